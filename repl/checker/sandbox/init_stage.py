"""The init stage: the first code to run inside a candidate's namespaces, before the candidate's program.

It joins the cgroup, builds the view, lowers the limits, drops every capability, reports the layers it could not
apply on a private pipe and starts a session of its own; then the program runs, confined. A new process runs it as
``python -I -S init_stage.py SPEC -- ARGV`` under the unshare tool and then *becomes* the program (exec); a process
forked from the fork server (candidate/fork_server.py) calls `enter_sandbox` and then runs the program without an exec.
"""

import json
import os
import secrets
import signal
import sys
from pathlib import Path

if __name__ == "__main__":  # started as a script with -I -S: the project's root is not on the path
    sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

from repl.checker.sandbox.limits import WATCHDOG_NOTE, lower_limits  # noqa: E402
from repl.checker.sandbox.view import CAP_SETFCAP, NEXT_PID, build_view, drop_capabilities  # noqa: E402

FIRST_USER_PID = 1000  # below: what a machine's boot starts


def enter_sandbox(spec: dict, draw_pid: bool = False) -> bool:
    """The init stage's work, done by a process that is already inside its namespaces (PID 1 of its PID namespace):
    join the cgroup, build the view, lower the limits, with `draw_pid` draw the namespace's next PID
    (draw_next_pid), drop every capability, report the notes on spec's report_fd and start a session of its own.
    What comes next (exec, or the fork server's runpy) runs confined. Whether the next PID was drawn."""
    notes: list[str] = []
    for number in (signal.SIGINT, signal.SIGTERM, signal.SIGPIPE):
        signal.signal(number, signal.SIG_DFL)
    if spec["cgroup"]:
        try:
            Path(spec["cgroup"], "cgroup.procs").write_text("0")
        except OSError:
            spec["cgroup"] = None
            # v2 keeps the quota in that cgroup; a judge has none
            spec["cpu_bounded"] = spec.get("judge") or spec.get("cpu_cgroup") is not None
    if spec.get("cpu_cgroup"):
        try:
            Path(spec["cpu_cgroup"], "cgroup.procs").write_text("0")
        except OSError:
            spec["cpu_bounded"] = False
    if spec["namespaces"]:
        try:
            build_view(spec, notes)
        except OSError as error:
            notes.append(f"filesystem view incomplete ({error}): writes outside the sandbox rely on Landlock")
    lower_limits(spec, notes)
    if not spec["cgroup"]:
        notes.append(f"{WATCHDOG_NOTE} (no memory cgroup could be made or joined here): it counts resident "
                     "memory, not shared memory that no process maps")
    os.chdir(spec["cwd"])
    drawn = bool(draw_pid and spec["namespaces"] and draw_next_pid())
    keep = (CAP_SETFCAP,) if spec.get("judge") else ()  # a judge maps root in its candidates' namespaces
    if spec["user_namespace"] and not drop_capabilities(keep):
        notes.append("capabilities in the namespace not dropped: the candidate could unmount the view's covers")
    with os.fdopen(spec["report_fd"], "w") as report:
        report.write(json.dumps(notes) + "\n")
    if spec["namespaces"]:
        os.setsid()  # our own session inside the PID namespace: its killpg(0) reaches only its own processes
    return drawn


def draw_next_pid() -> bool:
    """The PID namespace's next PID drawn among those a user's process has (ns_last_pid, while the capabilities
    last): a process that sees itself as PID 1 can tell it is sandboxed. False where it cannot be set."""
    try:
        pid_max = int(Path("/proc/sys/kernel/pid_max").read_text())
    except (OSError, ValueError):
        pid_max = 32768
    following = secrets.SystemRandom().randrange(FIRST_USER_PID, max(FIRST_USER_PID + 1, min(pid_max, 1 << 22) // 2))
    try:
        Path(NEXT_PID).write_text(str(following - 1))
    except OSError:
        return False
    return True


def main(spec: dict, argv: list[str]) -> None:
    enter_sandbox(spec)
    try:
        os.execvp(argv[0], argv)
    except OSError as error:
        print(f"cannot start {argv[0]}: {error}", file=sys.stderr)
        os._exit(127)


if __name__ == "__main__":
    main(json.loads(sys.argv[1]), sys.argv[3:])
