"""`eval --ray [ADDRESS]`: the evaluation of repl/workflows/evaluate.py spread over a Ray cluster (docs/ray.md).

The driver (this process) reads the problems and the candidate files, keeps the results file, and hands problems to
workers: Ray actors (repl/workflows/ray/worker.py), one per GPU of the cluster, or one per CPU when the checks run on the
Triton interpreter. A worker keeps its judge, its confined candidates and its model (or server client) warm for the
run and takes a few problems at a time, so a worker is never idle between two of them. Each finished problem comes
back as the results file's record and is written as the local loop writes it: same file, same summary, resumable by
either path.

Failures: a worker lost mid-problem (its process, or its whole node) fails the calls in flight with a Ray actor
error; those problems go back to the front of the queue and a new worker is asked for, which Ray places wherever
resources are free. A problem whose worker was lost MAX_ATTEMPTS times is left for a rerun. An error raised by the
work itself (a generation that failed, a check that could not run) stops the run, as it does locally. Ctrl-C (or
`cancel`) stops every worker's generation and checks, keeps the problems whose checks had all ended, and ends the
workers.

Ray is optional (requirements-ray.txt) and imported only here, only when called.
"""

import math
import os
import socket
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from repl.workflows.best_of import CheckOptions
from repl.core.errors import one_line
from repl.workflows.eval_problems import Problem, read_candidates
from repl.workflows.eval_results import ProblemResult, resumed_results, write_results
from repl.workflows.evaluate import EvalProgress, EvalReport, _wait_uninterrupted, final_report
from repl.workflows.eval_tune import NO_GPU_LINE, untuned_for_want_of_a_gpu
from repl.core.wording import counted

PACKAGE_DIR = Path(__file__).resolve().parents[2]  # shipped to the workers: their hosts need Python's packages, not this
PROBLEMS_PER_WORKER = 2  # in flight per worker: one checking while the next waits or generates
CPUS_PER_WORKER = 1  # a CPU worker: one check at a time (the candidate's interpreter is the busy process)
SPARES_PER_WORKER = 1  # candidates started ahead of need per worker (the host's default would multiply per worker)
MAX_ATTEMPTS = 3  # a problem whose worker was lost this many times is left unfinished, for a rerun
CANCEL_WAIT_S = 30.0  # after Ctrl-C, how long the problems in flight get to end (cancelled work ends in about 1 s)
WORKER_WAIT_S = 900.0  # with work left, how long the run waits with no worker ready (model downloads, autoscaling)
POLL_S = 0.5
CONNECT_PROBE_S = 5.0


class ClusterUnavailable(Exception):
    """Ray is not installed, or the cluster cannot be reached or used; the message is one line."""


@dataclass
class ClusterProgress(EvalProgress):
    """EvalProgress, plus where the work runs."""

    workers: int = 0  # workers ready to take problems
    workers_wanted: int = 0
    by_node: dict[str, int] = field(default_factory=dict)  # problems finished by each node in this run
    running: dict[str, str] = field(default_factory=dict)  # problem -> node, in flight


@dataclass
class ClusterReport(EvalReport):
    by_node: dict[str, int] = field(default_factory=dict)
    retried: list[str] = field(default_factory=list)  # problems redone after their worker was lost


@dataclass
class WorkerPlan:
    """What every worker asks of Ray, and how many there are."""

    device: str  # the check's (and a local model's) device on the worker: "cpu" or "cuda"
    workers: int
    num_cpus: float
    num_gpus: float


def plan_workers(resources: dict, device: str, workers: int | None) -> WorkerPlan:
    """Workers for the cluster's resources (ray.cluster_resources()): one per GPU when there are GPUs and the device
    is auto or cuda, else one per CPUS_PER_WORKER CPUs; `workers` sets the number instead (those beyond the free
    resources wait for them: an autoscaling cluster adds nodes). ValueError (one line) when the device cannot be
    had."""
    if device.startswith("cuda:"):
        raise ValueError(f"--device {device} names a GPU of this machine; with --ray every worker gets one GPU from "
                         "Ray: use --device cuda (or auto)")
    gpus, cpus = int(resources.get("GPU", 0)), int(resources.get("CPU", 0))
    if device == "cuda" and gpus == 0:
        raise ValueError("--device cuda: the Ray cluster has no GPUs")
    if device in ("auto", "cuda") and gpus:
        return WorkerPlan("cuda", workers or gpus, num_cpus=1, num_gpus=1)
    if cpus < CPUS_PER_WORKER and not workers:
        raise ValueError("the Ray cluster has no CPU for a worker")
    return WorkerPlan("cpu", workers or cpus // CPUS_PER_WORKER, num_cpus=CPUS_PER_WORKER, num_gpus=0)


def connect(address: str | None, *, debug: bool = False) -> bool:
    """ray.init: the cluster at `address` (HOST:PORT, auto, ray://HOST:PORT), or without one $RAY_ADDRESS or else a
    new local cluster. This package is shipped to the workers. True when this call connected (and the caller must
    disconnect); False when the process was connected already (then its own runtime_env must give the workers this
    package). ClusterUnavailable when it cannot."""
    try:
        import ray
    except ImportError:
        raise ClusterUnavailable("--ray needs Ray: pip install -r requirements-ray.txt") from None
    if ray.is_initialized():
        return False
    import logging

    unanswered = _unanswered(address)
    if unanswered:
        raise ClusterUnavailable(unanswered)
    runtime_env = {"py_modules": [str(PACKAGE_DIR)], "excludes": ["__pycache__", "*.pyc"]}
    options = {}
    if not debug:  # Ray's own INFO lines and its workers' output would scroll through the progress display
        options = {"logging_level": logging.ERROR, "log_to_driver": False}
    if not address and not os.environ.get("RAY_ADDRESS"):  # a new local cluster: no dashboard to start
        options["include_dashboard"] = False
    try:
        ray.init(address=address or None, runtime_env=runtime_env, **options)
    except Exception as error:  # ConnectionError, ValueError for a bad address, RuntimeError ...
        where = f"at {address}" if address else "(a local one)"
        raise ClusterUnavailable(f"could not start or reach the Ray cluster {where}: {one_line(error)}") from None
    return True


def _unanswered(address: str | None) -> str | None:
    """Why nothing can be reached at a HOST:PORT address, or None (other forms are left to Ray). Ray itself would
    retry an address where nothing listens for minutes."""
    host, colon, port = (address or "").rpartition(":")
    if "://" in (address or "") or not colon or not port.isdigit():
        return None
    try:
        socket.create_connection((host.strip("[]") or "127.0.0.1", int(port)), timeout=CONNECT_PROBE_S).close()
    except OSError as error:
        return (f"nothing answers at {address} ({error.strerror or one_line(error)}): start the cluster's head "
                "with `ray start --head` and give the address it prints")
    return None


@dataclass(eq=False)
class _Worker:
    handle: object
    ready_ref: object  # ready()'s result: where it runs
    node: str | None = None  # a label for people; None until ready
    in_flight: int = 0
    alive: bool = True


def evaluate_on_ray(problems: list[Problem], *, address: str | None = None, candidates_dir=None,
                    samples: int | None = None, generation: dict | None = None, check: CheckOptions | None = None,
                    out_path=None, cancel: threading.Event | None = None, workers: int | None = None,
                    concurrency: int | None = None, on_progress: Callable[[ClusterProgress], None] | None = None,
                    debug: bool = False, archive=None, tune: bool = False,
                    run_record: dict | None = None) -> ClusterReport:
    """repl.workflows.evaluate.evaluate on a Ray cluster: candidates from `candidates_dir` (read here, sent to the workers), or
    `samples` per problem generated by the workers as `generation` says (eval_worker.EvalWorker). check: how to check
    (its jobs are not used: each worker checks one kernel at a time); `workers`: how many (default: as the cluster's
    resources allow); `concurrency`: generation requests in flight across the cluster (default: PROBLEMS_PER_WORKER
    problems per worker); `archive` (an EvalArchive) keeps what the workers send back of each candidate, as a local
    run does; `tune`: each problem's best kernel tuned on its worker (eval --tune); `run_record`: how the run was made,
    kept in the results file as a local run keeps it. Raises ClusterUnavailable,
    ResultsFileError, ValueError (a device the cluster cannot give), WorkerStartError, or the first error that
    stopped the work."""
    if (generation is None) == (candidates_dir is None):
        raise ValueError("evaluate_on_ray needs either a generation spec or a candidates folder")
    check = check or CheckOptions()
    results = resumed_results(out_path)  # a results file that is not ours is refused before the cluster starts
    owns_connection = connect(address, debug=debug)
    try:
        import ray

        plan = plan_workers(ray.cluster_resources(), check.device, workers)
        run = _ClusterRun(ray, plan, problems, results, candidates_dir=candidates_dir, samples=samples,
                          generation=generation, check=check, out_path=out_path, cancel=cancel or threading.Event(),
                          concurrency=concurrency, on_progress=on_progress or (lambda progress: None),
                          archive=archive, tune=tune, run_record=run_record)
        return run.run()
    finally:
        if owns_connection:
            import ray

            ray.shutdown()


class _ClusterRun:
    def __init__(self, ray, plan: WorkerPlan, problems: list[Problem], results: dict[str, ProblemResult], *,
                 candidates_dir, samples, generation, check: CheckOptions, out_path, cancel: threading.Event,
                 concurrency, on_progress, archive=None, tune: bool = False, run_record: dict | None = None):
        self.ray, self.plan, self.problems, self.results = ray, plan, problems, results
        self.run_record = run_record
        self.archive = archive
        self.tune, self.said_no_gpu = tune, False
        self.candidates_dir, self.samples, self.generation = candidates_dir, samples, generation
        self.out_path, self.cancel, self.report = out_path, cancel, on_progress
        self.skipped = [problem.name for problem in problems if problem.name in results]
        self.queue = deque(problem for problem in problems if problem.name not in results)
        self.per_worker = max(PROBLEMS_PER_WORKER,
                              math.ceil((concurrency or 0) / max(samples or 1, 1) / max(plan.workers, 1)))
        self.worker_check = {"device": plan.device, "trials": check.trials, "atol": check.atol, "rtol": check.rtol,
                             "timeout": check.timeout, "scale": check.scale, "jobs": 1, "spares": SPARES_PER_WORKER}
        self.worker_class = None  # EvalWorker as a Ray actor class, made once
        self.workers: list[_Worker] = []
        self.tasks: dict = {}  # object ref -> (worker, problem)
        self.attempts: dict[str, int] = {}
        self.retried: list[str] = []
        self.unfinished: dict[str, str] = {}
        self.losses = 0
        self.unwritten = False
        self.last_ready = time.monotonic()
        self.node_labels: dict[str, str] = {}
        self.progress = ClusterProgress(problems_total=len(problems), problems_done=len(self.skipped),
                                        resumed=len(self.skipped), workers_wanted=plan.workers)

    # -- the run -------------------------------------------------------------------------------------------------
    def run(self) -> ClusterReport:
        self.report(self.progress)
        interrupted = False
        try:
            for _ in range(self.plan.workers if self.queue else 0):  # a finished file needs no worker
                self._start_worker()
            while self.queue or self.tasks:
                if self.cancel.is_set():
                    raise KeyboardInterrupt
                self._dispatch()
                self._harvest(POLL_S)
                self._write_if_needed()
                self._check_stalled()
        except KeyboardInterrupt:
            # Ctrl-C: stop generation and checks everywhere; problems whose checks had all ended are still recorded.
            interrupted = True
            self._stop()
            _wait_uninterrupted(self._drain)
        except BaseException:
            self._stop()
            raise
        finally:
            self._write_if_needed()
            self._end_workers()
        # Problems left unfinished after losing their workers are reported as such, not as an interruption.
        report = final_report([problem for problem in self.problems if problem.name not in self.unfinished],
                              self.results, self.skipped, interrupted)
        return ClusterReport(**{**report.__dict__, "unfinished": self.unfinished}, by_node=dict(self.progress.by_node),
                             retried=self.retried)

    def _start_worker(self) -> None:
        if self.worker_class is None:
            from repl.workflows.ray.worker import EvalWorker

            # Not restarted by Ray: a lost worker's problems are put back in the queue here, and a new worker asked
            # for, which Ray places wherever resources are free.
            self.worker_class = self.ray.remote(EvalWorker).options(
                num_cpus=self.plan.num_cpus, num_gpus=self.plan.num_gpus, max_restarts=0,
                max_concurrency=self.per_worker + 2,  # its problems, and cancel() or close() while they run
                scheduling_strategy="SPREAD")
        handle = self.worker_class.remote(self.worker_check, self.generation)
        self.workers.append(_Worker(handle, handle.ready.remote()))

    def _dispatch(self) -> None:
        """Give each ready worker problems up to per_worker in flight, the least busy first. A busy worker gets one
        more only while the queue holds enough for the workers still starting: the first worker up must not take
        the problems that the next ones, seconds later, would have checked at the same time."""
        while self.queue:
            ready = [worker for worker in self.workers if worker.alive and worker.node is not None
                     and worker.in_flight < self.per_worker]
            if not ready:
                return
            worker = min(ready, key=lambda worker: worker.in_flight)
            starting = sum(1 for worker in self.workers if worker.alive and worker.node is None)
            if worker.in_flight and len(self.queue) <= starting * self.per_worker:
                return
            problem = self.queue.popleft()
            given = (read_candidates(self.candidates_dir, problem.name, self.samples)
                     if self.candidates_dir is not None else None)
            payload = {"name": problem.name, "code": problem.code, "given": given, "samples": self.samples,
                       "tune": self.tune}
            self.tasks[worker.handle.run.remote(payload)] = (worker, problem)
            worker.in_flight += 1
            self.progress.running[problem.name] = worker.node
            self.progress.current = problem.name
            self.report(self.progress)

    def _harvest(self, timeout: float) -> None:
        """Wait up to `timeout` for a worker to be ready or a problem to end, then take everything that has."""
        pending = [worker.ready_ref for worker in self.workers if worker.alive and worker.node is None]
        refs = list(self.tasks) + pending
        if not refs:  # nothing to wait for: _check_stalled decides
            return
        done, _ = self.ray.wait(refs, num_returns=1, timeout=timeout)
        if done:  # and whatever else has ended by now, so that one write records them all
            done, _ = self.ray.wait(refs, num_returns=len(refs), timeout=0)
        for ref in done:
            if ref in self.tasks:
                self._problem_ended(ref)
            else:
                self._worker_ready(next(worker for worker in self.workers if worker.ready_ref is ref))

    def _worker_ready(self, worker: _Worker) -> None:
        from repl.workflows.ray.worker import WorkerStartError

        exceptions = self.ray.exceptions
        try:
            where = self.ray.get(worker.ready_ref)
        except exceptions.RayActorError as error:
            if not getattr(error, "actor_init_failed", False):
                self._worker_lost(worker, error)
                return
            # The worker's class could not even be built there (this package or torch missing on that host, ...):
            # the last line of Ray's message is the exception.
            lines = [line.strip() for line in str(error).splitlines() if line.strip()]
            raise WorkerStartError(f"a Ray worker could not start: {lines[-1] if lines else error!r}") from None
        except self._lost_errors() as error:
            self._worker_lost(worker, error)
            return
        except exceptions.RayTaskError as error:
            cause = _cause(error)
            if isinstance(cause, WorkerStartError):
                raise cause from None
            raise WorkerStartError(f"a Ray worker could not start: {one_line(cause, with_type=True)}") from None
        except exceptions.RayError as error:  # RuntimeEnvSetupError: this package could not be set up there
            raise WorkerStartError(f"a Ray worker could not start: {one_line(error, with_type=True)}") from None
        worker.node = self._label(where)
        self.last_ready = time.monotonic()
        self.progress.workers = sum(1 for w in self.workers if w.alive and w.node is not None)
        self.report(self.progress)

    def _problem_ended(self, ref) -> None:
        worker, problem = self.tasks.pop(ref)
        worker.in_flight -= 1
        self.progress.running.pop(problem.name, None)
        try:
            value = self.ray.get(ref)
        except self._lost_errors() as error:
            self._worker_lost(worker, error, problem)
            return
        except self.ray.exceptions.RayTaskError as error:
            raise _cause(error) from None
        self.last_ready = time.monotonic()
        if value is None:
            return  # cancelled mid-problem: not recorded, a rerun does it again
        result = ProblemResult.from_json_dict(value["result"])
        result.note = value["note"]
        if untuned_for_want_of_a_gpu(result) and not self.said_no_gpu:
            self.said_no_gpu = True
            self._event(NO_GPU_LINE)
        if self.archive is not None:
            self.archive.keep(problem, result, value.get("outputs", []))
        self.results[problem.name] = result
        self.unwritten = True
        progress = self.progress
        progress.problems_done += 1
        progress.candidates_checked += result.n
        progress.by_node[worker.node] = progress.by_node.get(worker.node, 0) + 1
        progress.finished = result
        self.report(progress)
        progress.finished = None

    def _worker_lost(self, worker: _Worker, error: BaseException, problem: Problem | None = None) -> None:
        """A worker died (its process or its node): its problems go back to the queue, a new worker is asked for."""
        if worker.alive:
            worker.alive = False
            self.losses += 1
            self._kill(worker)
            where = f" on {worker.node}" if worker.node else ""
            replace = not self.cancel.is_set() and self.losses <= 2 * self.plan.workers + MAX_ATTEMPTS
            self._event(f"a Ray worker{where} was lost ({_short(error)})"
                        + ("; another is asked for" if replace else ""))
            if replace:
                self._start_worker()
            self.progress.workers = sum(1 for w in self.workers if w.alive and w.node is not None)
        if problem is None:
            return
        attempts = self.attempts[problem.name] = self.attempts.get(problem.name, 0) + 1
        if attempts >= MAX_ATTEMPTS:
            times = counted(attempts, "time")
            self.unfinished[problem.name] = f"its worker was lost {times} (last: {_short(error)})"
            self._event(f"{problem.name} is left unfinished: its worker was lost {times}")
            return
        if problem.name not in self.retried:
            self.retried.append(problem.name)
        self.queue.appendleft(problem)
        self._event(f"{problem.name} is tried again (attempt {attempts + 1} of {MAX_ATTEMPTS})")

    def _check_stalled(self) -> None:
        if self.tasks or not self.queue:
            return
        if any(worker.alive for worker in self.workers) and time.monotonic() - self.last_ready < WORKER_WAIT_S:
            return
        wanted = f"{self.plan.num_gpus:g} GPU" if self.plan.num_gpus else f"{self.plan.num_cpus:g} CPU"
        raise ClusterUnavailable(f"no Ray worker became ready in {WORKER_WAIT_S:.0f} s with {len(self.queue)} "
                                 f"problem(s) left: the cluster has no free {wanted} for a worker, or its workers "
                                 "keep dying")

    # -- stopping ------------------------------------------------------------------------------------------------
    def _stop(self) -> None:
        self.cancel.set()
        self.queue.clear()
        for worker in self.workers:
            if worker.alive:
                worker.handle.cancel.remote()

    def _drain(self) -> None:
        """After _stop: record what ends within CANCEL_WAIT_S (finished problems are kept)."""
        deadline = time.monotonic() + CANCEL_WAIT_S
        while self.tasks and time.monotonic() < deadline:
            self._harvest(min(POLL_S, max(0.0, deadline - time.monotonic())))

    def _end_workers(self) -> None:
        closing = [worker.handle.close.remote() for worker in self.workers if worker.alive and worker.node]
        if closing:
            self.ray.wait(closing, num_returns=len(closing), timeout=10)
        for worker in self.workers:
            self._kill(worker)
        self.tasks.clear()

    def _kill(self, worker: _Worker) -> None:
        try:
            self.ray.kill(worker.handle, no_restart=True)
        except Exception:  # already gone
            pass

    # -- helpers -------------------------------------------------------------------------------------------------
    def _lost_errors(self) -> tuple:
        exceptions = self.ray.exceptions
        names = ("RayActorError", "WorkerCrashedError", "NodeDiedError", "ObjectLostError", "OwnerDiedError")
        return tuple(getattr(exceptions, name) for name in names if hasattr(exceptions, name))

    def _label(self, where: dict) -> str:
        """A node's name for people: its host name, with the start of Ray's node id where hosts run several nodes."""
        node_id, host = where.get("node_id") or "?", where.get("host") or "?"
        if node_id not in self.node_labels:
            shared = any(label.split(":")[0] == host for label in self.node_labels.values())
            several = shared or sum(1 for node in self.ray.nodes()
                                    if node.get("NodeManagerHostname") == host and node.get("Alive")) > 1
            self.node_labels[node_id] = f"{host}:{node_id[:6]}" if several else host
        return self.node_labels[node_id]

    def _write_if_needed(self) -> None:
        if self.unwritten and self.out_path:
            write_results(self.out_path, list(self.results.values()), self.run_record)
        self.unwritten = False

    def _event(self, message: str) -> None:
        self.progress.event = message
        self.report(self.progress)
        self.progress.event = None


def _cause(error: BaseException) -> BaseException:
    """The exception a worker raised, from Ray's RayTaskError around it."""
    cause = getattr(error, "cause", None)
    return cause if isinstance(cause, BaseException) else error


def _short(error: BaseException) -> str:
    return one_line(error, with_type=True)[:160]
