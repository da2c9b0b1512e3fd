"""What a check concludes: one record that travels from the worker to the caller, and out as JSON."""

from dataclasses import asdict, dataclass, field, fields

# The verdicts, plus `cancelled` for a check the caller stopped (Ctrl-C in the REPL) before it concluded.
VERDICTS = (
    "correct",
    "mismatch",
    "compile_error",
    "runtime_error",
    "timeout",
    "crash",
    "no_triton",
    "invalid_reference",
    "cancelled",
)


@dataclass
class CheckResult:
    verdict: str
    correct: bool = False
    device: str | None = None  # "cuda" or "cpu-interpreter"; None when the worker never said
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
    # Beyond the keys.
    traceback: str | None = None  # the candidate's (or reference's) traceback, for --debug and the REPL
    suspicious: str | None = None  # one-line warning: too fast to be true, ...
    shape_specialised: bool = False  # the kernel hard-codes sizes (Inductor style): right only for these shapes
    notes: list[str] = field(default_factory=list)  # one-line facts worth knowing (weights copied, ...)
    output_tail: str | None = None  # last lines the worker printed, kept when it died
    elapsed_s: float | None = None

    def __post_init__(self):
        if self.verdict not in VERDICTS:
            raise ValueError(f"unknown verdict {self.verdict!r}")
        self.correct = self.verdict == "correct"

    def to_json_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_json_dict(cls, data: dict) -> "CheckResult":
        """Reads what to_json_dict wrote; keys it does not know (from a newer writer) are ignored."""
        known = {f.name for f in fields(cls)}
        return cls(**{key: value for key, value in data.items() if key in known})
