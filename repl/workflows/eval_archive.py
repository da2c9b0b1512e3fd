"""What `eval` keeps beside its results file: every sampled kernel and every check, KernelBench-style (a folder per
problem, a file per sample), and every sampled reply with its check in the session log.

    results.json                     the results (repl/workflows/eval_results.py)
    results_kernels/19_ReLU/
        sample_1.py                  the kernel, with a header: model, sampling, verdict (as :save writes it)
        sample_1.check.json          the whole check: verdict, message, errors, traceback, timings...
        sample_2.reply.txt           a reply with no code in it, whole
        good.py.check.json           with --candidates: the check of DIR/19_ReLU/good.py (the kernel is there)
        sample_1.tuned.py            with --tune: the best kernel tuned (when a variant beat it), with its check in
        sample_1.tuned.check.json    the same way; the untuned kernel stays beside it

The kernels folder is a candidates folder too: `eval PROBLEMS --candidates results_kernels` checks the same kernels
again without a model (check files and tuned kernels are not candidates).

A Ray worker checks on another host: what is kept travels back as plain data (candidate_output), and the driver
writes it, as a local run does, and logs it (a local run's engine logs its own), a tuned kernel as a tuned variant
of the entry of the candidate it was tuned from.
"""

import json
import os
from pathlib import Path
from typing import Callable

from repl.core.errors import one_line
from repl.core.extract import extract_kernel_code
from repl.generation import Reply
from repl.core.kernel_file import kernel_header, real_folder, unsafe_name, write_text_atomically
from repl.core.settings import SamplingSettings

CHECK_FILE_SUFFIX = ".check.json"
TUNED_SUFFIX = ".tuned"  # sample_1.tuned.py: the tuned kernel of sample_1, kept beside it


def kernels_dir_for(results_path: str | os.PathLike) -> Path:
    """The default kernels folder of a results file: results.json -> results_kernels/ beside it."""
    path = Path(results_path).expanduser()
    return path.with_name(f"{path.stem}_kernels")


def candidate_output(candidate) -> dict:
    """What is kept of a finished candidate (repl.workflows.best_of.Candidate), as plain data: its name, its reply when it was
    sampled (None for a given file) and its whole check."""
    attempt = candidate.attempt
    sampled = candidate.name is None and attempt is not None
    return {"file": candidate.name or f"sample_{candidate.index}",
            "reply": reply_record(attempt.reply) if sampled else None,
            "kernel": attempt.kernel if attempt is not None else None,  # the very text its check was of
            "check": candidate.check.to_json_dict() if candidate.check is not None else None}


def reply_record(reply: Reply) -> dict:
    first_token_s = reply.first_token_at - reply.started_at if reply.first_token_at is not None else None
    return {"model": reply.model, "settings": dict(reply.settings.__dict__), "text": reply.text, "tokens": reply.tokens,
            "finish_reason": reply.finish_reason, "error": reply.error, "elapsed_s": reply.elapsed_s,
            "first_token_s": first_token_s}


def reply_from_record(data: dict) -> Reply:
    """The reply again, its times relative to its start (as the session log keeps them)."""
    first_token_s = data.get("first_token_s")
    return Reply(model=data["model"], settings=SamplingSettings(**data["settings"]), text=data["text"],
                 tokens=data["tokens"], finish_reason=data["finish_reason"], error=data.get("error"), started_at=0.0,
                 first_token_at=first_token_s, finished_at=data.get("elapsed_s") or 0.0)


class EvalArchive:
    """kernels_dir: where kernels and checks go (None: nowhere); recorder: a repl.engine.recorder.Recorder for replies sampled
    elsewhere (the workers of `eval --ray`) and their checks (None: not logged here; a local run's engine records its
    own). Paths in the results file are relative to `results_dir` (the results file's folder). A file that cannot be
    written (a full disk, a symbolic link in the way) is said through on_warning (one line) and the run goes on."""

    def __init__(self, kernels_dir: str | os.PathLike | None = None, recorder=None,
                 results_dir: str | os.PathLike | None = None, on_warning: Callable[[str], None] = lambda line: None):
        self.on_warning = on_warning
        self.kernels_dir = Path(kernels_dir).expanduser() if kernels_dir is not None else None
        self.recorder = recorder
        self.results_dir = Path(results_dir).expanduser() if results_dir is not None else None

    def keep(self, problem, result, outputs: list[dict]) -> None:
        """Save a finished problem's kernels and checks and log its sampled replies; each candidate's line in
        `result` (a repl.workflows.eval_results.ProblemResult) gets the paths of its files ("kernel_file", "check_file")."""
        if self.kernels_dir is not None:
            try:
                self._keep_files(problem, result, outputs)
            except (OSError, ValueError) as error:
                self.on_warning(f"{problem.name}: kernels and checks not kept: {one_line(error)}")
        if self.recorder is not None:
            self._log(problem, outputs)

    def _keep_files(self, problem, result, outputs: list[dict]) -> None:
        if unsafe_name(problem.name):
            raise ValueError(unsafe_name(problem.name))
        lines = {line["file"]: line for line in result.candidates}
        folder = real_folder(self.kernels_dir / problem.name)
        if any(output["reply"] is not None for output in outputs):  # never while the folder's kernels are the
            self._remove_earlier_samples(folder)                    # candidates (--candidates into --kernels)
        for output in outputs:
            try:
                if output.get("tuned"):
                    self._save_tuned(folder, output, result.tuned)
                    continue
                self._save(folder, output, lines.get(output["file"]))
            except (OSError, ValueError) as error:
                self.on_warning(f"{problem.name}/{output['file']}: not kept: {one_line(error)}")

    def _save(self, folder: Path, output: dict, line: dict | None) -> None:
        name, reply, check = output["file"], output["reply"], output["check"]
        if unsafe_name(name):
            raise ValueError(unsafe_name(name))
        saved = {}
        if reply is not None:
            kernel = output["kernel"] if "kernel" in output else extract_kernel_code(reply["text"])
            if kernel is not None:
                from repl.checker.result import CheckResult

                header = kernel_header(reply["model"], SamplingSettings(**reply["settings"]),
                                       CheckResult.from_json_dict(check) if check else None)
                saved["kernel_file"] = write_text_atomically(folder / f"{name}.py", header + kernel, replace=True)
            else:
                saved["kernel_file"] = write_text_atomically(folder / f"{name}.reply.txt", reply["text"],
                                                             replace=True)
        if check is not None:
            saved["check_file"] = write_text_atomically(folder / f"{name}{CHECK_FILE_SUFFIX}",
                                                        json.dumps(check, indent=2) + "\n", replace=True)
        if line is not None:
            line.update({key: self._relative(path) for key, path in saved.items()})

    def _save_tuned(self, folder: Path, output: dict, record: dict | None) -> None:
        """The tuned kernel (with its header) and its check, named after the candidate it was tuned from; their
        paths go into the results file's "tuned" record."""
        name, reply, check = output["file"], output["reply"], output["check"]
        if unsafe_name(name):
            raise ValueError(unsafe_name(name))
        from repl.checker.result import CheckResult

        model, settings = (reply["model"], SamplingSettings(**reply["settings"])) if reply else (f"file:{name}", None)
        header = kernel_header(model, settings, CheckResult.from_json_dict(check))
        saved = {"kernel_file": write_text_atomically(folder / f"{name}{TUNED_SUFFIX}.py", header + output["kernel"],
                                                      replace=True),
                 "check_file": write_text_atomically(folder / f"{name}{TUNED_SUFFIX}{CHECK_FILE_SUFFIX}",
                                                     json.dumps(check, indent=2) + "\n", replace=True)}
        if record is not None:
            record.update({key: self._relative(path) for key, path in saved.items()})

    @staticmethod
    def _remove_earlier_samples(folder: Path) -> None:
        """A problem done again (a rerun after Ctrl-C, or with fewer samples) leaves no sample of the earlier run
        behind; files this archive did not write are left alone."""
        for path in folder.glob("sample_*"):
            if path.is_symlink() or not path.is_file():  # a link or a folder: not the archive's sample
                continue
            stem = path.name.split(".", 1)[0]
            if stem[len("sample_"):].isdigit() and path.name.endswith((".py", ".reply.txt", CHECK_FILE_SUFFIX)):
                path.unlink()

    def _relative(self, path: Path) -> str:
        if self.results_dir is None:
            return str(path)
        try:
            return os.path.relpath(path, self.results_dir)
        except ValueError:  # another drive (Windows)
            return str(path)

    def _log(self, problem, outputs: list[dict]) -> None:
        """Each sampled reply with its check, and a tuned kernel (eval --tune) as :tune logs one: a tuned variant of
        the entry just logged for the candidate it was tuned from (given files are not logged)."""
        from repl.checker.result import CheckResult
        from repl.engine.attempt import Attempt, tuned_attempt
        from repl.core.module_source import inspect_module_source

        module = inspect_module_source(problem.code)
        logged: dict[str, Attempt] = {}  # each candidate's attempt by its name, its log_id its entry
        for output in outputs:
            if output["reply"] is None:
                continue
            check = CheckResult.from_json_dict(output["check"]) if output["check"] else None
            if not output.get("tuned"):
                logged[output["file"]] = Attempt(module=module, reply=reply_from_record(output["reply"]),
                                                 source_name=problem.name, check=check)
                self.recorder.finished(logged[output["file"]])
            elif output["file"] in logged:
                self.recorder.tuned(tuned_attempt(logged[output["file"]], output["kernel"], check, output["tuning"]))
