"""The session log's schema: append-only migrations, in the manner of simonw/llm. A migration, once released, is
never edited; a change is a new function appended below. session_log.py applies them when it opens the database."""

import sqlite3
from datetime import datetime, timezone
from typing import Callable

MIGRATIONS: list[Callable[[sqlite3.Connection], None]] = []
migration = MIGRATIONS.append


@migration
def m001_modules_replies_checks(db: sqlite3.Connection) -> None:
    db.execute("""
        CREATE TABLE modules (
            id INTEGER PRIMARY KEY,
            time TEXT NOT NULL,                -- first submitted, ISO 8601 UTC
            code_hash TEXT NOT NULL UNIQUE,    -- sha256 of code: a module submitted again is the same row
            name TEXT,                         -- the class the kernel replaces, e.g. Model
            source_name TEXT,                  -- stem of the file it was loaded from, if any
            code TEXT NOT NULL
        )""")
    db.execute("""
        CREATE TABLE replies (
            id INTEGER PRIMARY KEY,
            module_id INTEGER NOT NULL REFERENCES modules(id),
            time TEXT NOT NULL,                -- generation started, ISO 8601 UTC
            model TEXT NOT NULL,
            temperature REAL,
            top_p REAL,
            max_new_tokens INTEGER,
            seed INTEGER,                      -- the seed this generation used (seed+n with --seed), or NULL
            text TEXT NOT NULL DEFAULT '',     -- rewritten while streaming
            tokens INTEGER NOT NULL DEFAULT 0,
            finish_reason TEXT,                -- stop, length, interrupted, error; NULL: still streaming, or the
                                               -- writing process died before the reply ended
            error TEXT,
            elapsed_s REAL,
            first_token_s REAL,                -- prefill latency
            tokens_per_second REAL
        )""")
    db.execute("""
        CREATE TABLE checks (
            id INTEGER PRIMARY KEY,
            reply_id INTEGER NOT NULL REFERENCES replies(id),
            time TEXT NOT NULL,
            verdict TEXT NOT NULL,
            device TEXT,
            speedup_vs_eager REAL,
            speedup_vs_compiled REAL,
            result TEXT NOT NULL               -- the whole CheckResult as JSON
        )""")


@migration
def m002_reply_heartbeat_and_indexes(db: sqlite3.Connection) -> None:
    # updated_at: when a reply's row was last written, so a reply whose writer was killed still has a duration.
    db.execute("ALTER TABLE replies ADD COLUMN updated_at TEXT")
    db.execute("UPDATE replies SET updated_at = time")
    db.execute("CREATE INDEX replies_module_id ON replies(module_id)")
    db.execute("CREATE INDEX checks_reply_id ON checks(reply_id)")


@migration
def m003_sessions(db: sqlite3.Connection) -> None:
    # A session is one process that wrote replies (the REPL, or a one-shot run): :history lists the current one's
    # first, and --continue skips sessions still running elsewhere.
    db.execute("""
        CREATE TABLE sessions (
            id INTEGER PRIMARY KEY,
            started_at TEXT NOT NULL,
            ended_at TEXT,                     -- NULL: still running, or killed (then its pid is gone)
            pid INTEGER,
            kind TEXT                          -- repl, oneshot, samples
        )""")
    db.execute("ALTER TABLE replies ADD COLUMN session_id INTEGER REFERENCES sessions(id)")
    db.execute("CREATE INDEX replies_session_id ON replies(session_id)")


@migration
def m004_session_current(db: sqlite3.Connection) -> None:
    # What was current when an interactive session ended (its module, its kernel's reply): what --continue restores.
    db.execute("ALTER TABLE sessions ADD COLUMN current_module_id INTEGER REFERENCES modules(id)")
    db.execute("ALTER TABLE sessions ADD COLUMN current_reply_id INTEGER REFERENCES replies(id)")


def migrate(db: sqlite3.Connection, migrations: list = MIGRATIONS) -> None:
    """Apply the migrations not yet recorded in _migrations, in order, in one transaction."""
    db.execute("BEGIN IMMEDIATE")
    try:
        db.execute("CREATE TABLE IF NOT EXISTS _migrations (name TEXT PRIMARY KEY, applied_at TEXT NOT NULL)")
        applied = {name for (name,) in db.execute("SELECT name FROM _migrations")}
        for step in migrations:
            if step.__name__ not in applied:
                step(db)
                db.execute("INSERT INTO _migrations (name, applied_at) VALUES (?, ?)", (step.__name__, utc_now()))
        db.execute("COMMIT")
    except BaseException:
        if db.in_transaction:
            db.execute("ROLLBACK")
        raise


@migration
def m005_tuned_replies(db: sqlite3.Connection) -> None:
    # A kernel :tune made current: its reply row holds the tuned text, this the variant (JSON: from_reply, launch...)
    db.execute("ALTER TABLE replies ADD COLUMN tuning TEXT")


def utc_now() -> str:
    """Now, ISO 8601 UTC, as every time in the log is written."""
    return datetime.now(timezone.utc).isoformat(timespec="milliseconds")
