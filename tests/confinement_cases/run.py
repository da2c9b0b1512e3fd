"""Runs one attack case as the checker's candidate process would run it: confined (start_confined) and with
Landlock applied to itself first (confine_self). Usage: run.py SANDBOX_DIR CASE_FILE [ARGS...]."""
import json
import runpy
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # as the candidate does: no PYTHONPATH names the checkout
from repl.checker.sandbox import confine_self  # noqa: E402

sandbox_dir, case, *args = sys.argv[1:]
on_gpu = "gpu" in Path(case).name  # the case's own name: a checkout's folder may hold "gpu" too
if on_gpu:  # as a candidate does (candidate.prepare): its CUDA context exists before Landlock applies
    import torch

    torch.empty(1, device="cuda")
notes = confine_self(sandbox_dir, memory_limit_bytes=None, gpu=on_gpu)
print(json.dumps({"confine_self_notes": notes}), file=sys.stderr, flush=True)
sys.argv = [case, *args]
runpy.run_path(case, run_name="__main__")
