"""`log --delete` prunes the session log through its one writer: by entry id, --before DATE, a whole session (and the
other filters); a bad selector removes nothing and says why in one line; a session writing meanwhile loses nothing;
on a terminal it asks first."""

import sqlite3
import subprocess
import sys
import textwrap

import pexpect
import pytest

from processes import wait_until
from repl.cli.main import main
from repl.log.session_log import SessionLog, default_log_path
from test_session_log import MODULE, REPO_ROOT, home, log_reply, subprocess_env  # noqa: F401 (home: a fixture)

OTHER_MODULE = MODULE.replace("torch.relu(x)", "torch.tanh(x)")


def session_with(count: int, code: str = MODULE) -> list[int]:
    """A finished session that logged `count` entries; their ids."""
    log = SessionLog.open()
    ids = [log_reply(log, code=code) for _ in range(count)]
    log.close()
    return ids


def remaining() -> list[int]:
    with sqlite3.connect(default_log_path()) as db:
        return [row[0] for row in db.execute("SELECT id FROM replies ORDER BY id")]


def table_count(table: str) -> int:
    with sqlite3.connect(default_log_path()) as db:
        return db.execute(f"SELECT count(*) FROM {table}").fetchone()[0]


def test_delete_by_entry_id(home, capsys):
    ids = session_with(3)
    assert main(["log", "--delete", str(ids[0]), str(ids[2]), "--yes"]) == 0
    assert remaining() == [ids[1]]
    assert f"Removed 2 entries ({ids[0]}, {ids[2]})." in capsys.readouterr().out


def test_delete_before_a_date_removes_the_older_entries_with_their_checks(home, capsys):
    ids = session_with(3)
    with sqlite3.connect(default_log_path()) as db:
        db.execute("UPDATE replies SET time = '2026-01-05T10:00:00.000+00:00' WHERE id = ?", (ids[0],))
        db.execute("INSERT INTO checks (reply_id, time, verdict, result) VALUES (?, '', 'correct', '{}')", (ids[0],))
    assert main(["log", "--delete", "--before", "2026-02-01", "--yes"]) == 0
    assert remaining() == ids[1:]
    assert table_count("checks") == 0
    assert "Removed 1 entry" in capsys.readouterr().out


def test_delete_a_whole_session_with_its_unused_module(home, capsys):
    first = session_with(2, code=OTHER_MODULE)
    second = session_with(1)
    assert main(["log", "--delete", "--session", "1", "--yes"]) == 0
    assert remaining() == second
    assert table_count("sessions") == 1 and table_count("modules") == 1  # the tanh module went with its session
    out = capsys.readouterr().out
    assert f"Removed 2 entries ({first[0]}-{first[1]}), 1 session left empty and 1 module no entry uses." in out


@pytest.mark.parametrize("arguments, message", [
    (["--delete"], "--delete needs a selector"),
    (["--delete", "1", "99", "--yes"], "no entry 99 in the session log"),
    (["--delete", "--before", "last week", "--yes"], "--before takes a date"),
    (["--delete", "1", "-n", "3", "--yes"], "--delete goes with entry ids"),
    (["--before", "2026-01-01"], "--before and --yes go with --delete"),
    (["--delete", "1"], "--delete asks before removing 1 entry (1); add --yes"),  # stdin is no terminal here
])
def test_a_bad_selector_removes_nothing_and_says_why_in_one_line(home, capsys, arguments, message):
    ids = session_with(2)
    assert main(["log", *arguments]) != 0
    error = capsys.readouterr().err
    assert message in error and len(error.strip().splitlines()) == 1, error
    assert remaining() == ids


WRITER = textwrap.dedent("""
    import sys, time
    from pathlib import Path
    sys.path.insert(0, "tests")
    from repl.log.session_log import SessionLog
    from test_session_log import log_reply
    folder = Path(sys.argv[1])
    log = SessionLog.open(write_interval_s=0)
    written = [log_reply(log)]
    (folder / "ready").touch()
    while not (folder / "stop").exists():
        written.append(log_reply(log))
    log.close()
    print(len(written), log.warning)
""")


def test_a_session_writing_meanwhile_loses_nothing_and_keeps_its_entries(home, tmp_path, capsys):
    old = session_with(3)
    writer = subprocess.Popen([sys.executable, "-c", WRITER, str(tmp_path)], cwd=REPO_ROOT, env=subprocess_env(home),
                              stdout=subprocess.PIPE, text=True)
    try:
        assert wait_until(lambda: (tmp_path / "ready").exists(), timeout_s=60)
        # Every entry is chosen; those of the running session are kept, the others removed, while it writes.
        assert main(["log", "--delete", "--before", "2999-01-01", "--yes"]) == 0
        (tmp_path / "stop").touch()
        written, warning = writer.communicate(timeout=60)[0].split()
    finally:
        writer.kill()
    assert warning == "None" and writer.returncode == 0
    assert not set(old) & set(remaining()) and len(remaining()) == int(written)
    assert "of sessions still running" in capsys.readouterr().err


def test_on_a_terminal_it_lists_the_entries_and_asks_first(home):
    ids = session_with(2)
    child = pexpect.spawn(sys.executable, ["kernelllm.py", "log", "--delete", str(ids[0])], cwd=str(REPO_ROOT),
                          env=subprocess_env(home), encoding="utf-8", dimensions=(40, 120))
    child.expect(r"Delete 1 entry\? \[y/N\]", timeout=60)
    assert "relu" in child.before  # the entry, shown before the question
    child.sendline("y")
    child.expect(rf"Removed 1 entry \({ids[0]}\)\.", timeout=60)
    child.expect(pexpect.EOF, timeout=60)
    assert remaining() == ids[1:]
