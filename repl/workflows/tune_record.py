"""What the session log keeps of a tune whose variant became the current kernel (:tune, :best K --tune): the launch
parameters it changed, its timings beside the original's, and what else was tried, as plain data
(Engine.record_tuned writes it)."""

from repl.workflows.tune import DEFAULT_WARPS, TuneReport, launch_parameters


def launch_changes(original: str, tuned: str) -> list[dict]:
    """Each launch parameter whose value differs between the two texts: kernel, parameter, from, to (num_warps
    from Triton's default where the original did not say)."""
    def values(code: str) -> dict:
        found, seen = {}, {}
        for parameter in launch_parameters(code):
            key = (parameter.kernel, parameter.name)
            seen[key] = seen.get(key, -1) + 1  # the n-th launch of that kernel with that parameter
            found[(*key, seen[key])] = parameter.value
        return found

    before, after = values(original), values(tuned)
    return [{"kernel": kernel, "parameter": name, "from": before.get((kernel, name, n), DEFAULT_WARPS), "to": value}
            for (kernel, name, n), value in after.items() if before.get((kernel, name, n)) != value]


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
