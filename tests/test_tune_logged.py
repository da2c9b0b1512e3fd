"""A :tune whose variant is kept is logged (Engine.record_tuned, through the engine's one writer): the variant is an
entry of its own, marked as a tuned variant of the checked kernel's entry (its launch parameters, its check), so that
:history, `log`, --continue and :save all see the same kernel. The checks come from a test double of the judges
(this machine has no GPU, and :tune runs only on one)."""

from pathlib import Path

from repl.checker import devices
from repl.checker.result import CheckResult, Verdict
from repl.core.settings import SamplingSettings
from repl.log.session_log import SessionLog
from repl.ui.history_commands import continue_last
from stand_in_checker import stand_in_checks
from test_repl_session import RELU, make_session, output

INDUCTOR = (Path(__file__).resolve().parent / "checker_cases" / "relu_inductor_style.py").read_text()


def timed_by_launch(reference, kernel, **options) -> CheckResult:
    """The kernel as generated 10 ms, its num_warps=8 variant 6 ms, every other variant 12 ms."""
    ms = 6.0 if "XBLOCK=128, num_warps=8," in kernel else 10.0 if kernel == INDUCTOR else 12.0
    return CheckResult(verdict=Verdict.CORRECT, device="cuda", kernel_ms=ms, trials=5, message="stand-in", valid_for={
        "summary": "any size of dim 0", "device": "cuda", "init_arguments": [[], {}], "output": "tensor", "inputs": [
            {"shape": ["d0", 4, 4, 4], "dtype": "torch.float32", "contiguous": True, "stride": [64, 16, 4, 1]}]})


def tuned_session(tmp_path, monkeypatch):
    monkeypatch.setattr(devices, "visible_gpu_count", lambda: 1)  # as on a host with a GPU
    session, _, console = make_session(tmp_path, monkeypatch, f"Here:\n```python\n{INDUCTOR}```",
                                       checks=stand_in_checks(timed_by_launch))
    log = SessionLog.open(tmp_path / "log.db", enabled=True)
    session.engine.record_to(log)
    return session, console, log


def test_a_kept_variant_is_logged_as_a_tuned_variant_of_the_checked_kernel(tmp_path, monkeypatch):
    session, console, log = tuned_session(tmp_path, monkeypatch)
    session.handle(RELU)
    session.handle(":run --device cuda")
    original = session.attempt
    session.handle(":tune")
    tuned = session.attempt
    assert "Kept triton_poi_fused_relu_0 num_warps 4 -> 8" in " ".join(output(console).split())
    assert tuned.log_id not in (None, original.log_id) and "num_warps=8," in tuned.kernel

    entry = log.get(tuned.log_id)
    assert entry.kernel == tuned.kernel and entry.verdict == "correct" and entry.check["kernel_ms"] == 6.0
    assert entry.model == original.reply.model and entry.settings == original.reply.settings
    assert entry.tuning["from_reply"] == original.log_id
    assert entry.tuning["launch"] == [{"kernel": "triton_poi_fused_relu_0", "parameter": "num_warps", "from": 4,
                                       "to": 8}]
    assert entry.tuning["speedup"] == 10 / 6 and len(entry.tuning["tried"]) == 9
    # 4 variants, 3 more around the winner (none faster: the climb stops), then both timed again
    assert entry.to_json_dict()["tuning"] == entry.tuning  # what `log --json` prints
    assert log.get(original.log_id).tuning is None and log.get(original.log_id).kernel == INDUCTOR

    session.handle(":history")
    assert f"tuned from #{original.log_id}" in output(console)


def test_continue_save_and_export_take_the_tuned_kernel(tmp_path, monkeypatch):
    session, _, log = tuned_session(tmp_path, monkeypatch)
    session.handle(RELU)
    session.handle(":run --device cuda")
    session.handle(":tune")
    tuned = session.attempt
    session.engine.record_current(session.module.code, session.source_name, tuned)  # as the session ends
    log.close()

    later, console, _ = tuned_session(tmp_path, monkeypatch)
    continue_last(later)
    assert later.attempt.kernel == tuned.kernel and later.attempt.tuning["from_reply"] == tuned.tuning["from_reply"]
    assert "tuned from #" in output(console) and later.attempt.check.kernel_ms == 6.0
    later.handle(":save tuned.py")
    assert "num_warps=8," in (tmp_path / "tuned.py").read_text()
    later.handle(":export shipped.py")
    shipped = (tmp_path / "shipped.py").read_text()
    assert "num_warps=8," in shipped
    assert "# tuned: triton_poi_fused_relu_0 num_warps 4 -> 8, 1.67x the kernel as generated" in shipped


def test_a_tuning_column_that_is_not_an_object_reads_as_none(tmp_path):
    log = SessionLog.open(tmp_path / "log.db", enabled=True)
    reply_id = log.start_reply(log.record_module(RELU), "m", SamplingSettings())
    log._run(lambda db: db.execute("UPDATE replies SET tuning = '[1, 2]' WHERE id = ?", (reply_id,)))
    assert log.get(reply_id).tuning is None
    log._run(lambda db: db.execute("UPDATE replies SET tuning = 'not json' WHERE id = ?", (reply_id,)))
    assert log.get(reply_id).tuning is None
