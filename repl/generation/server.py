"""Generation through an OpenAI-compatible inference server: vLLM, SGLang, llama.cpp, ollama, ``transformers serve``.

Only the legacy ``/v1/completions`` endpoint is used, with the raw trained prompt: KernelLLM was fine-tuned on a raw
completion prompt, and a chat endpoint would wrap it in the Llama-3 chat template. The prompt text carries no BOS; the
server's tokenizer adds the one BOS, as the local backend's does.

All HTTP runs on one asyncio event loop per backend, in a daemon thread (httpx2's AsyncClient). A reply's request is a
task on that loop, so ``cancel()`` from any thread cancels the task, which closes the connection at once (and the
server stops generating), and many requests in flight cost no threads. Text pieces reach the consuming thread through
a queue, as in the local backend.

Token counts: for a single-choice request, ``usage.completion_tokens`` when the server sends usage (vLLM, SGLang,
ollama and ``transformers serve`` do, asked with ``stream_options.include_usage``), less the end-of-text token the
servers count; otherwise, and for the choices of one ``n=K`` request (whose usage is their total), the number of text
pieces streamed: one per token on most servers, a little less where a server merges pieces (mid-UTF-8 tokens).
"""

import asyncio
import contextlib
import dataclasses
import json
import os
import queue
import random
import threading
import time
from collections.abc import Callable, Mapping
from typing import TypeVar
from urllib.parse import urlsplit

import httpx2

from repl.generation import FAILED, FINISHED, INTERRUPTED, TRUNCATED, GenerationError, Reply
from repl.settings import SamplingSettings

# The longest silence tolerated from the server: before the first token (queueing and prefill on a busy server) and
# between tokens. Longer means a stalled stream, which is closed and reported.
DEFAULT_TIMEOUT_S = 120.0
CONNECT_TIMEOUT_S = 10.0
# Answers worth trying again: the server is busy, restarting or failing for a moment.
TRANSIENT_STATUSES = {408, 425, 429, 500, 502, 503, 504}

T = TypeVar("T")


class ServerError(GenerationError):
    """A failure of the server or of the connection (one line); ``transient`` when trying again may succeed."""

    def __init__(self, message: str, transient: bool = False):
        super().__init__(message)
        self.transient = transient


def server_backend_from(values) -> "ServerBackend | None":
    """The backend the command line asks for, or None for the local model.

    ``values``: an argparse namespace or a mapping with ``server``, ``server_model``, ``api_key`` (each may be
    absent or None); the server falls back to $KERNELLLM_SERVER and the key to $OPENAI_API_KEY. ValueError (one line)
    for a URL that is not http(s)."""
    get = values.get if isinstance(values, Mapping) else lambda name: getattr(values, name, None)
    url = get("server") or os.environ.get("KERNELLLM_SERVER")
    if not url:
        return None
    return ServerBackend(url, model=get("server_model"), api_key=get("api_key") or os.environ.get("OPENAI_API_KEY"))


def completion_request(model: str, prompt: str, settings: SamplingSettings, n: int = 1) -> dict:
    """The /v1/completions body: the raw prompt and the sampling settings, streamed, with usage at the end.

    Only fields of OpenAI's completions schema: ``transformers serve`` refuses any other (422), so no ``top_k``.
    vLLM and SGLang do not apply top-k unless asked; llama.cpp and ollama default to top-k 40 (see docs/server.md)."""
    body = {"model": model, "prompt": prompt, "max_tokens": settings.max_new_tokens,
            "temperature": settings.temperature, "top_p": settings.top_p,
            "stream": True, "stream_options": {"include_usage": True}}
    if settings.seed is not None:
        body["seed"] = settings.seed
    if n > 1:
        body["n"] = n
    return body


def seeded(settings: SamplingSettings, offset: int) -> SamplingSettings:
    """Settings for the offset-th of several separate requests: seed, seed+1, ... so they sample different replies."""
    if settings.seed is None or offset == 0:
        return settings
    return dataclasses.replace(settings, seed=settings.seed + offset)


class ServerReplyStream:
    """One reply streamed from the server. Iterate for text pieces; ``cancel()`` (any thread) stops it at once.

    Its request runs on the backend's event loop and feeds it events through a queue; ``failure`` is the ServerError
    behind a FAILED reply (``failure.transient`` says whether trying again may help)."""

    def __init__(self, model: str, settings: SamplingSettings, on_cancel: Callable[[], None]):
        self.reply = Reply(model=model, settings=settings)
        self.failure: ServerError | None = None
        self.prompt_tokens: int | None = None  # from the server's usage, when it sends it
        self._events: queue.SimpleQueue = queue.SimpleQueue()
        self._cancelled = threading.Event()
        self._on_cancel = on_cancel

    @property
    def cancelled(self) -> bool:
        return self._cancelled.is_set()

    def cancel(self) -> None:
        if not self._cancelled.is_set():
            self._cancelled.set()
            self._events.put(None)  # wakes the consumer now
            self._on_cancel()

    # Called from the event loop's thread.
    def _piece(self, text: str) -> None:
        self._events.put(("text", text))

    def _end(self, finish_reason: str, tokens: int | None = None, failure: ServerError | None = None) -> None:
        self._events.put(("end", finish_reason, tokens, failure))

    def __iter__(self):
        reply = self.reply
        while not reply.done:
            if self._cancelled.is_set():
                self._finish(INTERRUPTED)
                break
            try:
                # A short timeout keeps the loop responsive to KeyboardInterrupt in the consuming thread.
                event = self._events.get(timeout=0.1)
            except queue.Empty:
                continue
            if event is None:
                continue
            if event[0] == "text":
                if reply.first_token_at is None:
                    reply.first_token_at = time.monotonic()
                reply.tokens += 1
                reply.text += event[1]
                yield event[1]
            else:
                self._finish(*event[1:])

    def _finish(self, finish_reason: str, tokens: int | None = None, failure: ServerError | None = None) -> None:
        reply = self.reply
        if tokens is not None:
            reply.tokens = tokens
        self.failure = failure
        reply.error = str(failure) if failure else None
        reply.finished_at = time.monotonic()
        reply.finish_reason = finish_reason  # last: it marks the reply done


class ServerBackend:
    """Generation by an OpenAI-compatible server at ``base_url`` (as OpenAI clients take it: http://host:8000/v1).

    Nothing is sent until the first use; then ``connect()`` checks that the server answers and serves ``model``
    (or picks the only model it serves). ``close()`` cancels what is in flight and ends the event loop."""

    def __init__(self, base_url: str, model: str | None = None, api_key: str | None = None,
                 timeout: float = DEFAULT_TIMEOUT_S):
        parts = urlsplit(base_url)
        if parts.scheme not in ("http", "https") or not parts.netloc:
            raise ValueError(f"the server URL must be http(s)://HOST[:PORT]/v1, got {base_url!r}")
        self.base_url = base_url.rstrip("/")
        self.model = model
        self.api_key = api_key
        self.timeout = timeout
        self.honours_n: bool | None = None  # whether n=K gives K choices; learnt from the first n=K request
        self._connected = False
        self._lock = threading.Lock()
        self._closed = threading.Event()
        self._in_flight: dict = {}  # request future -> its streams
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="server-http", daemon=True)
        self._thread.start()
        self._client = httpx2.AsyncClient(
            base_url=self.base_url + "/",
            headers={"Authorization": f"Bearer {api_key}"} if api_key else None,
            timeout=httpx2.Timeout(timeout, connect=min(timeout, CONNECT_TIMEOUT_S)),
            limits=httpx2.Limits(max_connections=None, max_keepalive_connections=32),  # callers bound concurrency
        )

    @property
    def description(self) -> str:
        return f"{self.model or 'the served model'} on {self.base_url}"

    # -- the server's models ---------------------------------------------------------------------------------------
    def list_models(self) -> list[str]:
        """The ids the server lists at GET /models; ServerError (one line) when it cannot be asked."""
        payload = self._call(self._get_json("models", timeout=min(self.timeout, 30.0)))
        entries = payload.get("data") if isinstance(payload, dict) else None
        if not isinstance(entries, list):
            raise ServerError(f"{self.base_url}/models did not list models; is {self.base_url} an OpenAI-compatible "
                              "API base (e.g. http://HOST:8000/v1)?")
        return [entry["id"] for entry in entries if isinstance(entry, dict) and "id" in entry]

    def connect(self) -> str:
        """Check that the server answers and serves the model, choosing the only served model when none was named;
        returns the model name. ServerError (one line) otherwise. Once it succeeded, returns at once."""
        with self._lock:
            if not self._connected:
                self.model = choose_model(self.base_url, self.model, self.list_models())
                self._connected = True
            return self.model

    # -- generation ------------------------------------------------------------------------------------------------
    def stream(self, prompt: str, settings: SamplingSettings) -> ServerReplyStream:
        """Start streaming a reply to the raw prompt; ServerError when the server cannot be reached or lacks the
        model, later failures end the reply as FAILED with a one-line ``reply.error``."""
        return self.stream_many(prompt, settings, 1)[0]

    def stream_many(self, prompt: str, settings: SamplingSettings, k: int) -> list[ServerReplyStream]:
        """K replies to one prompt: one request with n=K on a server that honours it, else K requests at once
        (with seed, seed+1, ... when a seed is set). The first n=K request finds out which: a server that ignores
        n (transformers serve, ollama) streams only choice 0, then the other K-1 are requested; one that refuses it
        (llama.cpp) answers an error, then all K are."""
        if k < 1:
            raise ValueError("k must be at least 1")
        if settings.greedy and k > 1:
            raise ValueError("greedy decoding (temperature 0) gives the same reply k times; use a temperature > 0")
        if self._closed.is_set():
            raise ServerError("the server backend is closed")
        self.connect()
        if k == 1 or self.honours_n is False:
            return [self._start(prompt, seeded(settings, i), 1)[0] for i in range(k)]
        return self._start(prompt, settings, k)

    def generate(self, prompt: str, settings: SamplingSettings, *, attempts: int = 4,
                 first_delay_s: float = 1.0) -> Reply:
        """The whole reply, trying again with exponential backoff after transient failures (unreachable server,
        429/5xx, a dropped or stalled stream): for batch work such as eval. Returns a FAILED reply when the failure
        is permanent (wrong model, 4xx) or outlasts the attempts; INTERRUPTED when the backend is closed meanwhile."""

        def attempt() -> Reply:
            if self._closed.is_set():
                return _ended_reply(self.model, settings, INTERRUPTED)
            stream = self.stream(prompt, settings)
            for _ in stream:
                pass
            if stream.failure is not None:
                raise stream.failure
            return stream.reply

        try:
            return retry_transient(attempt, attempts=attempts, first_delay_s=first_delay_s, sleep=self._closed.wait)
        except ServerError as error:
            return _ended_reply(self.model, settings, FAILED, str(error))

    def close(self) -> None:
        """Cancel every reply in flight (they end INTERRUPTED), close the connections, end the event loop."""
        if self._closed.is_set():
            return
        self._closed.set()
        for streams in list(self._in_flight.values()):
            for stream in streams:
                stream.cancel()
        asyncio.run_coroutine_threadsafe(self._shut_down(), self._loop).result(timeout=10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=5)
        self._loop.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    # -- on the event loop -----------------------------------------------------------------------------------------
    def _call(self, coroutine):
        return asyncio.run_coroutine_threadsafe(coroutine, self._loop).result()

    def _start(self, prompt: str, settings: SamplingSettings, n: int) -> list[ServerReplyStream]:
        request = None

        def cancel_when_all_cancelled():
            # One request may feed several streams (n=K): it is cancelled once none of them wants it any more.
            if request is not None and all(s.cancelled or s.reply.done for s in streams):
                request.cancel()

        streams = [ServerReplyStream(self.model, settings, cancel_when_all_cancelled) for _ in range(n)]
        request = asyncio.run_coroutine_threadsafe(self._complete(prompt, settings, streams), self._loop)
        self._in_flight[request] = streams
        request.add_done_callback(lambda done: self._in_flight.pop(done, None))
        return streams

    async def _shut_down(self) -> None:
        requests = [task for task in asyncio.all_tasks() if task is not asyncio.current_task()]
        for task in requests:
            task.cancel()
        await asyncio.gather(*requests, return_exceptions=True)  # each closes its connection
        await self._client.aclose()
        await self._loop.shutdown_asyncgens()  # httpx's line iterators left behind by a finished read

    async def _get_json(self, path: str, timeout: float):
        try:
            response = await self._client.get(path, timeout=httpx2.Timeout(timeout, connect=CONNECT_TIMEOUT_S))
        except httpx2.HTTPError as error:
            raise describe_transport_error(error, self.base_url, self.timeout) from None
        if response.status_code >= 400:
            raise status_error(response, self.base_url)
        try:
            return response.json()
        except ValueError:
            raise ServerError(f"{response.request.url} did not answer JSON; is {self.base_url} an OpenAI-compatible "
                              "API base (e.g. http://HOST:8000/v1)?") from None

    async def _complete(self, prompt: str, settings: SamplingSettings, streams: list[ServerReplyStream]) -> None:
        """One streamed request with n=len(streams), feeding its streams; each stream gets exactly one end."""
        n = len(streams)
        choices = _Choices(streams)
        refused_n = answered = False
        try:
            body = completion_request(self.model, prompt, settings, n)
            async with self._client.stream("POST", "completions", json=body) as response:
                answered = True
                if response.status_code >= 400:
                    await response.aread()
                    if n > 1 and self.honours_n is None:
                        refused_n = True  # e.g. llama.cpp: "Only one completion choice is allowed"
                    else:
                        raise status_error(response, self.base_url)
                else:
                    async with contextlib.aclosing(_sse_data(response)) as events:
                        async for data in events:
                            if data.strip() == "[DONE]":
                                break
                            choices.take(_parse_chunk(data))
                            if len(choices.seen) > 1:
                                self.honours_n = True
        except httpx2.HTTPError as error:
            choices.fail(describe_transport_error(error, self.base_url, self.timeout, answered))
            return
        except ServerError as error:
            choices.fail(error)
            return

        if n == 1:
            choices.end_single()
            return
        if refused_n or choices.seen == {0}:
            self.honours_n = False
            alone = [i for i in range(n) if i not in choices.seen]  # all K after a refusal, the other K-1 after 0
        else:
            alone = []
        for index in range(n):
            if index not in choices.ended and index not in alone:
                choices.end(index, choices.finish.get(index))
        await asyncio.gather(*(self._complete(prompt, seeded(settings, i), [streams[i]]) for i in alone))


class _Choices:
    """What one request has streamed, choice by choice (``index``), handed on to the choices' streams."""

    def __init__(self, streams: list[ServerReplyStream]):
        self.streams = streams
        self.seen: set[int] = set()
        self.ended: set[int] = set()
        self.finish: dict[int, str] = {}
        self.usage: dict = {}

    def take(self, chunk: dict) -> None:
        for choice in chunk.get("choices") or []:
            index = choice.get("index", 0)
            if not isinstance(index, int) or not 0 <= index < len(self.streams) or index in self.ended:
                continue
            self.seen.add(index)
            if choice.get("text"):
                self.streams[index]._piece(choice["text"])
            if choice.get("finish_reason"):
                self.finish[index] = choice["finish_reason"]
                if len(self.streams) > 1:  # ends now; a single choice waits for the usage that follows
                    self.end(index, self.finish[index])
        if isinstance(chunk.get("usage"), dict):
            self.usage = chunk["usage"]

    def end(self, index: int, finish_reason: str | None, tokens: int | None = None,
            failure: ServerError | None = None) -> None:
        self.ended.add(index)
        failure = failure or _unfinished(finish_reason)
        if failure is not None:
            self.streams[index]._end(FAILED, failure=failure)
        else:  # "length": the max_tokens asked for, or the server's own limit (its context length)
            self.streams[index]._end(FINISHED if finish_reason == "stop" else TRUNCATED, tokens)

    def end_single(self) -> None:
        """The end of a one-choice request, with the server's token count when it sent usage."""
        tokens, prompt_tokens = self.usage.get("completion_tokens"), self.usage.get("prompt_tokens")
        if isinstance(prompt_tokens, int):
            self.streams[0].prompt_tokens = prompt_tokens
        if not isinstance(tokens, int):
            tokens = None
        elif self.finish.get(0) == "stop":
            tokens = max(tokens - 1, 0)  # the servers count the end-of-text token; Reply.tokens does not
        self.end(0, self.finish.get(0), tokens)

    def fail(self, failure: ServerError) -> None:
        for index in range(len(self.streams)):
            if index not in self.ended:
                self.end(index, None, failure=failure)


def _ended_reply(model: str | None, settings: SamplingSettings, finish_reason: str, error: str | None = None) -> Reply:
    reply = Reply(model=model or "?", settings=settings, finish_reason=finish_reason, error=error)
    reply.finished_at = time.monotonic()
    return reply


async def _sse_data(response):
    """The data of each server-sent event: its ``data:`` lines, joined; a blank line ends an event."""
    lines: list[str] = []
    async for line in response.aiter_lines():
        if line.startswith("data:"):
            lines.append(line[5:].removeprefix(" "))
        elif not line and lines:
            yield "\n".join(lines)
            lines = []
    if lines:
        yield "\n".join(lines)


def _unfinished(finish_reason: str | None) -> ServerError | None:
    """Why a reply with this finish_reason is a failure; None for "stop" and "length"."""
    if finish_reason in ("stop", "length"):
        return None
    if finish_reason is None:
        return ServerError("the server ended the stream before the reply was finished", transient=True)
    return ServerError(f"the server ended the reply early (finish_reason {finish_reason!r})",
                       transient=finish_reason == "abort")


def _parse_chunk(data: str) -> dict:
    try:
        chunk = json.loads(data)
    except ValueError:
        raise ServerError(f"the server sent something other than JSON mid-stream: {_one_line(data, 100)!r}") from None
    if not isinstance(chunk, dict):
        raise ServerError(f"the server sent an unexpected event mid-stream: {_one_line(data, 100)!r}")
    if chunk.get("error"):  # vLLM, SGLang and transformers serve report a failure inside the stream this way
        raise ServerError(f"the server failed mid-reply: {_error_detail(chunk)}")
    return chunk


# -- one-line messages -------------------------------------------------------------------------------------------------
def choose_model(base_url: str, wanted: str | None, served: list[str]) -> str:
    listing = ", ".join(served) if served else "none"
    if wanted:
        if wanted in served:
            return wanted
        raise ServerError(f"the server at {base_url} does not serve model {wanted!r}; it serves: {listing} "
                          "(choose with --server-model)")
    if len(served) == 1:
        return served[0]
    if not served:
        raise ServerError(f"the server at {base_url} lists no models; name the model with --server-model")
    raise ServerError(f"the server at {base_url} serves several models: {listing}; choose one with --server-model")


def describe_transport_error(error: httpx2.HTTPError, base_url: str, timeout: float,
                             answered: bool = False) -> ServerError:
    cause = _root_cause(error)
    if isinstance(error, httpx2.ConnectTimeout):
        return ServerError(f"cannot reach the server at {base_url}: connecting timed out", transient=True)
    if isinstance(error, httpx2.ConnectError):
        return ServerError(f"cannot reach the server at {base_url} ({cause}); is it running? "
                           "(--server / $KERNELLLM_SERVER)", transient=True)
    if isinstance(error, httpx2.ReadTimeout):
        return ServerError(f"the server sent nothing for {timeout:g} s (stalled); the request was closed",
                           transient=True)
    if isinstance(error, (httpx2.RemoteProtocolError, httpx2.ReadError)):
        if not answered:
            return ServerError(f"the server at {base_url} closed the connection without answering ({cause})",
                               transient=True)
        return ServerError(f"the server closed the connection mid-reply ({cause}); the reply is incomplete",
                           transient=True)
    return ServerError(f"the request to {base_url} failed: {type(error).__name__}: {cause}", transient=True)


def status_error(response: httpx2.Response, base_url: str) -> ServerError:
    code = response.status_code
    try:
        detail = _error_detail(response.json())
    except ValueError:
        detail = _one_line(response.text, 200)
    message = f"the server answered {code} {response.reason_phrase}" + (f": {detail}" if detail else "")
    if code in (401, 403):
        message += " (check --api-key / $OPENAI_API_KEY)"
    elif code == 404:
        message += f" for {response.request.url} (is {base_url} the API base, e.g. http://HOST:8000/v1?)"
    return ServerError(message, transient=code in TRANSIENT_STATUSES)


def _error_detail(payload) -> str:
    """The message in an error body, whichever server's shape: {"error": {"message"}}, {"error"}, {"detail"}."""
    if isinstance(payload, dict):
        for key in ("error", "detail", "message"):
            value = payload.get(key)
            if isinstance(value, dict):
                value = value.get("message") or value
            if value:
                return _one_line(value if isinstance(value, str) else json.dumps(value), 200)
    return _one_line(json.dumps(payload), 200)


def _root_cause(error: BaseException) -> str:
    """The deepest OS-level reason (``connection refused``, ``Name or service not known``) or the error's text."""
    found, reason, seen = None, error, set()
    while reason is not None and id(reason) not in seen:
        seen.add(id(reason))
        if isinstance(reason, ConnectionRefusedError):
            return "connection refused"
        if isinstance(reason, OSError) and reason.strerror:
            found = reason.strerror
        reason = reason.__cause__ or reason.__context__
    return found or _one_line(str(error) or type(error).__name__, 200)


def _one_line(text: str, limit: int) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[:limit - 1] + "…"


def retry_transient(run: Callable[[], T], *, attempts: int = 4, first_delay_s: float = 1.0,
                    max_delay_s: float = 30.0, sleep: Callable[[float], object] = time.sleep) -> T:
    """``run()``, called again while it raises a transient ServerError, at most ``attempts`` times in all, waiting
    first_delay_s, twice that, ... (capped at max_delay_s, with jitter so that many clients do not retry in step).
    The last error is raised when the attempts run out; a permanent error at once."""
    for attempt in range(attempts):
        try:
            return run()
        except ServerError as error:
            if not error.transient or attempt == attempts - 1:
                raise
            sleep(min(max_delay_s, first_delay_s * 2 ** attempt) * random.uniform(0.5, 1.0))
    raise ValueError("attempts must be at least 1")
