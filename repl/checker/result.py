"""What a check concludes: one record that travels from the judge to the caller, and out as JSON."""

import json
import types
from dataclasses import asdict, dataclass, field, fields
from enum import StrEnum


class Verdict(StrEnum):
    """A check's conclusion. A `str` (``Verdict.CORRECT == "correct"``), so JSON and string comparisons keep working;
    each member also carries how it is shown (a rich style) and whether it is the kernel's fault (False: the
    reference, the machine, the caller or the checker's own failure stopped the check)."""

    CORRECT = ("correct", "bold green", False)
    MISMATCH = ("mismatch", "bold red", True)
    COMPILE_ERROR = ("compile_error", "bold red", True)
    RUNTIME_ERROR = ("runtime_error", "bold red", True)
    TIMEOUT = ("timeout", "bold red", True)
    CRASH = ("crash", "bold red", True)
    NO_TRITON = ("no_triton", "bold yellow", True)  # no Triton launch, or launches that did no work
    INVALID_REFERENCE = ("invalid_reference", "bold magenta", False)
    TOO_LARGE = ("too_large", "bold magenta", False)  # the problem does not fit this device (KernelBench sizes)
    CANCELLED = ("cancelled", "dim", False)
    CHECKER_ERROR = ("checker_error", "bold magenta", False)  # the checker's own code failed: nothing said of the kernel

    def __new__(cls, value: str, style: str, kernels_fault: bool):
        member = str.__new__(cls, value)
        member._value_ = value
        member.style = style
        member.kernels_fault = kernels_fault
        return member

    @property
    def label(self) -> str:
        """For people: ``invalid reference``."""
        return self.value.replace("_", " ")


VERDICTS = tuple(Verdict)
REPLY_JSON_BYTES = 4 * 1024 * 1024  # the most a result the judge sends holds (the wire accepts 64 MiB)


@dataclass
class CheckResult:
    verdict: Verdict
    correct: bool = False
    device: str | None = None  # "cuda" or "cpu-interpreter"; None when the check never got that far
    trials: int = 0  # trials whose outputs were compared
    max_abs_error: float | None = None
    max_rel_error: float | None = None
    message: str = ""  # one line, for the user
    triton_kernels: list[str] = field(default_factory=list)  # @triton.jit kernels the candidate launched
    kernel_ms: float | None = None
    eager_ms: float | None = None
    compiled_ms: float | None = None
    speedup_vs_eager: float | None = None
    speedup_vs_compiled: float | None = None
    # Beyond KernelBench's keys.
    traceback: str | None = None  # the candidate's (or reference's) traceback, for --debug and the REPL
    suspicious: str | None = None  # the flags in one line (older results: a >10x warning); see `flags`
    shape_specialised: bool = False  # the kernel hard-codes sizes (Inductor style): right only for these shapes
    notes: list[str] = field(default_factory=list)  # one-line facts worth knowing (weights copied, ...)
    output_tail: str | None = None  # last lines the candidate printed, kept when it died
    elapsed_s: float | None = None
    phases_s: dict = field(default_factory=dict)  # where the judge's time went: problem, candidate, load, trials, ...
    # Speed the judge vouches for, and who did the work (docs/checker.md).
    flags: list[str] = field(default_factory=list)  # evidence that the timing is not to be believed, one line each
    timing: dict | None = None  # the figures behind kernel_ms: calls, windows, candidate_ms, judge_ms, round trip...
    roofline: dict | None = None  # bytes and FLOPs over kernel_ms, as shares of the device's measured limits
    work: dict | None = None  # who did the work: "summary", shares of GPU time, the PyTorch operations beside Triton
    # The shapes a correct kernel was also tried at, and what it is valid for (judge/valid_for.py).
    valid_for: dict | None = None
    # The tolerance the comparisons used: {"atol", "rtol", "why"} ("float32's, as KernelBench's eval", "as given"...).
    tolerance: dict | None = None

    def __post_init__(self):
        try:
            self.verdict = Verdict(self.verdict)
        except ValueError:
            raise ValueError(f"unknown verdict {self.verdict!r}") from None
        self.correct = self.verdict is Verdict.CORRECT

    @property
    def flagged(self) -> bool:
        """A timing with evidence against it: never ranked above an unflagged correct kernel, never counted in
        fast_p or a geomean."""
        return bool(self.flags)

    def to_json_dict(self) -> dict:
        data = asdict(self)
        data["verdict"] = self.verdict.value
        return data

    @classmethod
    def from_json_dict(cls, data: dict) -> "CheckResult":
        """Reads what to_json_dict wrote; keys it does not know (from a newer writer) are ignored, and a value not of
        its field's type (a forged note that is not text...) is left out: every report can then show the result."""
        if not isinstance(data, dict):
            raise ValueError("a check result that is not a JSON object")
        types = {f.name: f.type for f in fields(cls)}
        return cls(**{key: value for key, value in data.items() if key in types and _conforms(value, types[key])})


def _conforms(value, annotation) -> bool:
    """Whether a JSON value fits a field's annotation (str, float | None, list[str], dict, Verdict...)."""
    if isinstance(annotation, str):  # postponed annotations are not used here; accept plain JSON
        return True
    if isinstance(annotation, types.UnionType):
        return any(_conforms(value, option) for option in annotation.__args__)
    if annotation is type(None):
        return value is None
    origin = getattr(annotation, "__origin__", None)
    if origin is list:
        (item,) = annotation.__args__
        return isinstance(value, list) and all(_conforms(element, item) for element in value)
    if origin is dict or annotation is dict:
        return isinstance(value, dict) and all(isinstance(key, str) for key in value)
    if annotation is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if annotation is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if annotation is Verdict:
        return isinstance(value, str)
    return isinstance(value, annotation)


def bounded_json_dict(result: CheckResult, limit: int = REPLY_JSON_BYTES) -> dict:
    """The result as JSON that fits `limit` whatever the candidate made its text of (characters that grow sixfold
    when escaped included): texts cut, then only the verdict and the start of the message."""
    data = result.to_json_dict()
    if len(json.dumps(data)) <= limit:
        return data
    for name, value in data.items():
        if isinstance(value, str):
            data[name] = value[-20_000:] if name in ("traceback", "output_tail") else value[:2000]
        elif isinstance(value, list):
            data[name] = [str(item)[:500] for item in value[:32]]
    if len(json.dumps(data)) <= limit:
        return data
    return CheckResult(verdict=result.verdict, device=result.device, message=result.message[:2000]).to_json_dict()
