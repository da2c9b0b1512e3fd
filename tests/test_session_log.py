"""The session log keeps every module, reply and check, survives kills and concurrent sessions, and never stops a
session when it cannot write. Every test runs in its own KERNELLLM_HOME."""

import hashlib
import io
import json
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import tempfile
import textwrap
import time
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path

import pytest
from rich.console import Console

from repl.engine.attempt import attempt_from_log
from repl.generation import FINISHED, INTERRUPTED, Reply
from repl.log.session_log import MIGRATIONS, SessionLog, default_log_path, migrate
from repl.core.settings import SamplingSettings
from repl.ui import commands
from repl.ui.console import THEME
from repl.ui.history_commands import continue_last
from processes import wait_until

REPO_ROOT = Path(__file__).resolve().parents[1]

MODULE = '''import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x):
        return torch.relu(x)


def get_inputs():
    return [torch.randn(16, 16)]


def get_init_inputs():
    return []
'''
KERNEL = "import torch\n\n\nclass ModelNew(torch.nn.Module):\n    def forward(self, x):\n        return x.relu()\n"
REPLY_TEXT = f"Here is the kernel:\n\n```python\n{KERNEL}```\n"
CHECK = {"verdict": "correct", "device": "cuda", "trials": 3, "speedup_vs_eager": 1.8, "speedup_vs_compiled": 0.9,
         "message": "outputs match"}
REQUIRED_JSON_KEYS = {"id", "time", "module_name", "tokens", "interrupted", "verdict", "kernel"}


@pytest.fixture
def home(tmp_path, monkeypatch) -> Path:
    monkeypatch.setenv("KERNELLLM_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("KERNELLLM_NO_LOG", raising=False)
    return tmp_path / "home"


@pytest.fixture
def log(home):
    opened = SessionLog.open()
    assert opened.enabled, opened.warning
    yield opened
    opened.close()


def subprocess_env(home: Path) -> dict:
    env = {key: value for key, value in os.environ.items() if key != "KERNELLLM_NO_LOG"}
    return {**env, "KERNELLLM_HOME": str(home), "PYTHONPATH": str(REPO_ROOT)}


def log_reply(log: SessionLog, text: str = REPLY_TEXT, tokens: int = 40, finish_reason: str = FINISHED,
              code: str = MODULE, check: dict | None = None, seed: int | None = 3,
              source_name: str | None = "relu") -> int:
    """What the REPL does for one generation: module, reply streamed in two pieces, finish, optional check."""
    settings = SamplingSettings(temperature=0.7, top_p=0.9, max_new_tokens=512, seed=seed)
    reply_id = log.start_reply(log.record_module(code, source_name=source_name), "facebook/KernelLLM", settings)
    log.append_reply_text(reply_id, text[: len(text) // 2], tokens // 2)
    reply = Reply(model="facebook/KernelLLM", settings=settings, text=text, tokens=tokens,
                  finish_reason=finish_reason, started_at=100.0, first_token_at=100.5, finished_at=102.5)
    log.finish_reply(reply_id, reply)
    if check:
        log.record_check(reply_id, check)
    return reply_id


def integrity(path: Path) -> str:
    with sqlite3.connect(path) as db:
        return db.execute("PRAGMA integrity_check").fetchone()[0]


class FakeClock:
    def __init__(self):
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


# -- what is kept ------------------------------------------------------------------------------------------------

def test_a_reply_is_kept_with_its_module_settings_timing_and_check(log):
    reply_id = log_reply(log, check=CHECK)

    entry = log.get(reply_id)
    assert (entry.module_name, entry.source_name, entry.module_code) == ("Model", "relu", MODULE)
    assert (entry.model, entry.settings) == ("facebook/KernelLLM", SamplingSettings(0.7, 0.9, 512, 3))
    assert (entry.text, entry.tokens, entry.finish_reason, entry.interrupted) == (REPLY_TEXT, 40, FINISHED, False)
    assert entry.elapsed_s == pytest.approx(2.5) and entry.first_token_s == pytest.approx(0.5)
    assert entry.tokens_per_second == pytest.approx(39 / 2.0)
    assert (entry.verdict, entry.speedup_vs_eager, entry.kernel) == ("correct", 1.8, KERNEL)
    assert log.last() == entry


def test_the_latest_check_of_a_reply_is_its_verdict(log):
    reply_id = log_reply(log, check={"verdict": "mismatch"})
    log.record_check(reply_id, CHECK)
    assert log.get(reply_id).verdict == "correct"


def test_a_module_submitted_again_keeps_its_row(log):
    first = log.record_module(MODULE)
    again = log.record_module(MODULE, source_name="relu")
    other = log.record_module(MODULE.replace("relu", "tanh"))
    assert first == again != other


def test_recent_lists_the_last_entries_oldest_first(log):
    ids = [log_reply(log, tokens=n) for n in (10, 20, 30)]
    assert [entry.id for entry in log.recent(2)] == ids[1:]
    assert [entry.id for entry in log.recent(None)] == ids
    assert log.get(999) is None


def test_an_entry_opens_as_an_attempt_ready_for_run_save_and_regen(log):
    entry = log.get(log_reply(log, check=CHECK))
    attempt = attempt_from_log(entry)
    assert (attempt.module.code, attempt.module.runnable, attempt.source_name) == (MODULE, True, "relu")
    assert (attempt.reply.text, attempt.reply.settings.seed, attempt.reply.done) == (REPLY_TEXT, 3, True)
    assert (attempt.kernel, attempt.check.verdict, attempt.check.speedup_vs_eager, attempt.log_id) == (
        KERNEL, "correct", 1.8, entry.id)


# -- streaming and kills ---------------------------------------------------------------------------------------

def test_streamed_text_is_written_at_most_once_per_interval_and_always_at_the_end(home):
    clock = FakeClock()
    log = SessionLog.open(write_interval_s=0.5, clock=clock)
    reply_id = log.start_reply(log.record_module(MODULE), "m", SamplingSettings())
    on_disk = sqlite3.connect(default_log_path())  # what a reader (or a restart after kill -9) sees

    def stored():
        return on_disk.execute("SELECT text, tokens, finish_reason FROM replies WHERE id = ?", (reply_id,)).fetchone()

    clock.now = 0.3
    assert not log.append_reply_text(reply_id, "a", 1) and stored() == ("", 0, None)
    clock.now = 0.6
    assert log.append_reply_text(reply_id, "ab", 2) and stored() == ("ab", 2, None)
    clock.now = 0.9
    assert not log.append_reply_text(reply_id, "abc", 3) and stored() == ("ab", 2, None)
    log.finish_reply(reply_id, Reply("m", SamplingSettings(), text="abcd", tokens=4, finish_reason=INTERRUPTED))
    assert stored() == ("abcd", 4, INTERRUPTED)
    on_disk.close()
    log.close()


STREAMER = textwrap.dedent("""
    import itertools, sys, time
    from repl.log.session_log import SessionLog
    from repl.core.settings import SamplingSettings

    log = SessionLog.open()
    assert log.enabled, log.warning
    reply_id = log.start_reply(log.record_module(sys.argv[2]), "fake/model", SamplingSettings(seed=7))
    progress = open(sys.argv[1], "w", buffering=1)
    text = ""
    for i in itertools.count():  # fake generation: a chunk every couple of milliseconds, forever
        text += f"chunk {i}\\n"
        log.append_reply_text(reply_id, text, i + 1)
        progress.write(f"{i} {time.monotonic()}\\n")
        time.sleep(0.002)
""")


def chunk_times(progress: Path) -> dict[int, float]:
    """Chunk index -> when the streamer logged it, from its progress file."""
    times = {}
    if progress.exists():
        for line in progress.read_text().splitlines(keepends=True):
            if line.endswith("\n"):  # the last line may have been cut by the kill
                index, moment = line.split()
                times[int(index)] = float(moment)
    return times


def test_a_process_killed_mid_stream_keeps_all_but_the_last_second_of_its_reply(home, tmp_path):
    progress = tmp_path / "progress"
    streamer = subprocess.Popen([sys.executable, "-c", STREAMER, str(progress), MODULE], cwd=REPO_ROOT,
                                env=subprocess_env(home), stderr=subprocess.PIPE)

    def streamed_for(seconds: float) -> bool:  # by the streamer's own clock, so the kill falls anywhere
        if streamer.poll() is not None:
            raise AssertionError(f"the streamer died: {streamer.stderr.read().decode()}")
        times = chunk_times(progress)
        return bool(times) and max(times.values()) - min(times.values()) >= seconds

    try:
        assert wait_until(lambda: streamed_for(1.2), 15), "the streamer never streamed for 1.2 s"
    finally:
        streamer.send_signal(signal.SIGKILL)
        streamer.wait()
    assert streamer.returncode == -signal.SIGKILL

    log = SessionLog.open()
    entry = log.last()
    assert (entry.finish_reason, entry.state, entry.interrupted) == (None, "unfinished", True)
    assert entry.tokens >= 1 and entry.text == "".join(f"chunk {i}\n" for i in range(entry.tokens))
    assert attempt_from_log(entry).reply.finish_reason == INTERRUPTED
    streamed = chunk_times(progress)
    last_kept = streamed.get(entry.tokens - 1, max(streamed.values()))  # killed between its write and its line
    assert max(streamed.values()) - last_kept < 1.0
    log.close()
    assert integrity(default_log_path()) == "ok"


# -- two sessions at once ----------------------------------------------------------------------------------------

WRITER = textwrap.dedent("""
    import sys
    from repl.generation import Reply
    from repl.log.session_log import SessionLog
    from repl.core.settings import SamplingSettings

    name, count = sys.argv[1], int(sys.argv[2])
    log = SessionLog.open(write_interval_s=0)  # every append writes: as much contention as possible
    print("ready", flush=True)
    sys.stdin.readline()  # start together
    for i in range(count):
        module_id = log.record_module(f"# {name} {i}\\nclass Model: pass\\n", name=f"{name}{i}")
        reply_id = log.start_reply(module_id, "fake/model", SamplingSettings(seed=i))
        text = ""
        for piece in range(3):
            text += f"{name}-{i}-{piece} "
            log.append_reply_text(reply_id, text, piece + 1)
        log.finish_reply(reply_id, Reply("fake/model", SamplingSettings(seed=i), text=text, tokens=3,
                                         finish_reason="stop"))
        log.record_check(reply_id, {"verdict": "correct", "speedup_vs_eager": 1.0 + i})
    print(log.warning or "ok", flush=True)
""")


def test_two_processes_writing_at_once_lose_nothing_and_corrupt_nothing(home):
    count = 25
    writers = [subprocess.Popen([sys.executable, "-c", WRITER, name, str(count)], cwd=REPO_ROOT,
                                env=subprocess_env(home), stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
               for name in ("a", "b")]
    for writer in writers:
        assert writer.stdout.readline().strip() == "ready"
    for writer in writers:
        writer.stdin.write("go\n")
        writer.stdin.flush()
    outputs = [writer.communicate(timeout=60)[0].strip() for writer in writers]
    assert outputs == ["ok", "ok"]

    assert integrity(default_log_path()) == "ok"
    log = SessionLog.open()
    entries = log.recent(None)
    assert len(entries) == 2 * count
    for name in ("a", "b"):
        mine = [entry for entry in entries if entry.module_name.startswith(name)]
        assert [entry.module_name for entry in mine] == [f"{name}{i}" for i in range(count)]
        assert [entry.text for entry in mine] == [f"{name}-{i}-0 {name}-{i}-1 {name}-{i}-2 " for i in range(count)]
        assert [(entry.state, entry.verdict, entry.speedup_vs_eager) for entry in mine] == [
            ("stop", "correct", 1.0 + i) for i in range(count)]
    log.close()


# -- a log that cannot be used ------------------------------------------------------------------------------------

def test_a_corrupt_database_file_turns_the_log_off_with_one_warning(home):
    home.mkdir()
    garbage = b"this is not a database " * 400
    default_log_path().write_bytes(garbage)
    warnings = []

    log = SessionLog.open(on_warning=warnings.append)

    assert not log.enabled and warnings == [log.warning]
    assert "damaged" in log.warning and str(default_log_path()) in log.warning and "\n" not in log.warning
    assert log.start_reply(log.record_module(MODULE), "m", SamplingSettings()) is None and log.recent() == []
    assert default_log_path().read_bytes() == garbage  # the user's file is left for them to inspect


@contextmanager
def as_an_ordinary_user():
    """Root writes through any permission; a read-only directory is only read-only to an ordinary user."""
    if os.geteuid() != 0:
        yield
        return
    os.seteuid(65534)  # nobody
    try:
        yield
    finally:
        os.seteuid(0)


@pytest.fixture
def public_tmp():
    """A temporary directory an ordinary user can reach (pytest's tmp_path is private to its owner)."""
    directory = Path(tempfile.mkdtemp())
    directory.chmod(0o755)
    yield directory
    for path in [directory, *directory.rglob("*")]:
        if path.is_dir():
            path.chmod(0o755)
    shutil.rmtree(directory)


@pytest.mark.parametrize("situation", ["empty read-only directory", "existing read-only log",
                                       "missing directory under a read-only one"])
def test_a_read_only_data_directory_turns_the_log_off_with_one_warning(public_tmp, monkeypatch, situation):
    data = public_tmp / "data"
    data.mkdir()
    if situation == "existing read-only log":
        with SessionLog.open(data / "session_log.db") as existing:
            log_reply(existing)
        (data / "session_log.db").chmod(0o444)
    if situation == "missing directory under a read-only one":
        monkeypatch.setenv("KERNELLLM_HOME", str(data / "kernelllm"))
    else:
        monkeypatch.setenv("KERNELLLM_HOME", str(data))
    data.chmod(0o555)
    warnings = []

    with as_an_ordinary_user():
        log = SessionLog.open(on_warning=warnings.append)

    assert not log.enabled and warnings == [log.warning] and "\n" not in log.warning
    assert log.record_module(MODULE) is None


def test_a_database_locked_by_another_program_turns_the_log_off_with_one_warning(log):
    log.close()
    holder = sqlite3.connect(default_log_path(), isolation_level=None)
    holder.execute("BEGIN EXCLUSIVE")
    try:
        started = time.monotonic()
        locked = SessionLog.open(busy_timeout_s=0.1)
        assert time.monotonic() - started < 5
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    assert not locked.enabled and "locked" in locked.warning


def test_a_failure_after_opening_warns_once_and_the_log_goes_quiet(home):
    warnings = []
    log = SessionLog.open(on_warning=warnings.append, busy_timeout_s=0.1, write_interval_s=0)
    reply_id = log.start_reply(log.record_module(MODULE), "m", SamplingSettings())
    holder = sqlite3.connect(default_log_path(), isolation_level=None)
    holder.execute("BEGIN EXCLUSIVE")  # another program holds the log mid-stream
    try:
        assert log.append_reply_text(reply_id, "a", 1) is False
        assert log.append_reply_text(reply_id, "ab", 2) is False
        log.finish_reply(reply_id, Reply("m", SamplingSettings(), text="ab", tokens=2, finish_reason=FINISHED))
        log.record_check(reply_id, CHECK)
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    assert len(warnings) == 1 and "locked" in warnings[0] and not log.enabled
    assert log.recent() == [] and log.get(reply_id) is None and log.last() is None


@pytest.mark.parametrize("value", ["1", "yes", "true"])
def test_kernelllm_no_log_turns_logging_off_without_a_warning_or_a_file(home, monkeypatch, value):
    monkeypatch.setenv("KERNELLLM_NO_LOG", value)
    log = SessionLog.open()
    assert not log.enabled and log.warning is None
    assert log.start_reply(log.record_module(MODULE), "m", SamplingSettings()) is None
    assert not home.exists()


def test_no_log_off_values_keep_logging_on(home, monkeypatch):
    monkeypatch.setenv("KERNELLLM_NO_LOG", "0")
    assert SessionLog.open().enabled


# -- migrations --------------------------------------------------------------------------------------------------

def applied_migrations(path: Path) -> list[str]:
    with sqlite3.connect(path) as db:
        return [name for (name,) in db.execute("SELECT name FROM _migrations ORDER BY rowid")]


def test_a_log_at_the_first_schema_is_upgraded_and_keeps_its_data(home):
    home.mkdir()
    old = sqlite3.connect(default_log_path(), isolation_level=None)
    migrate(old, MIGRATIONS[:1])
    # Rows as the first release wrote them (its columns only).
    old.execute("INSERT INTO modules (id, time, code_hash, name, source_name, code) VALUES (?, ?, ?, ?, ?, ?)",
                (1, "2025-01-02T03:04:05.000+00:00", hashlib.sha256(MODULE.encode()).hexdigest(), "Model", "relu",
                 MODULE))
    old.execute("INSERT INTO replies (id, module_id, time, model, temperature, top_p, max_new_tokens, seed, text, "
                "tokens, finish_reason, elapsed_s) VALUES (1, 1, '2025-01-02T03:04:06.000+00:00', "
                "'facebook/KernelLLM', 1.0, 0.97, 2048, 5, ?, 42, 'stop', 3.5)", (REPLY_TEXT,))
    old.execute("INSERT INTO replies (id, module_id, time, model, text, tokens) VALUES "
                "(2, 1, '2025-01-02T03:05:00.000+00:00', 'facebook/KernelLLM', 'cut sh', 2)")  # killed mid-stream
    old.execute("INSERT INTO checks (reply_id, time, verdict, device, speedup_vs_eager, result) VALUES "
                "(1, '2025-01-02T03:04:10.000+00:00', 'correct', 'cuda', 1.8, ?)", (json.dumps(CHECK),))
    old.close()

    log = SessionLog.open()

    assert log.enabled, log.warning
    assert applied_migrations(default_log_path()) == [step.__name__ for step in MIGRATIONS]
    kept = log.get(1)
    assert (kept.module_code, kept.text, kept.tokens, kept.settings.seed, kept.elapsed_s) == (
        MODULE, REPLY_TEXT, 42, 5, 3.5)
    assert (kept.verdict, kept.speedup_vs_eager, kept.kernel) == ("correct", 1.8, KERNEL)
    assert (log.get(2).text, log.get(2).state, log.get(2).elapsed_s) == ("cut sh", "unfinished", 0.0)
    assert log.record_module(MODULE) == 1  # old rows still deduplicate new submissions
    new = log_reply(log)
    assert log.last().id == new == 3
    log.close()
    assert integrity(default_log_path()) == "ok"


def test_migrations_run_once(log):
    log_reply(log)
    log.close()
    again = SessionLog.open()
    assert again.enabled and len(again.recent()) == 1
    assert applied_migrations(default_log_path()) == [step.__name__ for step in MIGRATIONS]
    assert len({step.__name__ for step in MIGRATIONS}) == len(MIGRATIONS)


# -- reading the log: the log command, :history, :open, --continue --------------------------------------------

LOG_COMMANDS = {"standalone": [sys.executable, "-m", "repl.cli.log"],
                "kernelllm.py": [sys.executable, "kernelllm.py", "log"]}


def run_log_command(home: Path, runner: str, *arguments: str) -> subprocess.CompletedProcess:
    return subprocess.run([*LOG_COMMANDS[runner], *arguments], cwd=REPO_ROOT, env=subprocess_env(home),
                          capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("runner", LOG_COMMANDS)
def test_log_json_is_a_list_of_entries_with_the_documented_keys(log, home, runner):
    complete = log_reply(log, check=CHECK)
    cut = log_reply(log, text="```python\nclass ModelNew", tokens=5, finish_reason=INTERRUPTED)
    log.close()

    result = run_log_command(home, runner, "--json")

    assert result.returncode == 0, result.stderr
    entries = json.loads(result.stdout)
    assert isinstance(entries, list) and [entry["id"] for entry in entries] == [complete, cut]
    assert all(REQUIRED_JSON_KEYS <= set(entry) for entry in entries)
    first, second = entries
    assert (first["module_name"], first["tokens"], first["interrupted"], first["verdict"], first["kernel"]) == (
        "Model", 40, False, "correct", KERNEL)
    assert (second["tokens"], second["interrupted"], second["verdict"], second["kernel"].strip()) == (
        5, True, None, "class ModelNew")
    datetime.fromisoformat(first["time"])

    assert [entry["id"] for entry in json.loads(run_log_command(home, runner, "--json", "-n", "1").stdout)] == [cut]


def test_log_jsonl_is_one_entry_a_line_the_same_objects_as_json(log, home):
    log_reply(log, check=CHECK)
    log_reply(log, text="```python\nclass ModelNew", tokens=5, finish_reason=INTERRUPTED)
    log.close()
    lines = run_log_command(home, "standalone", "--jsonl").stdout.splitlines()
    assert [json.loads(line) for line in lines] == json.loads(run_log_command(home, "standalone", "--json").stdout)
    assert len(lines) == 2


def test_log_prints_a_table_of_entries(log, home):
    log_reply(log, check=CHECK)
    log.close()
    result = run_log_command(home, "standalone")
    assert result.returncode == 0, result.stderr
    assert " relu " in result.stdout and "correct" in result.stdout and "1.80x" in result.stdout


def test_log_filters_by_verdict_module_and_session(log, home):
    first_session = [log_reply(log, check=CHECK),
                     log_reply(log, code=MODULE.replace("relu", "sigmoid"), source_name=None)]  # pasted
    log.close()
    later = SessionLog.open()
    add = MODULE.replace("torch.relu(x)", "x + x")
    second_session = [log_reply(later, code=add, check={**CHECK, "verdict": "mismatch"}, source_name="2_Add"),
                      log_reply(later, check=CHECK)]
    later.close()

    def ids(*arguments: str) -> list[int]:
        result = run_log_command(home, "standalone", "--json", *arguments)
        assert result.returncode == 0, result.stderr
        return [entry["id"] for entry in json.loads(result.stdout)]

    assert ids("--verdict", "correct") == [first_session[0], second_session[1]]
    assert ids("--verdict", "unchecked") == [first_session[1]]
    assert ids("--session", "last") == second_session
    assert ids("--session", str(later.session_id), "--verdict", "mismatch") == [second_session[0]]
    # Labels: the file a module came from ("relu", by log_reply), else the operation its forward starts with.
    assert ids("--module", "REL", "-n", "1") == [second_session[1]]
    assert ids("--module", "sigm") == [first_session[1]] and ids("--module", "2_add") == [second_session[0]]
    table = run_log_command(home, "standalone", "--verdict", "correct")
    assert " session " in table.stdout and table.stdout.count(" correct ") == 2


def test_log_writes_any_logged_kernel_to_stdout_or_a_file(log, home, tmp_path):
    entry = log_reply(log, check=CHECK)
    prose = log_reply(log, text="no code here", tokens=3)
    log.close()
    printed = run_log_command(home, "standalone", "--kernel", str(entry))
    assert (printed.returncode, printed.stdout) == (0, KERNEL)  # the code alone: `log --kernel 3 > kernel.py`
    out = tmp_path / "kernel.py"
    written = run_log_command(home, "standalone", "--kernel", str(entry), "--out", str(out))
    assert written.returncode == 0, written.stderr
    assert out.read_text().endswith(KERNEL) and "# Checked: correct on cuda (outputs match)" in out.read_text()
    again = run_log_command(home, "standalone", "--kernel", str(entry), "--out", str(out))
    assert again.returncode == 1 and "exists; add --force" in again.stderr
    for arguments, complaint in [(["--kernel", str(prose)], "holds no code block"),
                                 (["--kernel", "999"], "no entry 999 in the session log"),
                                 (["--out", str(out)], "--out and --force go with --kernel ID")]:
        result = run_log_command(home, "standalone", *arguments)
        assert result.returncode in (1, 2) and complaint in result.stderr and len(result.stderr.splitlines()) == 1


def test_log_without_a_log_prints_an_empty_list_and_creates_nothing(home):
    result = run_log_command(home, "standalone", "--json")
    assert (result.returncode, json.loads(result.stdout)) == (0, [])
    assert not home.exists()


def test_log_on_a_corrupt_database_says_so_in_one_line_and_fails(home):
    home.mkdir()
    default_log_path().write_bytes(b"garbage" * 1000)
    result = run_log_command(home, "standalone", "--json")
    assert result.returncode == 1 and "damaged" in result.stderr and len(result.stderr.strip().splitlines()) == 1


class FakeSession:
    """What the history commands use of ReplSession."""

    def __init__(self, log: SessionLog):
        self.log = log
        self.console = Console(file=io.StringIO(), width=120, theme=THEME)
        self.opened = []

    def open_attempt(self, entry):
        self.opened.append(entry)

    def run(self, line: str) -> str:
        command, arguments = commands.parse(line)
        command.run(self, arguments)
        return self.console.file.getvalue()


def test_history_lists_recent_entries_and_open_makes_one_current(log):
    first = log_reply(log, check=CHECK)
    log_reply(log, tokens=7, finish_reason=INTERRUPTED)
    session = FakeSession(log)

    listing = session.run(":history 5")
    assert " relu " in listing and "correct" in listing and "1.80x" in listing and "interrupted" in listing
    session.run(f":open {first}")
    assert [entry.id for entry in session.opened] == [first]
    with pytest.raises(commands.CommandError, match="no entry 99"):
        session.run(":open 99")
    with pytest.raises(commands.CommandError, match="usage"):
        session.run(":history lots")


def test_history_with_the_log_off_says_why(home):
    session = FakeSession(SessionLog.open(enabled=False))
    with pytest.raises(commands.CommandError, match="off"):
        session.run(":history")


def test_continue_opens_the_last_entry(log):
    log_reply(log)
    last = log_reply(log, tokens=9)
    session = FakeSession(log)
    continue_last(session)
    assert [entry.id for entry in session.opened] == [last]


# -- sessions: :history shows this one first, --continue skips sessions still running elsewhere ----------------------

SOFTMAX_MODULE = MODULE.replace("torch.relu(x)", "torch.softmax(x, dim=-1)")


def test_entries_are_labelled_by_file_stem_or_by_the_operation_in_forward(log):
    from repl.ui.history_commands import module_label

    from_file = log.get(log_reply(log))
    settings = SamplingSettings()
    pasted_id = log.start_reply(log.record_module(SOFTMAX_MODULE), "m", settings)
    log.finish_reply(pasted_id, Reply(model="m", settings=settings, text="", finish_reason=FINISHED))
    assert module_label(from_file) == "relu"
    assert module_label(log.get(pasted_id)) == "softmax"


def test_history_shows_this_sessions_entries_first_and_all_with_all(home):
    earlier = SessionLog.open()
    first = log_reply(earlier)
    earlier.close()
    current = SessionLog.open()
    mine = log_reply(current, code=SOFTMAX_MODULE)
    session = FakeSession(current)

    listing = session.run(":history")
    assert listing.index("this session") < listing.index("earlier sessions")
    assert listing.index(f"\n  {mine} ") < listing.index("earlier sessions") < listing.index(f"\n  {first} ")
    assert [entry.id for entry in current.recent(5, session="this")] == [mine]
    assert [entry.id for entry in current.recent(5, session="others")] == [first]

    every = FakeSession(current).run(":history --all")
    assert "this session" not in every and every.index(f"\n  {first} ") < every.index(f"\n  {mine} ")
    current.close()


def test_continue_restores_what_was_current_in_the_last_interactive_session(home):
    """--continue resumed the last row of the log: an empty candidate of a :best, or a one-shot run from elsewhere."""
    from repl.log.current import record_current

    repl_session = SessionLog.open()
    current = log_reply(repl_session)  # the kernel made current (a :pick, say)
    log_reply(repl_session, code=SOFTMAX_MODULE)  # a later candidate of another module, not current
    record_current(repl_session, repl_session.get(current).module_id, current)
    repl_session.close()
    oneshot = SessionLog.open(kind="oneshot")  # a one-shot run from another terminal, after it
    log_reply(oneshot, code=SOFTMAX_MODULE)
    oneshot.close()

    session = FakeSession(SessionLog.open())
    continue_last(session)
    assert [entry.id for entry in session.opened] == [current]


def test_continue_restores_a_module_that_had_no_kernel_yet(home):
    from repl.log.current import record_current

    repl_session = SessionLog.open()
    log_reply(repl_session)
    record_current(repl_session, repl_session.record_module(SOFTMAX_MODULE, source_name="23_Softmax"), None)
    repl_session.close()
    session = FakeSession(SessionLog.open())
    session.module = session.source_name = None
    continue_last(session)
    assert session.opened == [] and session.module.code == SOFTMAX_MODULE and session.source_name == "23_Softmax"
    assert "Continuing with 23_Softmax (no kernel yet" in session.console.file.getvalue()


def test_continue_skips_a_session_still_running_elsewhere_but_not_one_that_died(home):
    finished = SessionLog.open()
    mine = log_reply(finished)
    finished.close()
    running = SessionLog.open()  # another terminal's session, still open (its process, this one, is alive)
    log_reply(running, code=SOFTMAX_MODULE)

    starting = SessionLog.open()
    session = FakeSession(starting)
    continue_last(session)
    assert [entry.id for entry in session.opened] == [mine]

    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    with sqlite3.connect(default_log_path()) as db:  # the other session's process was killed: its work is the last
        db.execute("UPDATE sessions SET pid = ? WHERE id = ?", (int(dead.stdout), running.session_id))
    session = FakeSession(starting)
    continue_last(session)
    assert [entry.id for entry in session.opened] == [starting.last().id] != [mine]
    running.close()
    starting.close()
