"""The fair baselines of a kernel that computes float32 in TF32 (a `tl.dot` not asked for input_precision="ieee"):
eager and torch.compile timed with TF32 allowed for their matmuls too, once per problem and kept with it; the
speedups that rank the kernel are against them, and a note says exactly what each baseline did.

PyTorch's eager matmul does not use TF32 by default (cuDNN's convolutions already do). torch.compile is compiled
again under the flag: Dynamo guards on it, and Inductor's matmuls (cuBLAS, or its Triton templates, which read the
flag when they are compiled) then use TF32 as eager does."""

from dataclasses import dataclass


@dataclass
class FairFigures:
    eager_ms: float | None
    compiled_ms: float | None
    note: str


def time_references_in_tf32(judge, problem) -> None:
    """problem.eager_tf32_ms, and on CUDA problem.compiled_tf32_ms: the reference timed with
    torch.backends.cuda.matmul.allow_tf32 set, by the candidates' harness (speed.time_model). Once per problem; a
    baseline that fails is left None, with a timing note."""
    import torch

    from repl.checker.judge.speed import reference_template, time_model
    from repl.checker.loading import describe

    wanted = [("eager_tf32_ms", "eager")] + ([("compiled_tf32_ms", "torch.compile")] if judge.on_cuda else [])
    wanted = [(attribute, name) for attribute, name in wanted if getattr(problem, attribute) is None]
    if not wanted:
        return
    bases = [judge.make_inputs(problem), judge.make_inputs(problem)]
    allowed = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = True
    try:
        template = reference_template(judge, problem, bases)
        for attribute, name in wanted:
            try:
                model = problem.model if name == "eager" else torch.compile(problem.model)
                setattr(problem, attribute, time_model(judge, problem, model, bases, template))
            except Exception as error:
                problem.timing_notes.append(f"timing {name} with TF32 allowed failed: {describe(error)}")
    finally:
        torch.backends.cuda.matmul.allow_tf32 = allowed


def fair_figures(eager_ms: float | None, compiled_ms: float | None, eager_tf32_ms: float | None,
                 compiled_tf32_ms: float | None) -> FairFigures:
    """The baselines a TF32 kernel is compared with: each one's TF32 timing where it was measured, else the float32
    one, and a note that says which is which (both figures where both exist)."""
    said = []
    for name, plain, tf32 in (("eager", eager_ms, eager_tf32_ms), ("torch.compile", compiled_ms, compiled_tf32_ms)):
        if tf32 is not None:
            said.append(f"{name} {tf32:.4g} ms" + (f" (without TF32 {plain:.4g} ms)" if plain is not None else ""))
        elif plain is not None:
            said.append(f"{name} not timed with TF32: its speedup is against float32 ({plain:.4g} ms)")
    note = ("baselines timed with TF32 allowed (torch.backends.cuda.matmul.allow_tf32), as the kernel computes: "
            + "; ".join(said) + "; the speedups are against them") if said else ""
    return FairFigures(eager_tf32_ms if eager_tf32_ms is not None else eager_ms,
                       compiled_tf32_ms if compiled_tf32_ms is not None else compiled_ms, note)
