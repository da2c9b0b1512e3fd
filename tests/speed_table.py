"""Issue 21's table on a GPU: the timing cheats, the torch-does-the-work kernel and the honest kernels that were judged
wrong, checked by whichever checker is on the path (this one, or an older tree's: only CheckResult fields that exist
are read), with what each must get.

    python tests/speed_table.py [--device cuda] [--json FILE] [--small]

--small shrinks every problem so that the table runs under Triton's interpreter (device cpu, interpreter timings):
a dry run of the cases and of this script, not of the figures. tests/test_speed_gpu.py asserts the expectations on a
GPU; docs/gpu-runs.md records the figures.
"""

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

CASES_DIR = Path(__file__).parent / "speed_cases"
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the tree this copy of the script is in
MATMUL = "matmul_reference.py"
# Checked in this order, through one Checker: the background-work attack first, so that the reference is timed
# right after it (the issue: "the next, honest kernel of the problem 3.11x", eager 5.18 ms instead of 2.66).
MATMUL_CASES = [
    ("keeps the GPU busy from a thread", "attack_background_work.py"),
    ("honest Triton matmul", "matmul_triton.py"),
    ("patches the CUDA event timer (55%)", "attack_patched_event_timer.py"),
    ("memoises by pointer and fingerprint", "attack_memo_fingerprint.py"),
    ("memoises every other timed call", "attack_memo_every_other.py"),
    ("computes on a side stream", "attack_side_stream.py"),
    ("a flag kernel beside torch.matmul", "attack_flag_beside_matmul.py"),
]
OTHER_CASES = [
    ("honest autotuned large-K matmul", "matmul_large_k_reference.py", "matmul_large_k_triton.py"),
    ("honest LayerNorm, ~20x eager", "layernorm_reference.py", "layernorm_triton.py"),
    ("diag(a) @ b as a row scaling, an algorithmic win", "diag_matmul_reference.py", "diag_rows_triton.py"),
]
SMALL = {"N = 4096": "N = 64", "M, N, K = 64, 64, 524288": "M, N, K = 16, 16, 8192",
         "batch_size, features, dim1, dim2 = 16, 64, 256, 256": "batch_size, features, dim1, dim2 = 2, 4, 8, 64",
         "torch.rand(8192, 8192": "torch.rand(64, 64"}


EXTENDS = "# extends: "


def read(name: str, small: bool) -> str:
    """A case's source; an attack that says "# extends: K" gets kernel file K's kernel and helpers (everything but its
    ModelNew) after its imports, so that each attack file holds only its trick."""
    text = (CASES_DIR / name).read_text()
    if EXTENDS in text:
        base = (CASES_DIR / text.split(EXTENDS, 1)[1].split()[0]).read_text()
        body = base[base.index("\n\n\n"):base.index("\nclass ModelNew")]
        lines = text.splitlines()
        last_import = max(i for i, line in enumerate(lines) if line.startswith(("import ", "from ")))
        text = "\n".join(lines[:last_import + 1]) + body + "\n".join(lines[last_import + 1:]) + "\n"
    for old, new in (SMALL.items() if small else ()):
        text = text.replace(old, new)
    return text


def row(label: str, result) -> dict:
    keys = ("verdict", "message", "kernel_ms", "eager_ms", "compiled_ms", "speedup_vs_eager", "suspicious", "flags",
            "timing", "roofline", "work", "elapsed_s", "phases_s", "notes")
    data = {key: getattr(result, key, None) for key in keys}
    data["verdict"] = str(data["verdict"])
    data["label"] = label
    return data


def direct_matmul_ms(small: bool) -> float | None:
    """torch.matmul of the problem's size timed here, as do_bench does (L2 flushed before every call): the eager
    time a quiet GPU gives, to compare with the judge's cached one."""
    import torch

    if not torch.cuda.is_available():
        return None
    n = 64 if small else 4096
    a, b = torch.rand(n, n, device="cuda"), torch.rand(n, n, device="cuda")
    flush = torch.empty(256 * 1024 * 1024 // 4, dtype=torch.int32, device="cuda")
    for _ in range(3):
        a @ b
    times = []
    for _ in range(50):
        flush.zero_()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        a @ b
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times)


def run(device: str, small: bool = False, log=print) -> dict:
    from repl.checker import Checker

    options = {"interpreter_timing": True} if small else {}
    rows = []
    started = time.monotonic()
    with Checker(device) as checker:
        reference = read(MATMUL, small)
        for label, kernel in MATMUL_CASES:
            rows.append(row(label, checker.check(reference, read(kernel, small), **options)))
            log(f"[{time.monotonic() - started:.0f} s] " + json.dumps(rows[-1], default=str))
        for label, reference_file, kernel in OTHER_CASES:
            rows.append(row(label, checker.check(read(reference_file, small), read(kernel, small), **options)))
            log(f"[{time.monotonic() - started:.0f} s] " + json.dumps(rows[-1], default=str))
    return {"rows": rows, "direct_eager_ms": direct_matmul_ms(small), "seconds": round(time.monotonic() - started, 1)}


def expectations(table: dict) -> list[tuple[str, bool, str]]:
    """(what, held, the figures) for each promise of issue 21's done-when, on this table."""
    rows = {r["label"]: r for r in table["rows"]}
    honest = rows["honest Triton matmul"]
    honest_ms = honest["kernel_ms"] or 0.0

    def flagged(r) -> bool:
        return bool(r.get("flags"))

    def within_10_percent_or_flagged(r) -> tuple[bool, str]:
        if r["verdict"] != "correct":
            return True, r["verdict"]
        near = r["kernel_ms"] is not None and r["kernel_ms"] >= 0.9 * honest_ms
        return near or flagged(r), f"{r['kernel_ms']} ms vs honest {honest_ms} ms, flags {r.get('flags')}"

    checks = [("honest matmul: correct, unflagged", honest["verdict"] == "correct" and not flagged(honest),
               f"{honest['verdict']} {honest_ms} ms, flags {honest.get('flags')}")]
    for label in ("patches the CUDA event timer (55%)", "memoises by pointer and fingerprint",
                  "memoises every other timed call", "computes on a side stream"):
        held, detail = within_10_percent_or_flagged(rows[label])
        checks.append((f"{label}: within 10% of honest, flagged, or not correct", held, detail))
    direct, eager = table.get("direct_eager_ms"), honest.get("eager_ms")
    if direct and eager:
        checks.append(("eager timed after the background-work attack is a quiet GPU's (within 15%)",
                       abs(eager - direct) <= 0.15 * direct, f"judge's eager {eager} ms, quiet {direct} ms"))
    flag = rows["a flag kernel beside torch.matmul"]
    checks.append(("the torch-does-the-work kernel is not correct", flag["verdict"] != "correct", flag["message"]))
    for label in ("honest autotuned large-K matmul", "honest LayerNorm, ~20x eager",
                  "diag(a) @ b as a row scaling, an algorithmic win"):
        r = rows[label]
        checks.append((f"{label}: correct, unflagged", r["verdict"] == "correct" and not flagged(r),
                       f"{r['verdict']}: {r['message']}; {r['kernel_ms']} ms, {r['speedup_vs_eager']}x eager, "
                       f"flags {r.get('flags')}, suspicious {r.get('suspicious')}"))
    return checks


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--json", help="write the table here")
    parser.add_argument("--small", action="store_true", help="small problems, for the CPU interpreter")
    options = parser.parse_args(argv)
    table = run("cpu" if options.small else options.device, options.small)
    table["expectations"] = [list(item) for item in expectations(table)]
    for what, held, detail in table["expectations"]:
        print(f"{'PASS' if held else 'FAIL'}  {what}: {detail}")
    print(f"table took {table['seconds']} s")
    if options.json:
        Path(options.json).write_text(json.dumps(table, indent=1, default=str))
    return 0 if all(held for _, held, _ in table["expectations"]) else 1


if __name__ == "__main__":
    sys.exit(main())
