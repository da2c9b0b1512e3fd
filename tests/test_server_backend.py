"""The server backend against a real OpenAI-compatible server: ``transformers serve`` in a child process on 127.0.0.1,
serving the tiny test models. No HTTP is mocked here.

Test setup around ``transformers serve`` (its source: transformers/cli/serving/):
- its GET /v1/models lists the models of the Hugging Face cache (``scan_cache_dir``), not a directory it was given
  (and, before 5.24, answered 500 when that cache did not exist); to test the listing, the tiny models are placed in a private
  cache (models--kernelllm-tests--NAME/snapshots/REV, files linked) and served by hub id, offline; one test serves a
  directory, as the README's offline route does;
- the random tiny model emits end-of-text after a few dozen tokens; the tests that cancel, stall or kill a stream need
  one that goes on, so its copy here ("endless") has a generation config that names no end token;
- it ignores ``n`` (it streams choice 0 only), which is what the K-requests fallback is for.
"""

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import urllib.error
import urllib.request

import pytest

from processes import wait_until
from repl.generation import FAILED, FINISHED, INTERRUPTED, TRUNCATED, GenerationError
from repl.generation.server import ServerBackend, completion_request, server_backend_from
from repl.core.prompt import build_prompt
from repl.core.settings import SamplingSettings
from tiny_models import PREPARED_REPLY, RELU_MODULE

ENDLESS = "kernelllm-tests/endless"
TRAINED = "kernelllm-tests/trained"
PROMPT = build_prompt(RELU_MODULE)
SHORT = SamplingSettings(max_new_tokens=6)
LONG = SamplingSettings(max_new_tokens=3000)  # minutes on a CPU: only ever cancelled, stalled or cut


# -- a real server in a child process -----------------------------------------------------------------------------
def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def transformers_command() -> str:
    """transformers' console script, next to this interpreter (a virtual environment's bin) or on PATH."""
    found = shutil.which("transformers", path=str(Path(sys.executable).parent)) or shutil.which("transformers")
    if found is None:
        pytest.fail("the `transformers` command is missing: pip install -r requirements-dev.txt "
                    "(it has transformers[serving])")
    return found


def linked_model(directory: Path, target: Path, endless: bool = False) -> Path:
    """A model directory whose files link to ``directory``'s; ``endless``: its generation config names no end token."""
    target.mkdir(parents=True)
    for file in Path(directory).iterdir():
        (target / file.name).symlink_to(file.resolve())
    if endless:
        config = json.loads((target / "generation_config.json").read_text())
        (target / "generation_config.json").unlink()
        (target / "generation_config.json").write_text(json.dumps({**config, "eos_token_id": None}))
    return target


def hub_cache(root: Path, models: dict[str, Path], endless: set[str] = frozenset()) -> Path:
    """A Hugging Face cache holding each model directory under a hub id (files linked, not copied)."""
    for name, directory in models.items():
        repo = root / ("models--" + name.replace("/", "--"))
        revision = "0" * 40
        linked_model(directory, repo / "snapshots" / revision, endless=name in endless)
        (repo / "refs").mkdir()
        (repo / "refs" / "main").write_text(revision)
    return root


class Server:
    """``transformers serve`` on a free port, in its own process group; ready once GET /health answers."""

    def __init__(self, cache: Path, log: Path, force_model: str | Path | None = None):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}/v1"
        self.log = log
        env = {**os.environ, "HF_HUB_CACHE": str(cache), "HF_HOME": str(cache.parent / "hf-home"),
               "HF_HUB_OFFLINE": "1", "HF_HUB_DISABLE_UPDATE_CHECK": "1", "TOKENIZERS_PARALLELISM": "false"}
        command = [transformers_command(), "serve", *([str(force_model)] if force_model else []),
                   "--host", "127.0.0.1", "--port", str(self.port), "--device", "cpu", "--log-level", "warning"]
        with open(log, "w") as sink:
            self.process = subprocess.Popen(command, env=env, stdout=sink, stderr=subprocess.STDOUT,
                                            start_new_session=True)
        self._wait_until_ready(deadline=time.monotonic() + 120)

    def _wait_until_ready(self, deadline: float) -> None:
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                pytest.fail(f"transformers serve exited with {self.process.returncode}:\n{self.log_tail()}")
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/health", timeout=2) as answer:
                    if answer.status == 200:
                        return
            except (urllib.error.URLError, OSError):
                pass
            time.sleep(0.2)  # polling a child process's port: there is no event to await
        self.stop()
        pytest.fail(f"transformers serve did not answer within the deadline:\n{self.log_tail()}")

    def log_tail(self) -> str:
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-30:])

    def signal(self, number: int) -> None:
        try:
            os.killpg(self.process.pid, number)
        except ProcessLookupError:  # already gone
            pass

    def stop(self) -> None:
        if self.process.poll() is None:
            self.signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.signal(signal.SIGKILL)
                self.process.wait()


@pytest.fixture(scope="module")
def server(tmp_path_factory, tiny_model_dir, trained_model_dir):
    """One server for the module, serving two models on demand (no model forced), as its cache lists them."""
    root = tmp_path_factory.mktemp("served")
    cache = hub_cache(root / "hub", {ENDLESS: tiny_model_dir, TRAINED: trained_model_dir}, endless={ENDLESS})
    running = Server(cache, root / "server.log")
    yield running
    running.stop()


@pytest.fixture
def backend(server):
    with ServerBackend(server.url, model=ENDLESS) as backend:
        yield backend


@pytest.fixture(scope="module")
def directory_server(tmp_path_factory, tiny_model_dir):
    """The README's offline route, ``transformers serve LOCAL_DIR``, with no Hugging Face cache at all: a server of
    its own serving the endless model's directory. The last test that uses it stops it."""
    root = tmp_path_factory.mktemp("directory-served")
    running = Server(root / "no-hf-cache", root / "server.log",
                     force_model=linked_model(tiny_model_dir, root / "endless-model", endless=True))
    running.model_dir = root / "endless-model"
    yield running
    running.stop()


def is_one_line(message: str) -> bool:
    return bool(message) and "\n" not in message and len(message) < 400


def cancel_after(stream, pieces: int, cancel=None, before=lambda: None):
    """Iterate the stream; after ``pieces`` pieces, call ``before`` and have another thread cancel it (or do
    ``cancel``); returns the seconds from the cancel to the end of the iteration (not to the end of ``cancel``, which
    may go on closing)."""
    started = threading.Event()
    cancelled_at = []

    def canceller():
        started.wait()
        cancelled_at.append(time.monotonic())
        (cancel or stream.cancel)()

    thread = threading.Thread(target=canceller, daemon=True)
    thread.start()
    for count, _ in enumerate(stream, 1):
        if count == pieces:
            before()
            started.set()
    ended_at = time.monotonic()
    thread.join(timeout=5)
    assert cancelled_at and ended_at >= cancelled_at[0], \
        f"the stream ended after {count} pieces, before the cancel: {stream.reply.error}"
    return ended_at - cancelled_at[0]


# -- streaming -----------------------------------------------------------------------------------------------------
def test_pieces_concatenate_to_the_reply_and_the_servers_usage_counts_the_tokens(backend, tiny_model_dir):
    from transformers import AutoTokenizer

    stream = backend.stream(PROMPT, SHORT)
    pieces = list(stream)
    reply = stream.reply
    assert "".join(pieces) == reply.text and pieces
    # The server's length limit (max_tokens) reached: its finish_reason "length" is a truncated reply.
    assert reply.finish_reason == TRUNCATED and reply.error is None
    assert reply.tokens == SHORT.max_new_tokens  # usage.completion_tokens, not the (fewer) pieces
    assert reply.first_token_at is not None and reply.finished_at >= reply.first_token_at
    # The raw prompt was tokenized as the local backend does: the tokenizer's one BOS, no chat template around it.
    assert stream.prompt_tokens == len(AutoTokenizer.from_pretrained(tiny_model_dir)(PROMPT).input_ids)


def test_the_trained_model_answers_through_the_server_word_for_word(server, trained_model_dir):
    from transformers import AutoTokenizer

    with ServerBackend(server.url, model=TRAINED) as backend:
        stream = backend.stream(PROMPT, SamplingSettings(temperature=0, max_new_tokens=600))
        assert "".join(stream) == PREPARED_REPLY
    reply = stream.reply
    assert reply.finish_reason == FINISHED and reply.model == TRAINED
    # The server's count less its end-of-text token: the reply's own tokens, as the local backend counts them.
    tokenizer = AutoTokenizer.from_pretrained(trained_model_dir)
    assert reply.tokens == len(tokenizer(PREPARED_REPLY, add_special_tokens=False).input_ids)


def test_n_samples_from_a_server_that_ignores_n_come_from_separate_requests(backend):
    first = backend.stream_many(PROMPT, SHORT, 3)
    assert len(first) == 3
    for stream in first:
        assert "".join(stream) == stream.reply.text
        assert stream.reply.finish_reason == TRUNCATED
    # transformers serve 5.x streams choice 0 only; whichever way a release answers, the first request found out
    # (the scripted servers below pin down both ways)
    assert backend.honours_n in (True, False)
    again = backend.stream_many(PROMPT, SHORT, 2)
    for stream in again:
        list(stream)
    assert [stream.reply.finish_reason for stream in again] == [TRUNCATED, TRUNCATED]


def connections_to(port: int) -> int:
    """This process's established TCP connections to `port`: its sockets (/proc/self/fd) found in the kernel's TCP
    tables."""
    inodes = set()
    for descriptor in os.listdir("/proc/self/fd"):
        try:
            link = os.readlink(f"/proc/self/fd/{descriptor}")
        except OSError:
            continue
        if link.startswith("socket:["):
            inodes.add(link[len("socket:["):-1])
    count = 0
    for table in ("/proc/self/net/tcp", "/proc/self/net/tcp6"):
        try:
            rows = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for row in rows:
            fields = row.split()  # sl, local, remote, state (01: established), ..., inode (the tenth)
            if int(fields[2].rsplit(":", 1)[1], 16) == port and fields[3] == "01" and fields[9] in inodes:
                count += 1
    return count


@pytest.mark.skipif(not Path("/proc/self/net/tcp").exists(), reason="reads the connections from /proc")
def test_cancel_from_another_thread_ends_the_reply_at_once_and_frees_the_server(backend, server):
    stream = backend.stream(PROMPT, LONG)
    streaming = []
    # At once: milliseconds idle; the bound is for a loaded machine, far below the minutes of an uncancelled reply.
    assert cancel_after(stream, pieces=3, before=lambda: streaming.append(connections_to(server.port))) < 10
    assert stream.reply.interrupted and stream.reply.text
    # Its connection is closed, which is what tells the server to stop: left open, the 3000-token reply would hold it
    # for minutes (a follow-up request alone proves nothing: the server answers it alongside).
    assert streaming[0] >= 1
    assert wait_until(lambda: connections_to(server.port) < streaming[0], timeout_s=30), "the connection stayed open"
    started = time.monotonic()
    follow_up = backend.stream(PROMPT, SHORT)
    list(follow_up)
    assert follow_up.reply.finish_reason == TRUNCATED and time.monotonic() - started < 30


def test_closing_the_backend_interrupts_what_is_in_flight(server):
    backend = ServerBackend(server.url, model=ENDLESS)
    stream = backend.stream(PROMPT, LONG)
    assert cancel_after(stream, pieces=2, cancel=backend.close) < 10  # as above
    assert stream.reply.finish_reason == INTERRUPTED


# -- failures: one line each, and the session goes on ----------------------------------------------------------------
def test_a_wrong_model_name_is_one_line_listing_the_served_models(server):
    # The named model is requested as given; the server's refusal is the error, with what it lists.
    with ServerBackend(server.url, model="facebook/KernelLLM") as backend:
        stream = backend.stream(PROMPT, SHORT)
        assert list(stream) == []
    message = stream.reply.error
    assert stream.reply.finish_reason == FAILED and is_one_line(message), server.log_tail()
    assert re.search(r"the server answered [45]\d\d", message)  # transformers serve cannot load it (offline)
    assert "'facebook/KernelLLM'" in message and "--server-model" in message, (message, server.log_tail())
    # What transformers serve's /v1/models answers right after a failed load differs by release and timing (a CI
    # machine once got 500 there); the listing is named when it answers, which the scripted tests below pin down.
    if "it lists" in message:
        assert ENDLESS in message and TRAINED in message


def test_the_readmes_offline_route_streams_from_a_served_directory_named_as_the_model(directory_server):
    # `transformers serve LOCAL_DIR` with no Hugging Face cache: what its /v1/models answers differs by release
    # (500 up to 5.2x, a listing without the directory later), so this test asks nothing of it; the backend never
    # needs the listing for a model the user named (the scripted tests below pin that down for each kind of answer).
    with ServerBackend(directory_server.url, model=str(directory_server.model_dir)) as backend:
        stream = backend.stream(PROMPT, SHORT)
        pieces = list(stream)
    reply = stream.reply
    assert reply.finish_reason == TRUNCATED and reply.error is None and reply.tokens == SHORT.max_new_tokens
    assert pieces and "".join(pieces) == reply.text


def test_with_several_served_models_and_none_named_it_asks_for_one(server):
    with ServerBackend(server.url) as backend:
        with pytest.raises(GenerationError, match="several models.*--server-model") as raised:
            backend.connect()
    assert is_one_line(str(raised.value)) and ENDLESS in str(raised.value)


def test_a_url_that_is_not_the_api_base_gets_the_404_and_a_hint(server):
    with ServerBackend(server.url.removesuffix("/v1")) as backend:
        with pytest.raises(GenerationError, match=r"404 Not Found.*/v1") as raised:
            backend.connect()
    assert is_one_line(str(raised.value))


def test_a_server_that_is_not_running_is_reported_unreachable_at_once():
    started = time.monotonic()
    with ServerBackend(f"http://127.0.0.1:{free_port()}/v1") as backend:
        with pytest.raises(GenerationError, match="cannot reach the server.*connection refused") as raised:
            backend.stream(PROMPT, SHORT)
    assert is_one_line(str(raised.value)) and raised.value.transient
    assert time.monotonic() - started < 5


def test_a_stalled_stream_ends_after_the_read_timeout_with_a_one_line_error(server, backend):
    list(backend.stream(PROMPT, SHORT))  # the model loaded, so that only the stall can outlast the short timeout
    with ServerBackend(server.url, model=ENDLESS, timeout=3) as impatient:
        stream = impatient.stream(PROMPT, LONG)
        try:
            stalled_for = cancel_after(stream, pieces=2, cancel=lambda: server.signal(signal.SIGSTOP))
        finally:
            server.signal(signal.SIGCONT)
    assert 2.5 < stalled_for < 15
    reply = stream.reply
    assert reply.finish_reason == FAILED and is_one_line(reply.error) and "stalled" in reply.error
    assert reply.transient
    follow_up = backend.stream(PROMPT, SHORT)  # the server, running again, serves the next request
    list(follow_up)
    assert follow_up.reply.finish_reason == TRUNCATED


def test_a_request_the_server_cannot_serve_ends_the_reply_with_one_line(backend):
    # transformers serve 5.x reports generate()'s own errors (max_new_tokens=0 is one) as an error event in the
    # stream; how a release answers this request is its own affair, so only the shape of our answer is pinned here
    # (the scripted server below pins the error event itself).
    stream = backend.stream(PROMPT, SamplingSettings(max_new_tokens=0))
    pieces = list(stream)
    reply = stream.reply
    if reply.finish_reason == FAILED:
        assert is_one_line(reply.error) and not pieces
    else:
        assert reply.error is None and "".join(pieces) == reply.text


def test_a_server_stopped_mid_stream_ends_the_reply_with_a_one_line_error(directory_server):
    with ServerBackend(directory_server.url, model=str(directory_server.model_dir)) as backend:
        stream = backend.stream(PROMPT, LONG)
        assert cancel_after(stream, pieces=2, cancel=lambda: directory_server.signal(signal.SIGKILL)) < 5
        reply = stream.reply
        assert reply.finish_reason == FAILED and is_one_line(reply.error) and reply.text
        assert "mid-reply" in reply.error or "before the reply was finished" in reply.error
        directory_server.process.wait(timeout=10)
        after = backend.stream(PROMPT, SHORT)  # the session goes on: the next reply fails with its own reason
        list(after)
        assert after.reply.finish_reason == FAILED and "cannot reach the server" in after.reply.error
        assert after.reply.transient


# -- n=K on servers that do not run here: vLLM honours it, llama.cpp refuses it ---------------------------------------
class ScriptedServer(ThreadingHTTPServer):
    """A real HTTP server on 127.0.0.1 (not mocked HTTP) that answers /v1/completions as vLLM does for n=K (the K
    choices' chunks interleaved, told apart by ``index``, then a usage chunk and [DONE]) or, as ``refuse_n``, as
    llama.cpp does (500 "Only one completion choice is allowed" for n>1); ``busy``: as a server that is overloaded
    for a moment. Each choice streams three pieces: "0.0 0.1 0.2 ", cut at the token limit (the first) or stopped;
    with ``reply``, that text cut in three, stopped (as a model that answered)."""

    def __init__(self, refuse_n: bool = False, busy: int = 0, only_listed: bool = False, models_status: int = 200,
                 error_event: str | None = None, max_model_len: int | None = None, reply: str | None = None):
        super().__init__(("127.0.0.1", 0), _ScriptedHandler)
        self.reply = reply  # what every choice answers (None: its numbered pieces)
        self.max_model_len = max_model_len  # listed with the model, as vLLM lists it
        self.error_event = error_event  # after the first piece, an error event in the stream with this message
        self.models_status = models_status  # GET /models answers this (500: as transformers serve did with no cache)
        self.refuse_n = refuse_n
        self.only_listed = only_listed  # answer 404 for a model it does not list, as vLLM does
        self.busy = busy  # answer this many completion requests 503 (asking for a retry 20 ms later) first
        self.requests: list[dict] = []
        self.authorizations: list[str | None] = []  # each completion request's Authorization header
        self.url = f"http://127.0.0.1:{self.server_address[1]}/v1"
        threading.Thread(target=self.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()


class _ScriptedHandler(BaseHTTPRequestHandler):
    def log_message(self, *args):
        pass

    def do_GET(self):
        if self.server.models_status != 200:
            error = {"error": {"code": self.server.models_status, "message": "cannot list", "type": "server_error"}}
            return self._send(self.server.models_status, "application/json", json.dumps(error))
        entry = {"id": "kernelllm"}
        if self.server.max_model_len is not None:
            entry["max_model_len"] = self.server.max_model_len
        self._send(200, "application/json", json.dumps({"object": "list", "data": [entry]}))

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        self.server.requests.append(body)
        self.server.authorizations.append(self.headers.get("Authorization"))
        n = body.get("n", 1)
        if n > 1 and self.server.refuse_n:
            error = {"error": {"code": 500, "message": "Only one completion choice is allowed", "type": "server_error"}}
            return self._send(500, "application/json", json.dumps(error))
        if self.server.only_listed and body["model"] != "kernelllm":
            error = {"object": "error", "message": f"The model `{body['model']}` does not exist.", "code": 404}
            return self._send(404, "application/json", json.dumps(error))
        if len(self.server.requests) <= self.server.busy:
            error = {"error": {"code": 503, "message": "the engine is overloaded", "type": "server_error"}}
            return self._send(503, "application/json", json.dumps(error), {"retry-after-ms": "20"})
        reply, third = self.server.reply, -(-len(self.server.reply or "") // 3)
        events = [{"choices": [{"index": i, "text": reply[step * third:(step + 1) * third] if reply else f"{i}.{step} ",
                                "finish_reason": None}]} for step in range(3) for i in range(n)]
        if self.server.error_event is not None:  # as vLLM, SGLang and transformers serve report a failure mid-stream
            events = events[:1] + [{"error": {"message": self.server.error_event, "type": "server_error"}}]
        cut = 0 if reply is None else -1  # the first choice runs out of tokens, unless it answers the reply
        events += [{"choices": [{"index": i, "text": "", "finish_reason": "length" if i == cut else "stop"}]}
                   for i in range(n)]
        events.append({"choices": [], "usage": {"prompt_tokens": 9, "completion_tokens": 3 * n, "total_tokens": 9}})
        self._send(200, "text/event-stream", "".join(f"data: {json.dumps(e)}\n\n" for e in events) + "data: [DONE]\n\n")

    def _send(self, status: int, content_type: str, text: str, headers: dict | None = None):
        self.send_response(status)
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(text.encode())))
        self.end_headers()
        self.wfile.write(text.encode())


@pytest.fixture
def scripted():
    servers = []

    def start(**options):
        servers.append(ScriptedServer(**options))
        return servers[-1]

    yield start
    for server in servers:
        server.shutdown()
        server.server_close()


def test_a_server_that_honours_n_gives_k_replies_from_one_request(scripted):
    server = scripted()
    with ServerBackend(server.url) as backend:
        assert backend.connect() == "kernelllm"  # the only model listed, chosen without --server-model
        streams = backend.stream_many(PROMPT, SamplingSettings(seed=7), 3)
        texts = ["".join(stream) for stream in streams]
    assert texts == [f"{i}.0 {i}.1 {i}.2 " for i in range(3)]
    assert [stream.reply.finish_reason for stream in streams] == [TRUNCATED, FINISHED, FINISHED]
    assert [stream.reply.tokens for stream in streams] == [3, 3, 3]  # pieces: an n=K usage is the total
    assert backend.honours_n is True
    assert [(request["model"], request["n"], request["seed"]) for request in server.requests] == [("kernelllm", 3, 7)]


def test_a_server_that_refuses_n_gets_k_requests_with_consecutive_seeds(scripted):
    server = scripted(refuse_n=True)
    with ServerBackend(server.url) as backend:
        first = backend.stream_many(PROMPT, SamplingSettings(seed=7), 3)
        assert ["".join(stream) for stream in first] == ["0.0 0.1 0.2 "] * 3
        assert backend.honours_n is False
        again = backend.stream_many(PROMPT, SamplingSettings(seed=20), 2)
        assert ["".join(stream) for stream in again] == ["0.0 0.1 0.2 "] * 2
    assert [stream.reply.finish_reason for stream in first + again] == [TRUNCATED] * 5
    # The first request probes n=3; the rest go out concurrently, so they may arrive in any order.
    requests = [(request.get("n", 1), request["seed"]) for request in server.requests]
    assert requests[0] == (3, 7)
    assert sorted(requests[1:]) == [(1, 7), (1, 8), (1, 9), (1, 20), (1, 21)]


# -- pieces that need no server --------------------------------------------------------------------------------------
def test_the_request_is_a_raw_completion_with_the_sampling_settings():
    settings = SamplingSettings(temperature=1.0, top_p=0.97, max_new_tokens=99, seed=5)
    body = completion_request("m", PROMPT, settings, n=4)
    assert "messages" not in body and body["prompt"] == PROMPT
    assert (body["temperature"], body["top_p"], body["max_tokens"], body["seed"], body["n"]) == (1.0, 0.97, 99, 5, 4)
    assert body["stream"] is True


def test_a_busy_server_is_asked_again_until_it_takes_the_request(scripted):
    server = scripted(busy=2)
    with ServerBackend(server.url, max_retries=2) as backend:
        stream = backend.stream(PROMPT, SHORT)
        assert "".join(stream) == "0.0 0.1 0.2 "
    assert stream.reply.finish_reason == TRUNCATED and len(server.requests) == 3


def test_a_server_busy_beyond_the_retries_fails_the_reply_with_its_message_marked_transient(scripted):
    server = scripted(busy=10)
    with ServerBackend(server.url, max_retries=2) as backend:
        stream = backend.stream(PROMPT, SHORT)
        list(stream)
    reply = stream.reply
    assert reply.finish_reason == FAILED and reply.transient and len(server.requests) == 3
    assert is_one_line(reply.error) and "503" in reply.error and "the engine is overloaded" in reply.error


def test_an_error_event_inside_the_stream_ends_the_reply_with_its_message_on_one_line(scripted):
    server = scripted(error_event="generate() failed:\nmax_new_tokens must be greater than 0" + " (detail)" * 100)
    with ServerBackend(server.url, model="kernelllm") as backend:
        stream = backend.stream(PROMPT, SHORT)
        pieces = list(stream)
    reply = stream.reply
    assert pieces == ["0.0 "] and reply.text == "0.0 "  # what came before the failure is kept
    assert reply.finish_reason == FAILED and is_one_line(reply.error)
    assert reply.error.startswith("the server failed mid-reply: generate() failed: max_new_tokens must be")


def test_the_api_key_is_sent_as_a_bearer_token_and_no_authorization_without_one(scripted):
    server = scripted()
    for key in ("sk-test", None):
        with ServerBackend(server.url, model="kernelllm", api_key=key) as backend:
            list(backend.stream(PROMPT, SHORT))
    assert server.authorizations == ["Bearer sk-test", None]


def test_a_model_the_server_refuses_gets_its_message_and_the_models_it_lists(scripted):
    server = scripted(only_listed=True)
    with ServerBackend(server.url, model="kernellm") as backend:
        stream = backend.stream(PROMPT, SHORT)
        list(stream)
    message = stream.reply.error
    assert stream.reply.finish_reason == FAILED and not stream.reply.transient and is_one_line(message)
    assert message == ("the server answered 404 Not Found: The model `kernellm` does not exist.; "
                       "it lists kernelllm, not 'kernellm' (choose with --server-model)")


@pytest.mark.parametrize("models_status", [500, 404], ids=["listing-fails", "no-listing"])
def test_a_refused_model_without_a_listing_is_still_named_with_the_hint(scripted, models_status):
    server = scripted(only_listed=True, models_status=models_status)
    with ServerBackend(server.url, model="kernellm") as backend:
        stream = backend.stream(PROMPT, SHORT)
        list(stream)
    message = stream.reply.error
    assert stream.reply.finish_reason == FAILED and not stream.reply.transient and is_one_line(message)
    assert message.startswith("the server answered 404 Not Found: The model `kernellm` does not exist.")
    assert message.endswith("is 'kernellm' a model it serves? (choose with --server-model)")


@pytest.mark.parametrize("models_status", [200, 500, 404], ids=["listed-without-it", "listing-fails", "no-listing"])
def test_a_named_model_is_requested_whatever_the_listing_says(scripted, models_status):
    server = scripted(models_status=models_status)  # lists only "kernelllm" (or fails to list), answers any model
    with ServerBackend(server.url, model="not-listed") as backend:
        assert "".join(backend.stream(PROMPT, SHORT)) == "0.0 0.1 0.2 "
    assert [request["model"] for request in server.requests] == ["not-listed"]


def test_max_new_tokens_beyond_a_listed_context_is_refused_before_any_request(scripted):
    """Issue 24, item 3, what a server lets be known: vLLM lists each model's max_model_len."""
    server = scripted(max_model_len=4096)
    with ServerBackend(server.url) as backend:
        with pytest.raises(GenerationError, match="^max_new_tokens 100,000 cannot fit: the served model's context "
                                                  "holds 4,096 tokens, prompt and reply together$"):
            backend.stream(PROMPT, SamplingSettings(max_new_tokens=100000))
        assert server.requests == [] and backend.context_tokens == 4096
        assert "".join(backend.stream(PROMPT, SamplingSettings(max_new_tokens=100))) == "0.0 0.1 0.2 "


def test_with_no_model_named_a_listing_that_fails_is_one_line(scripted):
    server = scripted(models_status=500)
    with ServerBackend(server.url) as backend:
        with pytest.raises(GenerationError) as raised:
            backend.connect()
    assert is_one_line(str(raised.value)) and "500" in str(raised.value)


def test_the_command_line_values_pick_the_server_the_model_and_the_key(monkeypatch):
    monkeypatch.delenv("KERNELLLM_SERVER", raising=False)
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    assert server_backend_from({"server": None}) is None
    monkeypatch.setenv("KERNELLLM_SERVER", "http://gpu-box:8000/v1/")
    monkeypatch.setenv("OPENAI_API_KEY", "sk-env")
    with server_backend_from({"server_model": "facebook/KernelLLM"}) as backend:
        assert backend.base_url == "http://gpu-box:8000/v1" and backend.model == "facebook/KernelLLM"
        assert backend.api_key == "sk-env"
    with pytest.raises(ValueError, match="http"):
        server_backend_from({"server": "gpu-box:8000"})
