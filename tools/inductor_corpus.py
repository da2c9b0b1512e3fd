"""Inductor's Triton output for KernelBench problems, the way KernelLLM's training targets were made (torch.compile of
the module, its generated wrapper and kernels): the raw material of the drafting corpus (docs/performance.md).

Needs a CUDA GPU (on a CPU Inductor writes C++). Workers in parallel, each problem once with its own shapes
(``default``) and, time allowing, once more with ``dynamic=True`` (``dynamic``: a second, different reply for the
same module, standing in for a sibling sample). A problem that does not fit its worker's share of the GPU is run
again with its size constants divided by 8 (``shrunk``). Writes JSON lines: problem, variant, codes (the output code
of each compiled graph), the launch configs the autotuner chose, or the error.

    python tools/inductor_corpus.py KernelBench/level1 KernelBench/level2 --out corpus.jsonl.gz --seconds 100
"""

import argparse
import gzip
import json
import multiprocessing as mp
import os
import sys
import time
import traceback
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from repl.bench.inductor_compile import compile_problem  # noqa: E402


def worker(tasks, results, deadline: float, memory_fraction: float) -> None:
    os.environ.setdefault("TORCHINDUCTOR_COMPILE_THREADS", "1")
    import torch

    torch.cuda.set_per_process_memory_fraction(memory_fraction)
    while time.time() < deadline:
        try:
            path, variant = tasks.get_nowait()
        except Exception:
            return
        started = time.time()
        record = {"problem": Path(path).name, "level": Path(path).parent.name, "variant": variant, "shrunk": False}
        for shrink in (False, True):
            try:
                record.update(compile_problem(path, variant, shrink), shrunk=shrink)
                record.pop("error", None)
                break
            except torch.OutOfMemoryError as error:
                record["error"] = f"out of memory: {str(error)[:200]}"
            except Exception as error:
                record["error"] = "".join(traceback.format_exception_only(error))[-500:]
                break
            finally:
                torch.cuda.empty_cache()
        record["seconds"] = time.time() - started
        results.put(record)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("folders", nargs="+")
    parser.add_argument("--out", required=True)
    parser.add_argument("--seconds", type=float, default=100.0, help="no new problem starts after this")
    parser.add_argument("--workers", type=int, default=12)
    args = parser.parse_args()
    problems = sorted(str(path) for folder in args.folders for path in Path(folder).glob("*.py"))
    context = mp.get_context("spawn")
    tasks, results = context.Queue(), context.Queue()
    for variant in ("default", "dynamic"):  # every problem once before any twice
        for path in problems:
            tasks.put((path, variant))
    deadline = time.time() + args.seconds
    workers = [context.Process(target=worker, args=(tasks, results, deadline, 0.9 / args.workers), daemon=True)
               for _ in range(args.workers)]
    for process in workers:
        process.start()
    done = 0
    with gzip.open(args.out, "wt") as out:
        while any(process.is_alive() for process in workers) or not results.empty():
            try:
                record = results.get(timeout=1)
            except Exception:
                if time.time() > deadline + 20:  # a problem stuck past the deadline: stop waiting for it
                    break
                continue
            out.write(json.dumps(record) + "\n")
            done += 1
            status = record.get("error", "ok")[:80]
            print(f"{time.time() - deadline + args.seconds:6.1f}s {record['level']}/{record['problem']} "
                  f"{record['variant']}{' shrunk' if record['shrunk'] else ''}: {status}", flush=True)
    for process in workers:
        process.kill()
    print(f"{done} records", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
