"""What the judge learns about a problem once, when it first checks a kernel for it (kept with the problem):

- ``work``: the reference's operations by kind and the data they touch (work.py), to tell who did a kernel's work;
- ``sharpening`` / ``weak_note``: whether two input draws give outputs the comparison can tell apart, and what
  makes them (sharpen.py);
- ``size``: bytes and FLOPs, for the roofline (roofline.py; on a GPU);
- ``null_ms``: the timing harness's own cost per window size, measured in the judge with a kernel that does nothing
  (speed.py subtracts it from its clock).
"""

from dataclasses import dataclass, field


@dataclass
class ProblemFacts:
    work: dict
    sharpening: object = None
    weak_note: str | None = None
    size: object = None
    null_ms: dict = field(default_factory=dict)

    def sharpen(self, inputs: list) -> list:
        return self.sharpening(inputs) if self.sharpening is not None else inputs


def study_problem(judge, problem, atol: float, rtol: float) -> ProblemFacts:
    from repl.checker.judge.compare import compare_outputs
    from repl.checker.judge.roofline import measure_problem_size
    from repl.checker.judge.sharpen import study
    from repl.checker.work import reference_work

    def tell_apart(first, second) -> bool:
        return not compare_outputs(first, second, atol, rtol).matches

    sharpening, note = study(lambda: judge.make_inputs(problem), lambda inputs: judge.run_reference(problem, inputs),
                             tell_apart)
    facts = ProblemFacts(work={}, sharpening=sharpening, weak_note=note)
    inputs = facts.sharpen(judge.make_inputs(problem))
    facts.work = reference_work(problem.model, inputs)
    if judge.on_cuda:  # the roofline needs a GPU's timings (and the FLOP counter imports torch._dynamo: 2 s)
        facts.size = measure_problem_size(problem.model, inputs, judge.run_reference(problem, inputs))
    return facts
