"""Where CUDA stops working in the checker's sandbox: each layer of confinement reports what it sees and whether
CUDA's driver starts there. `python tools/sandbox_cuda_probe.py [--json]` (from the checkout's root).

Layers: the caller; a judge (start_confined with judge=True, then the judge's own syscall filter and
PR_SET_DUMPABLE 0, as judge/server.py does); a candidate inside that judge, started as a new process and, where
the fork server can serve, forked from one (as judge/candidates.py does), each before it confines itself (when the
candidate's CUDA context is made). Each layer reports its uid, user-namespace map, capabilities, seccomp mode,
dumpability, limits, how /proc, /dev and /sys are mounted, the device nodes, whether it can rename its own thread
(CUDA's driver does, through /proc/self/task/<tid>/comm) and cuInit's answer (in a child process: a layer that
touched CUDA could not fork a working one). Not a test: a diagnostic for a new machine.
"""

import ctypes
import json
import os
import resource
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

LIMITS = ("RLIMIT_AS", "RLIMIT_NPROC", "RLIMIT_FSIZE", "RLIMIT_MEMLOCK", "RLIMIT_NOFILE", "RLIMIT_STACK")


def cuda_init() -> str:
    """cuInit(0) and cuDeviceGetCount in a forked child: its answer, or why it could not be asked."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(read)
        try:
            cuda = ctypes.CDLL("libcuda.so.1")
            code = cuda.cuInit(0)
            count = ctypes.c_int(-1)
            count_code = cuda.cuDeviceGetCount(ctypes.byref(count)) if code == 0 else None
            answer = f"cuInit={code}" + (f" devices={count.value}" if count_code == 0 else "")
        except OSError as error:
            answer = f"libcuda not loaded: {error}"
        os.write(write, answer.encode())
        os._exit(0)
    os.close(write)
    with os.fdopen(read, "rb") as source:
        answer = source.read().decode()
    _, status = os.waitpid(pid, 0)
    return answer or f"child ended with status {status}"


def thread_rename() -> str:
    """As CUDA's driver names its threads: /proc/self/task/<its tid>/comm (a tid of this PID namespace)."""
    path = f"/proc/self/task/{threading_id()}/comm"
    try:
        with open(path, "w") as comm:
            comm.write("probe")
        return "ok"
    except OSError as error:
        return f"{type(error).__name__}: {error.strerror}"


def threading_id() -> int:
    return ctypes.CDLL(None).syscall(186) if os.uname().machine == "x86_64" else os.getpid()  # gettid


def mounts_of(paths: tuple[str, ...]) -> dict[str, str]:
    found = {}
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        fields = line.split()
        if fields[4] in paths:
            dash = fields.index("-")
            found[fields[4]] = f"{fields[dash + 1]} {fields[5]} {fields[dash + 3]}"
    return found


def status_fields() -> dict[str, str]:
    wanted = ("Uid", "Seccomp", "NoNewPrivs", "CapEff", "CapBnd", "Landlock")
    fields = {}
    for line in Path("/proc/self/status").read_text().splitlines():
        name, _, value = line.partition(":")
        if name in wanted:
            fields[name] = " ".join(value.split())
    return fields


def listing(path: str) -> list[str] | str:
    try:
        return sorted(os.listdir(path))
    except OSError as error:
        return error.strerror


def report(layer: str) -> dict:
    limits = {}
    for name in LIMITS:
        soft, hard = resource.getrlimit(getattr(resource, name))
        limits[name] = "inf" if soft == resource.RLIM_INFINITY else soft
    return {
        "layer": layer, "pid": os.getpid(), "uid": os.getuid(),
        "uid_map": " ".join(Path("/proc/self/uid_map").read_text().split()),
        "status": status_fields(), "dumpable": ctypes.CDLL(None).prctl(3, 0, 0, 0, 0),
        "limits": limits, "mounts": mounts_of(("/proc", "/dev", "/sys", "/proc/sys")),
        "dev": [name for name in listing("/dev") if "nvidia" in name or name == "dri"]
        if isinstance(listing("/dev"), list) else listing("/dev"),
        "nvidia_caps": listing("/dev/nvidia-caps"), "proc_driver_nvidia": listing("/proc/driver/nvidia"),
        "thread_rename": thread_rename(), "cuda": cuda_init(),
    }


def start_layer(layer: str, *, judge: bool, fork_server=None) -> list[dict]:
    """The probe again, one layer down; the reports of that layer and of those below it."""
    from repl.checker.sandbox import kill_process_tree, make_sandbox_dir, start_confined

    sandbox = make_sandbox_dir() if not judge else Path(tempfile.mkdtemp())
    for name in ("home", "tmp", "shm", "work"):
        (sandbox / name).mkdir(exist_ok=True)
    argv = [sys.executable, str(Path(__file__).resolve()), "--layer", layer]
    extra = {"PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    if judge:
        from repl.checker.sandbox import SANDBOX_ROOT_VARIABLE

        extra[SANDBOX_ROOT_VARIABLE] = str(sandbox)
    process, notes = start_confined(argv, sandbox_dir=sandbox, gpu=True, judge=judge, fork_server=fork_server,
                                    extra_env=extra, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    output = process.stdout.read().decode(errors="replace")
    kill_process_tree(process)
    reports = [json.loads(line[len("REPORT "):]) for line in output.splitlines() if line.startswith("REPORT ")]
    if not reports:
        reports = [{"layer": layer, "failed": output[-2000:]}]
    reports[0]["sandbox_notes"] = notes
    return reports


def run_layer(layer: str) -> None:
    """One layer's work, inside its sandbox: report, and start the next layers where there are some. A judge starts
    as judge/server.py does: its filter without the namespace part, its fork server, then the whole filter."""
    if layer != "judge":
        print("REPORT " + json.dumps(report(layer)), flush=True)
        return
    from repl.checker.candidate.fork_server import start_fork_server
    from repl.checker.sandbox.syscall_filter import install_syscall_filter

    print("REPORT " + json.dumps(report("judge, before its filter")), flush=True)
    notes = install_syscall_filter(namespaces=True)
    ctypes.CDLL(None).prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE, as judge/server.py
    for below in start_layer("candidate, new process", judge=False):
        print("REPORT " + json.dumps(below), flush=True)
    server = start_fork_server("cuda", None)
    notes += install_syscall_filter() if server is not None else []
    print("REPORT " + json.dumps({**report("judge, as it runs"), "filter_notes": notes}), flush=True)
    if server is None or not server.usable():
        print("REPORT " + json.dumps({"layer": "candidate, forked", "failed": server and server.gone}), flush=True)
        return
    try:
        for below in start_layer("candidate, forked", judge=False, fork_server=server):
            print("REPORT " + json.dumps(below), flush=True)
    finally:
        server.close()


def main() -> int:
    if sys.argv[1:2] == ["--layer"]:
        run_layer(sys.argv[2])
        return 0
    reports = [report("caller"), *start_layer("judge", judge=True)]
    if "--json" in sys.argv:
        print(json.dumps(reports))
    else:
        for entry in reports:
            print(json.dumps(entry))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
