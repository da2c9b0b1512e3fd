"""KernelLLM REPL: the engine (model, prompt, extraction, checking) and its front ends (repl.ui, repl.cli)."""

__version__ = "0.2.0"
