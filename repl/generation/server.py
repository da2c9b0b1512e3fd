"""Generation through an OpenAI-compatible inference server: vLLM, SGLang, llama.cpp, ollama, ``transformers serve``.

Only the legacy ``/v1/completions`` endpoint is used, with the raw trained prompt: KernelLLM was fine-tuned on a raw
completion prompt, and a chat endpoint would wrap it in the Llama-3 chat template. The prompt text carries no BOS; the
server's tokenizer adds the one BOS, as the local backend's does.

The requests go through the ``openai`` client (``AsyncOpenAI``): it streams the server-sent events, applies the timeouts
and retries a request the server did not take, with backoff (``MAX_RETRIES``, the one retry policy); its typed errors
become the one-line messages users see. The client runs on one asyncio event loop per backend, in a daemon thread. A
reply's request is a task on that loop, so ``cancel()`` from any thread cancels the task, which closes the connection
at once (and the server stops generating), and many requests in flight cost no threads. Text pieces reach the
consuming thread through a queue, as in the local backend.

Token counts: for a single-choice request, ``usage.completion_tokens`` when the server sends usage (vLLM, SGLang,
ollama and ``transformers serve`` do, asked with ``stream_options.include_usage``), less the end-of-text token the
servers count; otherwise, and for the choices of one ``n=K`` request (whose usage is their total), the number of text
pieces streamed: one per token on most servers, a little less where a server merges pieces (mid-UTF-8 tokens).
"""

import asyncio
import json
import os
import queue
import threading
import time
from collections.abc import Callable, Mapping
from urllib.parse import urlsplit

import openai

from repl.core.errors import one_line
from repl.generation import (FAILED, FINISHED, INTERRUPTED, TRUNCATED, Backend, GenerationError, Reply, check_many,
                             seeded, valid_text)
from repl.core.settings import SamplingSettings

# The longest silence tolerated from the server: before the first token (queueing and prefill on a busy server) and
# between tokens. Longer means a stalled stream, which is closed and reported.
DEFAULT_TIMEOUT_S = 120.0
CONNECT_TIMEOUT_S = 10.0
# The one retry policy. A request the server did not take (unreachable, no answer in time, 408/409/429/5xx) is sent
# again by the openai client up to MAX_RETRIES times, after about 0.5 s, 1 s, 2 s (doubling with jitter, at most 8 s;
# the server's Retry-After wins). A reply that fails once it streams is not sent again: it ends FAILED, with
# ``reply.transient`` set when sampling it again may succeed.
MAX_RETRIES = 3
# Answers worth trying again: the server is busy, restarting or failing for a moment.
TRANSIENT_STATUSES = {408, 409, 425, 429, 500, 502, 503, 504}


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
    """The arguments of ``completions.create``: the raw prompt and the sampling settings, streamed, with usage at
    the end.

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


class ServerReplyStream:
    """One reply streamed from the server. Iterate for text pieces; ``cancel()`` (any thread) stops it at once.

    Its request runs on the backend's event loop and feeds it events through a queue; a FAILED reply carries the
    error's line and whether trying again may succeed (``reply.error``, ``reply.transient``)."""

    def __init__(self, model: str, settings: SamplingSettings, on_cancel: Callable[[], None]):
        self.reply = Reply(model=model, settings=settings)
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
        self._events.put(("text", valid_text(text)))

    def _end(self, finish_reason: str, tokens: int | None = None, failure: GenerationError | None = None) -> None:
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

    def _finish(self, finish_reason: str, tokens: int | None = None, failure: GenerationError | None = None) -> None:
        reply = self.reply
        if tokens is not None:
            reply.tokens = tokens
        if failure is not None:
            reply.fail(failure)
            return
        reply.finished_at = time.monotonic()
        reply.finish_reason = finish_reason  # last: it marks the reply done


class ServerBackend(Backend):
    """Generation by an OpenAI-compatible server at ``base_url`` (as OpenAI clients take it: http://host:8000/v1).

    Nothing is sent until the first use. A ``model`` the user names is used as given; without one, ``connect()``
    picks the only model the server lists at /v1/models. ``close()`` cancels what is in flight and ends the loop."""

    samples_together = True  # stream_many: one request for k (or k requests at once)

    def __init__(self, base_url: str, model: str | None = None, api_key: str | None = None,
                 timeout: float = DEFAULT_TIMEOUT_S, max_retries: int = MAX_RETRIES):
        parts = urlsplit(base_url)
        if parts.scheme not in ("http", "https") or not parts.netloc:
            raise ValueError(f"the server URL must be http(s)://HOST[:PORT]/v1, got {base_url!r}")
        self.base_url = base_url.rstrip("/")
        self.model = model
        self.api_key = api_key
        self.timeout = timeout
        self.honours_n: bool | None = None  # whether n=K gives K choices; learnt from the first n=K request
        self._named = model is not None  # named by the user: trusted, whatever /v1/models lists
        self._contexts: dict[str, int] = {}  # model -> its context, where a listing says it (vLLM's max_model_len)
        self._connected = False
        self._lock = threading.Lock()
        self._closed = threading.Event()
        self._in_flight: dict = {}  # request future -> its streams
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="server-http", daemon=True)
        self._thread.start()
        self._client = openai.AsyncOpenAI(
            base_url=self.base_url, api_key=api_key or "none",
            timeout=openai.Timeout(timeout, connect=min(timeout, CONNECT_TIMEOUT_S)), max_retries=max_retries)
        # The client insists on a key; without one, each request leaves the Authorization header out.
        self._headers = None if api_key else {"Authorization": openai.omit}

    @property
    def description(self) -> str:
        return f"{self.model or 'the served model'} on {self.base_url}"

    @property
    def context_tokens(self) -> int | None:
        """The served model's context where the server's listing said it (vLLM and SGLang do); else unknown: the
        prompt's length is the server's to count, and a server refuses a request that cannot fit (in one line)."""
        return self._contexts.get(self.model)

    # -- the server's models ---------------------------------------------------------------------------------------
    def list_models(self) -> list[str]:
        """The ids the server lists at GET /models; GenerationError (one line) when it cannot be asked."""
        return self._call(self._list_models())

    def connect(self) -> str:
        """The model to request: the one the user named, as given, or else the only one the server lists (asked
        once). GenerationError (one line) when the server cannot be asked or lists none or several."""
        with self._lock:
            if not self._connected:
                if not self._named:
                    self.model = choose_model(self.base_url, self.list_models())
                self._connected = True
            return self.model

    # -- generation ------------------------------------------------------------------------------------------------
    def stream(self, prompt: str, settings: SamplingSettings) -> ServerReplyStream:
        """Start streaming a reply to the raw prompt; GenerationError when no model is named and the server cannot
        say which it serves; every later failure ends the reply as FAILED with a one-line ``reply.error``."""
        return self.stream_many(prompt, settings, 1)[0]

    def stream_many(self, prompt: str, settings: SamplingSettings, k: int) -> list[ServerReplyStream]:
        """K replies to one prompt: one request with n=K on a server that honours it, else K requests at once
        (with seed, seed+1, ... when a seed is set). The first n=K request finds out which: a server that ignores
        n (transformers serve, ollama) streams only choice 0, then the other K-1 are requested; one that refuses it
        (llama.cpp) answers an error, then all K are."""
        check_many(settings, k)
        if self._closed.is_set():
            raise GenerationError("the server backend is closed")
        self.connect()
        context = self.context_tokens
        if context is not None and settings.max_new_tokens >= context:
            raise GenerationError(f"max_new_tokens {settings.max_new_tokens:,} cannot fit: the served model's context "
                                  f"holds {context:,} tokens, prompt and reply together")
        if k == 1 or self.honours_n is False:
            return [self._start(prompt, seeded(settings, i), 1)[0] for i in range(k)]
        return self._start(prompt, settings, k)

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
        await self._client.close()
        await self._loop.shutdown_asyncgens()

    async def _list_models(self) -> list[str]:
        """GET /models once (a listing is a question, not work worth retrying)."""
        client = self._client.with_options(max_retries=0, timeout=min(self.timeout, 30.0))
        try:
            page = await client.models.list(extra_headers=self._headers)
            served = [entry for entry in page.data if isinstance(getattr(entry, "id", None), str)]
            for entry in served:
                context = getattr(entry, "max_model_len", None)
                if isinstance(context, int) and context > 0:
                    self._contexts[entry.id] = context
            return [entry.id for entry in served]
        except openai.OpenAIError as error:
            raise describe_failure(error, self.base_url, self.timeout) from None
        except (ValueError, TypeError, AttributeError):  # an answer that is not a model list
            raise GenerationError(f"{self.base_url}/models did not list models; is {self.base_url} an "
                                  "OpenAI-compatible API base (e.g. http://HOST:8000/v1)?") from None

    async def _complete(self, prompt: str, settings: SamplingSettings, streams: list[ServerReplyStream]) -> None:
        """One streamed request with n=len(streams), feeding its streams; each stream gets exactly one end."""
        n = len(streams)
        choices = _Choices(streams)
        # The first n=K request is a question (does the server honour n?): an error answer means no, not a retry.
        probing = n > 1 and self.honours_n is None
        client = self._client.with_options(max_retries=0) if probing else self._client
        refused_n = answered = False
        try:
            response = await client.completions.create(**completion_request(self.model, prompt, settings, n),
                                                       extra_headers=self._headers)
            answered = True
            async with response:
                async for chunk in response:
                    choices.take(chunk)
                    if len(choices.seen) > 1:
                        self.honours_n = True
        except openai.APIStatusError as error:
            if not probing:
                choices.fail(await self._explain_status(error))
                return
            refused_n = True  # e.g. llama.cpp: "Only one completion choice is allowed"
        except Exception as error:  # every failure ends every stream of the request, one line each
            choices.fail(describe_failure(error, self.base_url, self.timeout, answered))
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

    async def _explain_status(self, error: openai.APIStatusError) -> GenerationError:
        """The refusal's own message; for a model the user named, with what the server lists when that is known and
        lacks the model (a server may also serve what it does not list, so the listing alone decides nothing)."""
        failure = describe_failure(error, self.base_url, self.timeout)
        if not self._named:
            return failure
        try:
            served = await self._list_models()
        except GenerationError:
            # What a server answers at /models differs by server and release (transformers serve: 500 with no
            # cache up to 5.2x); the refusal still names the model asked for and how to choose another.
            return GenerationError(f"{failure}; is {self.model!r} a model it serves? (choose with --server-model)",
                                   failure.transient)
        if self.model in served:
            return failure
        # The listing answered, so the URL is the API base: a 404 here is about the model.
        failure = _status_failure(error, self.base_url, url_hint=False)
        listing = ", ".join(served) if served else "no models"
        return GenerationError(f"{failure}; it lists {listing}, not {self.model!r} (choose with --server-model)",
                               failure.transient)


class _Choices:
    """What one request has streamed, choice by choice (``index``), handed on to the choices' streams."""

    def __init__(self, streams: list[ServerReplyStream]):
        self.streams = streams
        self.seen: set[int] = set()
        self.ended: set[int] = set()
        self.finish: dict[int, str] = {}
        self.usage = None

    def take(self, chunk) -> None:
        """One streamed ``Completion`` chunk (read leniently: servers leave out fields OpenAI always sends)."""
        for choice in getattr(chunk, "choices", None) or []:
            index = getattr(choice, "index", None) or 0
            if not isinstance(index, int) or not 0 <= index < len(self.streams) or index in self.ended:
                continue
            self.seen.add(index)
            text = getattr(choice, "text", None)
            if text:
                self.streams[index]._piece(text)
            finish_reason = getattr(choice, "finish_reason", None)
            if finish_reason:
                self.finish[index] = finish_reason
                if len(self.streams) > 1:  # ends now; a single choice waits for the usage that follows
                    self.end(index, finish_reason)
        if getattr(chunk, "usage", None) is not None:
            self.usage = chunk.usage

    def end(self, index: int, finish_reason: str | None, tokens: int | None = None,
            failure: GenerationError | None = None) -> None:
        self.ended.add(index)
        failure = failure or _unfinished(finish_reason)
        if failure is not None:
            self.streams[index]._end(FAILED, failure=failure)
        else:  # "length": the max_tokens asked for, or the server's own limit (its context length)
            self.streams[index]._end(FINISHED if finish_reason == "stop" else TRUNCATED, tokens)

    def end_single(self) -> None:
        """The end of a one-choice request, with the server's token count when it sent usage."""
        tokens = getattr(self.usage, "completion_tokens", None)
        prompt_tokens = getattr(self.usage, "prompt_tokens", None)
        if isinstance(prompt_tokens, int):
            self.streams[0].prompt_tokens = prompt_tokens
        if not isinstance(tokens, int):
            tokens = None
        elif self.finish.get(0) == "stop":
            tokens = max(tokens - 1, 0)  # the servers count the end-of-text token; Reply.tokens does not
        self.end(0, self.finish.get(0), tokens)

    def fail(self, failure: GenerationError) -> None:
        for index in range(len(self.streams)):
            if index not in self.ended:
                self.end(index, None, failure=failure)


def _unfinished(finish_reason: str | None) -> GenerationError | None:
    """Why a reply with this finish_reason is a failure; None for "stop" and "length"."""
    if finish_reason in ("stop", "length"):
        return None
    if finish_reason is None:
        return GenerationError("the server ended the stream before the reply was finished", transient=True)
    return GenerationError(f"the server ended the reply early (finish_reason {finish_reason!r})",
                           transient=finish_reason == "abort")


# -- one-line messages -------------------------------------------------------------------------------------------------
def choose_model(base_url: str, served: list[str]) -> str:
    """The model to use when the user named none: the only one the server lists."""
    if len(served) == 1:
        return served[0]
    if not served:
        raise GenerationError(f"the server at {base_url} lists no models; name the model with --server-model")
    raise GenerationError(f"the server at {base_url} serves several models: {', '.join(served)}; "
                          "choose one with --server-model")


def describe_failure(error: Exception, base_url: str, timeout: float, answered: bool = False) -> GenerationError:
    """The one line for an error of the openai client (or a reply it could not parse); ``answered``: the server had
    begun the reply."""
    if isinstance(error, openai.APIStatusError):
        return _status_failure(error, base_url)
    if isinstance(error, openai.APITimeoutError):
        if answered:
            return GenerationError(f"the server sent nothing for {timeout:g} s (stalled); the request was closed",
                                   transient=True)
        return GenerationError(f"cannot reach the server at {base_url}: it did not answer in time", transient=True)
    if isinstance(error, openai.APIConnectionError):
        cause, reached = _root_cause(error)
        if answered:
            return GenerationError(f"the server closed the connection mid-reply ({cause}); the reply is incomplete",
                                   transient=True)
        if not reached:
            return GenerationError(f"cannot reach the server at {base_url} ({cause}); is it running? "
                                   "(--server / $KERNELLLM_SERVER)", transient=True)
        return GenerationError(f"the server at {base_url} closed the connection without answering ({cause})",
                               transient=True)
    if isinstance(error, openai.APIError):  # an error event inside the stream (vLLM, SGLang, transformers serve)
        detail = _error_detail(error.body) if error.body else one_line(error.message, 200)
        return GenerationError(f"the server failed mid-reply: {detail}")
    if isinstance(error, ValueError):
        return GenerationError(f"the server sent something other than JSON mid-stream ({one_line(error, 100)})")
    return GenerationError(f"the request to {base_url} failed: {one_line(error, 200, with_type=True)}")


def _status_failure(error: openai.APIStatusError, base_url: str, url_hint: bool = True) -> GenerationError:
    response, code = error.response, error.status_code
    detail = _error_detail(error.body) if error.body else ""
    message = f"the server answered {code} {response.reason_phrase}" + (f": {detail}" if detail else "")
    if code in (401, 403):
        message += " (check --api-key / $OPENAI_API_KEY)"
    elif code == 404 and url_hint:
        message += f" for {response.request.url} (is {base_url} the API base, e.g. http://HOST:8000/v1?)"
    return GenerationError(message, transient=code in TRANSIENT_STATUSES)


def _error_detail(payload) -> str:
    """The message in an error body, whichever server's shape: {"error": {"message"}}, {"error"}, {"detail"}, text."""
    if isinstance(payload, dict):
        for key in ("error", "detail", "message"):
            value = payload.get(key)
            if isinstance(value, dict):
                value = value.get("message") or value
            if value:
                return one_line(value if isinstance(value, str) else json.dumps(value), 200)
    return one_line(payload if isinstance(payload, str) else json.dumps(payload), 200)


def _root_cause(error: BaseException) -> tuple[str, bool]:
    """(the deepest OS-level reason or the error's text, whether the connection was made): an OSError in the chain
    (``connection refused``, ``Name or service not known``) means the server was never reached."""
    found, reason, seen = None, error, set()
    while reason is not None and id(reason) not in seen:
        seen.add(id(reason))
        if isinstance(reason, ConnectionRefusedError):
            return "connection refused", False
        if isinstance(reason, OSError) and reason.strerror:
            found = reason.strerror
        reason = reason.__cause__ or reason.__context__
    if found is not None:
        return found, False
    inner = error.__cause__ or error
    return one_line(inner, 200), True
