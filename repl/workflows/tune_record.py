"""What the session log keeps of a tune whose variant became the current kernel (:tune, :best K --tune): the launch
parameters it changed, its timings beside the original's, and what else was tried, as plain data
(Engine.record_tuned writes it)."""

from repl.workflows.tune import TuneReport, launch_changes


def tuning_record(original_code: str, report: TuneReport) -> dict:
    """The record of a report whose variant was kept (report.best)."""
    def tried(entry) -> dict:
        check = entry.check
        return {"variant": entry.label, "verdict": check.verdict.value if check else "check failed",
                "kernel_ms": check.kernel_ms if check else None}

    return {"variant": report.best.label.removesuffix(", again"),
            "launch": launch_changes(original_code, report.best_code),
            "speedup": report.speedup, "original_ms": report.baseline.check.kernel_ms,
            "kernel_ms": report.best.check.kernel_ms, "tried": [tried(entry) for entry in report.tried]}
