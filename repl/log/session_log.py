"""The session log: every module, reply and check, appended to a SQLite database in the data directory.

Nothing the user saw may be lost: a reply is written while it streams (one UPDATE of its row at most every
``write_interval_s``, and always when it ends), each write is its own committed transaction, and the database runs
in WAL mode with ``synchronous=FULL``, so a ``kill -9`` or a power cut loses at most the last interval of a reply.
Two sessions may write at once: transactions are single statements (or short ``BEGIN IMMEDIATE`` blocks) and wait
for each other through SQLite's busy timeout.

The log never stops a session: opening it never raises, and any SQLite or file error (corrupt, locked, read-only)
turns it off with one line in ``warning`` (also passed to ``on_warning``); every method then does nothing.

Schema changes are append-only migrations (schema.py).
"""

import hashlib
import json
import os
import sqlite3
import threading
import time
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Callable

from repl.core.errors import one_line
from repl.log.entry import LogEntry
from repl.generation import INTERRUPTED, Reply
from repl.core.paths import data_dir
from repl.core.settings import SamplingSettings
from repl.log.schema import MIGRATIONS, migrate, utc_now as _now  # noqa: F401 (MIGRATIONS: for its tests)

LOG_FILE_NAME = "session_log.db"
NO_LOG_VARIABLE = "KERNELLLM_NO_LOG"
WRITE_INTERVAL_S = 0.5  # how much of a streaming reply a kill may lose, at most
BUSY_TIMEOUT_S = 5.0  # how long a write waits for another session's transaction before the log gives up


def default_log_path() -> Path:
    return data_dir() / LOG_FILE_NAME


def logging_off_by_environment() -> bool:
    return os.environ.get(NO_LOG_VARIABLE, "").strip().lower() not in {"", "0", "false", "no", "off"}


class SessionLog:
    """Use ``SessionLog.open()``; a log that could not be opened, or failed later, is off and does nothing."""

    def __init__(self, db: sqlite3.Connection | None, path: Path | None, warning: str | None = None,
                 on_warning: Callable[[str], None] | None = None, write_interval_s: float = WRITE_INTERVAL_S,
                 clock: Callable[[], float] = time.monotonic, kind: str = "repl"):
        self._db = db
        self.kind = kind
        self.session_id: int | None = None  # this process's row in sessions, made with its first reply
        self.path = path
        self.warning = warning
        self.on_warning = on_warning
        self._write_interval_s = write_interval_s
        self._clock = clock
        self._last_write: dict[int, float] = {}  # reply id -> clock() of its last write
        self._lock = threading.Lock()  # one connection, shared by the UI thread and workers

    @classmethod
    def open(cls, path: str | os.PathLike | None = None, *, enabled: bool | None = None,
             on_warning: Callable[[str], None] | None = None, busy_timeout_s: float = BUSY_TIMEOUT_S,
             write_interval_s: float = WRITE_INTERVAL_S, clock: Callable[[], float] = time.monotonic,
             kind: str = "repl") -> "SessionLog":
        """The log at path (default: session_log.db in the data directory). Never raises. enabled=None follows
        KERNELLLM_NO_LOG; a log turned off on purpose has no warning. kind names what writes (repl, oneshot, ...)."""
        if enabled is None:
            enabled = not logging_off_by_environment()
        if not enabled:
            return cls(None, None)
        path = Path(path) if path is not None else default_log_path()

        def connect() -> sqlite3.Connection:
            path.parent.mkdir(parents=True, exist_ok=True)
            db = sqlite3.connect(path, timeout=busy_timeout_s, isolation_level=None, check_same_thread=False)
            try:
                db.execute("PRAGMA journal_mode = WAL")
                db.execute("PRAGMA synchronous = FULL")  # WAL + FULL: a committed write survives a power cut too
                migrate(db)
            except BaseException:
                db.close()
                raise
            return db

        try:
            db = _retry_when_busy(connect)
        except (sqlite3.Error, OSError) as error:
            log = cls(None, path, on_warning=on_warning)
            log._give_up(error)
            return log
        db.row_factory = sqlite3.Row
        return cls(db, path, on_warning=on_warning, write_interval_s=write_interval_s, clock=clock, kind=kind)

    @property
    def enabled(self) -> bool:
        return self._db is not None

    def __enter__(self) -> "SessionLog":
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()

    def close(self) -> None:
        """Mark this session ended and close the database."""
        if self.session_id is not None:
            self._run(lambda db: db.execute("UPDATE sessions SET ended_at = ? WHERE id = ?", (_now(), self.session_id)))
        with self._lock:
            if self._db is not None:
                self._db.close()
                self._db = None

    def _give_up(self, error: Exception) -> None:
        """Turn the log off with one line of warning, once."""
        if self._db is not None:
            try:
                self._db.close()
            except sqlite3.Error:
                pass
            self._db = None
        if self.warning is None:
            self.warning = f"Session log off ({self.path}): {_reason(error)}; the session goes on without it."
            if self.on_warning is not None:
                self.on_warning(self.warning)

    def _run(self, work: Callable[[sqlite3.Connection], object], default=None):
        """work(db) under the lock; a failure turns the log off and gives default."""
        with self._lock:
            if self._db is None:
                return default
            try:
                return _retry_when_busy(lambda: work(self._db))
            except (sqlite3.Error, OSError) as error:
                self._give_up(error)
                return default

    # -- writing -----------------------------------------------------------------------------------------------
    def record_module(self, code: str, name: str | None = None, source_name: str | None = None) -> int | None:
        """The module's id; a module submitted again (same code) keeps its row, taking the newer source_name."""
        if name is None:
            from repl.core.module_source import inspect_module_source

            name = inspect_module_source(code).model_class
        code_hash = hashlib.sha256(code.encode("utf-8", "surrogatepass")).hexdigest()
        return self._run(lambda db: db.execute(
            "INSERT INTO modules (time, code_hash, name, source_name, code) VALUES (?, ?, ?, ?, ?) "
            "ON CONFLICT (code_hash) DO UPDATE SET source_name = coalesce(excluded.source_name, source_name) "
            "RETURNING id", (_now(), code_hash, name, source_name, code)).fetchone()[0])

    def start_reply(self, module_id: int | None, model: str, settings: SamplingSettings) -> int | None:
        """A new, empty reply row; pass the stream's reply.model and reply.settings (they carry the seed used)."""
        if module_id is None:
            return None

        def insert(db):
            now = _now()
            self._ensure_session(db)
            reply_id = db.execute(
                "INSERT INTO replies (module_id, time, updated_at, model, temperature, top_p, max_new_tokens, seed, "
                "session_id) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (module_id, now, now, model, settings.temperature, settings.top_p, settings.max_new_tokens,
                 settings.seed, self.session_id)).lastrowid
            self._last_write[reply_id] = self._clock()
            return reply_id

        return self._run(insert)

    def _ensure_session(self, db: sqlite3.Connection) -> None:
        """This process's row in sessions, made with the first thing it records."""
        if self.session_id is None:
            self.session_id = db.execute("INSERT INTO sessions (started_at, pid, kind) VALUES (?, ?, ?)",
                                         (_now(), os.getpid(), self.kind)).lastrowid

    def append_reply_text(self, reply_id: int | None, text: str, tokens: int) -> bool:
        """Record the reply so far, if write_interval_s has passed since its last write; True when it wrote."""
        if reply_id is None or self._clock() - self._last_write.get(reply_id, float("-inf")) < self._write_interval_s:
            return False

        def update(db):
            db.execute("UPDATE replies SET text = ?, tokens = ?, updated_at = ? WHERE id = ?",
                       (text, tokens, _now(), reply_id))
            self._last_write[reply_id] = self._clock()
            return True

        return self._run(update, default=False)

    def finish_reply(self, reply_id: int | None, reply: Reply) -> None:
        """Record the final reply: all its text, why it ended, its timing."""
        if reply_id is None:
            return
        first_token_s = reply.first_token_at - reply.started_at if reply.first_token_at is not None else None
        self._last_write.pop(reply_id, None)
        self._run(lambda db: db.execute(
            "UPDATE replies SET text = ?, tokens = ?, finish_reason = ?, error = ?, elapsed_s = ?, first_token_s = ?, "
            "tokens_per_second = ?, updated_at = ? WHERE id = ?",
            (reply.text, reply.tokens, reply.finish_reason or INTERRUPTED, reply.error, reply.elapsed_s, first_token_s,
             reply.tokens_per_second, _now(), reply_id)))

    def record_tuning(self, reply_id: int | None, tuning: dict) -> None:
        """Mark a reply as a tuned variant of another's kernel (tuning: plain data, from_reply its entry)."""
        if reply_id is not None:
            self._run(lambda db: db.execute("UPDATE replies SET tuning = ? WHERE id = ?", (json.dumps(tuning), reply_id)))

    def discard_reply(self, reply_id: int | None) -> None:
        """Remove a reply's row (one stopped before its first token: an entry with nothing in it)."""
        self._last_write.pop(reply_id, None)
        self._run(lambda db: db.execute("DELETE FROM replies WHERE id = ?", (reply_id,)))

    def record_check(self, reply_id: int | None, result) -> None:
        """Append a check of the reply's kernel: a repl.checker.CheckResult or its to_json_dict()."""
        if reply_id is None:
            return
        data = result if isinstance(result, dict) else result.to_json_dict()
        self._run(lambda db: db.execute(
            "INSERT INTO checks (reply_id, time, verdict, device, speedup_vs_eager, speedup_vs_compiled, result) "
            "VALUES (?, ?, ?, ?, ?, ?, ?)", (reply_id, _now(), data["verdict"], data.get("device"),
                                             data.get("speedup_vs_eager"), data.get("speedup_vs_compiled"),
                                             json.dumps(data))))

    def delete_entries(self, entry_ids) -> "Pruned":
        """Remove entries (replies with their checks) in one transaction, with the sessions they leave empty and,
        when no other session is running, the modules they leave unused. Entries of a session still running are
        kept (its process may write them yet): Pruned.kept_running names them."""
        ids = sorted(set(entry_ids))

        def delete(db):
            db.execute("BEGIN IMMEDIATE")  # no session writes between choosing the rows and removing them
            try:
                pruned = _delete_replies(db, ids, running=self._running_sessions(db) - {self.session_id})
                db.execute("COMMIT")
            except BaseException:
                db.execute("ROLLBACK")
                raise
            return pruned

        return self._run(delete, default=Pruned([], [], 0, 0))

    @staticmethod
    def _running_sessions(db: sqlite3.Connection) -> set[int]:
        rows = db.execute("SELECT id, pid FROM sessions WHERE ended_at IS NULL").fetchall()
        return {row["id"] for row in rows if _process_alive(row["pid"])}

    # -- reading -----------------------------------------------------------------------------------------------
    def recent(self, n: int | None = 10, *, session: str = "all") -> list[LogEntry]:
        """The last n entries (all with n=None), oldest first: of every session (session="all"), of this process's
        session ("this") or of the others ("others")."""
        if session == "this" and self.session_id is None:
            return []
        where = {"all": "", "this": " WHERE r.session_id = ?",
                 "others": " WHERE r.session_id IS NULL OR r.session_id != ?"}[session]
        parameters = (() if session == "all" else (self.session_id or -1,)) + (-1 if n is None else n,)
        rows = self._run(lambda db: db.execute(_ENTRY_QUERY + where + " ORDER BY r.id DESC LIMIT ?",
                                               parameters).fetchall(), default=[])
        return [_entry(row) for row in reversed(rows)]

    def find(self, n: int | None = None, *, verdict: str | None = None, session_id: int | None = None,
             before: str | None = None) -> list[LogEntry]:
        """The last n entries (all with n=None), oldest first, of one session, with one verdict (of the latest
        check; "unchecked" for entries never checked) and begun before a time (ISO 8601 UTC) where given."""
        conditions, parameters = [], []
        if before is not None:
            conditions.append("r.time < ?")
            parameters.append(before)
        if session_id is not None:
            conditions.append("r.session_id = ?")
            parameters.append(session_id)
        if verdict == "unchecked":
            conditions.append("NOT EXISTS (SELECT 1 FROM checks c WHERE c.reply_id = r.id)")
        elif verdict is not None:
            conditions.append("(SELECT c.verdict FROM checks c WHERE c.reply_id = r.id ORDER BY c.id DESC LIMIT 1) = ?")
            parameters.append(verdict)
        where = " WHERE " + " AND ".join(conditions) if conditions else ""
        rows = self._run(lambda db: db.execute(_ENTRY_QUERY + where + " ORDER BY r.id DESC LIMIT ?",
                                               (*parameters, -1 if n is None else n)).fetchall(), default=[])
        return [_entry(row) for row in reversed(rows)]

    def last_session_id(self) -> int | None:
        """The newest session that logged a reply."""
        return self._run(lambda db: db.execute("SELECT max(session_id) FROM replies").fetchone()[0])

    def get(self, entry_id: int) -> LogEntry | None:
        row = self._run(lambda db: db.execute(_ENTRY_QUERY + " WHERE r.id = ?", (entry_id,)).fetchone())
        return _entry(row) if row is not None else None

    def last(self) -> LogEntry | None:
        entries = self.recent(1)
        return entries[0] if entries else None

    def last_of_finished_sessions(self) -> LogEntry | None:
        """What --continue opens: the last entry of a session that is over (ended, or its process gone), so that a
        session still running in another terminal does not take over; the last entry of all when every session is
        still running."""

        def query(db):
            running = list(self._running_sessions(db))
            marks = ",".join("?" * len(running))
            return db.execute(_ENTRY_QUERY + f" WHERE r.session_id IS NULL OR r.session_id NOT IN ({marks}) "
                              "ORDER BY r.id DESC LIMIT 1", running).fetchone()

        row = self._run(query)
        return _entry(row) if row is not None else self.last()


_ENTRY_QUERY = """
    SELECT r.*, m.name AS module_name, m.code AS module_code, m.source_name,
           (SELECT c.result FROM checks c WHERE c.reply_id = r.id ORDER BY c.id DESC LIMIT 1) AS check_result
    FROM replies r JOIN modules m ON m.id = r.module_id"""


@dataclass
class Pruned:
    """What delete_entries removed, and the entries it kept because their session is still running."""
    removed: list[int]
    kept_running: list[int]
    sessions: int
    modules: int


def _delete_replies(db: sqlite3.Connection, ids: list[int], running: set[int]) -> Pruned:
    rows = db.execute(f"SELECT id, session_id, module_id FROM replies WHERE id IN ({','.join('?' * len(ids))})",
                      ids).fetchall()
    kept = [row["id"] for row in rows if row["session_id"] in running]
    removed = [row for row in rows if row["session_id"] not in running]
    gone = [row["id"] for row in removed]
    marks = ",".join("?" * len(gone))
    db.execute(f"DELETE FROM checks WHERE reply_id IN ({marks})", gone)
    db.execute(f"DELETE FROM replies WHERE id IN ({marks})", gone)
    db.execute(f"UPDATE sessions SET current_reply_id = NULL WHERE current_reply_id IN ({marks})", gone)
    sessions = {row["session_id"] for row in removed if row["session_id"] is not None}
    emptied = [session for session in sessions
               if db.execute("SELECT 1 FROM replies WHERE session_id = ?", (session,)).fetchone() is None]
    db.execute(f"DELETE FROM sessions WHERE id IN ({','.join('?' * len(emptied))})", emptied)
    modules = 0
    if not running:  # a running session may hold a module's id to start its next reply with
        unused = db.execute(
            f"DELETE FROM modules WHERE id IN ({','.join('?' * len(removed))}) AND NOT EXISTS (SELECT 1 FROM replies "
            "r WHERE r.module_id = modules.id) AND NOT EXISTS (SELECT 1 FROM sessions s WHERE s.current_module_id = "
            "modules.id)", [row["module_id"] for row in removed])
        modules = unused.rowcount
    return Pruned(gone, kept, len(emptied), modules)


def _retry_when_busy(work: Callable[[], object], attempts: int = 4):
    """work(), tried again a few times when SQLite answers "locked" or "busy" at once: some lock conflicts between two
    sessions (two connections opening a new WAL database together, a write that would deadlock) skip the busy
    timeout and fail immediately; a moment later they succeed."""
    for attempt in range(attempts):
        started = time.monotonic()
        try:
            return work()
        except sqlite3.OperationalError as error:
            busy = "locked" in str(error) or "busy" in str(error)
            waited_out = time.monotonic() - started > 1.0  # the busy timeout ran out: a lock really held, give up
            if not busy or waited_out or attempt == attempts - 1:
                raise
            time.sleep(0.05 * 2 ** attempt)


def _entry(row: sqlite3.Row) -> LogEntry:
    elapsed_s = row["elapsed_s"]
    if elapsed_s is None and row["updated_at"]:  # unfinished: as long as it was heard from
        elapsed_s = (datetime.fromisoformat(row["updated_at"]) - datetime.fromisoformat(row["time"])).total_seconds()
    return LogEntry(
        id=row["id"], time=row["time"], module_id=row["module_id"], module_name=row["module_name"],
        module_code=row["module_code"], source_name=row["source_name"], model=row["model"],
        settings=SamplingSettings(temperature=row["temperature"], top_p=row["top_p"],
                                  max_new_tokens=row["max_new_tokens"], seed=row["seed"]),
        text=row["text"], tokens=row["tokens"], finish_reason=row["finish_reason"], error=row["error"],
        elapsed_s=elapsed_s, first_token_s=row["first_token_s"], tokens_per_second=row["tokens_per_second"],
        check=json.loads(row["check_result"]) if row["check_result"] else None, session_id=row["session_id"],
        tuning=_json_object(row["tuning"]))


def _json_object(text: str | None) -> dict | None:
    """A column of JSON that holds an object, else None (written by hand, or by a newer writer, it may not)."""
    try:
        value = json.loads(text) if text else None
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def _process_alive(pid: int | None) -> bool:
    if not pid:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process with that id
        return True
    return True


def _reason(error: Exception) -> str:
    message = one_line(error)
    if "locked" in message or "busy" in message:
        return "the database is locked by another program"
    if "not a database" in message or "malformed" in message:
        return f"the database is damaged ({message}); move it aside to start a new log"
    if isinstance(error, OSError):
        return f"cannot create its directory: {error.strerror or message}"
    if "readonly" in message or "unable to open" in message:
        return f"cannot write the database ({message})"
    return message
