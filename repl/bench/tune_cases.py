"""What :tune gains, and what it costs: `python -m repl.bench.tune_cases REFERENCE KERNEL [REFERENCE KERNEL ...]
[--device cuda] [--json]`. Each pair is checked (the original), then tuned through the same Checker (every variant
checked and timed like any candidate); per kernel: the original's and the kept variant's kernel_ms (both timed
again, one after the other, when a variant won), the speedup (of that pair; 1.0 when the original is kept),
how many variants were tried and how many were correct and timed unflagged (usable), the checks in all, what the
first check cost (and where its time went), and the seconds tuning took. Not a test: figures depend on the GPU;
docs/shipping.md records them."""

import argparse
import json
import math
import time
from pathlib import Path
from typing import Callable

from repl.checker.result import CheckResult


def tune_pair(check: Callable[[str], CheckResult], kernel: str, *, interpreter: bool = False,
              max_checks: int | None = None) -> dict:
    """Check `kernel` with `check` (code -> its CheckResult against the problem), then tune it as :tune does.
    interpreter: the checks time under Triton's CPU interpreter (figures that test the tool), so tune there too.
    max_checks: the variants the climb may check (:tune's MAX_CHECKS by default)."""
    from repl.workflows.tune import CPU_REFUSAL, MAX_CHECKS, tune, tune_refusal, variants

    original = check(kernel)
    row = {"verdict": original.verdict.value, "kernel_ms": original.kernel_ms, "variants": len(variants(kernel)),
           "valid_for": (original.valid_for or {}).get("summary"), "check_s": original.elapsed_s,
           "check_phases_s": original.phases_s}
    refusal = tune_refusal(original)
    if refusal and not (interpreter and refusal == CPU_REFUSAL and original.correct and original.kernel_ms):
        return {**row, "not_tuned": refusal, "checks": 1, "message": original.message}
    started = time.monotonic()
    report = tune(kernel, original, check, max_checks=max_checks or MAX_CHECKS)
    kept = report.best is not None
    return {**row, "kept": report.best.label.removesuffix(", again") if kept else "as generated",
            "original_again_ms": report.baseline.check.kernel_ms if kept else None,
            "tuned_ms": report.best.check.kernel_ms if kept else original.kernel_ms,
            "speedup": report.speedup if kept else 1.0, "tune_s": round(time.monotonic() - started, 1),
            "variants": report.variants_checked, "checks": 1 + len(report.tried),
            "usable_variants": sum(tried.usable for tried in report.tried[:report.variants_checked]),
            "reverified": report.best.check.correct if kept else None, "tuned_code": report.best_code,
            "tried": [[tried.label, tried.check.verdict.value if tried.check else tried.why,
                       tried.check.kernel_ms if tried.check else None] for tried in report.tried]}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m repl.bench.tune_cases", description=__doc__.split("\n")[0])
    parser.add_argument("files", nargs="+", metavar="REFERENCE KERNEL")
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    if len(args.files) % 2:
        parser.error("give REFERENCE KERNEL pairs")
    from repl.checker import Checker

    rows = []
    with Checker(device=args.device) as checker:
        for reference, kernel in zip(args.files[::2], args.files[1::2]):
            problem = Path(reference).read_text()
            row = tune_pair(lambda code: checker.check(problem, code), Path(kernel).read_text())
            row["kernel"] = Path(kernel).name
            row.pop("tuned_code", None)
            rows.append(row)
            print(json.dumps(row) if args.json else f"{row['kernel']}: {row}", flush=True)
    speedups = [row["speedup"] for row in rows if row.get("speedup")]
    if speedups:
        geomean = math.exp(sum(math.log(value) for value in speedups) / len(speedups))
        print(json.dumps({"tuned": len(speedups), "geomean_speedup": round(geomean, 3),
                          "slower": sum(value < 1 for value in speedups)}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
