"""Batch evaluation: pass@k and fast_p arithmetic against hand-computed values, the results file, resuming, and a
real run over tests/eval_problems with the known-good and known-bad kernels of tests/eval_candidates."""

import json
import shutil
import threading
from pathlib import Path

import pytest

from repl.workflows.best_of import CheckOptions
from repl.checker import CheckResult
from repl.engine.engine import Engine, EngineOptions
from repl.workflows.eval_problems import candidate_files, find_problems, select_problems
from repl.workflows.eval_results import ProblemResult, ResultsFileError, read_results
from repl.workflows.eval_scores import compiled, overall_totals, pass_at_k, summarize
from repl.workflows.evaluate import evaluate
from repl.core.settings import SamplingSettings

TESTS = Path(__file__).parent
PROBLEMS = TESTS / "eval_problems"
CANDIDATES = TESTS / "eval_candidates"
PROBLEM_KEYS = {"name", "n", "compiled", "correct", "pass_at", "best", "too_large", "not_judged", "candidates"}


# -- arithmetic ----------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("n, c, k, expected", [
    (5, 2, 1, 2 / 5),
    (5, 2, 2, 1 - 3 / 10),  # 1 - C(3,2)/C(5,2)
    (5, 2, 3, 1 - 1 / 10),  # 1 - C(3,3)/C(5,3)
    (5, 2, 4, 1.0),  # n - c < k: every draw of 4 holds a correct one
    (5, 0, 3, 0.0),
    (10, 3, 5, 1 - 21 / 252),  # 1 - C(7,5)/C(10,5)
    (0, 0, 1, 0.0),  # no candidates: unsolved
])
def test_pass_at_k_is_the_unbiased_estimator(n, c, k, expected):
    assert pass_at_k(n, c, k) == pytest.approx(expected)


def test_pass_at_k_beyond_n_is_refused():
    with pytest.raises(ValueError):
        pass_at_k(3, 1, 4)


def result(name, verdicts, kernel_ms=None, best_speedup=None):
    """A problem's result as the file stores it; kernel_ms per candidate, the best's speedup vs eager."""
    kernel_ms = kernel_ms or [None] * len(verdicts)
    candidates = [{"file": f"{i}.py", "verdict": v, "kernel_ms": ms} for i, (v, ms) in enumerate(zip(verdicts,
                                                                                                     kernel_ms))]
    correct = [c for c in candidates if c["verdict"] == "correct"]
    best = None
    if correct:
        fastest = min(correct, key=lambda c: c["kernel_ms"] or float("inf"))
        best = {"candidate": fastest["file"], "kernel_ms": fastest["kernel_ms"], "speedup_vs_eager": best_speedup}
    n, c = len(verdicts), len(correct)
    return ProblemResult(name, n, sum(v != "compile_error" for v in verdicts), c,
                         {str(k): pass_at_k(n, c, k) for k in range(1, n + 1)}, best, candidates)


def test_summary_pass_at_k_is_the_mean_over_problems_up_to_the_smallest_n():
    results = [result("a", ["correct", "mismatch", "mismatch", "compile_error"]),  # n 4, c 1
               result("b", ["correct", "correct", "mismatch"]),  # n 3, c 2
               result("c", ["mismatch", "mismatch", "mismatch"])]  # n 3, c 0
    summary = summarize(results)
    assert summary["problems"] == 3 and set(summary["pass_at"]) == {"1", "2", "3"}
    assert summary["pass_at"]["1"] == pytest.approx((1 / 4 + 2 / 3 + 0) / 3)
    assert summary["pass_at"]["2"] == pytest.approx(((1 - 3 / 6) + 1 + 0) / 3)  # a: 1 - C(3,2)/C(4,2)
    assert summary["pass_at"]["3"] == pytest.approx(((1 - 1 / 4) + 1 + 0) / 3)  # a: 1 - C(3,3)/C(4,3)
    assert summary["fast_p"] is None  # no timings


def test_fast_p_counts_problems_whose_best_kernel_is_correct_and_faster_than_p():
    results = [result("a", ["correct", "mismatch"], [0.5, None], best_speedup=2.4),
               result("b", ["correct", "correct"], [1.0, 2.0], best_speedup=1.2),
               result("c", ["correct"], [3.0], best_speedup=0.8),
               result("d", ["mismatch", "runtime_error"])]
    assert summarize(results)["fast_p"] == {"0": 0.75, "1.0": 0.5, "1.5": 0.25, "2.0": 0.25}
    # b: eager = 1.0 ms * 1.2 = 1.2 ms; its correct candidates ran 1.0 and 2.0 ms: speedups 1.2 and 0.6.
    assert results[1].speedups == pytest.approx([1.2, 0.6])
    assert results[1].geomean_speedup == pytest.approx((1.2 * 0.6) ** 0.5)


def test_fast_0_is_the_correctness_rate_and_an_untimed_correct_kernel_is_not_slow():
    results = [result("a", ["correct"], [0.5], best_speedup=2.4),
               result("b", ["correct", "mismatch"]),  # correct, but its timing failed: untimed
               result("c", ["mismatch"]),
               result("d", ["correct"], [3.0], best_speedup=0.8)]
    fast_p = summarize(results)["fast_p"]
    assert fast_p["0"] == 3 / 4 == sum(r.correct > 0 for r in results) / len(results)
    assert fast_p == {"0": 0.75, "1.0": 0.25, "1.5": 0.25, "2.0": 0.25}
    assert overall_totals(results)["untimed"] == 1


def test_problems_too_large_for_the_device_are_counted_apart():
    results = [result("a", ["correct", "mismatch"], [0.5, None], best_speedup=2.4),
               result("b", ["mismatch", "mismatch"]),
               result("big", ["too_large", "too_large"])]
    summary = summarize(results)
    assert summary["problems"] == 2 and summary["too_large"] == 1
    assert summary["pass_at"] == pytest.approx({"1": (0.5 + 0) / 2, "2": (1 + 0) / 2})
    assert summary["fast_p"]["0"] == 0.5
    totals = overall_totals(results)
    assert totals["too_large"] == ["big"] and totals["candidates"] == 4


# -- problems and candidates ---------------------------------------------------------------------------------------

def test_problems_come_in_kernelbench_numeric_order(tmp_path):
    for name in ["10_B.py", "2_A.py", "1_C.py", "__init__.py", "notes.txt"]:
        (tmp_path / name).write_text("")
    assert [p.name for p in find_problems(tmp_path)] == ["1_C", "2_A", "10_B"]


@pytest.mark.parametrize("words, chosen", [
    (["2"], ["2_A"]),  # a KernelBench id
    (["1-2"], ["1_C", "2_A"]),  # a range of ids
    (["10_B.py", "1_C"], ["1_C", "10_B"]),  # names, in the problems' order
    (["*b,2"], ["2_A", "10_B"]),  # a glob (case ignored) and an id, comma-separated
])
def test_problems_are_selected_by_id_range_name_or_glob(tmp_path, words, chosen):
    for name in ["10_B.py", "2_A.py", "1_C.py"]:
        (tmp_path / name).write_text("")
    assert [p.name for p in select_problems(find_problems(tmp_path), words)] == chosen
    with pytest.raises(ValueError, match="--problems 99: no problem matches it"):
        select_problems(find_problems(tmp_path), ["2", "99"])


def test_a_timeout_or_crash_once_the_kernel_had_loaded_counts_as_compiled():
    """It compiled: its check's phases show the kernel loaded, and the trials ran out of time ("0 compiled" said
    otherwise); one stuck in its own import did not."""
    assert compiled(CheckResult(verdict="timeout", phases_s={"problem": 0.1, "candidate_ready": 0.2, "load": 0.3}))
    assert compiled(CheckResult(verdict="crash", phases_s={"load": 0.3, "first_trial": 0.2}))
    assert not compiled(CheckResult(verdict="timeout", phases_s={"problem": 0.1, "candidate_ready": 0.2}))
    assert compiled(CheckResult(verdict="mismatch")) and not compiled(CheckResult(verdict="compile_error"))


def test_a_results_file_of_an_earlier_version_is_resumed(tmp_path, checked):
    """Written before messages, "too_large" and a too-large problem's null pass@k: read, kept, resumed."""
    out = tmp_path / "results.json"
    old = {"problems": [
        {"name": "1_ReLU", "n": 1, "compiled": 1, "correct": 1, "pass_at": {"1": 1.0},
         "best": {"candidate": "good.py", "kernel_ms": None, "speedup_vs_eager": None},
         "candidates": [{"file": "good.py", "verdict": "correct", "kernel_ms": None}]},
        {"name": "2_Add", "n": 2, "compiled": 0, "correct": 0, "pass_at": {"1": 0.0, "2": 0.0}, "best": None,
         "candidates": [{"file": "good.py", "verdict": "too_large", "kernel_ms": None},
                        {"file": "torch_only.py", "verdict": "too_large", "kernel_ms": None}]}],
        "summary": {"problems": 1, "too_large": 1, "pass_at": {"1": 1.0}, "fast_p": None}}
    out.write_text(json.dumps(old))
    assert read_results(out)[1].pass_at is None  # too large: never measured
    report = evaluate(find_problems(PROBLEMS), candidates_dir=CANDIDATES, out_path=out, checks=checked)
    assert report.skipped == ["1_ReLU"]  # 2_Add (too large then) and 3_Sigmoid are done now
    data = json.loads(out.read_text())
    assert data["problems"][0] == {**old["problems"][0], "too_large": None, "not_judged": 0}  # kept as it was
    assert [c["file"] for c in data["problems"][1]["candidates"]] == ["good.py", "torch_only.py"]  # checked now


def test_candidates_are_every_file_of_the_problem_folder_up_to_samples():
    assert [p.name for p in candidate_files(CANDIDATES, "1_ReLU")] == ["good.py", "identity.py", "reply.md"]
    assert [p.name for p in candidate_files(CANDIDATES, "1_ReLU", limit=2)] == ["good.py", "identity.py"]
    assert candidate_files(CANDIDATES, "3_Sigmoid") == []


# -- a real run ----------------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def real_run(tmp_path_factory):
    """One evaluation of the test problems with the real checker (5 checks on the CPU interpreter)."""
    out = tmp_path_factory.mktemp("eval") / "results.json"
    report = evaluate(find_problems(PROBLEMS), candidates_dir=CANDIDATES, out_path=out,
                      check=CheckOptions(device="cpu", trials=1, jobs=2))
    return report, out


def test_known_good_and_bad_kernels_give_the_hand_computed_pass_at_k(real_run):
    report, out = real_run
    by_name = {r.name: r for r in report.results}
    relu, add, sigmoid = by_name["1_ReLU"], by_name["2_Add"], by_name["3_Sigmoid"]
    assert [c["verdict"] for c in relu.candidates] == ["correct", "mismatch", "correct"]  # reply.md is a reply
    assert "elements differ" in relu.candidates[1]["message"]  # why, not only the verdict
    assert relu.candidates[0]["message"].startswith("matches the reference on 1 trial")
    assert [c["verdict"] for c in add.candidates] == ["correct", "no_triton"]
    assert (relu.n, relu.compiled, relu.correct) == (3, 3, 2)
    assert relu.pass_at == pytest.approx({"1": 2 / 3, "2": 1.0, "3": 1.0})
    assert add.pass_at == pytest.approx({"1": 0.5, "2": 1.0})
    assert (sigmoid.n, sigmoid.pass_at, sigmoid.best) == (0, {}, None)
    assert relu.best == {"candidate": "good.py", "kernel_ms": None, "speedup_vs_eager": None, "flagged": None}
    # Over the three problems, k up to the smallest n (2): (2/3 + 1/2 + 0) / 3 and (1 + 1 + 0) / 3.
    assert report.summary["pass_at"] == pytest.approx({"1": 7 / 18, "2": 2 / 3})
    assert report.summary["fast_p"] is None  # the CPU interpreter gives no timings
    assert report.totals["candidates"] == 5 and report.totals["correct"] == 3 and not report.interrupted


def test_the_results_file_has_exactly_the_documented_keys(real_run):
    _, out = real_run
    data = json.loads(out.read_text())
    assert set(data) == {"problems", "summary", "run"}
    assert set(data["run"]) == {"date"}  # evaluate() called without a run record: only when it was written
    assert set(data["summary"]) == {"problems", "too_large", "not_judged", "pass_at", "fast_p", "flagged"}
    assert data["summary"]["flagged"] == {"count": 0, "candidates": []}
    for problem in data["problems"]:
        assert set(problem) == PROBLEM_KEYS
        for candidate in problem["candidates"]:
            # roofline with a timing (a GPU), work and valid_for with a correct verdict
            assert {"file", "verdict", "message", "kernel_ms", "flagged"} <= set(candidate) <= {
                "file", "verdict", "message", "kernel_ms", "flagged", "roofline", "work", "valid_for"}  # no reply
            assert ("work" in candidate) == ("valid_for" in candidate) == (candidate["verdict"] == "correct")
        assert problem["best"] is None or set(problem["best"]) == {"candidate", "kernel_ms", "speedup_vs_eager",
                                                                   "flagged"}
    assert [p["name"] for p in data["problems"]] == ["1_ReLU", "2_Add", "3_Sigmoid"]


def test_a_rerun_with_the_same_file_checks_nothing_again(real_run, tmp_path, stand_in_checks):
    _, out = real_run
    copy = tmp_path / "results.json"
    shutil.copy(out, copy)
    report = evaluate(find_problems(PROBLEMS), candidates_dir=CANDIDATES, out_path=copy,
                      checks=stand_in_checks(lambda *a, **k: pytest.fail("checked again")))
    assert report.skipped == ["1_ReLU", "2_Add", "3_Sigmoid"]
    assert json.loads(copy.read_text()) == json.loads(out.read_text())


# -- resuming and the model --------------------------------------------------------------------------------------

@pytest.fixture
def checked(stand_in_checks):
    """A stand-in CheckPool (verdicts by marker); .texts lists every kernel it checked."""
    texts = []

    def check(reference_code, reply_text, **options):
        texts.append(reply_text)
        verdict = "correct" if "tl.maximum" in reply_text or "x + y" in reply_text else "mismatch"
        if "ModelNew" not in reply_text:
            verdict = "compile_error"
        return CheckResult(verdict=verdict)

    pool = stand_in_checks(check)
    pool.texts = texts
    return pool


def test_an_interrupted_run_keeps_finished_problems_and_a_rerun_does_the_rest(tmp_path, checked):
    out = tmp_path / "results.json"
    cancel = threading.Event()

    def stop_after_the_first_problem(progress):
        if progress.finished is not None:
            cancel.set()

    first = evaluate(find_problems(PROBLEMS), candidates_dir=CANDIDATES, out_path=out, cancel=cancel,
                     on_progress=stop_after_the_first_problem, checks=checked)
    written = [p["name"] for p in json.loads(out.read_text())["problems"]]
    assert first.interrupted and 1 <= len(written) < 3  # the one that stopped it, and any that ended meanwhile
    checks_before = len(checked.texts)
    second = evaluate(find_problems(PROBLEMS), candidates_dir=CANDIDATES, out_path=out, checks=checked)
    assert second.skipped == written and not second.interrupted
    assert [r.name for r in second.results] == ["1_ReLU", "2_Add", "3_Sigmoid"]
    sizes = {"1_ReLU": 3, "2_Add": 2, "3_Sigmoid": 0}
    assert len(checked.texts) - checks_before == 5 - sum(sizes[name] for name in written)


def test_a_too_large_problem_is_skipped_and_tried_again_on_a_rerun(tmp_path, monkeypatch, stand_in_checks):
    checked_on = []

    def check(reference_code, reply_text, *, device, **options):
        checked_on.append(device)
        if "return a + b" in reference_code and device == "cpu":  # 2_Add stands for a problem beyond the CPU
            return CheckResult(verdict="too_large", message="too large for the CPU interpreter: ...")
        return CheckResult(verdict="correct" if "tl.maximum" in reply_text or "x + y" in reply_text else "mismatch")

    from repl.checker import devices

    monkeypatch.setattr(devices, "visible_gpu_count", lambda: 1)  # as on a host with a GPU
    checks = stand_in_checks(check)
    out = tmp_path / "results.json"
    first = evaluate(find_problems(PROBLEMS), candidates_dir=CANDIDATES, out_path=out, check=CheckOptions("cpu"),
                     checks=checks)
    assert first.summary["too_large"] == 1 and first.summary["problems"] == 2
    assert first.totals["too_large"] == ["2_Add"] and first.totals["candidates"] == 3
    relu = first.results[0]
    assert set(first.summary["pass_at"]) == {"1", "2", "3"}  # up to ReLU's 3: 2_Add's 2 does not limit it
    assert first.summary["pass_at"]["1"] == pytest.approx((relu.pass_at["1"] + 0) / 2)  # nor counts as unsolved
    second = evaluate(find_problems(PROBLEMS), candidates_dir=CANDIDATES, out_path=out, check=CheckOptions("cuda"),
                      checks=checks)
    assert second.skipped == ["1_ReLU", "3_Sigmoid"] and checked_on[-2:] == ["cuda:0", "cuda:0"]
    assert second.summary["too_large"] == 0 and second.summary["problems"] == 3


def test_a_file_that_is_not_an_eval_result_is_refused(tmp_path):
    out = tmp_path / "results.json"
    out.write_text('{"something": "else"}')
    with pytest.raises(ResultsFileError, match="not an eval results file"):
        read_results(out)


def test_model_candidates_are_sampled_k_per_problem_with_the_tiny_random_model(tiny_model_dir, checked):
    engine = Engine(EngineOptions(model=str(tiny_model_dir), device="cpu"),
                    SamplingSettings(max_new_tokens=8, seed=0), checks=checked)
    report = evaluate(find_problems(PROBLEMS), engine=engine, samples=2)
    assert [r.n for r in report.results] == [2, 2, 2]
    assert [c["file"] for c in report.results[0].candidates] == ["sample_1", "sample_2"]
    assert report.summary["pass_at"] == {"1": 0.0, "2": 0.0}  # noise is never a correct kernel


def test_concurrency_samples_several_problems_at_once(checked):
    """With a server in mind: --concurrency 4 and 2 samples keep two problems generating together."""
    import time

    from repl.generation import Backend
    from replay_backend import ReplayStream

    active, most_active, started = [0], [0], [0]
    lock = threading.Lock()
    # The first two streams wait for each other: with two problems sampled together both arrive, one at a time
    # breaks the barrier after 30 s. (Overlapping sleeps alone missed each other on a loaded machine.)
    meet = [threading.Barrier(2, timeout=30)]

    class SlowStream(ReplayStream):
        def __iter__(self):
            with lock:
                active[0] += 1
                most_active[0] = max(most_active[0], active[0])
                started[0] += 1
                meets = meet[0] is not None and started[0] <= 2
            if meets:
                meet[0].wait()
            time.sleep(0.3)  # room for a third stream in flight, which most_active would count
            yield from super().__iter__()
            with lock:
                active[0] -= 1

    class SlowBackend(Backend):
        description = "slow replaying backend (test double)"

        def stream(self, prompt, settings):
            return SlowStream(["```python\nclass ModelNew: pass\n```"], settings)

    problems = find_problems(PROBLEMS)
    engine = Engine(settings=SamplingSettings(temperature=1.0, seed=0), backend_override=SlowBackend(), checks=checked)
    evaluate(problems, engine=engine, samples=2, concurrency=4)
    assert most_active[0] == 2  # two problems, one stream each at a time (no stream_many): 2 in flight
    most_active[0], meet[0] = 0, None
    evaluate(problems, engine=engine, samples=2)
    assert most_active[0] == 1


def test_an_eval_survives_a_candidate_that_breaks_its_check(tmp_path, stand_in_checks):
    # Whatever one candidate does to the checking machinery (here: the check raises, as the caller's parser did on
    # a line of 100,000 '-'), every other candidate gets its verdict and the results file is written.
    def check(reference_code, reply_text, **options):
        if "x + y" in reply_text:
            raise MemoryError()
        return CheckResult(verdict="correct" if "tl.maximum" in reply_text else "mismatch")

    out = tmp_path / "results.json"
    report = evaluate(find_problems(PROBLEMS), candidates_dir=CANDIDATES, out_path=out, checks=stand_in_checks(check))
    assert not report.interrupted
    verdicts = {r.name: [c["verdict"] for c in r.candidates] for r in report.results}
    assert "checker_error" in verdicts["2_Add"] and "correct" in verdicts["1_ReLU"]
    assert [p["name"] for p in json.loads(out.read_text())["problems"]] == ["1_ReLU", "2_Add", "3_Sigmoid"]


def _failing_checker_on(marker: str, failing: list[bool]):
    """A stand-in check that, while failing[0], fails on the checker's side for kernels or references holding
    `marker`; else correct for the known-good kernels."""
    def check(reference_code, reply_text, **options):
        if failing[0] and (marker in reference_code or marker in reply_text):
            return CheckResult(verdict="checker_error", message="the checker failed: its timing broke")
        return CheckResult(verdict="correct" if "tl.maximum" in reply_text or "x + y" in reply_text else "mismatch")
    return check


def test_a_problem_the_checker_failed_on_is_counted_apart_and_checked_again_by_a_rerun(tmp_path, stand_in_checks):
    failing = [True]
    checks = stand_in_checks(_failing_checker_on("return a + b", failing))  # every check of 2_Add
    out = tmp_path / "results.json"
    first = evaluate(find_problems(PROBLEMS), candidates_dir=CANDIDATES, out_path=out, checks=checks)
    add = next(result for result in first.results if result.name == "2_Add")
    assert add.checker_failed and add.pass_at is None and add.correct == 0
    assert first.summary["not_judged"] == {"problems": 1, "candidates": 2}
    assert first.summary["problems"] == 2  # 1_ReLU, and 3_Sigmoid (no candidates: unsolved); not 2_Add
    relu = first.results[0]
    assert first.summary["pass_at"]["1"] == pytest.approx((relu.pass_at["1"] + 0) / 2)
    assert first.totals["not_judged"] == 2 and first.totals["not_judged_problems"] == ["2_Add"]
    written = {problem["name"]: problem for problem in json.loads(out.read_text())["problems"]}
    assert written["2_Add"]["not_judged"] == 2 and written["1_ReLU"]["not_judged"] == 0
    failing[0] = False
    second = evaluate(find_problems(PROBLEMS), candidates_dir=CANDIDATES, out_path=out, checks=checks)
    assert second.skipped == ["1_ReLU", "3_Sigmoid"]  # 2_Add checked again
    assert second.summary["not_judged"] == {"problems": 0, "candidates": 0} and second.summary["problems"] == 3


def test_a_candidate_the_checker_failed_on_is_neither_correct_nor_wrong_in_pass_at_k(stand_in_checks):
    checks = stand_in_checks(_failing_checker_on("Copies its input", [True]))  # one of 1_ReLU's three (one good)
    report = evaluate(find_problems(PROBLEMS), candidates_dir=CANDIDATES, checks=checks)
    relu = report.results[0]
    assert (relu.n, relu.judged, relu.correct) == (3, 2, 1)
    assert relu.pass_at == pytest.approx({"1": 1 / 2, "2": 1.0})  # over the two judged; not 1/3 over all three
    assert report.summary["not_judged"] == {"problems": 0, "candidates": 1}
    assert set(report.summary["pass_at"]) == {"1", "2"}  # up to the fewest judged


def test_a_problem_whose_prompt_does_not_fit_the_models_context_is_too_large_and_the_run_goes_on(checked, tmp_path):
    from replay_backend import ReplayBackend

    from repl.generation import PromptTooLong

    class ShortContext(ReplayBackend):
        def stream(self, prompt, settings):
            if "Elementwise sum of two tensors" in prompt:  # 2_Add, as if too long for the model's context
                raise PromptTooLong("the prompt is 5,000 tokens and the model's context holds 4,096")
            return super().stream(prompt, settings)

    engine = Engine(settings=SamplingSettings(temperature=1.0, seed=0),
                    backend_override=ShortContext("```python\nclass ModelNew: pass\n```"), checks=checked)
    report = evaluate(find_problems(PROBLEMS), engine=engine, samples=2, out_path=tmp_path / "results.json")
    by_name = {result.name: result for result in report.results}
    assert sorted(by_name) == ["1_ReLU", "2_Add", "3_Sigmoid"]  # the other problems were sampled and checked
    too_long = by_name["2_Add"]
    assert too_long.too_large and too_long.pass_at is None and too_long.n == 2
    saved = {problem["name"]: problem for problem in json.loads((tmp_path / "results.json").read_text())["problems"]}
    assert saved["2_Add"]["too_large"] == "the prompt is 5,000 tokens and the model's context holds 4,096"
    assert report.summary["too_large"] == 1 and report.summary["problems"] == 2
