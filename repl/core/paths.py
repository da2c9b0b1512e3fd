"""Where the tool keeps its own files: the user's data directory by platform convention, or KERNELLLM_HOME."""

import os
from pathlib import Path

import platformdirs


def data_dir() -> Path:
    override = os.environ.get("KERNELLLM_HOME")
    return Path(override).expanduser() if override else Path(platformdirs.user_data_dir("kernelllm", appauthor=False))


def history_file() -> Path:
    return data_dir() / "input_history"
