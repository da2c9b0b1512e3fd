"""What was current when an interactive session ended (its module, the reply of its kernel), kept in the session
log's sessions table: what --continue restores, rather than the last row of the log (a one-shot run from another
terminal, or a candidate of a :best)."""

from repl.log.session_log import LogEntry, SessionLog, _process_alive


def record_current(log: SessionLog, module_id: int | None, reply_id: int | None) -> None:
    """Note what is current as this session ends."""
    if module_id is None:
        return

    def update(db):
        log._ensure_session(db)
        db.execute("UPDATE sessions SET current_module_id = ?, current_reply_id = ? WHERE id = ?",
                   (module_id, reply_id, log.session_id))

    log._run(update)


def current_of_last_session(log: SessionLog) -> tuple[str, str | None, LogEntry | None] | None:
    """What was current when the last interactive session that is over ended, as (module code, its file's name, the
    entry of its kernel or None); for one that ended without saying (killed), its last entry. None when no
    interactive session is over."""

    def last_session_over(db):
        for row in db.execute("SELECT id, pid, ended_at, current_module_id, current_reply_id FROM sessions "
                              "WHERE kind = 'repl' ORDER BY id DESC").fetchall():
            if row["ended_at"] is not None or not _process_alive(row["pid"]):
                return row
        return None

    session = log._run(last_session_over)
    if session is None:
        return None
    if session["current_module_id"] is None:
        entries = log.find(1, session_id=session["id"])
        return (entries[0].module_code, entries[0].source_name, entries[0]) if entries else None
    entry = log.get(session["current_reply_id"]) if session["current_reply_id"] is not None else None
    module = log._run(lambda db: db.execute("SELECT code, source_name FROM modules WHERE id = ?",
                                            (session["current_module_id"],)).fetchone())
    return (module["code"], module["source_name"], entry) if module is not None else None
