"""Run a check script in a fresh Python under Triton's interpreter (TRITON_INTERPRET=1 is read when triton is
imported, so it needs a process of its own); the script prints "ok" when every assertion held."""

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def run_under_interpreter(code: str, timeout: float = 300) -> None:
    env = {**os.environ, "TRITON_INTERPRET": "1", "PYTHONPATH": str(REPO)}
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0 and "ok" in done.stdout, done.stderr[-3000:]
