"""Triton's C launchers built once per fork server, not once per candidate.

Triton 3.6 (torch 2.11's) builds, for each kernel signature a process launches, a small C module with the system's C
compiler (its "launcher"), and for its driver a C helper (`cuda_utils`), each cached in the process's Triton cache.
A candidate's cache is new and empty (its HOME is a new tmpfs), so every candidate paid 0.18-0.28 s of `gcc` per
signature on the H200, at its first launch and again where valid-for's batch-1 variant turns a size into a constant
(2026-12-02, docs/gpu-runs.md): a third of a warm check. A launcher's source depends only on the sequence of its
arguments' C types (every pointer alike, constexprs by position), so a few dozen forms cover most kernels.

How, and why it is safe to share:
- the fork server starts a builder process (this file run as a script) before its own imports; it runs only
  Triton's code (`make_launcher` and `compile_module_from_src`, as `CudaLauncher` calls them) on forms listed
  here, in a private cache, and sends each built file's bytes back on a pipe, most common forms first;
- the fork server keeps the bytes it has received (`PREBUILT`) and each candidate it forks inherits them;
- a candidate writes them into its own Triton cache (`seed_triton_cache`) before any candidate code runs.
No file is shared: a candidate can change only its own copies, as it can change anything in its own process. A
signature not listed, or one whose form was not built yet, is built by Triton as before. With Triton's generic
launcher (newer versions have no `make_launcher`), only `cuda_utils` is built. Never on a CPU (the interpreter
builds nothing).
"""

import json
import os
import sys
from pathlib import Path

PREBUILT: dict[tuple[str, str], bytes] = {}  # (the cache folder Triton named for it, file name): the file's bytes
MAX_FILE_BYTES = 16 << 20  # a launcher is about 22 KB, cuda_utils about 100 KB
BATCH = 16  # forms built at once (gcc processes); each batch is sent as soon as it is built
POINTER, INT32, INT64, FLOAT32, CONSTEXPR = "*fp32", "i32", "i64", "fp32", "constexpr"


def forms() -> list[tuple[str, ...]]:
    """Argument type sequences, the likeliest first: pointers, then sizes (i32; i64 past 2**31 elements), then
    constexprs (block sizes; a size equal to 1 also becomes one: a batch-1 launch). Hand-written elementwise and
    row kernels, Inductor's pointwise and reduction kernels (`xnumel`, `rnumel`, `XBLOCK`, `RBLOCK`), a scalar."""
    found = []

    def add(*parts):
        form = tuple(part for kinds in parts for part in kinds)
        if form not in found:
            found.append(form)

    for constexprs in (1, 2):
        for pointers in range(1, 7):
            for sizes in range(0, 3):
                add([POINTER] * pointers, [INT32] * sizes, [CONSTEXPR] * constexprs)
    for pointers in range(1, 7):
        add([POINTER] * pointers, [CONSTEXPR] * 3)  # two sizes equal to 1 beside a block size
        add([POINTER] * pointers, [INT32] * 3, [CONSTEXPR])
        add([POINTER] * pointers, [INT64], [CONSTEXPR])
        add([POINTER] * pointers, [INT32], [FLOAT32], [CONSTEXPR])  # a row kernel's eps or scale
    for pointers in range(7, 11):
        add([POINTER] * pointers, [INT32], [CONSTEXPR])
        add([POINTER] * pointers, [INT32] * 2, [CONSTEXPR] * 2)
    return found


# ---- the builder process -------------------------------------------------------------------------------------------

def _builders() -> list:
    """The builds, cuda_utils first; each runs Triton's own code into this process's private cache."""
    from triton.backends.nvidia import driver
    from triton.runtime import build

    jobs = [lambda: driver.CudaUtils()]
    make_launcher = getattr(driver, "make_launcher", None)
    compile_module = getattr(build, "compile_module_from_src", None) or getattr(driver, "compile_module_from_src",
                                                                                 None)
    if make_launcher is None or compile_module is None:
        return jobs  # a generic launcher: nothing per signature to build

    def launcher(form):
        signature = dict(enumerate(form))
        constants = {(index,): 1 for index, kind in signature.items() if kind == CONSTEXPR}
        source = make_launcher(constants, signature, None)  # as CudaLauncher.__init__ (Triton 3.6) calls them
        compile_module(src=source, name="__triton_launcher", library_dirs=driver.library_dirs(),
                       include_dirs=driver.include_dirs, libraries=driver.libraries)

    return jobs + [lambda form=form: launcher(form) for form in forms()]


def _send_new_files(cache: Path, sent: set, out) -> None:
    for path in sorted(cache.glob("*/*")):
        key = (path.parent.name, path.name)
        if key in sent or not path.is_file() or path.name.startswith("tmp"):
            continue
        data = path.read_bytes()
        if len(data) > MAX_FILE_BYTES:
            continue
        sent.add(key)
        out.write(json.dumps({"key": key[0], "name": key[1], "size": len(data)}).encode() + b"\n" + data)
    out.flush()


def builder_main() -> int:
    import shutil
    import tempfile
    from concurrent.futures import ThreadPoolExecutor

    cache = Path(tempfile.mkdtemp())
    os.environ["TRITON_CACHE_DIR"] = str(cache)  # before Triton reads it: this process's own, removed at the end
    os.environ.pop("TRITON_CACHE_MANAGER", None)  # Triton's file cache, whose folders seed_triton_cache writes
    out = sys.stdout.buffer
    try:
        jobs = _builders()
        sent: set = set()
        # Beside a cold check's critical path (the judge's imports, the first candidate): a quarter of the cores,
        # at a lower priority.
        os.nice(5)
        workers = max(1, min(BATCH, (os.cpu_count() or 2) // 4))
        with ThreadPoolExecutor(workers) as pool:
            for start in range(0, len(jobs), BATCH):
                for future in [pool.submit(build) for build in jobs[start:start + BATCH]]:
                    try:
                        future.result()
                    except Exception:
                        pass  # that form is built by Triton in the candidate, as before
                _send_new_files(cache, sent, out)
    except Exception as error:  # no CUDA driver or compiler here: the candidates build their own, as before
        print(f"launchers not prebuilt: {error}", file=sys.stderr)
    finally:
        shutil.rmtree(cache, ignore_errors=True)
    return 0


# ---- the fork server's side ----------------------------------------------------------------------------------------

class Harvest:
    """The builder process and the frames read from its pipe into PREBUILT (the fork server reads when its selector
    says the pipe is readable; never blocks)."""

    def __init__(self, argv: list[str] | None = None):
        import subprocess

        self.buffer = b""
        argv = argv or [sys.executable, str(Path(__file__).resolve())]
        self.process = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                        stderr=subprocess.DEVNULL)
        self.fd = self.process.stdout.fileno()
        os.set_blocking(self.fd, False)

    @classmethod
    def start(cls) -> "Harvest | None":
        """The builder started, or None where it cannot be (its candidates then build their own, as before)."""
        try:
            return cls()
        except OSError:
            return None

    def read(self) -> bool:
        """Takes what the pipe holds; False once the builder has ended (its pipe closed)."""
        while True:
            try:
                chunk = os.read(self.fd, 1 << 20)
            except BlockingIOError:
                return True
            if not chunk:
                return False
            self.buffer += chunk
            try:
                self._parse()
            except (ValueError, KeyError, TypeError):  # not the builder's frames: nothing more is taken from it
                return False

    def _parse(self) -> None:
        while b"\n" in self.buffer:
            header, rest = self.buffer.split(b"\n", 1)
            frame = json.loads(header)
            if len(rest) < frame["size"]:
                return
            PREBUILT[(frame["key"], frame["name"])] = rest[:frame["size"]]
            self.buffer = rest[frame["size"]:]

    def close(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
        self.process.stdout.close()
        self.process.wait()


# ---- the candidate's side ------------------------------------------------------------------------------------------

def seed_triton_cache() -> int:
    """Writes the inherited files into this process's Triton cache, each in the folder the builder's cache had it
    in (Triton's file cache: its folder per key); how many. None are written where the user set a cache manager
    of their own."""
    from triton import knobs

    if not PREBUILT or knobs.cache.manager_class is not None:
        return 0
    from triton.runtime.cache import FileCacheManager

    for (folder, name), data in PREBUILT.items():
        FileCacheManager(folder).put(data, name, binary=True)
    return len(PREBUILT)


if __name__ == "__main__":
    sys.exit(builder_main())
