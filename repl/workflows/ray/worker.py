"""One worker of `eval --ray` (the driver is repl/workflows/ray/driver.py): a check pool and, when sampling, a model or a server
client, each made once and kept warm for the run; problems arrive one call at a time and go back as the results
file's records.

A worker checks exactly as a local run does: the same per-problem step (repl.workflows.eval_step.start_problem), the same
CheckPool, hence the same judge process and the same confined candidates, on the worker's own host. It holds one
device: a Ray GPU worker sees only the GPU Ray gave it (as cuda:0), where its model (if any) runs and its checks time.

Nothing here imports Ray at module level: the driver wraps the class with ray.remote, so the class is also plain
Python. The methods may run at once in the actor's threads (the driver keeps a few problems in flight per worker and
calls cancel() while they run).
"""

import os
import socket
import threading
from concurrent.futures import wait as wait_for_futures
from pathlib import Path

from repl.workflows.best_of import CheckOptions
from repl.checker.caller.pool import CheckPool
from repl.core.errors import one_line
from repl.workflows.eval_problems import Problem
from repl.workflows.eval_step import ProblemRun, start_problem
from repl.workflows.eval_tune import tune_finished


class WorkerStartError(RuntimeError):
    """The worker cannot do its work (its model did not load, its server is unusable); the message is one line."""


class EvalWorker:
    """check: CheckOptions' fields (jobs 1: a worker is one check slot). generation: None when the candidates are
    given; else where samples come from: {"server", "server_model", "api_key"} for an OpenAI-compatible server, or
    {"model", "dtype"} for a model loaded here on `check["device"]`, with "settings" (SamplingSettings' fields).
    checks: the judges to check with (a CheckPool, left open; default: the worker's own, started now, closed with
    it; check["spares"] sets its spare candidate processes)."""

    def __init__(self, check: dict, generation: dict | None = None, checks: CheckPool | None = None):
        self._cancel = threading.Event()
        self._runs: set[ProblemRun] = set()
        self._lock = threading.Lock()
        self._engine = None
        self._own_checks: CheckPool | None = None  # the pool it started (closed with it), not one handed in
        self._generates = generation is not None
        self._start_error: str | None = None  # raised by ready(): an actor whose __init__ raises tells Ray's story
        try:
            check = dict(check)
            spares = check.pop("spares", None)
            pool = checks if checks is not None else CheckPool(spares=spares)
            self._own_checks = None if checks is not None else pool
            self._check = CheckOptions(**check)
            pool.reserve(self._check.device, self._check.jobs)  # its judge starts now
            self._engine = _engine(generation, self._check.device, pool)
            if self._generates:
                self._engine.start_loading()  # the one load of this worker's life; ready() waits for it
        except Exception as error:  # a device this host cannot use, a server URL that is not one, ...
            self._start_error = one_line(error, with_type=not isinstance(error, ValueError))

    def ready(self) -> dict:
        """Wait until the worker can take problems (its model loaded and warmed up); where it runs: node_id (Ray's,
        None outside Ray), host, pid. WorkerStartError when it cannot work."""
        if self._start_error is not None:
            raise WorkerStartError(f"a worker on {socket.gethostname()} cannot start: {self._start_error}")
        if self._generates:
            state, message = self._engine.wait_until_loaded(lambda progress: None)
            if state == "failed":
                raise WorkerStartError(f"the model did not load on {socket.gethostname()}: {message}")
            self._engine.wait_for_fast_decoding(lambda progress: None)
        return {"node_id": _ray_node_id(), "host": socket.gethostname(), "pid": os.getpid()}

    def run(self, problem: dict) -> dict | None:
        """One problem, start to end: {"name", "code", "given": [(file, text)] or None, "samples", "tune"} ->
        {"result": the results file's record, "note": why it was too large or None, "outputs": each candidate's
        reply and whole check, for the driver's EvalArchive}; None when cancel() stopped it mid-problem. Raises the
        error that stopped it (a generation or check that could not run)."""
        job = start_problem(Problem(problem["name"], Path(problem["name"] + ".py"), problem["code"]), self._engine,
                            self._check, self._cancel, given=problem.get("given"), samples=problem.get("samples"))
        with self._lock:
            self._runs.add(job)
            stopped = self._cancel.is_set()
        if stopped:  # cancel() came between start_problem and the line above
            job.cancel()
        try:
            wait_for_futures([job.finished])  # ends with the candidates, or with the error job.result() raises
        finally:
            with self._lock:
                self._runs.discard(job)
        result = job.result()
        if result is None:
            return None
        outputs = job.outputs()
        if problem.get("tune"):  # eval --tune: as a local run tunes, on this worker's judges
            # a kept variant goes back in outputs: this engine logs nothing, the driver's archive logs it
            outputs += tune_finished(job, result, self._engine, self._check, self._cancel)
        return {"result": result.to_json_dict(), "note": result.note, "outputs": outputs}

    def cancel(self) -> None:
        """Stop every problem in flight: generation at once, checks as the pool's cancel event stops them."""
        with self._lock:
            self._cancel.set()
            runs = list(self._runs)
        for job in runs:
            job.cancel()

    def close(self) -> None:
        """End the judges and candidates, and the model or server client."""
        self.cancel()
        if self._own_checks is not None:
            self._own_checks.close()
        if self._engine is not None:
            self._engine.close()
            backend = self._engine.backend_override or self._engine.loaded_backend
            if backend is not None:
                backend.close()


def _engine(generation: dict | None, device: str, checks: CheckPool):
    """The worker's engine: its judges, and the model or server client it samples with (none with given
    candidates)."""
    from repl.engine.engine import Engine, EngineOptions
    from repl.core.settings import SamplingSettings

    if generation is None:
        return Engine(checks=checks)
    settings = SamplingSettings(**generation.get("settings", {}))
    server = None
    if generation.get("server"):
        from repl.generation.server import server_backend_from

        server = server_backend_from(generation)
    options = EngineOptions(device=device, dtype=generation.get("dtype") or "auto")
    if generation.get("model"):
        options.model = generation["model"]
    return Engine(options, settings, backend_override=server, checks=checks)


def _ray_node_id() -> str | None:
    try:
        import ray

        return ray.get_runtime_context().get_node_id() if ray.is_initialized() else None
    except ImportError:
        return None
