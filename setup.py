"""The packages for `pip install .` (the rest is pyproject.toml): the repository's `repl/` installs as
kernelllm_repl/repl, so that the top of site-packages holds only `kernelllm` and `kernelllm_repl`, no generic `repl`
(kernelllm.py puts kernelllm_repl/ on sys.path, the judges inherit it; the imports stay `repl.…`)."""

from setuptools import find_packages, setup

PACKAGES = find_packages(include=["repl", "repl.*"])

setup(packages=[f"kernelllm_repl.{package}" for package in PACKAGES],
      package_dir={"kernelllm_repl.repl": "repl"},
      package_data={"kernelllm_repl.repl.fastpath": ["drafting_seed.txt"],
                    "kernelllm_repl.repl.cli": ["eval_report.css"]})
