"""The environment a candidate starts with: an allow-list of the caller's variables, never a secret-looking name;
HOME, temp and cache directories in the sandbox."""

import os
import re
import site
from pathlib import Path

PROJECT_ROOT = Path(__file__).resolve().parents[3]  # holds the `repl` package the candidate runs from

_ALLOWED_NAMES = {"PATH", "LANG", "LANGUAGE", "TZ", "LD_LIBRARY_PATH", "VIRTUAL_ENV", "CONDA_PREFIX",
                  "PYTHONNOUSERSITE", "PYTHONUNBUFFERED", "CC", "CXX"}
_ALLOWED_PREFIXES = ("LC_", "CUDA_", "NVIDIA_", "CUBLAS_", "CUBLASLT_", "CUDNN_", "NCCL_", "TRITON_", "TORCH_",
                     "TORCHINDUCTOR_", "PYTORCH_", "OMP_", "KMP_", "MKL_", "OPENBLAS_", "HIP_", "ROCM_", "HSA_",
                     # The checker's test probes read what they expect to see from these.
                     "KERNELLLM_TEST_")
_SECRET_NAME = re.compile(
    r"TOKEN|SECRET|PASSWORD|PASSWD|CREDENTIAL|API_?KEY|ACCESS_?KEY|PRIVATE_?KEY|AUTH"
    r"|^AWS_|^AZURE_|^GOOGLE_APPLICATION|^NETRC$|^HF_HOME$|^HF_TOKEN_PATH$",
    re.IGNORECASE,
)


def is_secret_name(name: str) -> bool:
    """Environment names that may hold credentials (HF_TOKEN, OPENAI_API_KEY, AWS_*, SSH_AUTH_SOCK, ...).
    HF_HOME goes too: the Hugging Face token file lives under it."""
    return bool(_SECRET_NAME.search(name))


def is_allowed_env_name(name: str) -> bool:
    """The allow-list: what a candidate's environment may hold from the caller's (never a secret-looking name)."""
    return (name in _ALLOWED_NAMES or name.startswith(_ALLOWED_PREFIXES)) and not is_secret_name(name)


def worker_environment(parent_env: dict[str, str], sandbox_dir: Path,
                       cuda_visible_devices: str | None = None) -> dict[str, str]:
    """The confined process's environment: the allowed part of the caller's, with HOME, temp and cache directories
    in the sandbox. cuda_visible_devices: None keeps the caller's GPUs, "" hides them all, "2" shows only that one."""
    env = {name: value for name, value in parent_env.items() if is_allowed_env_name(name)}
    home, tmp = sandbox_dir / "home", sandbox_dir / "tmp"
    # No PYTHONPATH naming the checkout (a tell): the checker's programs put it on their path themselves.
    env.update(HOME=str(home), TMPDIR=str(tmp))
    # Caches and temp folders the caller names move into the sandbox; the others' defaults already lie under HOME and
    # TMPDIR, and a variable only a sandbox sets would tell a candidate that it is being checked.
    moved = {"TMP": tmp, "TEMP": tmp, "XDG_CACHE_HOME": home / ".cache", "XDG_CONFIG_HOME": home / ".config",
             "TRITON_CACHE_DIR": home / ".triton" / "cache", "TORCHINDUCTOR_CACHE_DIR": tmp / "torchinductor"}
    env.update({name: str(path) for name, path in moved.items() if name in parent_env})
    for name in ("PYTHONDONTWRITEBYTECODE", "PYTHONUSERBASE"):
        if parent_env.get(name):
            env[name] = parent_env[name]
    users_path = [path for path in parent_env.get("PYTHONPATH", "").split(os.pathsep)
                  if path and os.path.abspath(path) != str(PROJECT_ROOT)]  # the judge's own entry is not the user's
    if users_path:
        env["PYTHONPATH"] = os.pathsep.join(users_path)
    # HOME moves, but packages installed with `pip install --user` must still import.
    if "PYTHONUSERBASE" not in env and os.path.isdir(site.getusersitepackages()):
        env["PYTHONUSERBASE"] = site.getuserbase()
    env.setdefault("PATH", os.defpath)
    env.pop("TRITON_INTERPRET", None)  # the worker decides
    if cuda_visible_devices is not None:
        env["CUDA_VISIBLE_DEVICES"] = cuda_visible_devices
    return env
