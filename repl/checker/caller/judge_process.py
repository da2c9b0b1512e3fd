"""The caller's side of a judge: start it, send it checks, read its answers, and replace it when it dies.

The judge runs confined (sandbox.start_confined with judge=True: it runs the user's module, which may come from
anywhere; `confine_reference=False`, from `--trust-problems`, turns that off), in its own session (the caller's process group is not its, nor the
candidates'); it reports on private pipes (fd numbers in argv), never on stdout, which the reference may print to.
The judge enforces each check's timeout on the candidate itself; this side only guards against the judge itself
being stuck (a reference that hangs) or dying (a reference that crashes it), and turns either into
`invalid_reference` when the judge was running the reference at the time.
"""

import os
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from repl.checker.defaults import GRACE_S, JUDGE_START_S, PREPARE_TIMEOUT_S
from repl.checker.result import CheckResult, Verdict
from repl.checker.sandbox import (SANDBOX_ROOT_VARIABLE, PipeCollector, is_secret_name, kill_process_tree,
                                  start_confined)
from repl.checker.sandbox.limits import judge_memory_limit_bytes
from repl.checker.sandbox.processes import children, kill_tree
from repl.checker.wire import Channel, PeerGone, Stopped, WireError

PROJECT_ROOT = Path(__file__).resolve().parents[3]
OUTPUT_TAIL_BYTES = 16 * 1024
CANCEL_GRACE_S = 1.5  # after asking the judge to cancel, how long before it is stopped instead


class JudgeProcess:
    preparing = None  # Preparing: the last preparation sent, until the judge says it has ended
    stuck_on_another_reference = False  # stopped while stuck preparing another reference than its check's
    # The reference of its last check: with nothing queued, the judge makes that problem's next trials on its own
    # (preparation.prepare_again), which it does not report.
    last_checked_reference: str | None = None
    sandbox_root: str | None = None  # the folder its candidates' sandbox folders go in

    def __init__(self, device: str, cuda_visible_devices: str | None, memory_limit_bytes: int | None,
                 spares: int | None, *, confine_reference: bool = True):
        """confine_reference: False (`--trust-problems`) runs the reference (the user's module) with the user's rights,
        as a reference that reads a data file beside it needs."""
        request_read, request_write = os.pipe()
        reply_read, reply_write = os.pipe()
        # Its candidates' sandbox folders go in a folder of its own, removed once it is gone: a judge that is killed
        # (stuck, or its caller gone) cannot remove them itself. Confined, that folder is its own sandbox too.
        self.sandbox_root = tempfile.mkdtemp()  # removed by close(), or below; no name a candidate could read as a tell
        argv = [sys.executable, "-m", "repl.checker.judge.server", "--requests", str(request_read), "--replies",
                str(reply_write), "--device", device]
        if spares is not None:
            argv += ["--spares", str(spares)]
        if memory_limit_bytes:
            argv += ["--memory-limit", str(memory_limit_bytes)]
        self.confined = confine_reference
        self.notes: list[str] = []
        streams = dict(stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        try:
            if self.confined:
                self.process, self.notes = self._start_confined(argv, device, cuda_visible_devices,
                                                                (request_read, reply_write), streams)
            else:
                self.process = subprocess.Popen(argv, pass_fds=(request_read, reply_write), cwd=PROJECT_ROOT,
                                                env=self._unconfined_environment(cuda_visible_devices),
                                                start_new_session=True, **streams)
        except BaseException:
            os.close(reply_read)
            os.close(request_write)
            shutil.rmtree(self.sandbox_root, ignore_errors=True)
            raise
        finally:
            os.close(request_read)
            os.close(reply_write)
        self.channel = Channel(reply_read, request_write)
        self.device_label = "cuda" if device == "cuda" else "cpu-interpreter"
        self.ready = False
        self._output = PipeCollector(self.process.stdout, limit_bytes=OUTPUT_TAIL_BYTES, keep="tail")
        self._sending = threading.Lock()  # a preparation may be sent while another thread checks

    def _start_confined(self, argv, device, cuda_visible_devices, fds, streams):
        """The judge in a sandbox of its own (sandbox/: namespaces, read-only view, private HOME and /tmp, no
        network, host sockets covered), its candidates' sandboxes inside it; the syscall filter it installs itself."""
        for name in ("home", "tmp", "shm", "work"):
            os.mkdir(os.path.join(self.sandbox_root, name))
        passed = {name: value for name, value in os.environ.items()
                  if name.startswith("KERNELLLM_") and not is_secret_name(name)}
        if device == "cuda":
            make_uvm_device_node()
        return start_confined([*argv, "--confined"], sandbox_dir=Path(self.sandbox_root), gpu=device == "cuda",
                              cuda_visible_devices=cuda_visible_devices, pass_fds=fds, judge=True,
                              memory_limit_bytes=judge_memory_limit_bytes(),
                              extra_env={**passed, SANDBOX_ROOT_VARIABLE: self.sandbox_root,
                                         "PYTHONPATH": self._python_path()}, **streams)

    @staticmethod
    def _python_path() -> str:
        """The judge runs as `-m repl.checker.judge.server`: the checkout first (its candidates' path leaves it out)."""
        return os.pathsep.join(filter(None, [str(PROJECT_ROOT), os.environ.get("PYTHONPATH")]))

    def _unconfined_environment(self, cuda_visible_devices: str | None) -> dict[str, str]:
        env = {name: value for name, value in os.environ.items() if not is_secret_name(name)}
        env[SANDBOX_ROOT_VARIABLE] = self.sandbox_root
        env["PYTHONPATH"] = self._python_path()
        env.pop("TRITON_INTERPRET", None)
        if cuda_visible_devices is not None:
            env["CUDA_VISIBLE_DEVICES"] = cuda_visible_devices
        return env

    def alive(self) -> bool:
        return self.channel.read_fd is not None and self.process.poll() is None

    def output_tail(self) -> str | None:
        return self._output.data().decode("utf-8", errors="replace") or None

    def send(self, message: dict, deadline: float | None = None) -> None:
        with self._sending:
            self.channel.send(message, deadline=deadline)

    def _wait_ready(self, cancel, deadline: float | None = None) -> CheckResult | None:
        """None once the judge has said it is ready; a result saying why not. A judge that is not ready by a
        `deadline` of the caller's own (sizing's short wait) is left starting; by JUDGE_START_S, it is stopped."""
        if self.ready:
            return None
        try:
            message, _ = self.channel.receive(max_blob=0, deadline=deadline or time.monotonic() + JUDGE_START_S,
                                              cancel=cancel)
        except Stopped as stopped:
            if stopped.reason == "cancelled":
                return CheckResult(verdict=Verdict.CANCELLED, message="check cancelled before the judge started")
            if deadline is not None:
                return CheckResult(verdict=Verdict.TIMEOUT, message="the judge is still starting")
            self.close()
            return CheckResult(verdict=Verdict.CHECKER_ERROR, message=f"the judge did not start within {JUDGE_START_S:g} s")
        except (PeerGone, WireError):
            self.close()
            return CheckResult(verdict=Verdict.CHECKER_ERROR, message="the judge did not start",
                               output_tail=self.output_tail())
        if not message.get("ready"):
            self.close()
            return CheckResult(verdict=Verdict.CHECKER_ERROR, message=f"the judge did not start: {message.get('failed')}")
        self.ready = True
        self.notes += [str(note) for note in message.get("notes") or [] if isinstance(note, str)]
        if self.preparing is not None:  # sent while it started: its time counts from now
            self.preparing.deadline = max(self.preparing.deadline, time.monotonic() + PREPARE_TIMEOUT_S)
        return None

    def check(self, request: dict, cancel: threading.Event | None) -> CheckResult:
        waited = time.monotonic()
        failed = self._wait_ready(cancel)
        if failed is not None:
            return failed
        judge_start = time.monotonic() - waited
        result = self._check(request, cancel)
        if judge_start > 0.01 and result.phases_s:  # the check waited for its judge to start: said first
            result.phases_s = {"judge_start": round(judge_start, 3), **result.phases_s}
        return result

    def _check(self, request: dict, cancel: threading.Event | None) -> CheckResult:
        try:
            self.send(request)
        except PeerGone:
            self.close()
            return CheckResult(verdict=Verdict.CHECKER_ERROR, message="the judge died before the check")
        stage, alone, deadline, cancel_sent = "queued", True, None, None
        limit = float(request["timeout"])
        # Queued, the check waits for the judge's preparation to reach the end of a step: one sent, until its
        # deadline; else one the judge may be making on its own after its last check (prepare_again), as long again.
        # A judge that has checked nothing yet makes none: no bound (its start, under load, is no stuck reference).
        queued_until = time.monotonic() + PREPARE_TIMEOUT_S if self.last_checked_reference is not None else None
        while True:
            now = time.monotonic()
            if cancel is not None and cancel.is_set() and cancel_sent is None:
                cancel_sent = now
                try:
                    self.send({"op": "cancel", "id": request["id"]})
                except PeerGone:
                    pass
            preparing = None
            if stage == "queued":
                preparing = self.preparing.deadline if self.preparing is not None else queued_until
            waits = [t for t in (deadline, preparing, cancel_sent and cancel_sent + CANCEL_GRACE_S) if t]
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
                if preparing is not None and time.monotonic() >= preparing:
                    return self._stuck_preparing(request)
                continue
            except (PeerGone, WireError):
                self.close()
                return self._died(stage, alone)
            if "prepared" in message:
                self._prepared(message)
                continue
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
                self.last_checked_reference = request.get("reference_code")
                if self.preparing is not None:  # a preparation sent meanwhile starts only now
                    self.preparing.deadline = max(self.preparing.deadline, time.monotonic() + PREPARE_TIMEOUT_S)
                try:
                    result = CheckResult.from_json_dict(message["result"])
                    result.notes += [f"the module ran with {note}" for note in self.notes if note not in result.notes]
                    return result
                except (ValueError, TypeError) as error:
                    return CheckResult(verdict=Verdict.CHECKER_ERROR, device=self.device_label,
                                       message=f"the judge's answer could not be read ({error})")

    def start_preparing(self, prepare_id: int, reference_code: str) -> bool:
        """Ask the judge to prepare this reference (preparation.py) once it has nothing else to do; returns at once,
        True when the request was sent. Thread-safe: the judge may be checking meanwhile (the preparation waits for
        the check). A judge still starting reads no request yet: it gets one only where the request fits its pipe
        whole, written at once (a partial frame could only be ended by stopping the judge); a larger one is not sent."""
        request = {"op": "prepare", "id": prepare_id, "reference_code": reference_code}
        # Known before it is sent: another thread reading this judge's answers may see it end at once.
        earlier, self.preparing = self.preparing, Preparing(prepare_id, reference_code,
                                                            time.monotonic() + PREPARE_TIMEOUT_S)
        if self.ready:
            self.send(request)
            return True
        frame = self.channel.frame(request)
        if len(frame) <= select.PIPE_BUF:
            try:
                with self._sending:  # a write of up to PIPE_BUF bytes is whole or nothing: a short wait for room
                    self.channel.send_frame(frame, deadline=time.monotonic() + 0.1)
                return True
            except Stopped:
                pass
        self.preparing = earlier  # what the judge will do first, still
        return False

    def prepare(self, prepare_id: int, reference_code: str, timeout: float) -> str | None:
        """Start preparing the reference and wait for its size: the judge's too_large line (None: it fits, or no
        answer within `timeout`, after which the judge is stopped: a module whose import hangs). A judge still
        starting has up to `timeout` to start (if it does not, it is left starting, given the preparation where
        start_preparing can, and None is returned); the module's `timeout` counts from then: a judge that started
        late is no module's fault. The caller holds this judge; the preparation goes on after the answer."""
        if self._wait_ready(None, time.monotonic() + timeout) is not None:
            if self.alive():
                try:
                    self.start_preparing(prepare_id, reference_code)
                except PeerGone:  # it died meanwhile: the next check starts another
                    pass
            return None
        deadline = time.monotonic() + timeout
        try:
            self.start_preparing(prepare_id, reference_code)
            while True:
                message, _ = self.channel.receive(max_blob=0, deadline=deadline)
                if "prepared" in message:
                    self._prepared(message)
                if message.get("sized") == prepare_id:
                    return message.get("too_large")
        except Stopped:
            self.close(grace_s=0)  # stuck in the module's import
            return None
        except (PeerGone, WireError):
            self.close()
            return None

    def wait_until_prepared(self, timeout: float) -> dict | None:
        """Wait (holding this judge) until its last preparation has ended: what the judge said of it ("steps",
        "stopped"), or None when none was under way or no answer came within `timeout`."""
        deadline = time.monotonic() + timeout
        if self.preparing is not None and self._wait_ready(None, deadline) is not None:  # sent while it started
            return None
        try:
            while self.preparing is not None:
                message, _ = self.channel.receive(max_blob=0, deadline=deadline)
                if "prepared" in message and self._prepared(message):
                    return message
        except (Stopped, PeerGone, WireError):
            return None
        return None

    def _prepared(self, message: dict) -> bool:
        """The judge has ended a preparation; True when it was the last one sent."""
        if self.preparing is not None and message.get("prepared") == self.preparing.id:
            self.preparing = None
            return True
        return False

    def _stuck_preparing(self, request: dict) -> CheckResult:
        """The judge has not ended a preparation in PREPARE_TIMEOUT_S: stuck in that reference (it hangs in Model()
        or forward). The judge is stopped; the check is the reference's fault only when it is the same one."""
        stuck_in = self.preparing.reference_code if self.preparing is not None else self.last_checked_reference
        same = stuck_in == request.get("reference_code")
        self.stuck_on_another_reference = not same
        self.close(grace_s=0)
        if same:
            return CheckResult(verdict=Verdict.INVALID_REFERENCE, device=self.device_label,
                               message=f"the reference did not finish within {PREPARE_TIMEOUT_S:g} s while it was "
                                       "prepared; the judge was stopped", output_tail=self.output_tail())
        return CheckResult(verdict=Verdict.CHECKER_ERROR, device=self.device_label, output_tail=self.output_tail(),
                           message=f"the judge was stuck preparing another module for {PREPARE_TIMEOUT_S:g} s (its "
                                   "reference hangs) and was stopped; check again")

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
        # The judge runs no kernel code and a candidate cannot signal it: its death is the checker's failure.
        return CheckResult(verdict=Verdict.CHECKER_ERROR, device=self.device_label, message=f"the judge died ({how})",
                           output_tail=self.output_tail())

    def close(self, grace_s: float = 3.0) -> None:
        """Ask the judge to end (its candidates and fork server go with it), and kill it after grace_s; 0 for a judge
        known to be stuck (a reference that hangs), which would not read the request. Its sandbox folders go with it."""
        try:
            self._end(grace_s)
        finally:
            if self.sandbox_root and self.process.poll() is not None:
                shutil.rmtree(self.sandbox_root, ignore_errors=True)

    def _end(self, grace_s: float) -> None:
        if self.channel.read_fd is None and self.process.poll() is not None:
            return
        if grace_s:
            try:
                self.send({"op": "close"}, deadline=time.monotonic() + 0.5)
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
        if self.confined:  # its PID namespace, its group and its cgroup
            kill_process_tree(self.process)
            return
        try:
            os.killpg(self.process.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        try:
            self.process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            pass



def make_uvm_device_node() -> None:
    """/dev/nvidia-uvm exists only once a process has asked for it (CUDA runs the setuid nvidia-modprobe); the
    judge's view binds the device nodes present when it starts, and no_new_privs keeps it from asking itself."""
    if not os.path.exists("/dev/nvidia-uvm") and shutil.which("nvidia-modprobe"):
        subprocess.run(["nvidia-modprobe", "-u", "-c=0"], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL, timeout=30, check=False)


class Preparing:
    """A preparation sent to a judge and not yet ended: its id, its reference, when the caller gives up on it."""

    def __init__(self, prepare_id: int, reference_code: str, deadline: float):
        self.id, self.reference_code, self.deadline = prepare_id, reference_code, deadline
