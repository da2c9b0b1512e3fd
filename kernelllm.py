"""KernelLLM: turn a PyTorch nn.Module into Triton kernels, check them, keep the best.

Command line: ``python kernelllm.py --help``, or ``kernelllm --help`` once installed (``pip install .``). Python:

    from kernelllm import KernelLLM
    model = KernelLLM()                                   # facebook/KernelLLM, CUDA when present
    kernel_reply = model.generate_triton(module_source)   # the model's reply (prose + code block)
    result = model.check(module_source, kernel_reply)     # right? how fast? (an isolated judge; CPU: correctness)
    ranked = model.best(module_source, 8)                 # 8 sampled, each checked, the best first
    for piece in model.stream_raw(prompt):                # any raw prompt, streamed
        print(piece, end="")

Checking alone, no model loaded: ``check_kernel(module_source, kernel)`` (a judge of its own for one check), or
``with Checker(device="cpu") as checker: checker.check(module_source, kernel)`` (judges kept warm between checks).

The class keeps the interface of the helper script published with the model, without its defects: the prompt is
the trained one with a single BOS, the reply is cut by token ids, sampling defaults to the model card's evaluation
setting (temperature 1.0, top_p 0.97), and the device is not hard-coded.
"""

import os
import sys
from pathlib import Path
from typing import Iterator

# Installed (`pip install .`), the `repl` package lives in kernelllm_repl/ beside this file, so that nothing named as
# generically as `repl` sits at the top of site-packages; in the repository it is beside this file.
_INSTALLED_HOME = Path(__file__).resolve().parent / "kernelllm_repl"
if _INSTALLED_HOME.is_dir() and str(_INSTALLED_HOME) not in sys.path:
    sys.path.insert(0, str(_INSTALLED_HOME))

from repl.checker import Checker, check_kernel
from repl.engine.engine import Engine, EngineOptions
from repl.core.extract import extract_kernel_code
from repl.generation.model_loading import DEFAULT_MODEL
from repl.core.prompt import build_prompt
from repl.core.settings import DEFAULT_MAX_NEW_TOKENS, DEFAULT_TEMPERATURE, DEFAULT_TOP_P, SamplingSettings

__all__ = ["KernelLLM", "Checker", "build_prompt", "check_kernel", "extract_kernel_code", "main", "console_main"]


class KernelLLM:
    """A loaded KernelLLM. Loading happens in the constructor (use the REPL for background loading)."""

    def __init__(self, model_name: str = DEFAULT_MODEL, device: str = "auto", dtype: str = "auto",
                 seed: int | None = None):
        self.model_name = model_name
        self._engine = Engine(EngineOptions(model=model_name, device=device, dtype=dtype), SamplingSettings(seed=seed))
        backend = self._engine.backend()  # raises GenerationError with a one-line reason when loading fails
        self.device = backend.device or device

    def _settings(self, temperature: float, top_p: float, max_new_tokens: int) -> SamplingSettings:
        return SamplingSettings(temperature=temperature, top_p=top_p, max_new_tokens=max_new_tokens,
                                seed=self._engine.settings.seed)

    def stream_raw(self, prompt: str, temperature: float = DEFAULT_TEMPERATURE, top_p: float = DEFAULT_TOP_P,
                   max_new_tokens: int = DEFAULT_MAX_NEW_TOKENS) -> Iterator[str]:
        """Text pieces of the model's continuation of ``prompt``, used verbatim, as they are generated.
        Stopping iteration early (break, or an exception such as KeyboardInterrupt) stops the generation."""
        stream = self._engine.stream_reply(prompt, self._settings(temperature, top_p, max_new_tokens))
        try:
            yield from stream
        finally:
            stream.cancel()

    def generate_raw(self, prompt: str, temperature: float = DEFAULT_TEMPERATURE, top_p: float = DEFAULT_TOP_P,
                     max_new_tokens: int = DEFAULT_MAX_NEW_TOKENS) -> str:
        """The model's whole continuation of ``prompt``, used verbatim."""
        return "".join(self.stream_raw(prompt, temperature, top_p, max_new_tokens))

    def generate_triton(self, code: str, temperature: float = DEFAULT_TEMPERATURE, top_p: float = DEFAULT_TOP_P,
                        max_new_tokens: int = DEFAULT_MAX_NEW_TOKENS) -> str:
        """The model's reply for a PyTorch module (``class Model(nn.Module)`` with ``get_inputs()`` and
        ``get_init_inputs()``, run as ``Model(*get_init_inputs())(*get_inputs())``), prompted exactly as it was
        trained. ``extract_kernel_code(reply)`` gives the code block."""
        return self.generate_raw(build_prompt(code), temperature, top_p, max_new_tokens)

    def check(self, module_source: str, kernel: str, *, device: str = "auto", trials: int | None = None,
              timeout: float | None = None):
        """Check a kernel against its module: ``kernel`` is a reply of generate_triton (its code block is checked)
        or the kernel's code. It runs in an isolated judge of this object's, started at the first check and kept
        warm for the next (close() ends it): correctness on random inputs (``trials`` sets, 5 by default); on a GPU
        also its time against eager PyTorch and torch.compile; on the CPU under Triton's interpreter (correctness
        only). ``timeout``: seconds for the kernel (its loading and trials). Returns a ``repl.checker.CheckResult``
        (``.verdict``, ``.correct``, ``.message``, ``.kernel_ms``, ``.speedup_vs_eager``); ValueError for a device
        that cannot be used."""
        from repl.engine.attempt import given_reply, new_attempt

        options = {name: value for name, value in (("trials", trials), ("timeout", timeout)) if value is not None}
        attempt = new_attempt(module_source, given_reply("api", kernel))
        return self._engine.check(attempt, device=device, **options)

    def best(self, module_source: str, k: int, *, device: str = "auto", trials: int | None = None, jobs: int = 1,
             temperature: float = DEFAULT_TEMPERATURE, top_p: float = DEFAULT_TOP_P,
             max_new_tokens: int = DEFAULT_MAX_NEW_TOKENS) -> list:
        """Sample ``k`` replies for the module and check each as it completes (checks overlap the sampling; ``jobs``
        at once), as ``:best K`` does. Returns them ranked: correct first, then the fastest (timed on a GPU), then
        the lowest error. Each is a ``repl.engine.attempt.Attempt``: ``.reply.text``, ``.kernel`` (its code) and ``.check``
        (its CheckResult). ValueError for k > 1 under greedy decoding (temperature 0: k copies of one reply) or a
        device that cannot be used. Ctrl-C stops the sampling and the checks, then is raised."""
        from repl.workflows.best_of import BestOfRun, CheckOptions, rank

        check = CheckOptions(device=device, jobs=jobs, **({"trials": trials} if trials is not None else {}))
        run = BestOfRun(module_source, k, engine=self._engine, check=check,
                        settings=self._settings(temperature, top_p, max_new_tokens)).start()
        try:
            run.wait()
        except KeyboardInterrupt:
            run.cancel()
            run.wait()
            raise
        if run.error is not None:
            raise run.error
        return [candidate.attempt for candidate in rank(run.candidates) if candidate.attempt is not None]

    def run_repl(self) -> None:
        """The interactive session, on this already loaded model."""
        from repl.ui.console import make_console
        from repl.ui.session import ReplSession

        ReplSession(self._engine, make_console()).run()

    def close(self) -> None:
        """End the judges that checks and sessions (check, run_repl) started; they also end with this process. A
        local model holds no connection or thread to end: its memory goes with this object."""
        self._engine.close()

    def __enter__(self) -> "KernelLLM":
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()


def main(argv: list[str] | None = None, prog: str = "kernelllm.py") -> int:
    from repl.cli.main import main as cli_main

    return cli_main(argv, prog=prog)


def console_main() -> None:
    """The `kernelllm` command that `pip install .` makes (pyproject.toml): what `python kernelllm.py` does."""
    _exit_at_once(main(prog="kernelllm"))


def _exit_at_once(status: int) -> None:
    """Leave without the interpreter's teardown: unloading torch and transformers takes a second or more after the
    work is done and does nothing useful (every file is written and closed, the session log too)."""
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    os._exit(status)


if __name__ == "__main__":
    _exit_at_once(main())
