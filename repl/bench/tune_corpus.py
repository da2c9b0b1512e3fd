"""What :tune gains over a corpus in the model's own style, and what it costs:

    python -m repl.bench.tune_corpus KernelBench/level1 KernelBench/level2 [--every K] [--limit N] [--seconds S]
        [--launch inductor|kernelbook] [--corpus CORPUS.jsonl.gz] [--hand-written] [--hand-written-large]
        [--groups G,G] [--device cuda|cpu] [--keep DIR] --json OUT

The sample: every K-th problem of each folder (by number), the folders interleaved, the first N. Each is compiled by
Inductor on the GPU (repl.bench.inductor_compile; or read from a corpus tools/inductor_corpus.py or --save-corpus
wrote, what it lacks compiled here), rewritten as KernelBook writes it (repl.bench.kernelbook_format: a ModelNew
candidate file) and checked by the Checker against its problem; the correct ones are the corpus. A problem whose
inputs exceed 1 GiB is checked with its input sizes halved until they fit (repl.bench.problem_sizes.fit).
``--launch kernelbook`` gives each kernel the launch numbers Inductor chose for it at KernelBook's small input
sizes, as the model learnt them (repl.bench.problem_sizes): those kernels are the group "model-style", each also
timed with Inductor's own numbers for this GPU (``inductor_ms``). ``--hand-written`` adds a second group: each
correct Triton kernel of tests/speed_cases and tests/checker_cases (a file ``STEM_triton*.py`` or
``STEM_inductor*.py`` beside ``STEM_reference.py``); ``--hand-written-large`` the same kernels as the group
"hand-written-large", each with its problem's inputs grown to working sizes along the dimensions its own check found
it valid for (repl.bench.working_sizes: at the tests' sizes a call is the wrapper's Python). ``--groups`` tunes only
the groups named. Each kernel is tuned as ``:tune`` tunes it (repl.workflows.tune through tune_cases.tune_pair: the
same checker, fresh inputs, the same keep rule). No kernel starts after
``--seconds``, and one still tuning a minute later is cut short; what was not reached is listed. On the CPU
(``--device cpu``, a corpus file) the variants are timed under Triton's interpreter: figures that test this tool,
not speed. Not a test; docs/shipping.md records the figures."""

import argparse
import json
import math
import multiprocessing
import re
import statistics
import time
from collections import Counter
from dataclasses import dataclass
from itertools import chain, zip_longest
from pathlib import Path

from repl.bench.kernelbook_format import kernelbook_code
from repl.bench.problem_sizes import at_kernelbook_sizes, fit, model_style_configs
from repl.bench.tune_cases import tune_pair

TESTS = Path(__file__).resolve().parents[2] / "tests"
HAND_WRITTEN_FOLDERS = (TESTS / "speed_cases", TESTS / "checker_cases")
OVERRUN_S = 60.0  # a kernel still tuning this long after --seconds is cut short: its unchecked variants are dropped
OUT_OF_TIME = "out of time: the run's --seconds were spent"
MAX_INPUT_BYTES = 1 << 30  # larger inputs make one check take minutes (KernelBench's 6 GiB Sigmoid: over 140 s)
KERNELBOOK_SIZES = "kernelbook-sizes"  # the corpus variant compiled at KernelBook's input sizes


@dataclass
class Kernel:
    group: str  # "model-style", "inductor", "hand-written" or "hand-written-large"
    name: str  # "level1/19_ReLU.py", "checker_cases/relu_triton.py"
    reference: str
    code: str | None = None
    problem: str = ""  # why there is no candidate (compile or conversion failed)
    sizes: str = ""  # how the problem's input sizes were scaled to fit ("" when they were not)
    inductor_code: str | None = None  # model-style: the same kernel with Inductor's own launch numbers
    launch_changed: tuple = ()  # model-style: the kernels given KernelBook-size launch numbers


def problem_number(path: Path) -> tuple:
    number = re.match(r"\d+", path.name)
    return (int(number.group()) if number else math.inf, path.name)


def sample(folders: list[str], every: int, limit: int | None) -> list[Path]:
    """Every `every`-th problem of each folder by number (the first included), the folders interleaved."""
    chosen = [sorted(Path(folder).glob("*.py"), key=problem_number)[::every] for folder in folders]
    interleaved = [path for path in chain.from_iterable(zip_longest(*chosen)) if path is not None]
    return interleaved[:limit]


def hand_written(folders=HAND_WRITTEN_FOLDERS, group: str = "hand-written") -> list[Kernel]:
    """The kernels of the tests' cases that have a reference beside them (STEM_triton*.py / STEM_inductor*.py and
    STEM_reference.py); attack_* cases are not kernels to tune."""
    found = []
    for folder in folders:
        for path in sorted(folder.glob("*.py")):
            stem = re.sub(r"_(triton|inductor).*$", "", path.stem)
            reference = folder / f"{stem}_reference.py"
            if stem != path.stem and not path.name.startswith("attack_") and reference.exists():
                found.append(Kernel(group, f"{folder.name}/{path.name}", reference.read_text(),
                                    path.read_text()))
    return found


@dataclass
class Problem:
    path: Path
    source: str = ""  # the problem as checked: its input sizes scaled to fit MAX_INPUT_BYTES where needed
    sizes: str = ""
    small: str | None = None  # --launch kernelbook: the problem at KernelBook's input sizes
    problem: str = ""  # why it has no source


def prepare(path: Path, kernelbook: bool) -> Problem:
    """The problem at the sizes it is checked at and, for --launch kernelbook, at KernelBook's."""
    def input_bytes(source: str) -> int:
        return problem_tensors(source)[1]

    try:
        source, sizes = fit(path.read_text(), input_bytes, MAX_INPUT_BYTES)
        return Problem(path, source, sizes, at_kernelbook_sizes(source, input_bytes) if kernelbook else None)
    except Exception as error:  # the problem's own code failed on the meta device, or it cannot be made to fit
        return Problem(path, problem=f"not prepared: {type(error).__name__}: {str(error)[:200]}")


def _compile_one(path: str, source: str, memory_fraction: float) -> dict:
    import os

    os.environ.setdefault("TORCHINDUCTOR_COMPILE_THREADS", "1")
    from repl.bench.inductor_compile import compile_problem

    try:
        import torch

        torch.cuda.set_per_process_memory_fraction(memory_fraction)  # the workers share the GPU
        return compile_problem(path, source=source)
    except Exception as error:  # the problem's own failure (out of memory, an op Inductor refuses): one line
        return {"error": f"{type(error).__name__}: {str(error).splitlines()[0][:200] if str(error) else ''}"}


def compile_all(sources: dict, workers: int, seconds: float) -> dict:
    """Inductor's output for each (key: (path, variant), problem's source), compiled in `workers` processes sharing
    the GPU; one not compiled within `seconds` gets an error saying so."""
    context = multiprocessing.get_context("spawn")
    with context.Pool(workers) as pool:
        pending = {key: pool.apply_async(_compile_one, (str(key[0]), source, 0.9 / workers))
                   for key, source in sources.items()}
        deadline, found = time.monotonic() + seconds, {}
        for key, result in pending.items():
            try:
                found[key] = result.get(timeout=max(deadline - time.monotonic(), 0.1))
            except multiprocessing.TimeoutError:
                found[key] = {"error": f"not compiled within {seconds:.0f} s"}
        pool.terminate()
    return found


def read_corpus(path: str) -> dict[tuple[str, str], dict]:
    """The records of a corpus file (tools/inductor_corpus.py's or --save-corpus's), by ("level/problem", variant)."""
    import gzip

    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt", encoding="utf-8") as lines:
        records = [json.loads(line) for line in lines if line.strip()]
    return {(f"{record['level']}/{record['problem']}", record.get("variant", "default")): record
            for record in records}


def save_corpus(path: str, records: dict) -> None:
    import gzip

    with gzip.open(path, "wt", encoding="utf-8") as out:
        for (problem, variant), record in records.items():
            out.write(json.dumps({"problem": problem.name, "level": problem.parent.name, "variant": variant,
                                  **record}) + "\n")


def problem_tensors(source: str) -> tuple[list[tuple[str, tuple]], int]:
    """What the problem's forward hands to Inductor's ``call`` ("self.conv.weight", "input_0") with its shape, in the
    order Dynamo lifts them (first use in forward: a BatchNorm's running mean before its weight), and the inputs'
    bytes; traced on PyTorch's meta device, so no memory is taken. Runs the problem's code (KernelBench's own files,
    trusted here as the checker's --trust-problems trusts them)."""
    import torch

    namespace: dict = {"__name__": "kernelbench_problem"}
    exec(compile(source, "problem.py", "exec"), namespace)
    with torch.device("meta"):
        model = namespace["Model"](*namespace["get_init_inputs"]())
        inputs = namespace["get_inputs"]()
    names = {id(tensor): f"self.{name}" for name, tensor in [*model.named_parameters(), *model.named_buffers()]}
    names.update({id(value): f"input_{index}" for index, value in enumerate(inputs)
                  if isinstance(value, torch.Tensor)})
    lifted = []

    def record(graph, example_inputs):
        lifted.extend(value for value in example_inputs if id(value) in names)
        return graph.forward

    torch._dynamo.reset()
    torch.compile(model, backend=record)(*inputs)
    tensors = [(names[id(value)], tuple(value.shape)) for value in lifted]
    given = [value for value in inputs if isinstance(value, torch.Tensor)]
    return tensors, sum(value.numel() * value.element_size() for value in given)


def inductor_kernel(problem: Problem, record: dict | None, small: dict | None = None) -> Kernel:
    """The problem's Inductor output as a KernelBook-style candidate (its first graph's code), or why there is none;
    with ``small`` (the compile at KernelBook's sizes), in the model's style where its launch numbers differ."""
    path = problem.path
    kernel = Kernel("inductor", f"{path.parent.name}/{path.name}", problem.source, sizes=problem.sizes)
    record = record or {"error": "not in the corpus"}
    if problem.problem:
        kernel.problem = problem.problem
    elif "error" in record or not record.get("codes"):
        kernel.problem = f"not compiled: {record.get('error', 'no output code')}"
    elif record.get("sizes", "") != problem.sizes:
        kernel.problem = f"not compiled: the corpus has it at other sizes ({record.get('sizes') or 'its own'})"
    elif ".run(" not in record["codes"][0]:
        kernel.problem = "no Triton kernel: Inductor handed all of it to a library (extern_kernels)"
    elif unconfigured := sorted(set(re.findall(r"(triton_\w+)\.run\(", record["codes"][0])) - set(record["configs"])):
        kernel.problem = f"not converted: no launch config found for {', '.join(unconfigured)}"
    else:
        try:
            tensors, _ = problem_tensors(kernel.reference)
            kernel.code = kernelbook_code(kernel.reference, record["codes"][0], record["configs"], tensors)
            if small and "configs" in small:
                configs, changed = model_style_configs(record["configs"], small["configs"])
                if changed:
                    kernel.group, kernel.launch_changed = "model-style", tuple(changed)
                    kernel.inductor_code = kernel.code
                    kernel.code = kernelbook_code(kernel.reference, record["codes"][0], configs, tensors)
        except (StopIteration, ValueError, SyntaxError, AttributeError) as error:
            kernel.problem = f"not converted: {type(error).__name__}: {error}"
    return kernel


def tune_kernel(checker, kernel: Kernel, interpreter: bool, stop_at: float, max_checks: int | None = None) -> dict:
    """One row: the candidate checked, and tuned when correct; a check asked for after `stop_at` is not run."""
    def check(code: str):
        if time.monotonic() > stop_at:
            raise TimeoutError(OUT_OF_TIME)
        return checker.check(kernel.reference, code, interpreter_timing=interpreter)

    started = time.monotonic()
    row = tune_pair(check, kernel.code, interpreter=interpreter, max_checks=max_checks)
    if kernel.inductor_code and row.get("verdict") == "correct":  # what the autotuner's own numbers give here
        try:
            own = check(kernel.inductor_code)
            row["inductor_ms"], row["inductor_verdict"] = own.kernel_ms, own.verdict.value
        except TimeoutError:
            pass
    row["seconds"] = round(time.monotonic() - started, 1)
    if any(OUT_OF_TIME in (step[1] or "") for step in row.get("tried", [])):
        row["cut_short"] = True
    return row


def geomean(values: list[float]) -> float | None:
    return math.exp(sum(math.log(value) for value in values) / len(values)) if values else None


def against_inductor(tuned: list[dict]) -> dict:
    """Model-style rows: the geomean of Inductor's own numbers' time over the kernel's, before and after tuning
    (above 1: faster than the autotuner's choice for this GPU)."""
    timed = [row for row in tuned if row.get("inductor_ms") and row.get("inductor_verdict") == "correct"]
    if not timed:
        return {}
    return {"inductor_timed": len(timed),
            "untuned_vs_inductor": geomean([row["inductor_ms"] / row["kernel_ms"] for row in timed]),
            "tuned_vs_inductor": geomean([row["inductor_ms"] / row["tuned_ms"] for row in timed])}


def summary(rows: list[dict]) -> dict:
    """Per group: how many kernels were sampled, had a candidate, were correct (the corpus), tuned and kept a
    variant; the geomean speedup over the untuned kernels, how many ended slower, whether every kept variant was
    re-verified, and what a kernel cost."""
    tuned = [row for row in rows if "speedup" in row and not row.get("cut_short")]
    kept = [row for row in tuned if row["kept"] != "as generated"]
    seconds = [row["seconds"] for row in tuned]
    return {"sampled": len(rows), "candidates": sum("verdict" in row for row in rows),
            "correct": sum(row.get("verdict") == "correct" for row in rows), "tuned": len(tuned),
            "variant_kept": len(kept), "cut_short": sum(bool(row.get("cut_short")) for row in rows),
            "not_reached": [row["kernel"] for row in rows if row.get("not_reached")],
            "geomean_speedup": geomean([row["speedup"] for row in tuned]),
            "slower": sum(row["speedup"] < 1 for row in tuned),
            "kept_reverified": sum(bool(row.get("reverified")) for row in kept),
            "seconds_per_tuned_kernel": {"mean": statistics.mean(seconds), "median": statistics.median(seconds),
                                         "max": max(seconds)} if seconds else None,
            "checks_per_tuned_kernel": statistics.mean(row["checks"] for row in tuned) if tuned else None,
            **against_inductor(tuned),
            "outcomes": dict(sorted(Counter(row.get("verdict") or row.get("problem", "?").split(":")[0]
                                            for row in rows if not row.get("not_reached")).items()))}


LARGE = "hand-written-large"
GROUPS = ("model-style", "inductor", "hand-written", LARGE)


def group_names(text: str) -> set[str]:
    names = set(text.split(","))
    if unknown := sorted(names - set(GROUPS)):
        raise argparse.ArgumentTypeError(f"no group {', '.join(unknown)} (the groups: {', '.join(GROUPS)})")
    return names


def arguments(argv):
    parser = argparse.ArgumentParser(prog="python -m repl.bench.tune_corpus", description=__doc__.split("\n")[0])
    parser.add_argument("folders", nargs="*", help="KernelBench's level folders (level1, level2)")
    parser.add_argument("--every", type=int, default=1, help="every K-th problem of each folder, by number")
    parser.add_argument("--limit", type=int, help="at most N problems of the sample")
    parser.add_argument("--seconds", type=float, default=600.0, help="no kernel starts tuning after this")
    parser.add_argument("--corpus", help="Inductor's output from tools/inductor_corpus.py (or --save-corpus): what "
                        "it holds is not compiled again")
    parser.add_argument("--save-corpus", help="write the compiled output there (tools/inductor_corpus.py's format)")
    parser.add_argument("--previous", help="a report of an earlier run: its kernels are kept, not tuned again "
                                           "(those it did not reach are)")
    parser.add_argument("--compile-workers", type=int, default=8)
    parser.add_argument("--hand-written", action="store_true", help="also the tests' Triton kernels")
    parser.add_argument("--hand-written-large", action="store_true",
                        help="also the tests' Triton kernels with their inputs grown to working sizes")
    parser.add_argument("--groups", type=group_names, help="tune only these groups (model-style,inductor,"
                        "hand-written,hand-written-large): a run that measures what an earlier one did not")
    parser.add_argument("--max-checks", type=int, help="variants a kernel's climb may check (:tune's 24)")
    parser.add_argument("--launch", choices=["inductor", "kernelbook"], default="inductor",
                        help="kernelbook: the launch numbers Inductor chose at KernelBook's input sizes")
    parser.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    parser.add_argument("--keep", help="a folder for each candidate and each kept variant")
    parser.add_argument("--json", required=True)
    return parser.parse_args(argv)


def candidates(args, started: float) -> list[Kernel]:
    kernelbook = args.launch == "kernelbook"
    problems = {path: prepare(path, kernelbook) for path in sample(args.folders, args.every, args.limit)}
    variants = {(path, "default"): problem.source for path, problem in problems.items() if not problem.problem}
    variants.update({(path, KERNELBOOK_SIZES): problem.small for path, problem in problems.items() if problem.small})
    stored = read_corpus(args.corpus) if args.corpus else {}
    records = {key: stored.get((f"{key[0].parent.name}/{key[0].name}", key[1])) for key in variants}
    missing = {key: source for key, source in variants.items() if records[key] is None}
    if missing and (args.device == "cuda" or not args.corpus):  # what the corpus lacks is compiled here (GPU only)
        compiled = compile_all(missing, args.compile_workers, args.seconds / 2)
        for (path, _), record in compiled.items():
            record["sizes"] = problems[path].sizes  # compiled at the sizes it is checked at
        records.update(compiled)
    if args.save_corpus:
        save_corpus(args.save_corpus, {key: record for key, record in records.items() if record})
    print(f"{len(problems)} problems, Inductor's output in {time.monotonic() - started:.0f} s", flush=True)
    kernels = [inductor_kernel(problem, records.get((path, "default")), records.get((path, KERNELBOOK_SIZES)))
               for path, problem in problems.items()]
    kernels.sort(key=lambda kernel: kernel.group != "model-style")  # what --launch kernelbook is for, first
    return (kernels + (hand_written() if args.hand_written else [])
            + (hand_written(group=LARGE) if args.hand_written_large else []))


def keep_files(folder: str, kernel: Kernel, row: dict) -> None:
    out = Path(folder)
    out.mkdir(parents=True, exist_ok=True)
    name = kernel.name.replace("/", "__")
    if kernel.code:
        (out / name).write_text(kernel.code)
    if row.get("tuned_code"):
        (out / name.replace(".py", "__tuned.py")).write_text(row["tuned_code"])


def main(argv=None) -> int:
    args = arguments(argv)
    from repl.checker import Checker

    started = time.monotonic()
    kernels = candidates(args, started)
    rows, interpreter = previous_rows(args.previous), args.device == "cpu"
    done = {row["kernel"] for row in rows}
    with Checker(device=args.device) as checker:
        for kernel in [kernel for kernel in kernels if kernel.name not in done
                       and (not args.groups or kernel.group in args.groups)]:
            row = {"group": kernel.group, "kernel": kernel.name}
            out_of_time = time.monotonic() - started > args.seconds
            if kernel.group == LARGE and not out_of_time:
                grow(checker, kernel, interpreter)
            row.update({"sizes": kernel.sizes} if kernel.sizes else {})
            row.update({"launch_changed": list(kernel.launch_changed)} if kernel.launch_changed else {})
            if kernel.problem:
                row["problem"] = kernel.problem
            elif out_of_time:
                row["not_reached"] = True
            else:
                row.update(tune_kernel(checker, kernel, interpreter, started + args.seconds + OVERRUN_S,
                                       args.max_checks))
            if args.keep:
                keep_files(args.keep, kernel, row)
            row.pop("tuned_code", None)
            rows.append(row)
            print(json.dumps(row), flush=True)
            write_report(args.json, rows, time.monotonic() - started)
    print(json.dumps(write_report(args.json, rows, time.monotonic() - started)["summary"]), flush=True)
    return 0


def grow(checker, kernel: Kernel, interpreter: bool) -> None:
    """A hand-written kernel's problem at working sizes (kernel.sizes says how), or kernel.problem saying why not:
    its check at its own sizes finds the dimensions it is valid for, and only those grow."""
    from repl.bench import working_sizes

    own = checker.check(kernel.reference, kernel.code, interpreter_timing=interpreter)
    if not own.correct:
        kernel.problem = f"not grown: {own.verdict.value} at its own sizes"
        return
    try:
        shapes = working_sizes.input_shapes(kernel.reference)
    except Exception as error:  # the problem's own get_inputs() failed here (a .cuda() without CUDA)
        kernel.problem = f"not grown: its inputs could not be made here: {type(error).__name__}: {error}"[:300]
        return
    try:
        shapes, kernel.sizes = working_sizes.working_shapes(shapes, (own.valid_for or {}).get("inputs", []),
                                                            working_sizes.WORKING_BYTES)
    except ValueError as error:
        kernel.problem = f"not grown: {error}"
        return
    if shapes:
        kernel.reference = working_sizes.at_working_sizes(kernel.reference, shapes)


def previous_rows(path: str | None) -> list[dict]:
    """The rows of an earlier report that were checked and tuned to the end; the rest (not reached, no candidate: a
    fact of the corpus, cheap to find again; a check the checker itself failed; a tune cut short by --seconds, which
    the summary leaves out) are done again."""
    if not path:
        return []
    return [row for row in json.loads(Path(path).read_text())["kernels"]
            if row.get("verdict") not in (None, "checker_error") and not row.get("cut_short")]


def write_report(path: str, rows: list[dict], seconds: float) -> dict:
    """The report so far (written after each kernel: a run stopped from outside keeps what it measured)."""
    groups = {group: [row for row in rows if row["group"] == group] for group in sorted({row["group"] for row in rows})}
    if {"model-style", "inductor"} <= set(groups):  # the whole Inductor corpus: its kernels in the model's style,
        groups["inductor corpus"] = groups["model-style"] + groups["inductor"]  # and those whose numbers stay
    for hand in ("hand-written", LARGE):  # the goal's corpus: Inductor's kernels and the hand-written ones
        if "inductor corpus" in groups and hand in groups:
            groups[f"whole corpus ({hand})"] = groups["inductor corpus"] + groups[hand]
    report = {"seconds": round(seconds, 1), "summary": {group: summary(found) for group, found in groups.items()},
              "kernels": rows}
    Path(path).write_text(json.dumps(report, indent=1) + "\n")
    return report


if __name__ == "__main__":
    raise SystemExit(main())
