"""`python -m repl.bench.session_waits --model DIR`: the waits a user of the interactive session sees once the model has
written its kernel, measured through the session itself (what a paste, `:run` and `:best K` do, in this process).

- **paste to stream**: the time from a paste to the start of its reply (the module is sized first).
- **:run after the stream**: for each of `--modules` new small modules (a ReLU with its own shape, so that no judge
  has seen it), the module is pasted, its reply streams, and `:run` is typed the moment the stream ends; the figure
  is the time from the stream's end to the verdict on screen.
- **:best K's first verdict**: after one more new module is pasted, `:best K` samples K kernels; the figure is the
  time from the first finished candidate to the first verdict.
- **judge starts**: judge processes (`python -m repl.checker.judge.server`) this session started, seen by polling this
  process's children; a warm session needs one per device and job slot.

`--tokens-per-s R` paces the model's replies at R tokens a second (a real model's speed: about 120-180 on an H100)
instead of the tiny model's, so that the time a real stream gives the checker to prepare is there. Not a test:
figures go to stdout (and `--json FILE`); docs/gpu-runs.md and docs/checker.md record runs.
"""

import argparse
import io
import json
import os
import statistics
import sys
import threading
import time
from pathlib import Path

from repl.engine.engine import Engine, EngineOptions
from repl.generation import Backend
from repl.core.settings import SamplingSettings
from repl.ui.console import make_console
from repl.ui.session import ReplSession

JUDGE_MODULE = "repl.checker.judge.server"

SMALL_MODULE = '''import torch
import torch.nn as nn


class Model(nn.Module):
    """Simple model that performs a ReLU activation."""
    def __init__(self):
        super(Model, self).__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(x)


batch_size = {batch}
dim = {dim}


def get_inputs():
    x = torch.randn(batch_size, dim)
    return [x]


def get_init_inputs():
    return []
'''


def small_module(number: int) -> str:
    """A new small module: a ReLU whose shape no earlier module of the run had (the tiny model's kernel fits it)."""
    return SMALL_MODULE.format(batch=4 + number % 4, dim=1000 + 17 * number)


class JudgeCounter:
    """Counts the judge processes this process starts from now on, by polling /proc (a judge lives seconds at least:
    it imports torch before it answers anything); judges already running are not counted. Counted from outside rather
    than read from CheckPool.judge_starts: a judge started past the pool (as sizing once started its own) counts too."""

    def __init__(self, poll_s: float = 0.02):
        self.seen: set[int] = set()
        self._before = set(self._judges())
        self._poll_s = poll_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, name="judge-counter", daemon=True)

    def start(self) -> "JudgeCounter":
        self._thread.start()
        return self

    def stop(self) -> int:
        self._stop.set()
        self._thread.join()
        return len(self.seen)

    def _watch(self) -> None:
        while not self._stop.wait(self._poll_s):
            self.seen.update(pid for pid in self._judges() if pid not in self._before)

    @staticmethod
    def _judges() -> list[int]:
        """The judge processes that are this process's children now."""
        me, found = str(os.getpid()), []
        for entry in os.listdir("/proc"):
            if not entry.isdigit():
                continue
            try:
                parent = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()[1]
                command = Path(f"/proc/{entry}/cmdline").read_bytes().split(b"\0")
            except (OSError, IndexError):
                continue
            if parent == me and JUDGE_MODULE.encode() in command:
                found.append(int(entry))
        return found


class PacedBackend(Backend):
    """Another backend's replies, each piece held back until the reply has taken 1/R s per token so far: the
    duration of a real model's stream around a fast tiny model."""

    def __init__(self, inner: Backend, tokens_per_s: float):
        self.inner, self.tokens_per_s = inner, tokens_per_s
        self.description = f"{inner.description}, paced at {tokens_per_s:g} tokens/s"
        self.device, self.context_tokens = inner.device, inner.context_tokens
        self.samples_together = inner.samples_together

    def wait_until_serving(self, timeout=None):
        return self.inner.wait_until_serving(timeout)

    def stream(self, prompt, settings):
        return _PacedStream(self.inner.stream(prompt, settings), self.tokens_per_s)

    def stream_many(self, prompt, settings, k):
        return [_PacedStream(stream, self.tokens_per_s) for stream in self.inner.stream_many(prompt, settings, k)]

    def close(self):
        self.inner.close()


class _PacedStream:
    def __init__(self, inner, tokens_per_s: float):
        self.inner, self.tokens_per_s = inner, tokens_per_s
        self.reply = inner.reply
        self._cancelled = threading.Event()

    def cancel(self):
        self._cancelled.set()
        self.inner.cancel()

    def __iter__(self):
        started = time.monotonic()
        for piece in self.inner:
            due = started + self.reply.tokens / self.tokens_per_s
            self._cancelled.wait(max(0.0, due - time.monotonic()))
            yield piece
        self.reply.finished_at = time.monotonic()


def run(options) -> dict:
    settings = SamplingSettings(temperature=1.0, seed=0, max_new_tokens=options.max_new_tokens)
    engine = Engine(EngineOptions(model=options.model, device=options.device), settings)
    judges = JudgeCounter().start()
    console = make_console(file=io.StringIO(), force_terminal=False, width=120)
    session = ReplSession(engine, console, module_input=object(), check_device=options.check_device)
    report = {"model": options.model, "device": options.device, "check_device": options.check_device,
              "tokens_per_s": options.tokens_per_s, "runs": [], "best": None}
    try:
        engine.start(options.check_device)  # as the session does when it opens: the model and the judge start
        state, message = engine.wait_until_loaded(lambda progress: None)
        if state != "ready":
            raise SystemExit(f"the model did not load: {message}")
        if options.tokens_per_s:
            engine.backend_override = PacedBackend(engine.backend(), options.tokens_per_s)
        for number in range(options.modules):
            pasted, before = time.monotonic(), session.attempt
            session.handle(small_module(number))
            if session.attempt is before or session.attempt.reply is None:
                raise SystemExit(f"module {number} got no reply: {console.file.getvalue().strip()[-300:]}")
            reply = session.attempt.reply
            session.handle(f":run --trials {options.trials}")
            verdict_at = time.monotonic()
            check = session.attempt.check
            report["runs"].append({"module": number, "paste_to_stream_s": round(reply.started_at - pasted, 3),
                                   "stream_s": round(reply.finished_at - reply.started_at, 3),
                                   "verdict_after_stream_s": round(verdict_at - reply.finished_at, 3),
                                   "verdict": str(check.verdict) if check else None,
                                   "phases_s": check.phases_s if check else None})
            _say(f"module {number}: stream after {reply.started_at - pasted:.2f} s, took "
                 f"{reply.finished_at - reply.started_at:.2f} s; verdict "
                 f"{verdict_at - reply.finished_at:.2f} s after it ({check.verdict if check else 'none'})")
        if options.best:
            session.handle(small_module(options.modules))
            session.handle(f":best {options.best} --trials {options.trials}")
            candidates = [c for c in session.candidates if c.attempt is not None]
            verdicts = sorted(c.check_finished_at for c in candidates if c.check_finished_at is not None)
            if not verdicts:
                raise SystemExit(f":best {options.best} checked no candidate: "
                                 f"{console.file.getvalue().strip()[-300:]}")
            first_finished = min(c.attempt.reply.finished_at for c in candidates)
            report["best"] = {"k": options.best, "candidates": len(candidates),
                              "first_verdict_after_first_candidate_s": round(verdicts[0] - first_finished, 3),
                              "last_verdict_after_first_candidate_s": round(verdicts[-1] - first_finished, 3),
                              "verdicts": sorted(str(c.verdict) for c in candidates),
                              # each candidate, in the order its check ended: when its reply ended, its check started
                              # and ended (s after the first finished candidate), and where the judge's time went
                              "checks": [_timeline(c, first_finished) for c in
                                         sorted(candidates, key=lambda c: c.check_finished_at or float("inf"))]}
            _say(f":best {options.best}: first verdict {verdicts[0] - first_finished:.2f} s after the first "
                 f"finished candidate, last {verdicts[-1] - first_finished:.2f} s")
    finally:
        engine.close()
        report["judge_starts"] = judges.stop()
    waits = [entry["verdict_after_stream_s"] for entry in report["runs"]]
    if waits:
        report["verdict_after_stream_median_s"] = round(statistics.median(waits), 3)
    _say(f"judge starts: {report['judge_starts']}")
    return report


def _timeline(candidate, origin: float) -> dict:
    def since(moment):
        return None if moment is None else round(moment - origin, 3)

    check = candidate.check
    return {"reply_ended_s": since(candidate.attempt.reply.finished_at), "check_started_s": since(candidate.check_started_at),
            "check_ended_s": since(candidate.check_finished_at), "verdict": str(candidate.verdict),
            "phases_s": check.phases_s if check is not None else None}


def _say(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m repl.bench.session_waits", description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", required=True, help="model directory or hub id (tests/tiny_models.py trained DIR)")
    parser.add_argument("--device", default="auto", help="where the model runs (default: auto)")
    parser.add_argument("--check-device", default="auto", help="where kernels are checked (default: auto)")
    parser.add_argument("--modules", type=int, default=3, help="new modules pasted and checked with :run")
    parser.add_argument("--best", type=int, default=8, help="K for the :best K at the end (0: none)")
    parser.add_argument("--trials", type=int, default=5)
    parser.add_argument("--max-new-tokens", type=int, default=512)
    parser.add_argument("--tokens-per-s", type=float, default=None,
                        help="pace the replies at this many tokens a second (a real model's stream)")
    parser.add_argument("--json", metavar="FILE", help="also write the figures here")
    options = parser.parse_args(argv)
    report = run(options)
    text = json.dumps(report, indent=2)
    print(text)
    if options.json:
        Path(options.json).write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
