"""A correct ReLU that refuses to import when it can tell it is being checked by the cheap tells: the checker's
command line in sys.argv or /proc/self/cmdline, environment variables only the sandbox sets, a file, folder or module
name of the checker's (kernel.py, kernelllm-*), a PYTHONPATH (the test's shell has none), PID 1 (os.getpid() or
/proc/self/stat), a cgroup named for the checker (/proc/self/cgroup)."""
import os
import sys

import torch
import torch.nn as nn
import triton
import triton.language as tl

SANDBOX_ONLY = ("TRITON_CACHE_DIR", "TORCHINDUCTOR_CACHE_DIR", "XDG_CACHE_HOME", "XDG_CONFIG_HOME", "TMP", "TEMP",
                "PYTHONDONTWRITEBYTECODE")
tells = [f"argv {sys.argv[1:]}" for _ in [0] if len(sys.argv) > 1 or "checker" in sys.argv[0]]
tells += [name for name in SANDBOX_ONLY if name in os.environ]
cmdline = open("/proc/self/cmdline", "rb").read().replace(b"\0", b" ").decode(errors="replace")
tells += [f"cmdline {cmdline!r}" for _ in [0] if "repl" in cmdline or " -m " in cmdline or "--" in cmdline]
places = {"file": __file__, "module": __name__, "cwd": os.getcwd(), "HOME": os.environ.get("HOME", "")}
tells += [f"{what} {where}" for what, where in places.items() if "kernelllm" in where or where.endswith("kernel.py")]
tells += [f"PYTHONPATH {os.environ['PYTHONPATH']}" for _ in [0] if "PYTHONPATH" in os.environ]
tells += [f"sys.path[0] {sys.path[0]}" for _ in [0] if sys.path[0] != os.path.dirname(os.path.abspath(__file__))]
stat_pid = open("/proc/self/stat").read().split()[0]
tells += [f"PID {os.getpid()} (/proc/self/stat: {stat_pid})" for _ in [0] if os.getpid() == 1 or stat_pid == "1"]
cgroup = open("/proc/self/cgroup").read()
tells += [f"cgroup {cgroup!r}" for _ in [0] if "kernelllm" in cgroup or "check" in cgroup]
if tells:
    raise RuntimeError(f"checked, it can tell: {', '.join(tells)}")


@triton.jit
def relu_kernel(x_ptr, out_ptr, n_elements, BLOCK_SIZE: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offsets < n_elements
    x = tl.load(x_ptr + offsets, mask=mask)
    tl.store(out_ptr + offsets, tl.maximum(x, 0.0), mask=mask)


class ModelNew(nn.Module):
    def forward(self, x):
        out = torch.empty_like(x)
        relu_kernel[(triton.cdiv(x.numel(), 64),)](x, out, x.numel(), BLOCK_SIZE=64)
        return out
