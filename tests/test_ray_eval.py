"""`eval --ray` on a real Ray cluster started here: a head without CPUs and two worker nodes of one CPU each (Ray's
cluster_utils starts them as `ray start` does: a GCS, a raylet per node), so every problem is checked by a Ray worker
on a worker node, with its own judge and confined candidates, on the Triton interpreter. One cluster is shared by
the module (starting it costs about 10 s)."""

import copy
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import pytest

if os.environ.get("KERNELLLM_REQUIRE_RAY") != "1":  # CI sets it: there, a missing Ray fails instead of skipping
    pytest.importorskip("ray")
from ray.cluster_utils import Cluster  # noqa: E402

from repl.workflows.best_of import CheckOptions  # noqa: E402
from repl.checker import CheckResult  # noqa: E402
from repl.checker.sandbox import namespace_prefix  # noqa: E402
from repl.cli import main as main_cli  # noqa: E402
from repl.workflows.ray.worker import EvalWorker, WorkerStartError  # noqa: E402
from repl.workflows.eval_problems import find_problems  # noqa: E402
from repl.workflows.evaluate import evaluate  # noqa: E402
from repl.workflows.ray.driver import WorkerPlan, evaluate_on_ray, plan_workers  # noqa: E402

TESTS = Path(__file__).parent
REPO = TESTS.parent
SMALL_NODE = {"object_store_memory": 80 * 2**20}  # Ray's floor is 75 MiB; the default takes 30% of the memory
CHECK = CheckOptions(device="cpu", trials=1)
GOOD_RELU = (TESTS / "eval_candidates" / "1_ReLU" / "good.py").read_text()
# Waits in forward until a file exists: a check held for as long as a test needs (a sleep held it for a guessed time).
GATED_RELU = GOOD_RELU.replace("    def forward(self, x):\n", "    def forward(self, x):\n        import os, time\n"
                               "        while not os.path.exists({gate!r}):\n            time.sleep(0.05)\n")
# Where a gate a test opens mid-check goes: inside the project, which a candidate's sandbox shows (read-only, as it
# changes); its /tmp is its own.
GATES = REPO / ".pytest_cache" / "kernelllm-gates"


class RayTestCluster:
    def __init__(self, cluster: Cluster, nodes: list):
        self.cluster, self.nodes = cluster, nodes

    @property
    def address(self) -> str:
        return self.cluster.address

    def labels(self) -> set[str]:
        """How the run names the worker nodes (one host: its name and the start of each node's id)."""
        return {f"{os.uname().nodename}:{node.node_id[:6]}" for node in self.nodes}

    def remove(self, label: str) -> None:
        node = next(node for node in self.nodes if label.endswith(node.node_id[:6]))
        self.nodes.remove(node)
        self.cluster.remove_node(node)

    def free_cpus_return_to(self, cpus: int, timeout: float = 120) -> bool:
        """Whether the cluster's free CPUs come back to `cpus` (its workers all ended) within `timeout` seconds."""
        import ray

        ray.init(address=self.address, logging_level="ERROR")
        try:
            deadline = time.monotonic() + timeout
            while ray.available_resources().get("CPU", 0) < cpus:
                if time.monotonic() > deadline:
                    return False
                time.sleep(0.2)
            return True
        finally:
            ray.shutdown()

    def add_worker_nodes(self, count: int) -> None:
        """Start `count` worker nodes of one CPU (together) and wait until the cluster has them."""
        self.nodes += [self.cluster.add_node(num_cpus=1, wait=False, **SMALL_NODE) for _ in range(count)]
        self.cluster.wait_for_nodes(timeout=180)


@pytest.fixture(scope="module")
def ray_cluster():
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 0, "include_dashboard": False, **SMALL_NODE})
    try:
        yield RayTestCluster(cluster, [])
    finally:
        cluster.shutdown()


@pytest.fixture
def cluster(ray_cluster):
    """The shared cluster with two worker nodes (a test that removed one gets it back here)."""
    if len(ray_cluster.nodes) < 2:
        ray_cluster.add_worker_nodes(2 - len(ray_cluster.nodes))
    return ray_cluster


def problem_set(folder: Path, gated: dict[str, Path] | None = None, extra: dict[str, str] | None = None):
    """tests/eval_problems and their candidates, copied; `gated`: ReLU problems whose one candidate waits in forward
    until that file exists; `extra`: ReLU problems with the given candidate source."""
    problems, candidates = folder / "problems", folder / "candidates"
    shutil.copytree(TESTS / "eval_problems", problems)
    shutil.copytree(TESTS / "eval_candidates", candidates)
    sources = {name: GATED_RELU.format(gate=str(gate)) for name, gate in (gated or {}).items()} | (extra or {})
    for name, source in sources.items():
        shutil.copy(problems / "1_ReLU.py", problems / f"{name}.py")
        (candidates / name).mkdir()
        (candidates / name / "kernel.py").write_text(source)
    return problems, candidates


def probe_source(head: str) -> str:
    return (TESTS / "ray_cases" / "probes_cluster.py").read_text().replace("HEAD_ADDRESS", head)


# -- the same results as a local run -------------------------------------------------------------------------------

@pytest.mark.skipif(not namespace_prefix(), reason="no user namespaces on this machine: candidates are not confined")
def test_a_cluster_run_writes_the_file_a_local_run_writes(cluster, tmp_path):
    """tests/eval_problems' known-good and known-bad kernels, and a kernel that tries to reach the cluster from its
    sandbox on a worker: the file (verdicts, pass@k, summary) is the local run's, byte for byte once parsed."""
    source = probe_source(cluster.address)
    probe = {}
    exec(source.split("leaks = reached()")[0], probe)  # unconfined, the probe reaches the cluster: it can fail
    assert any("the head" in leak for leak in probe["reached"]()) and any("sockets" in leak for leak in
                                                                          probe["reached"]())
    problems, candidates = problem_set(tmp_path, extra={"4_ProbesCluster": source})
    seen = []
    on_ray = evaluate_on_ray(find_problems(problems), address=cluster.address, candidates_dir=candidates,
                             check=CHECK, out_path=tmp_path / "ray.json", on_progress=lambda p: seen.append(
                                 (p.workers, dict(p.by_node))))
    local = evaluate(find_problems(problems), candidates_dir=candidates, check=CheckOptions("cpu", trials=1, jobs=2),
                     out_path=tmp_path / "local.json")
    on_cluster = json.loads((tmp_path / "ray.json").read_text())
    assert without_messages(on_cluster) == without_messages(json.loads((tmp_path / "local.json").read_text()))
    verdicts = {p["name"]: [c["verdict"] for c in p["candidates"]] for p in on_cluster["problems"]}
    assert verdicts == {"1_ReLU": ["correct", "mismatch", "correct"], "2_Add": ["correct", "no_triton"],
                        "3_Sigmoid": [], "4_ProbesCluster": ["correct"]}  # the probe reached nothing
    assert on_ray.summary == local.summary and on_ray.totals == local.totals and not on_ray.interrupted
    assert on_ray.summary["pass_at"] == pytest.approx({"1": (2 / 3 + 1 / 2 + 0 + 1) / 4})  # k up to the least n
    # Progress: both workers came up, and the problems done are counted per node, on the cluster's worker nodes.
    assert max(workers for workers, _ in seen) == 2
    assert sum(on_ray.by_node.values()) == 4 and set(on_ray.by_node) <= cluster.labels()
    assert seen[-1][1] == on_ray.by_node
    # The local run's file, resumed on the cluster: nothing left to do, nothing changed.
    again = evaluate_on_ray(find_problems(problems), address=cluster.address, candidates_dir=candidates,
                            check=CHECK, out_path=tmp_path / "local.json")
    assert again.skipped == sorted(verdicts) and again.summary == local.summary and not again.by_node
    assert without_messages(json.loads((tmp_path / "local.json").read_text())) == without_messages(on_cluster)



def test_a_cluster_run_checks_at_the_scale_asked_and_keeps_its_run_record(cluster, tmp_path):
    """--scale reaches the workers' checks (the verdict says the reduced sizes, as a local run's does), and the
    results file keeps how the run was made, so that a resume at another scale is refused as a local one is."""
    problems, candidates = problem_set(tmp_path)
    evaluate_on_ray([problem for problem in find_problems(problems) if problem.name == "1_ReLU"],
                    address=cluster.address, candidates_dir=candidates, check=CheckOptions("cpu", trials=1, scale=0.5),
                    out_path=tmp_path / "ray.json", run_record={"scale": 0.5})
    written = json.loads((tmp_path / "ray.json").read_text())
    messages = [candidate["message"] for candidate in written["problems"][0]["candidates"]]
    assert messages and all(message.startswith("at reduced sizes (--scale 0.5: batch_size 4 → 2, dim 50 → 25)")
                            for message in messages), messages
    assert written["run"]["scale"] == 0.5

def without_messages(results: dict) -> dict:
    """A results file less its candidates' messages, which name figures of each check's random inputs ("94 of 200
    elements differ"), and less its run's date (to the minute: two runs a few seconds apart can fall either side)."""
    results = copy.deepcopy(results)
    for problem in results["problems"]:
        for candidate in problem["candidates"]:
            assert isinstance(candidate.pop("message"), str)
    if isinstance(results.get("run"), dict):
        assert isinstance(results["run"].pop("date"), str)
    return results


# -- generation on the workers -------------------------------------------------------------------------------------

def test_each_worker_loads_the_model_and_samples_its_problems(cluster, trained_model_dir, tmp_path, monkeypatch):
    """No --candidates: the one worker loads the tiny trained model (it answers every module with a ReLU kernel)
    and samples each problem's candidate there; its checks are the ones a local run makes, and what it sampled is
    kept here as a local run keeps it (kernels beside the results, the session log)."""
    monkeypatch.setenv("KERNELLLM_HOME", str(tmp_path / "home"))
    problems = tmp_path / "problems"
    problems.mkdir()
    for name in ("1_ReLU", "2_Add"):
        shutil.copy(TESTS / "eval_problems" / f"{name}.py", problems)
    out = tmp_path / "results.json"
    status = main_cli.main(["eval", str(problems), "--model", str(trained_model_dir), "--device", "cpu",
                            "--temperature", "0", "--max-new-tokens", "600", "--trials", "1", "--json", str(out),
                            "--ray", cluster.address, "--workers", "1"])
    assert status == 0
    data = json.loads(out.read_text())
    candidates = {p["name"]: p["candidates"] for p in data["problems"]}
    (relu,) = candidates["1_ReLU"]
    assert {key: relu[key] for key in ("file", "verdict", "kernel_ms", "flagged", "work", "finish_reason")} == {
        "file": "sample_1", "verdict": "correct", "kernel_ms": None, "flagged": None, "work": "Triton kernels only",
        "finish_reason": "stop"}
    assert [c["verdict"] for c in candidates["2_Add"]] != ["correct"]  # a ReLU kernel is no answer to an add
    assert "class ModelNew" in (tmp_path / relu["kernel_file"]).read_text()
    assert json.loads((tmp_path / relu["check_file"]).read_text())["message"] == relu["message"]
    from repl.log.session_log import SessionLog

    with SessionLog.open(tmp_path / "home" / "session_log.db", enabled=True) as log:
        assert sorted(entry.source_name for entry in log.recent(None)) == ["1_ReLU", "2_Add"]  # as they ended


def test_eval_tune_on_the_cluster_logs_the_kept_variant_right_after_its_original(cluster, tmp_path, monkeypatch,
                                                                                capsys):
    """--tune with samples from a server: the worker (its judges stand-ins timed as on a GPU, shipped to it with this
    package) tunes the sampled kernel and sends the kept variant back; the driver logs it as :tune logs one, a tuned
    variant of the sampled kernel's entry, right after that entry."""
    import ray

    import gpu_stand_in
    from repl.log.session_log import SessionLog
    from repl.workflows.ray import driver, worker
    from test_server_backend import ScriptedServer

    monkeypatch.setenv("KERNELLLM_HOME", str(tmp_path / "home"))
    monkeypatch.setattr(worker, "EvalWorker", gpu_stand_in.StandInGpuWorker)  # the class the driver starts
    problems = tmp_path / "problems"
    problems.mkdir()
    shutil.copy(TESTS / "eval_problems" / "1_ReLU.py", problems)
    server = ScriptedServer(reply=f"```python\n{GOOD_RELU}```\n")
    shipped = [str(driver.PACKAGE_DIR), str(TESTS / "stand_in_checker.py"), str(TESTS / "gpu_stand_in.py")]
    ray.init(address=cluster.address, logging_level="ERROR", log_to_driver=False,
             runtime_env={"py_modules": shipped, "excludes": ["__pycache__", "*.pyc"]})
    try:
        status = main_cli.main(["eval", str(problems), "--server", server.url, "--samples", "1", "--tune",
                                "--device", "cpu", "--trials", "1", "--json", str(tmp_path / "results.json"),
                                "--ray", cluster.address, "--workers", "1"])
    finally:
        ray.shutdown()
        server.shutdown()
        server.server_close()
    assert status == 0, capsys.readouterr().err
    assert json.loads((tmp_path / "results.json").read_text())["problems"][0]["tuned"]["kept"] == (
        "relu_kernel BLOCK_SIZE 64 -> 128 (the grid's too)")
    with SessionLog.open(tmp_path / "home" / "session_log.db", enabled=True) as log:
        original, tuned = log.recent(None)
    assert original.tuning is None and original.verdict == "correct" and "BLOCK_SIZE=64)" in original.kernel
    assert tuned.tuning["from_reply"] == original.id
    assert tuned.tuning["variant"] == "relu_kernel BLOCK_SIZE 64 -> 128 (the grid's too)"
    assert "BLOCK_SIZE=128)" in tuned.kernel and tuned.check["kernel_ms"] == 5.0 and tuned.model == original.model


# -- failures ------------------------------------------------------------------------------------------------------

def test_ctrl_c_keeps_what_finished_and_a_local_rerun_does_the_rest(cluster, tmp_path):
    """Ctrl-C (SIGINT to the command's process group, as a terminal sends it) once 1_ReLU is written: exit 130, the
    finished problems are in the file, the slow one is not; the same command without --ray resumes it locally."""
    # 9_SlowReLU's forward waits for a file never made, within a time limit of 600 s: it cannot end before the Ctrl-C,
    # nor after it unless its check is left to run, which the run would then wait 600 s for (CANCEL_WAIT_S, 30 s in
    # the product), far past communicate()'s 120 s.
    problems, candidates = problem_set(tmp_path, gated={"9_SlowReLU": tmp_path / "never-made"})
    for name in ("2_Add", "3_Sigmoid"):
        (problems / f"{name}.py").unlink()
    out = tmp_path / "results.json"
    waits_long_for_checks_in_flight = (
        "import sys; from repl.workflows.ray import driver as ray_eval; ray_eval.CANCEL_WAIT_S = 600.0; "
        "from repl.cli.main import main; sys.exit(main(['eval', *sys.argv[1:]]))")
    command = [sys.executable, "-c", waits_long_for_checks_in_flight, str(problems), "--candidates", str(candidates),
               "--device", "cpu", "--trials", "1", "--json", str(out)]
    run = subprocess.Popen(command + ["--ray", cluster.address, "--timeout", "600"], cwd=REPO, stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, text=True, start_new_session=True)
    lines = []
    try:
        for line in run.stderr:  # the line printed as each problem finishes
            lines.append(line)
            if "1_ReLU  2/3 correct" in line:
                os.killpg(run.pid, signal.SIGINT)
                break
        _, rest = run.communicate(timeout=120)
    finally:
        if run.poll() is None:
            run.kill()
    stderr = "".join(lines) + rest
    assert run.returncode == 130, stderr
    assert "Interrupted: the finished problems are kept" in stderr
    written = [p["name"] for p in json.loads(out.read_text())["problems"]]
    assert written == ["1_ReLU"]  # 9_SlowReLU's check was stopped
    assert cluster.free_cpus_return_to(2)  # the run's workers ended with it
    (candidates / "9_SlowReLU" / "kernel.py").write_text(GOOD_RELU)
    resumed = evaluate(find_problems(problems), candidates_dir=candidates, check=CHECK, out_path=out)
    assert resumed.skipped == written and not resumed.interrupted
    assert {r.name: [c["verdict"] for c in r.candidates] for r in resumed.results}["9_SlowReLU"] == ["correct"]
    assert resumed.summary["problems"] == 2


def test_a_problem_that_tries_to_kill_its_worker_cannot_and_the_run_completes(cluster, tmp_path):
    """Its reference signals the judge's parent, the Ray worker: the judge is confined (its own PID namespace), so
    the worker is out of its reach; its kernels get the verdicts they get for the ReLU it is, nothing is left unfinished and no worker is lost.
    (Before the judge was confined, such a problem killed its worker every time and was left for a rerun.)"""
    problems, candidates = problem_set(tmp_path)
    for name in ("2_Add", "3_Sigmoid"):
        (problems / f"{name}.py").unlink()
    (problems / "5_KillsItsWorker.py").write_text(
        "import os, signal\nos.kill(os.getppid(), signal.SIGKILL)  # the judge's parent: the Ray worker\n"
        + (problems / "1_ReLU.py").read_text())
    shutil.copytree(candidates / "1_ReLU", candidates / "5_KillsItsWorker")
    report = evaluate_on_ray(find_problems(problems), address=cluster.address, candidates_dir=candidates,
                             check=CHECK, out_path=tmp_path / "r.json")
    assert not report.unfinished and not report.interrupted
    assert sorted(r.name for r in report.results) == ["1_ReLU", "5_KillsItsWorker"]
    relu, killer = sorted(report.results, key=lambda result: result.name)
    assert (killer.correct, killer.compiled) == (relu.correct, relu.compiled)  # the same kernels, the same verdicts


# The last test on the cluster: a test after it would wait for a node to be started again.
def test_a_node_lost_mid_problem_has_its_problem_redone_elsewhere(cluster, tmp_path):
    """The node whose worker is checking 4_SlowReLU is removed (its raylet and workers killed): the problem is
    checked again on the other node, the run completes, and nothing else is redone."""
    # 4_SlowReLU's forward waits for a gate opened only once the run has given up on the lost worker: the first
    # check cannot end before its node is gone, nor after (a worker outliving its raylet could still answer); its
    # time limit of 600 s does not end it first either, however late the loss is noticed.
    gate = GATES / f"{uuid.uuid4().hex}"
    GATES.mkdir(parents=True, exist_ok=True)
    problems, candidates = problem_set(tmp_path, gated={"4_SlowReLU": gate})
    for name in ("1_ReLU", "2_Add", "3_Sigmoid"):
        (problems / f"{name}.py").unlink()
    nodes, removed, events = cluster.labels(), [], []

    def remove_its_node(progress) -> None:
        if progress.event:
            events.append(progress.event)
            if progress.event.startswith("4_SlowReLU is tried again"):
                gate.touch()
        if "4_SlowReLU" in progress.running and not removed:
            removed.append(progress.running["4_SlowReLU"])
            threading.Thread(target=cluster.remove, args=(removed[0],)).start()

    try:
        report = evaluate_on_ray(find_problems(problems), address=cluster.address, candidates_dir=candidates,
                                 check=CheckOptions(device="cpu", trials=1, timeout=600), on_progress=remove_its_node)
    finally:
        gate.unlink(missing_ok=True)
    assert removed and not report.interrupted and not report.unfinished and report.retried == ["4_SlowReLU"]
    assert [c["verdict"] for c in report.results[0].candidates] == ["correct"]
    assert report.by_node == {(nodes - set(removed)).pop(): 1}  # finished on the other node
    assert any(f"worker on {removed[0]} was lost" in event for event in events)
    assert "4_SlowReLU is tried again (attempt 2 of 3)" in events


# -- arguments -----------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("arguments, message, status", [
    (["--workers", "2"], "--workers needs --ray", 2),
    (["--ray", "--jobs", "2"], "with --ray, --workers N sets how many workers check at once", 2),
    (["--ray", "127.0.0.1:1"], "nothing answers at 127.0.0.1:1", 1),
])
def test_bad_cluster_arguments_get_one_line(arguments, message, status, capsys):
    arguments = ["eval", str(TESTS / "eval_problems"), "--candidates", str(TESTS / "eval_candidates"), *arguments]
    assert main_cli.main(arguments) == status
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err


# -- without a cluster ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("resources, device, workers, expected", [
    ({"CPU": 64, "GPU": 8}, "auto", None, WorkerPlan("cuda", 8, num_cpus=1, num_gpus=1)),
    ({"CPU": 64, "GPU": 8}, "cuda", 3, WorkerPlan("cuda", 3, num_cpus=1, num_gpus=1)),
    ({"CPU": 64, "GPU": 8}, "cpu", None, WorkerPlan("cpu", 64, num_cpus=1, num_gpus=0)),
    ({"CPU": 2.0}, "auto", None, WorkerPlan("cpu", 2, num_cpus=1, num_gpus=0)),
    ({"CPU": 2.0}, "cpu", 5, WorkerPlan("cpu", 5, num_cpus=1, num_gpus=0)),  # 3 wait for CPUs (an autoscaler)
])
def test_a_worker_per_gpu_else_per_cpu(resources, device, workers, expected):
    assert plan_workers(resources, device, workers) == expected


@pytest.mark.parametrize("resources, device, message", [
    ({"CPU": 8}, "cuda", "the Ray cluster has no GPUs"),
    ({"CPU": 8, "GPU": 2}, "cuda:1", "use --device cuda"),
    ({"CPU": 0}, "cpu", "no CPU for a worker"),
])
def test_a_device_the_cluster_cannot_give_is_refused(resources, device, message):
    with pytest.raises(ValueError, match=message):
        plan_workers(resources, device, None)


def test_a_worker_checks_a_problem_as_a_local_run_does_and_cancel_stops_it(stand_in_checks):
    """EvalWorker as plain Python (a stand-in checker): the record it returns is the results file's, and a problem
    stopped by cancel() comes back as None (not recorded)."""
    release, started = threading.Event(), threading.Event()

    def check(reference_code, reply_text, *, cancel=None, **options):
        if "slow" in reply_text:
            started.set()
            release.wait(30)
            return CheckResult(verdict="cancelled" if cancel.is_set() else "correct")
        return CheckResult(verdict="correct" if "tl.maximum" in reply_text else "mismatch")

    worker = EvalWorker({"device": "cpu", "trials": 1}, checks=stand_in_checks(check))
    assert worker.ready()["pid"] == os.getpid()
    code = (TESTS / "eval_problems" / "1_ReLU.py").read_text()
    given = [(name, (TESTS / "eval_candidates" / "1_ReLU" / name).read_text()) for name in ("good.py", "identity.py")]
    record = worker.run({"name": "1_ReLU", "code": code, "given": given, "samples": None})
    assert {key: record[key] for key in ("result", "note")} == {
        "result": {"name": "1_ReLU", "n": 2, "compiled": 2, "correct": 1, "pass_at": {"1": 0.5, "2": 1.0},
                   "best": {"candidate": "good.py", "kernel_ms": None, "speedup_vs_eager": None, "flagged": None},
                   "too_large": None, "not_judged": 0,
                   "candidates": [{"file": "good.py", "verdict": "correct", "message": "", "kernel_ms": None,
                                   "flagged": None},
                                  {"file": "identity.py", "verdict": "mismatch", "message": "", "kernel_ms": None,
                                   "flagged": None}]},
        "note": None}
    # What the driver keeps of each candidate (its EvalArchive): a given file has no reply; its whole check.
    assert [(output["file"], output["reply"], output["check"]["verdict"]) for output in record["outputs"]] == [
        ("good.py", None, "correct"), ("identity.py", None, "mismatch")]
    answer = []
    runner = threading.Thread(target=lambda: answer.append(
        worker.run({"name": "1_ReLU", "code": code, "given": [("slow.py", "# slow ModelNew")], "samples": None})))
    runner.start()
    assert started.wait(30)
    worker.cancel()
    release.set()
    runner.join(30)
    assert answer == [None]
    worker.close()


def test_a_worker_that_cannot_work_says_why_in_one_line():
    worker = EvalWorker({"device": "tpu", "trials": 1})
    with pytest.raises(WorkerStartError, match=r"cannot start: device must be auto, cpu, cuda or cuda:N") as error:
        worker.ready()
    assert "\n" not in str(error.value)


def test_a_worker_samples_through_the_server_with_the_key_it_was_given(stand_in_checks):
    """--server on a cluster: every worker makes its own client from the spec the driver sends (URL, model, key,
    sampling settings) and samples each of its problems there; a real HTTP server here, the checker a stand-in."""
    from test_server_backend import ScriptedServer

    checks = stand_in_checks(lambda reference_code, reply_text, **options: CheckResult(verdict="mismatch"))
    server = ScriptedServer()
    try:
        worker = EvalWorker({"device": "cpu", "trials": 1},
                            {"server": server.url, "server_model": None, "api_key": "secret-key",
                             "settings": {"temperature": 1.0, "top_p": 0.97, "max_new_tokens": 64, "seed": 5}},
                            checks=checks)
        worker.ready()
        code = (TESTS / "eval_problems" / "2_Add.py").read_text()
        record = worker.run({"name": "2_Add", "code": code, "given": None, "samples": 2})
        worker.close()
    finally:
        server.shutdown()
        server.server_close()
    assert [c["file"] for c in record["result"]["candidates"]] == ["sample_1", "sample_2"]
    assert [(r["model"], r["n"], r["seed"], r["max_tokens"]) for r in server.requests] == [("kernelllm", 2, 5, 64)]
    assert "return a + b" in server.requests[0]["prompt"] and server.authorizations == ["Bearer secret-key"]


def test_without_ray_installed_the_run_says_how_to_install_it(monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "ray", None)  # `import ray` raises ImportError, as where it is not installed
    arguments = ["eval", str(TESTS / "eval_problems"), "--candidates", str(TESTS / "eval_candidates"), "--ray"]
    assert main_cli.main(arguments) == 1
    assert "eval: error: --ray needs Ray: pip install -r requirements-ray.txt" in capsys.readouterr().err


def test_the_progress_bar_counts_problems_per_node_the_busiest_first():
    from repl.cli.eval_ray import status_line
    from repl.workflows.ray.driver import ClusterProgress

    progress = ClusterProgress(problems_total=20, workers=7, workers_wanted=8, running={"9_X": "gpu-a"})
    assert status_line(progress) == "7/8 workers  1 running"
    progress.by_node = {"gpu-a": 3, "gpu-b": 5, "gpu-c": 1, "gpu-d": 2, "gpu-e": 2}
    assert status_line(progress) == "7/8 workers  gpu-b 5 · gpu-a 3 · gpu-d 2 · 2 more nodes 3"
