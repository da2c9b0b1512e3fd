"""The caller's side of a judge: start it, send it checks, read its answers, and replace it when it dies.

The judge runs in its own session (the caller's process group is not its, nor the candidates'); it reports on
private pipes (fd numbers in argv), never on stdout, which the reference may print to. The judge enforces each
check's timeout on the candidate itself; this side only guards against the judge itself being stuck (a reference
that hangs) or dying (a reference that crashes it), and turns either into `invalid_reference` when the judge was
running the reference at the time.
"""

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from repl.checker.result import CheckResult, Verdict
from repl.checker.sandbox import PipeCollector, is_secret_name
from repl.checker.sandbox.processes import children, kill_tree
from repl.checker.wire import Channel, PeerGone, Stopped, WireError

PROJECT_ROOT = Path(__file__).resolve().parents[2]
OUTPUT_TAIL_BYTES = 16 * 1024
CANCEL_GRACE_S = 1.5  # after asking the judge to cancel, how long before it is stopped instead


class JudgeProcess:
    def __init__(self, device: str, cuda_visible_devices: str | None, memory_limit_bytes: int | None,
                 spares: int | None):
        request_read, request_write = os.pipe()
        reply_read, reply_write = os.pipe()
        env = {name: value for name, value in os.environ.items() if not is_secret_name(name)}
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(PROJECT_ROOT), os.environ.get("PYTHONPATH")]))
        env.pop("TRITON_INTERPRET", None)
        if cuda_visible_devices is not None:
            env["CUDA_VISIBLE_DEVICES"] = cuda_visible_devices
        argv = [sys.executable, "-m", "repl.checker.judge", "--requests", str(request_read), "--replies",
                str(reply_write), "--device", device]
        if spares is not None:
            argv += ["--spares", str(spares)]
        if memory_limit_bytes:
            argv += ["--memory-limit", str(memory_limit_bytes)]
        try:
            self.process = subprocess.Popen(argv, pass_fds=(request_read, reply_write), env=env, cwd=PROJECT_ROOT,
                                            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                            stderr=subprocess.STDOUT, start_new_session=True)
        finally:
            os.close(request_read)
            os.close(reply_write)
        self.channel = Channel(reply_read, request_write)
        self.device_label = "cuda" if device == "cuda" else "cpu-interpreter"
        self.ready = False
        self._output = PipeCollector(self.process.stdout, limit_bytes=OUTPUT_TAIL_BYTES, keep="tail")

    def alive(self) -> bool:
        return self.channel.read_fd is not None and self.process.poll() is None

    def output_tail(self) -> str | None:
        return self._output.data().decode("utf-8", errors="replace") or None

    def _wait_ready(self, cancel, deadline: float | None = None) -> CheckResult | None:
        from repl.checker import JUDGE_START_S

        if self.ready:
            return None
        try:
            deadline = deadline or time.monotonic() + JUDGE_START_S
            message, _ = self.channel.receive(max_blob=0, deadline=deadline, cancel=cancel)
        except Stopped as stopped:
            if stopped.reason == "cancelled":
                return CheckResult(verdict=Verdict.CANCELLED, message="check cancelled before the judge started")
            self.close()
            return CheckResult(verdict=Verdict.CRASH, message=f"the judge did not start within {JUDGE_START_S:g} s")
        except (PeerGone, WireError):
            self.close()
            return CheckResult(verdict=Verdict.CRASH, message="the judge did not start",
                               output_tail=self.output_tail())
        if not message.get("ready"):
            self.close()
            return CheckResult(verdict=Verdict.CRASH, message=f"the judge did not start: {message.get('failed')}")
        self.ready = True
        return None

    def check(self, request: dict, cancel: threading.Event | None) -> CheckResult:
        from repl.checker import GRACE_S

        failed = self._wait_ready(cancel)
        if failed is not None:
            return failed
        try:
            self.channel.send(request)
        except PeerGone:
            self.close()
            return CheckResult(verdict=Verdict.CRASH, message="the judge died before the check")
        stage, alone, deadline, cancel_sent = "queued", True, None, None
        limit = float(request["timeout"])
        while True:
            now = time.monotonic()
            if cancel is not None and cancel.is_set() and cancel_sent is None:
                cancel_sent = now
                try:
                    self.channel.send({"op": "cancel", "id": request["id"]})
                except PeerGone:
                    pass
            waits = [t for t in (deadline, cancel_sent and cancel_sent + CANCEL_GRACE_S) if t]
            try:
                # Short slices: a cancel set from another thread is passed on within 0.1 s.
                message, _ = self.channel.receive(max_blob=0, deadline=min([*waits, now + 0.1]))
            except Stopped:
                if cancel_sent is not None and time.monotonic() >= cancel_sent + CANCEL_GRACE_S:
                    self.close(grace_s=0)
                    return CheckResult(verdict=Verdict.CANCELLED, message="check cancelled; the judge was stopped")
                if deadline is not None and time.monotonic() >= deadline:
                    self.close(grace_s=0)
                    return self._stuck(stage, alone, limit)
                continue
            except (PeerGone, WireError):
                self.close()
                return self._died(stage, alone)
            if "stage" in message:
                stage = str(message["stage"])
                alone = message.get("alone") is not False  # whether no candidate of the check lives (reference)
                deadline_in = message.get("deadline_in")
                if isinstance(deadline_in, (int, float)) and 0 <= deadline_in < 1e9:
                    # The judge's own deadline, which it enforces: this one falls GRACE_S after it.
                    deadline = time.monotonic() + deadline_in + GRACE_S
                elif stage in ("received", "started"):  # "started": a candidate process is ready, the clock restarts
                    deadline = time.monotonic() + limit + GRACE_S
                continue
            if "result" in message:
                try:
                    return CheckResult.from_json_dict(message["result"])
                except (ValueError, TypeError) as error:
                    return CheckResult(verdict=Verdict.CRASH, device=self.device_label,
                                       message=f"the judge's answer could not be read ({error})")

    def size(self, reference_code: str, timeout: float) -> str | None:
        """The judge's too_large line for this reference (None: it fits, or no answer within `timeout`, after which
        the judge is stopped: a module whose import hangs)."""
        deadline = time.monotonic() + timeout
        if self._wait_ready(None, deadline) is not None:
            return None
        try:
            self.channel.send({"op": "size", "reference_code": reference_code})
            while True:
                message, _ = self.channel.receive(max_blob=0, deadline=deadline)
                if "size" in message:
                    return message["size"]
        except Stopped:
            self.close(grace_s=0)  # stuck in the module's import
            return None
        except (PeerGone, WireError):
            self.close()
            return None

    def _stuck(self, stage: str, alone: bool, limit: float) -> CheckResult:
        if stage == "reference" and not alone:  # the judge always answers itself, unless it is stuck
            return CheckResult(verdict=Verdict.TIMEOUT, device=self.device_label,
                               message=f"the reference did not finish within {limit:g} s while the candidate's "
                                       "processes were stopped; the judge was stopped", output_tail=self.output_tail())
        if stage == "reference":
            return CheckResult(verdict=Verdict.INVALID_REFERENCE, device=self.device_label,
                               message=f"the reference did not finish within {limit:g} s; the judge was stopped",
                               output_tail=self.output_tail())
        return CheckResult(verdict=Verdict.TIMEOUT, device=self.device_label,
                           message=f"no result within {limit:g} s; the judge was stopped",
                           output_tail=self.output_tail())

    def _died(self, stage: str, alone: bool) -> CheckResult:
        code = self.process.poll()
        how = (f"signal {signal.Signals(-code).name}" if code is not None and code < 0
               and -code in signal.Signals._value2member_map_ else f"status {code}")
        if stage == "reference" and alone:
            return CheckResult(verdict=Verdict.INVALID_REFERENCE, device=self.device_label,
                               message=f"the reference crashed the judge ({how})", output_tail=self.output_tail())
        return CheckResult(verdict=Verdict.CRASH, device=self.device_label, message=f"the judge died ({how})",
                           output_tail=self.output_tail())

    def close(self, grace_s: float = 3.0) -> None:
        """Ask the judge to end (its candidates and fork server go with it), and kill it after grace_s; 0 for a judge
        known to be stuck (a reference that hangs), which would not read the request."""
        if self.channel.read_fd is None and self.process.poll() is not None:
            return
        if grace_s:
            try:
                self.channel.send({"op": "close"}, deadline=time.monotonic() + 0.5)
            except Exception:
                pass
        self.channel.close()
        try:
            self.process.wait(timeout=grace_s)
        except subprocess.TimeoutExpired:
            pass
        if self.process.poll() is None:  # stuck: its candidates first (a judge killed alone would leave them)
            for child in children(self.process.pid):
                kill_tree(child)
        try:
            os.killpg(self.process.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        try:
            self.process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            pass

