"""Where the tool keeps its own files: the user's data directory by platform convention, or KERNELLLM_HOME."""

import os
from pathlib import Path

import platformdirs


def data_dir() -> Path:
    override = os.environ.get("KERNELLLM_HOME")
    return Path(override).expanduser() if override else Path(platformdirs.user_data_dir("kernelllm", appauthor=False))


def history_file() -> Path:
    return data_dir() / "input_history"


def use_user_cache_dir() -> None:
    """Inductor's cache (Triton's inside it) under the user's cache dir, for this process and those it starts:
    compiled kernels outlive the process, and no command leaves a torchinductor_* folder in $TMPDIR."""
    root = Path(platformdirs.user_cache_dir("kernelllm", appauthor=False))
    os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", str(root / "inductor"))
