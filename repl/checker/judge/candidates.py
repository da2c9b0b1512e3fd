"""Candidate processes, the judge's side: one confined process per check (`CandidateProcess`), started ahead of need
by `CandidatePool` (forked from the fork server where this OS allows) so that a check finds one ready."""

import contextlib
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

from repl.checker.judge.candidate_replies import clean_reply
from repl.checker.judge.ended import Ended, checker_failed
from repl.checker.result import Verdict
from repl.checker.sandbox.processes import continue_processes, kill_orphans, stop_tree
from repl.checker.wire import Channel, PeerGone, SharedBuffer, Stopped, WireError

OUTPUT_TAIL_BYTES = 64 * 1024
# Started as a script, which puts the checkout on its path itself: a PYTHONPATH naming it would be a tell.
CANDIDATE_MAIN = Path(__file__).resolve().parents[1] / "candidate" / "main.py"
CANDIDATE_START_S = 120.0  # a fresh candidate process imports torch and triton: slow on a loaded machine


class CandidateProcess:
    """One confined candidate process and the judge's ends of its pipes."""

    def __init__(self, device: str, memory_limit: int | None, cuda_visible_devices: str | None, fork_server=None):
        from repl.checker.sandbox import PipeCollector, make_sandbox_dir, start_confined

        self.sandbox_dir = make_sandbox_dir()
        request_read, request_write = os.pipe()
        reply_read, reply_write = os.pipe()
        shared_requests, shared_replies = SharedBuffer.create(), SharedBuffer.create()
        argv = [sys.executable, str(CANDIDATE_MAIN), "--requests", str(request_read), "--replies",
                str(reply_write), "--shared-requests", str(shared_requests.fd), "--shared-replies",
                str(shared_replies.fd), "--device", device, "--sandbox", str(self.sandbox_dir)]
        if memory_limit:
            argv += ["--memory-limit", str(memory_limit)]
        try:
            self.process, self.notes = start_confined(
                argv, sandbox_dir=self.sandbox_dir, gpu=device == "cuda", cuda_visible_devices=cuda_visible_devices,
                pass_fds=(request_read, reply_write, shared_requests.fd, shared_replies.fd),
                memory_limit_bytes=memory_limit, fork_server=fork_server, stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        except BaseException:
            shared_requests.close()
            shared_replies.close()
            raise
        finally:
            os.close(request_read)
            os.close(reply_write)
        self.channel = Channel(reply_read, request_write, shared_in=shared_replies, shared_out=shared_requests,
                               untrusted_peer=True)
        self._output = PipeCollector(self.process.stdout, limit_bytes=OUTPUT_TAIL_BYTES, keep="tail")
        self.ready = False

    def wait_ready(self, deadline: float, cancel: threading.Event | None) -> None:
        if self.ready:
            return
        reply, _ = self.channel.receive(max_blob=0, deadline=min(deadline, time.monotonic() + CANDIDATE_START_S),
                                        cancel=cancel)
        reply = clean_reply(reply)
        if not reply.get("ready"):
            raise PeerGone(str((reply.get("error") or {}).get("message", "candidate did not start")))
        self.notes = [*self.notes, *reply.get("notes", [])]
        self.ready = True

    def alive(self) -> bool:
        return self.channel.read_fd is not None and self.process.poll() is None

    @contextlib.contextmanager
    def stopped(self):
        """Every process of the candidate stopped (SIGSTOP) for the length of the block, then continued."""
        stopped = stop_tree(self.process.pid) if self.alive() else []
        try:
            yield
        finally:
            continue_processes(stopped)

    def output_tail(self) -> str | None:
        return self._output.data().decode("utf-8", errors="replace") or None

    def death_message(self) -> str:
        import signal

        try:
            code = self.process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            code = None
        if code is not None and code < 0:
            name = signal.Signals(-code).name if -code in signal.Signals._value2member_map_ else f"signal {-code}"
            return f"candidate died with {name}" + (" (out of memory?)" if name == "SIGKILL" else "")
        tail = self.output_tail() or ""
        last = next((line.strip() for line in reversed(tail.splitlines()) if line.strip()), "")
        message = f"candidate exited with status {code} without answering"
        return f"{message}: {last[:200]}" if last else message

    def kill(self) -> None:
        from repl.checker.sandbox import kill_process_tree, remove_sandbox_dir

        if self.channel.read_fd is None:
            return
        self.channel.close()
        kill_process_tree(self.process)
        remove_sandbox_dir(self.sandbox_dir)


class CandidatePool:
    """Keeps `spares` candidate processes starting or ready, so that a check finds one waiting. They are forked
    from a fork server (candidate/fork_server.py) that imported torch and Triton once, where this OS allows."""

    def __init__(self, device: str, memory_limit: int | None, cuda_visible_devices: str | None, spares: int):
        from repl.checker.candidate.fork_server import start_fork_server

        self.fork_server = start_fork_server(device, cuda_visible_devices)
        self.arguments = (device, memory_limit, cuda_visible_devices, self.fork_server)
        self.spares = spares
        self.waiting: list[CandidateProcess] = []
        self._filling: threading.Thread | None = None
        if self.fork_server is None:
            self.fill()  # a new interpreter: it imports torch while the judge does

    def fill(self) -> None:
        if not self.waiting:
            self.waiting.append(CandidateProcess(*self.arguments))

    def fill_in_background(self) -> None:
        """The first candidate, forked once the fork server has done its imports, without holding the judge up."""
        self._filling = threading.Thread(target=self.fill, name="first-candidate", daemon=True)
        self._filling.start()

    def take(self, deadline: float, cancel: threading.Event) -> CandidateProcess:
        if self._filling is not None:
            self._filling.join()  # a failure there leaves nothing waiting: a candidate is started below
            self._filling = None
        for attempt in (1, 2):  # a spare that died while waiting (the machine's OOM killer...) gets one successor
            candidate = self.waiting.pop(0) if self.waiting else CandidateProcess(*self.arguments)
            while len(self.waiting) < self.spares:
                self.waiting.append(CandidateProcess(*self.arguments))
            try:
                candidate.wait_ready(deadline, cancel)
                return candidate
            except Stopped as stopped:
                candidate.kill()
                if stopped.reason == "cancelled":
                    raise Ended(Verdict.CANCELLED, "check cancelled before the candidate started")
                raise Ended(Verdict.TIMEOUT, "no candidate process was ready in time")
            except (PeerGone, WireError) as error:  # no kernel code has run in it yet: the checker's failure
                message = f"the candidate process did not start: {error}; {candidate.death_message()}"
                tail = candidate.output_tail()
                candidate.kill()
                if attempt == 2:
                    failed = checker_failed(message)
                    failed.output_tail = tail
                    raise failed

    def top_up(self) -> None:
        """Start spares until `spares` are starting or ready (take() does after each check; a preparation before the
        first), unless the first is still being forked in the background."""
        if self._filling is not None and self._filling.is_alive():
            return
        while len(self.waiting) < self.spares:
            self.waiting.append(CandidateProcess(*self.arguments))

    def kill_orphans(self) -> None:
        """Nothing a candidate started outlives its check: where it had no PID namespace to die with, what it left
        was re-parented to this process (a child subreaper); processes of the pool are kept."""
        keep = {candidate.process.pid for candidate in self.waiting}
        if self.fork_server is not None:
            keep.add(self.fork_server.process.pid)
        kill_orphans(keep)

    def wait_for_spares(self, deadline: float, cancel: threading.Event) -> None:
        """Until every spare has finished starting (a starting process loads the CPU and the GPU): before the judge
        times anything. A spare that fails to start is the next take()'s business."""
        for candidate in list(self.waiting):
            try:
                candidate.wait_ready(deadline, cancel)
            except (Stopped, PeerGone, WireError):
                pass

    def close(self) -> None:
        if self._filling is not None:
            self._filling.join()
        for candidate in self.waiting:
            candidate.kill()
        self.waiting = []
        if self.fork_server is not None:
            self.fork_server.close()

