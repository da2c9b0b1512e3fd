"""The fork server process (`python repl/checker/candidate/fork_server_main.py`): it imports torch and Triton once
(PRELOADED), then forks each candidate the judge asks for (fork_server.ForkServer is the judge's side).

Each start forks twice, as `unshare --fork --kill-child` does for the exec path:
- the middle process starts a session of its own (the judge kills it with killpg), keeps only the descriptors the
  candidate gets, enters new user (root mapped to the caller's uid), network, mount, IPC and PID namespaces, and
  forks;
- the child, PID 1 of the new PID namespace, does what sandbox's init stage does (`init_stage.enter_sandbox`: cgroup,
  view, limits, the namespace's next PID drawn, every capability dropped, notes reported) and forks once more: its
  child, with a PID a user's process could have, runs argv's program (`python -m module ...` or `python script
  ...`) with runpy, in place of exec, while PID 1 waits and reports the program's status to the middle process;
- the middle process waits for the child and ends as it ended (its exit status, or its signal), which the fork
  server reports to the judge. Each dies with its parent (PR_SET_PDEATHSIG), so killing the middle process, or the
  fork server, or the judge, ends the candidate and its whole PID namespace.
"""

import ctypes
import fcntl
import gc
import json
import os
import runpy
import selectors
import signal
import socket
import sys
import threading
import traceback
from pathlib import Path

if __name__ == "__main__" and not __package__:  # started as a script: no PYTHONPATH naming the checkout (a tell)
    sys.path[0] = str(Path(__file__).resolve().parents[3])

from repl.checker.candidate.disguise import rewrite_cmdline  # noqa: E402
from repl.checker.candidate.fork_server import MAX_FDS, MAX_MESSAGE_BYTES  # noqa: E402
from repl.checker.candidate.prebuilt_launchers import Harvest  # noqa: E402
from repl.checker.sandbox.init_stage import enter_sandbox  # noqa: E402
from repl.checker.sandbox.syscall_filter import install_syscall_filter, load_binding  # noqa: E402
from repl.checker.sandbox.view import drop_capabilities  # noqa: E402

_CLONE_NEWNS, _CLONE_NEWIPC, _CLONE_NEWUSER, _CLONE_NEWPID, _CLONE_NEWNET = (0x00020000, 0x08000000, 0x10000000,
                                                                            0x20000000, 0x40000000)
_PR_SET_PDEATHSIG = 1
_PR_SET_DUMPABLE = 4
_PR_SET_NAME = 15
MAX_FD = 1 << 16

PRELOADED = ("torch", "triton", "triton.language", "repl.checker.candidate.compat", "repl.checker.cuda_on_cpu",
             "repl.checker.candidate.launches", "repl.checker.loading", "repl.checker.sandbox",
             "repl.checker.candidate.triton_warmup", "repl.checker.wire", "repl.core.extract",
             "repl.core.module_source")


def _preload(device: str) -> None:
    """What every candidate imports before it runs anything of its own (candidate/main.py's prepare); nothing that
    starts a thread or touches the GPU."""
    import importlib

    if device == "cpu":
        from repl.checker.cuda_on_cpu import enable_triton_interpreter

        enable_triton_interpreter()
    for name in PRELOADED:
        importlib.import_module(name)
    try:
        load_binding()  # finding libseccomp runs ldconfig: once here, not in every candidate
    except (ImportError, RuntimeError, OSError):
        pass  # each candidate's confine_self says so
    if device == "cuda":
        # Not Inductor's heuristics module (compat.HEURISTICS), though each candidate imports it: importing it asks
        # CUDA for its devices, after which torch refuses CUDA to every child (_cuda_unusable_in_children).
        importlib.import_module("repl.checker.timing")


def _cuda_unusable_in_children() -> bool:
    """torch marks every child of a process that asked the CUDA runtime anything (even how many devices there are)
    as unable to use CUDA; a child tells."""
    import torch

    pid = os.fork()
    if pid == 0:
        os._exit(1 if getattr(torch._C, "_cuda_isInBadFork", lambda: False)() else 0)
    return os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) != 0


def serve(control: socket.socket, device: str) -> None:
    problem = _namespaces_problem()
    if problem:
        control.send(json.dumps({"unusable": problem}).encode())
        return
    # Triton's launchers built beside this process's imports (prebuilt_launchers.py), for the candidates it forks.
    harvest = Harvest.start() if device == "cuda" else None
    _preload(device)
    if device == "cuda" and _cuda_unusable_in_children():
        control.send(json.dumps({"unusable": "its imports touched CUDA: its children could not use the GPU"}).encode())
        return
    gc.freeze()  # what the imports made stays out of every collection: a child's would copy all of its pages
    if os.getuid() == 0:
        # Root here (in a confined judge's namespace, or a root caller): its /proc files stay its own when not
        # dumpable, and no process but one with CAP_SYS_PTRACE over it (none below a confined judge) can write its
        # memory, nor its children's until they are confined: a reference cannot steer the next start.
        _libc().prctl(_PR_SET_DUMPABLE, 0, 0, 0, 0)
    control.send(json.dumps({"ready": True}).encode())
    selector = selectors.DefaultSelector()
    selector.register(control, selectors.EVENT_READ)
    if harvest is not None:
        selector.register(harvest.fd, selectors.EVENT_READ)
    children: dict[int, int] = {}  # pidfd: pid
    while True:
        for key, _ in selector.select():
            if harvest is not None and key.fd == harvest.fd:
                harvest = _take_builds(harvest, selector)
            elif key.fileobj is control:
                try:
                    data, fds, _, _ = socket.recv_fds(control, MAX_MESSAGE_BYTES, MAX_FDS)
                except OSError:
                    data, fds = b"", []
                if not data:
                    return  # the judge is gone: so are the children (their parent-death signal)
                if harvest is not None:
                    harvest = _take_builds(harvest, selector)  # what is built by now goes to this child too
                reply = _spawn(json.loads(data), fds)
                if "spawned" in reply:
                    pidfd = os.pidfd_open(reply["spawned"])
                    children[pidfd] = reply["spawned"]
                    selector.register(pidfd, selectors.EVENT_READ)
                control.send(json.dumps(reply).encode())
            elif key.fd in children:  # (a builder's pipe closed earlier in this round is neither)
                pid = children.pop(key.fd)
                selector.unregister(key.fd)
                os.close(key.fd)
                _, status = os.waitpid(pid, 0)
                control.send(json.dumps({"exited": pid, "code": os.waitstatus_to_exitcode(status)}).encode())


def _take_builds(harvest: Harvest, selector) -> Harvest | None:
    """The builder's frames read so far; None once it has ended (its pipe no longer watched)."""
    fd = harvest.fd
    if harvest.read():
        return harvest
    selector.unregister(fd)
    harvest.close()
    return None


def _spawn(request: dict, fds: list[int]) -> dict:
    try:
        # A fork copies only this thread: a lock another one held would never be released. Python threads would
        # be this module's doing; native pools (numpy's OpenBLAS starts one at import) stop across a fork through
        # their pthread_atfork handlers.
        if threading.active_count() != 1:
            return {"failed": f"the fork server runs {threading.active_count()} Python threads"}
        if len(fds) != len(request["targets"]):
            return {"failed": "descriptors missing"}
        sys.stdout.flush()
        sys.stderr.flush()
        parent = os.getpid()
        pid = os.fork()
        if pid == 0:
            try:
                _middle(request, dict(zip(request["targets"], fds)), parent)
            except BaseException:
                traceback.print_exc()
            os._exit(127)
        return {"spawned": pid}
    finally:
        for fd in fds:
            os.close(fd)


def _libc():
    libc = ctypes.CDLL(None, use_errno=True)
    libc.unshare.argtypes = [ctypes.c_int]
    return libc


def _enter_namespaces(libc) -> None:
    """New user (root inside mapped to our uid and gid), mount, IPC, network and PID namespaces (the PID one for the
    next child), as `unshare --user --map-root-user --net --pid --mount --ipc` does."""
    uid, gid = os.getuid(), os.getgid()
    flags = _CLONE_NEWUSER | _CLONE_NEWNS | _CLONE_NEWIPC | _CLONE_NEWNET | _CLONE_NEWPID
    if libc.unshare(flags) != 0:
        error = ctypes.get_errno()
        raise OSError(error, f"unshare: {os.strerror(error)}")
    for name, text in (("setgroups", "deny"), ("uid_map", f"0 {uid} 1"), ("gid_map", f"0 {gid} 1")):
        with open(f"/proc/self/{name}", "w") as file:
            file.write(text)


def _namespaces_problem() -> str | None:
    """Whether a child of this process can enter the namespaces (a seccomp profile or a sysctl may forbid what the
    unshare tool was allowed): tried once, in a child that exits at once. None when it can."""
    pid = os.fork()
    if pid == 0:
        try:
            _enter_namespaces(_libc())
            os._exit(0)
        except BaseException as error:
            os.write(2, f"{error}\n".encode())
            os._exit(1)
    _, status = os.waitpid(pid, 0)
    return None if os.waitstatus_to_exitcode(status) == 0 else "a child could not enter new namespaces"


def _keep_only(targets: dict[int, int]) -> None:
    """Each of our descriptors at the number the child gets (target: ours); every other one closed (the control
    socket, the selector, the children's pidfds). 0, 1 and 2 are /dev/null unless given."""
    floor = max([*targets, *targets.values(), 2]) + 1
    staged = {target: fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, floor) for target, fd in targets.items()}
    devnull = os.open(os.devnull, os.O_RDWR | os.O_CLOEXEC)
    for target in (0, 1, 2):
        staged.setdefault(target, fcntl.fcntl(devnull, fcntl.F_DUPFD_CLOEXEC, floor))
    for name in os.listdir("/proc/self/fd"):
        if int(name) not in staged.values():
            try:
                os.close(int(name))
            except OSError:
                pass  # the directory listing's own descriptor
    for target, fd in staged.items():
        os.dup2(fd, target, inheritable=True)
    for fd in set(staged.values()):
        os.close(fd)


def _middle(request: dict, targets: dict[int, int], server: int) -> None:
    libc = _libc()
    os.setsid()
    child: list[int] = []

    def end(number, frame):
        # The candidate may have cleared its own parent-death signal: this process, out of its reach (outside its
        # PID namespace), kills it, and with it the namespace, before it goes.
        if child:
            os.kill(child[0], signal.SIGKILL)
        os._exit(128 + number)

    signal.signal(signal.SIGTERM, end)
    libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
    if os.getppid() != server:
        os._exit(1)  # the server died before the line above: nobody would end this process
    _keep_only(targets)
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    os.environ.clear()
    os.environ.update(request["env"])
    _enter_namespaces(libc)
    alive_read, alive_write = os.pipe()
    status_read, status_write = os.pipe()
    pid = os.fork()
    if pid == 0:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        os.close(alive_write)
        os.close(status_read)
        _child(request, libc, alive_read, status_write)
    child.append(pid)
    os.close(alive_read)
    os.close(status_write)
    for fd in {0, 1, 2, *targets}:
        os.close(fd)  # the child holds them: the judge sees the pipes close when it ends
    _keep_nothing_to_lend(libc)
    while True:
        try:
            _, status = os.waitpid(pid, 0)
            break
        except InterruptedError:
            continue
    status = _program_status(status_read, status)
    if os.WIFSIGNALED(status):
        signal.signal(os.WTERMSIG(status), signal.SIG_DFL)
        os.kill(os.getpid(), os.WTERMSIG(status))
    os._exit(os.waitstatus_to_exitcode(status) if os.WIFEXITED(status) else 1)


def _keep_nothing_to_lend(libc) -> None:
    """The middle process, once its child is forked, only waits: no capability in its namespace, no namespace or
    mount, then dumpable again (the judge's memory watchdog reads its proportional set size; what it shares with the
    server would count whole in its resident size)."""
    install_syscall_filter()
    drop_capabilities()
    libc.prctl(_PR_SET_DUMPABLE, 1, 0, 0, 0)


def _child(request: dict, libc, parent_alive: int, status_fd: int) -> None:
    import select

    libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if select.select([parent_alive], [], [], 0)[0]:
        os._exit(1)  # end of file: the middle process died before the line above
    os.close(parent_alive)
    # Whoever asks (a judge's reference can reach this server too), a child is confined as a candidate is.
    spec = {**request["spec"], "judge": False, "writable": [], "namespaces": True, "user_namespace": True}
    try:
        drawn = enter_sandbox(spec, draw_pid=True)
    except BaseException as error:
        print(f"the sandbox could not be built: {error}", file=sys.stderr, flush=True)
        os._exit(127)
    if drawn:
        _run_below_the_init(libc, status_fd)  # returns in the program's process, status_fd closed
    else:
        os.close(status_fd)
    # No namespace or mount from here on, before anything runs that the caller chose (candidate/main.py adds the
    # rest of its confinement once its CUDA context is made).
    install_syscall_filter()
    # Confined now, it lends no right of the server's: dumpable again, as a new process is (the judge's memory
    # watchdog reads its proportional set size).
    libc.prctl(_PR_SET_DUMPABLE, 1, 0, 0, 0)
    # What a new interpreter starts with: KeyboardInterrupt on SIGINT, SIGPIPE ignored.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGPIPE, signal.SIG_IGN)
    os._exit(_run(request["argv"]))


def _run_below_the_init(libc, status_fd: int) -> None:
    """Returns in a child, the program's process, with the PID drawn for it: a process that sees itself as PID 1
    can tell it is sandboxed. This process stays PID 1 of the namespace, reaps what is orphaned there, and once the
    program has ended writes its wait status on status_fd (an init cannot die of a signal it sends itself: the
    middle process ends as the status says) and exits, which ends the namespace. Its name and command line are a
    shell's."""
    pid = os.fork()
    if pid == 0:
        os.close(status_fd)
        os.setpgid(0, 0)  # a group of its own in the init's session, as a shell's job is
        return
    libc.prctl(_PR_SET_DUMPABLE, 0, 0, 0, 0)  # the program cannot read or write this process's memory
    rewrite_cmdline("bash")  # the fork server's command line names the checkout: the program's parent looks a shell
    libc.prctl(_PR_SET_NAME, ctypes.c_char_p(b"bash"), 0, 0, 0)
    os.closerange(0, status_fd)
    os.closerange(status_fd + 1, MAX_FD)
    while True:
        reaped, status = os.wait()
        if reaped == pid:
            os.write(status_fd, str(status).encode())
            os._exit(0)


def _program_status(status_read: int, init_status: int) -> int:
    """The program's wait status where its init reported one, else the init's own (it died before, or was killed)."""
    os.set_blocking(status_read, False)
    try:
        reported = os.read(status_read, 32)
    except BlockingIOError:
        reported = b""
    os.close(status_read)
    return int(reported) if reported.isdigit() else init_status


def _run(argv: list[str]) -> int:
    """Run `python -m module args` or `python script args` in this process, as the interpreter would after an exec;
    returns the exit status."""
    try:
        try:
            if argv[1:2] == ["-m"]:
                sys.argv = [argv[2], *argv[3:]]
                sys.path[0] = os.getcwd()
                runpy.run_module(argv[2], run_name="__main__", alter_sys=True)
            else:
                sys.argv = argv[1:]
                sys.path[0] = os.path.dirname(os.path.abspath(argv[1]))
                runpy.run_path(argv[1], run_name="__main__")
            code = 0
        except SystemExit as exit:
            if exit.code is None or isinstance(exit.code, int):
                code = exit.code or 0
            else:
                print(exit.code, file=sys.stderr)
                code = 1
        except BaseException:
            traceback.print_exc()
            code = 1
        sys.stdout.flush()
        sys.stderr.flush()
    except BaseException:
        code = 120  # as the interpreter exits when it cannot flush its standard streams
    return code


def main() -> None:
    import argparse

    parser = argparse.ArgumentParser()
    parser.add_argument("--control", type=int, required=True)
    parser.add_argument("--device", choices=("cpu", "cuda"), required=True)
    parser.add_argument("--judge", type=int, required=True)
    options = parser.parse_args()
    control = socket.socket(fileno=options.control)
    # Dies with the judge (its middle processes then kill their candidates): a judge killed while a check ran
    # leaves nothing running.
    _libc().prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if os.getppid() != options.judge:
        os._exit(0)  # the judge died before the line above
    try:
        serve(control, options.device)
    except BaseException:
        traceback.print_exc()
        sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
