"""The names a kernel's file is given in a check (drawn per check by candidate/disguise.py, so that a kernel cannot
tell it is checked by a fixed path), and how a report finds that path again to show the user's own file instead."""

import re

PROJECTS = ("kernels", "triton-kernels", "fused-ops", "llm-kernels", "experiments", "gpu-ops", "model-opt", "src",
            "triton-playground", "perf", "ops", "inference")
FILE_STEMS = ("model_new", "fused", "triton_ops", "kernel_opt", "optimized", "solution", "custom_ops", "fast_model",
              "triton_impl", "new_model", "ops", "main")

# The kernel's copy in a candidate's sandbox: HOME/<project>/<stem>.py (and the older fixed .../work/kernel.py).
SANDBOX_COPY = re.compile(r"/[^\s\"']*/home/(?:" + "|".join(map(re.escape, PROJECTS)) + r")/(?:"
                          + "|".join(map(re.escape, FILE_STEMS)) + r")\.py"
                          r"|/[^\s\"']*kernelllm-check-[^/\s\"']+/work/kernel\.py")
