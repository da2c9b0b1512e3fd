"""What :tune gains, and what it costs: `python -m repl.bench.tune_cases REFERENCE KERNEL [REFERENCE KERNEL ...]
[--device cuda] [--json]`. Each pair is checked (the original), then tuned through the same Checker (every variant
checked and timed like any candidate); per kernel: the original's and the kept variant's kernel_ms (both timed
again, one after the other, when a variant won), the speedup (of that pair; 1.0 when the original is kept),
how many variants were tried and how many were correct, and the seconds tuning took. Not a test: figures depend on
the GPU; docs/shipping.md records them."""

import argparse
import json
import math
import time
from pathlib import Path


def tune_pair(checker, reference: str, kernel: str) -> dict:
    from repl.workflows.tune import tune, tune_refusal, variants

    original = checker.check(reference, kernel)
    row = {"verdict": original.verdict.value, "kernel_ms": original.kernel_ms, "variants": len(variants(kernel)),
           "valid_for": (original.valid_for or {}).get("summary")}
    refusal = tune_refusal(original)
    if refusal:
        return {**row, "not_tuned": refusal}
    started = time.monotonic()
    report = tune(kernel, original, lambda code: checker.check(reference, code))
    kept = report.best is not None
    return {**row, "kept": report.best.label if kept else "as generated",
            "original_again_ms": report.baseline.check.kernel_ms if kept else None,
            "tuned_ms": report.best.check.kernel_ms if kept else original.kernel_ms,
            "speedup": report.speedup if kept else 1.0, "tune_s": round(time.monotonic() - started, 1),
            "correct_variants": sum(tried.usable for tried in report.tried),
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
            row = tune_pair(checker, Path(reference).read_text(), Path(kernel).read_text())
            row["kernel"] = Path(kernel).name
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
