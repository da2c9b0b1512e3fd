"""What the judge learns about a problem once, when it first checks a kernel for it (kept with the problem):

- ``work``: the reference's operations by kind and the data they touch (work.py), to tell who did a kernel's work;
- ``sharpening`` / ``weak_note``: whether two input draws give outputs the comparison can tell apart, and what
  makes them (sharpen.py);
- ``changed_inputs``: which inputs a reference that returns no tensor changes in place, compared in every trial
  (in_place.py; a reference that returns its result is compared on it alone, as KernelBench does);
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
    changed_inputs: list = field(default_factory=list)

    def sharpen(self, inputs: list) -> list:
        return self.sharpening(inputs) if self.sharpening is not None else inputs

    def expected(self, output, inputs: list):
        """What a trial compares, from the reference's output and its inputs as its forward left them."""
        from repl.checker.in_place import with_changed_inputs

        return with_changed_inputs(output, inputs, self.changed_inputs)


def study_problem(judge, problem, atol: float, rtol: float) -> ProblemFacts:
    from repl.checker.in_place import changed_inputs
    from repl.checker.judge.compare import compare_outputs
    from repl.checker.loading import to_device
    from repl.checker.timing import tensors_in
    from repl.checker.judge.roofline import measure_problem_size
    from repl.checker.judge.sharpen import study
    from repl.checker.work import reference_work

    def tell_apart(first, second) -> bool:
        return not compare_outputs(first, second, atol, rtol).matches

    facts = ProblemFacts(work={})
    inputs = judge.make_inputs(problem)
    before = to_device(inputs, judge.device, clone=True)
    if not tensors_in(judge.run_reference(problem, inputs)):  # its output says nothing: what it changed is its work
        facts.changed_inputs = changed_inputs(before, inputs)
    del before, inputs
    facts.sharpening, facts.weak_note = study(
        lambda: judge.make_inputs(problem), lambda inputs: facts.expected(judge.run_reference(problem, inputs), inputs),
        tell_apart)
    inputs = facts.sharpen(judge.make_inputs(problem))
    facts.work = reference_work(problem.model, inputs)
    if judge.on_cuda:  # the roofline needs a GPU's timings (and the FLOP counter imports torch._dynamo: 2 s)
        facts.size = measure_problem_size(problem.model, inputs, judge.run_reference(problem, inputs))
    return facts
