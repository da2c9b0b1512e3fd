"""The judge process: a long-lived process (one per `Checker`) that runs only this project's code and the reference.

It never imports candidate code. For each check it:
1. loads the problem, or takes it from its cache (key: the reference's source): imports the reference in memory
   (no file a candidate could find), sizes it (sizing.py: `too_large` before anything is allocated), builds
   `Model` under seed 42, keeps its weights; on CUDA its eager and torch.compile timings are cached too;
2. takes the candidate process started ahead of need (torch, Triton, the CUDA context ready; confined) and starts
   the next one;
3. sends the candidate its kernel, the init arguments and the reference's weights (plain data, wire.py);
4. per trial: fresh inputs from a seed drawn from `secrets` (never sent, never reused), sent to the candidate; the
   reference's outputs are computed here meanwhile, and compared with the plain bytes the candidate returns;
5. one extra trial on fresh inputs with every Triton launch skipped, at a random place among the trials: if the
   output is still right, the Triton kernels did no work (`no_triton`); and who did the work (work.py): the
   PyTorch operations every trial ran, against the reference's;
6. on CUDA, when correct: times the candidate (speed.py: fresh inputs per call, outputs rechecked, its figures
   bounded by the judge's clock), then, with the candidate gone, the reference.

It talks to the caller on two private pipes (fd numbers in argv): requests ``check``/``prepare``/``cancel``, answers
``stage`` updates and one ``result`` per check. The modules, in the order of a check: problems.py (the reference,
loaded and cached; `Judge`), candidates.py (the candidate processes started ahead), check.py (the steps of one
check), and this one, the request loop (`JudgeServer`). A reference that hangs or kills this process is reported
by the caller as `invalid_reference` from the last stage it saw.
"""

import argparse
import os
import queue
import shutil
import sys
import threading

from repl.checker.defaults import default_spares
from repl.checker.judge.check import run_check
from repl.checker.judge.ended import CHECKER_FAILED
from repl.checker.judge.problems import Judge
from repl.checker.loading import describe, traceback_text
from repl.checker.result import CheckResult, Verdict, bounded_json_dict
from repl.checker.sandbox.launch import SANDBOX_ROOT_VARIABLE
from repl.checker.sandbox.syscall_filter import install_syscall_filter
from repl.checker.sandbox.processes import become_subreaper, children, kill_tree
from repl.checker.wire import Channel, PeerGone, WireError


class JudgeServer:
    """The request loop: a reader thread takes requests off the caller's pipe (a cancel acts at once, anything else
    is queued and stops a preparation under way); the main thread answers them one at a time, and between requests
    prepares the next check of the same problem."""

    def __init__(self, channel: Channel, judge: Judge):
        self.channel, self.judge = channel, judge
        self.requests: queue.Queue = queue.Queue()  # None: the caller closed
        self.cancel = threading.Event()  # the current check's
        self.current_id = None
        self.cancelled_ids: set = set()
        self.stop_preparing = threading.Event()  # the preparation under way stops (between its steps) once set
        self.in_preparation = threading.Event()  # the main thread is preparing: no request is read before its step ends
        self.queued = threading.Lock()  # a request is queued and the preparation's stop set as one step

    def serve(self) -> None:
        threading.Thread(target=self.read_requests, daemon=True).start()
        while (request := self.requests.get()) is not None:
            answered = self.prepare(request) if request["op"] == "prepare" else self.check(request)
            if not answered:
                break
            if request["op"] != "prepare" and self.requests.empty():
                self.prepare_again(request)

    def read_requests(self) -> None:
        while True:
            try:
                request, _ = self.channel.receive(max_blob=0)
            except (PeerGone, WireError, OSError):
                end_with_the_caller()
            if request.get("op") == "cancel":
                self.cancelled_ids.add(request.get("id"))
                if request.get("id") == self.current_id:
                    self.cancel.set()
                continue
            if request.get("op") not in ("check", "prepare"):
                with self.queued:  # one step, so that a preparation made meanwhile is stopped too (new_preparation)
                    self.requests.put(None)
                    self.stop_preparing.set()
                    busy = self.in_preparation.is_set()
                if busy:
                    self.end_now()
                return
            with self.queued:  # any other request comes first: a preparation is only for the time in between
                self.requests.put(request)
                self.stop_preparing.set()

    def end_now(self) -> None:
        """The caller closes while a preparation's step (a torch.compile: seconds) holds the main thread: the spares
        and their directories go first, then everything below, without waiting for the step."""
        for candidate in list(self.judge.pool.waiting):
            candidate.kill()
        end_with_the_caller()

    def new_preparation(self) -> threading.Event:
        with self.queued:  # a request queued before this event was made stops it too
            self.stop_preparing = stop = threading.Event()
            if not self.requests.empty():
                stop.set()
        return stop

    def prepare(self, request: dict) -> bool:
        """preparation.py for a reference before any kernel; False when the caller is gone."""
        from repl.checker.judge.preparation import prepare

        stop = self.new_preparation()
        self.in_preparation.set()
        try:
            sized = lambda reason: self.channel.send({"sized": request.get("id"), "too_large": reason})  # noqa: E731
            steps = prepare(self.judge, str(request.get("reference_code", "")), stop, sized)
            self.channel.send({"prepared": request.get("id"), "steps": steps, "stopped": stop.is_set()})
        except PeerGone:
            return False
        finally:
            self.in_preparation.clear()
        return True

    def check(self, request: dict) -> bool:
        """One check, its stages and its result sent; False when the caller is gone."""
        self.cancel.clear()
        self.current_id = request.get("id")
        if self.current_id in self.cancelled_ids:
            self.cancel.set()
        self.channel.send({"stage": "received"})
        try:
            result = run_check(self.judge, request, self.cancel,
                               lambda name, **extra: self.channel.send({"stage": name, **extra}))
        except BaseException as error:  # a bug in the judge; never a silent end, never the kernel's fault
            result = CheckResult(verdict=Verdict.CHECKER_ERROR, message=f"{CHECKER_FAILED}: {describe(error)}",
                                 traceback=traceback_text(error, (__file__,)))
        try:
            self.channel.send({"result": bounded_json_dict(result)})
        except PeerGone:
            return False
        return True

    def prepare_again(self, request: dict) -> None:
        """Idle until the next request: make the next check's trials of the same problem ahead (:best checks one
        module again and again; so does :run after :regen). Only a problem in the cache: nothing is imported."""
        from repl.checker.judge.preparation import prepare_again

        self.in_preparation.set()
        try:
            prepare_again(self.judge, str(request.get("reference_code", "")), self.new_preparation())
        finally:
            self.in_preparation.clear()


def end_with_the_caller() -> None:
    """The caller is gone (it exited or was killed): every process below this one is killed and this one exits at
    once, even while the main thread is stuck in a reference; the candidates' folders go too (the caller would
    have removed them)."""
    for child in children(os.getpid()):
        kill_tree(child)
    remove_sandbox_root()
    os._exit(0)


def remove_sandbox_root() -> None:
    root = os.environ.get(SANDBOX_ROOT_VARIABLE)
    if root:
        shutil.rmtree(root, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--requests", type=int, required=True)
    parser.add_argument("--replies", type=int, required=True)
    parser.add_argument("--device", choices=("cpu", "cuda"), required=True)
    parser.add_argument("--memory-limit", type=int, default=0)
    parser.add_argument("--spares", type=int, default=None)
    parser.add_argument("--confined", action="store_true", help="started in a sandbox: add the syscall filter")
    options = parser.parse_args()
    # Before any reference runs; namespaces and mounts stay allowed until its fork server has started (below).
    notes = install_syscall_filter(namespaces=True) if options.confined else []
    if options.confined:  # its candidates may see it under /proc (where the caller is root): not its memory
        import ctypes

        ctypes.CDLL(None).prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE
    for fd in (options.requests, options.replies):
        os.set_inheritable(fd, False)
    become_subreaper()  # orphans of candidates come here, where kill_orphans finds them
    channel = Channel(options.requests, options.replies)
    spares = default_spares(jobs=1) if options.spares is None else options.spares
    try:
        judge = Judge(options.device, options.memory_limit or None, os.environ.get("CUDA_VISIBLE_DEVICES"), spares)
    except BaseException as error:
        channel.send({"failed": describe(error)})
        remove_sandbox_root()  # each way out removes the candidates' folders: os._exit runs no atexit hook
        os._exit(1)
    if options.confined and judge.pool.fork_server is not None:
        # Its candidates now come from its fork server, which has what it needs: from here on no new namespace or
        # mount for the reference (which could otherwise mount a /proc without covers in a namespace of its own).
        notes += install_syscall_filter()
    import torch

    from repl.checker.judge.bytecode import bytecode_notes

    notes += bytecode_notes(torch)
    channel.send({"ready": True, "notes": notes})
    JudgeServer(channel, judge).serve()
    judge.pool.close()
    remove_sandbox_root()
    os._exit(0)


if __name__ == "__main__":
    sys.exit(main())
