"""`eval --tune` (repl/workflows/eval_tune.py): each problem's best correct kernel tuned as :tune tunes one, the tuned
kernel kept beside the untuned one (and logged, for a sampled kernel, as a tuned variant of its entry), fast_p with
and without tuning, and a results file from before --tune resumed. The GPU timings come from a test double of the
checker (gpu_stand_in.py: the CPU interpreter gives none); the CPU case runs the real checker through the command
line."""

import json
import threading
from pathlib import Path

import pytest

from gpu_stand_in import on_a_gpu, timed_as_on_a_gpu
from replay_backend import ReplayBackend
from repl.cli import main as main_cli
from repl.core.settings import SamplingSettings
from repl.engine.engine import Engine
from repl.log.session_log import SessionLog, default_log_path
from repl.workflows.best_of import CheckOptions
from repl.workflows.eval_archive import EvalArchive
from repl.workflows.eval_problems import candidate_files, find_problems
from repl.workflows.eval_step import start_problem
from repl.workflows.eval_tune import STOPPED, tune_best
from repl.workflows.evaluate import evaluate
from repl.workflows.ray.worker import EvalWorker

TESTS = Path(__file__).parent
PROBLEMS = TESTS / "eval_problems"
CANDIDATES = TESTS / "eval_candidates"


@pytest.fixture
def gpu_checks(stand_in_checks):
    """Stand-in GPU checks (gpu_stand_in.timed_as_on_a_gpu): 1_ReLU's good.py takes 10 ms, twice as fast with
    BLOCK_SIZE=128 and wrong with BLOCK_SIZE=32; 2_Add's good.py takes 4 ms and no variant of it is faster; .texts
    lists what was checked."""
    texts = []

    def check(reference_code, kernel, **options):
        texts.append(kernel)
        return timed_as_on_a_gpu(reference_code, kernel, **options)

    pool = stand_in_checks(check)
    pool.texts = texts
    return pool


def test_the_best_kernel_is_tuned_kept_beside_the_untuned_one_and_fast_p_given_both_ways(gpu_checks, tmp_path):
    out, kernels = tmp_path / "results.json", tmp_path / "results_kernels"
    events = []
    report = evaluate(find_problems(PROBLEMS)[:2], candidates_dir=CANDIDATES, out_path=out, checks=gpu_checks,
                      archive=EvalArchive(kernels, results_dir=tmp_path), tune=True,
                      on_progress=lambda progress: progress.event and events.append(progress.event))
    relu, add = json.loads(out.read_text())["problems"]
    assert relu["tuned"]["kept"] == "relu_kernel BLOCK_SIZE 64 -> 128 (the grid's too)"
    assert (relu["tuned"]["kernel_ms"], relu["tuned"]["speedup_vs_untuned"]) == (5.0, 2.0)
    assert relu["tuned"]["valid_for"] == "any size of dim 0 (5.0 ms)"
    assert relu["candidates"][0]["valid_for"] == "any size of dim 0 (10.0 ms)"  # each kept candidate's valid-for
    assert {"variant": "relu_kernel BLOCK_SIZE 64 -> 32 (the grid's too)", "verdict": "mismatch", "kernel_ms": 1.0,
            "why": None} in relu["tuned"]["tried"]
    assert add["tuned"]["kept"] is None and add["tuned"]["speedup_vs_untuned"] == 1.0
    tuned_file = tmp_path / relu["tuned"]["kernel_file"]
    assert tuned_file == kernels / "1_ReLU" / "good.py.tuned.py" and "BLOCK_SIZE=128" in tuned_file.read_text()
    assert json.loads((tmp_path / relu["tuned"]["check_file"]).read_text())["kernel_ms"] == 5.0
    assert not (kernels / "2_Add" / "good.py.tuned.py").exists()  # nothing beat it: no tuned kernel
    assert "good.py.tuned.py" not in [path.name for path in candidate_files(kernels, "1_ReLU")]
    summary = report.summary
    assert summary["fast_p"]["2.0"] == 0.5 and summary["fast_p_tuned"]["2.0"] == 1.0  # ReLU 1.2x -> 2.4x
    assert summary["tuned"] == {"tuned": 2, "faster": 1, "geomean_vs_untuned": pytest.approx(2 ** 0.5),
                                "not_tuned": 0}
    assert events == []  # on a GPU, nothing to say


def test_a_sampled_kernel_a_variant_beat_is_logged_as_its_tuned_variant_and_log_shows_it(gpu_checks, tmp_path,
                                                                                         monkeypatch, capsys):
    """Sampled candidates: 1_ReLU's kept variant is logged as :tune logs one (an entry of its own, with its
    confirming check and a tuning record naming the sampled kernel's entry), and `log` shows it; 2_Add's best, which
    no variant beats, adds nothing to the log."""
    monkeypatch.setenv("KERNELLLM_HOME", str(tmp_path / "home"))
    replies = [f"```python\n{(CANDIDATES / name / 'good.py').read_text()}```" for name in ("1_ReLU", "2_Add")]
    engine = Engine(settings=SamplingSettings(temperature=0.5, seed=7), backend_override=ReplayBackend(*replies),
                    checks=gpu_checks)
    with SessionLog.open(default_log_path(), enabled=True) as log:
        engine.record_to(log)
        try:
            report = evaluate(find_problems(PROBLEMS)[:2], engine=engine, samples=1, tune=True)
        finally:
            engine.close()
    assert [result.tuned["kept"] for result in report.results] == [
        "relu_kernel BLOCK_SIZE 64 -> 128 (the grid's too)", None]

    assert main_cli.main(["log", "--json"]) == 0
    entries = {entry["id"]: entry for entry in json.loads(capsys.readouterr().out)}
    assert sorted(entry["source_name"] for entry in entries.values()) == ["1_ReLU", "1_ReLU", "2_Add"]
    [tuned] = [entry for entry in entries.values() if entry["tuning"]]
    original = entries[tuned["tuning"]["from_reply"]]
    assert original["source_name"] == "1_ReLU" and original["tuning"] is None and tuned["id"] > original["id"]
    assert "BLOCK_SIZE=64)" in original["kernel"] and "BLOCK_SIZE=128)" in tuned["kernel"]
    assert (tuned["verdict"], tuned["check"]["kernel_ms"], tuned["tokens"]) == ("correct", 5.0, 0)
    assert (tuned["model"], tuned["temperature"], tuned["seed"]) == (original["model"], 0.5, 7)
    assert tuned["tuning"]["variant"] == "relu_kernel BLOCK_SIZE 64 -> 128 (the grid's too)"
    assert tuned["tuning"]["launch"] == [{"kernel": "relu_kernel", "parameter": "BLOCK_SIZE", "from": 64, "to": 128}]
    assert (tuned["tuning"]["speedup"], tuned["tuning"]["original_ms"]) == (2.0, 10.0)

    assert main_cli.main(["log"]) == 0
    assert f"tuned from #{original['id']}" in capsys.readouterr().out


def test_a_results_file_from_before_tune_is_resumed_its_problems_counted_untuned(gpu_checks, tmp_path):
    out = tmp_path / "results.json"
    evaluate(find_problems(PROBLEMS)[1:2], candidates_dir=CANDIDATES, out_path=out, checks=gpu_checks)
    assert "tuned" not in json.loads(out.read_text())["problems"][0]  # a run without --tune: the file as it was
    report = evaluate(find_problems(PROBLEMS)[:2], candidates_dir=CANDIDATES, out_path=out, checks=gpu_checks,
                      tune=True)
    assert report.skipped == ["2_Add"]
    data = json.loads(out.read_text())
    assert [("tuned" in problem) for problem in data["problems"]] == [True, False]
    assert data["summary"]["tuned"]["not_tuned"] == 1  # 2_Add, finished before --tune
    assert data["summary"]["fast_p_tuned"]["2.0"] == 1.0 and data["summary"]["fast_p_tuned"]["1.0"] == 1.0


def test_on_the_cpu_eval_tune_says_why_once_and_the_run_goes_on(tmp_path, capsys):
    out = tmp_path / "results.json"
    status = main_cli.main(["eval", str(PROBLEMS), "--candidates", str(CANDIDATES), "--problems", "1-2",
                            "--device", "cpu", "--trials", "1", "--tune", "--json", str(out)])
    captured = capsys.readouterr()
    assert status == 0, captured.err
    assert captured.err.count("tuning needs a GPU") == 1  # once per run, not per problem
    data = json.loads(out.read_text())
    assert all(problem["correct"] for problem in data["problems"])
    assert all("tuning needs a GPU" in problem["tuned"]["not_tuned"] for problem in data["problems"])
    assert data["summary"]["tuned"]["not_tuned"] == 2 and data["summary"]["fast_p_tuned"] is None
    assert "tuned: 0 kernels" in captured.out


def test_a_ray_worker_tunes_what_it_checked_and_sends_the_tuned_kernel_back(gpu_checks):
    """EvalWorker as plain Python: with "tune", its record carries the tuned figures and its outputs the tuned
    kernel, which the driver's archive keeps as a local run's does."""
    worker = EvalWorker({"device": "cpu", "trials": 1}, checks=gpu_checks)
    code = (PROBLEMS / "1_ReLU.py").read_text()
    given = [("good.py", (CANDIDATES / "1_ReLU" / "good.py").read_text())]
    try:
        record = worker.run({"name": "1_ReLU", "code": code, "given": given, "samples": None, "tune": True})
    finally:
        worker.close()
    assert record["result"]["tuned"]["kept"] == "relu_kernel BLOCK_SIZE 64 -> 128 (the grid's too)"
    tuned = [output for output in record["outputs"] if output.get("tuned")]
    assert len(tuned) == 1 and "BLOCK_SIZE=128" in tuned[0]["kernel"] and tuned[0]["file"] == "good.py"


def test_a_tuning_stopped_by_the_run_claims_nothing(stand_in_checks):
    """Variants cancelled mid-tune are not slower variants: the record says the tuning was stopped."""
    cancel = threading.Event()

    def check(reference_code, kernel, **options):
        if "BLOCK_SIZE=64)" not in kernel:  # a variant: the run is stopped while it is checked
            cancel.set()
        return on_a_gpu(10.0)

    engine = Engine(checks=stand_in_checks(check))
    problem = find_problems(PROBLEMS)[0]
    given = [("good.py", (CANDIDATES / "1_ReLU" / "good.py").read_text())]
    job = start_problem(problem, engine, CheckOptions(), threading.Event(), given=given)
    tuned = tune_best(problem.code, job.finished.result(), engine.checks, CheckOptions(), cancel)
    engine.close()
    assert tuned.record == {"candidate": "good.py", "not_tuned": STOPPED} and tuned.output is None


def test_the_command_line_shows_the_tuned_kernel_and_fast_p_both_ways(gpu_checks, tmp_path, capsys):
    status = main_cli.main(["eval", str(PROBLEMS), "--candidates", str(CANDIDATES), "--problems", "1-2", "--tune",
                            "--samples", "1"], checks=gpu_checks)
    captured = capsys.readouterr()
    assert status == 0, captured.err
    assert "tuned 5 ms (2x vs untuned)" in captured.err and "no launch variant faster" in captured.err
    assert "fast_p tuned  p=0 1.000  p=1.0 1.000  p=1.5 1.000  p=2.0 1.000" in captured.out
    assert "fast_p  p=0 1.000  p=1.0 1.000  p=1.5 0.500  p=2.0 0.500" in captured.out
    assert "tuned: 2 kernels, 1 faster (geomean 1.41x vs untuned), 0 not tuned" in captured.out


def test_with_scale_the_variants_are_checked_against_the_same_reduced_module(stand_in_checks, tmp_path):
    """eval --tune --scale F: the best kernel was checked at reduced sizes, so its variants are too, and their
    verdicts say so."""
    references = []

    def check(reference_code, kernel, **options):
        references.append(reference_code)
        return on_a_gpu(5.0 if "BLOCK_SIZE=128" in kernel else 10.0)

    out = tmp_path / "results.json"
    evaluate(find_problems(PROBLEMS)[:1], candidates_dir=CANDIDATES, out_path=out, checks=stand_in_checks(check),
             check=CheckOptions(scale=0.5), tune=True)
    [relu] = json.loads(out.read_text())["problems"]
    assert relu["tuned"]["kept"] == "relu_kernel BLOCK_SIZE 64 -> 128 (the grid's too)", relu["tuned"]
    assert len(set(references)) == 1 and "batch_size = 2" in references[0], references[0]  # 4 halved, every check
