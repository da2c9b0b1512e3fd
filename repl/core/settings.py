"""Sampling settings: one dataclass shared by the command line, `:set` and the Python API."""

from dataclasses import dataclass, fields

# The model card's evaluation setting (pass@k on KernelBench-Triton was measured at temperature 1.0, top_p 0.97).
DEFAULT_TEMPERATURE = 1.0
DEFAULT_TOP_P = 0.97
DEFAULT_MAX_NEW_TOKENS = 2048
GREEDY_SAMPLES = "greedy decoding (temperature 0) gives the same kernel every time; sample with a temperature above 0"


def greedy_samples_problem(temperature: float, samples: int) -> str | None:
    """Why `samples` replies cannot be sampled at this temperature (the one rule: greedy decoding gives one reply
    however often it is asked), or None."""
    return GREEDY_SAMPLES if temperature <= 0 and samples > 1 else None


@dataclass
class SamplingSettings:
    temperature: float = DEFAULT_TEMPERATURE
    top_p: float = DEFAULT_TOP_P
    max_new_tokens: int = DEFAULT_MAX_NEW_TOKENS
    seed: int | None = None

    @property
    def greedy(self) -> bool:
        return self.temperature <= 0

    def refuse_samples(self, k: int) -> None:
        """ValueError for k > 1 replies under greedy decoding (greedy_samples_problem)."""
        problem = greedy_samples_problem(self.temperature, k)
        if problem:
            raise ValueError(problem)

    def with_value(self, name: str, text: str) -> "SamplingSettings":
        """A copy with one setting parsed from text; ValueError with a one-line reason when it does not fit."""
        names = [field.name for field in fields(self)]
        if name not in names:
            raise ValueError(f"unknown setting {name!r}; settings: {', '.join(names)}")
        value = _parse(name, text)
        return SamplingSettings(**{**self.__dict__, name: value})

    def describe(self) -> list[tuple[str, str]]:
        return [(field.name, "none" if getattr(self, field.name) is None else str(getattr(self, field.name)))
                for field in fields(self)]


def _parse(name: str, text: str):
    text = text.strip()
    whole = name in {"seed", "max_new_tokens"}
    try:
        if name == "seed" and text.lower() in {"none", "off", ""}:
            return None
        value = int(text) if whole else float(text)
    except ValueError:
        raise ValueError(f"{name} needs {'a whole number' if whole else 'a number'}, got {text!r}") from None
    if name == "max_new_tokens" and value < 1:
        raise ValueError(f"max_new_tokens must be at least 1, not {value}")
    if name == "temperature" and value < 0:
        raise ValueError("temperature must be >= 0 (0 means greedy decoding)")
    if name == "top_p" and not 0 < value <= 1:
        raise ValueError("top_p must be in (0, 1]")
    return value
