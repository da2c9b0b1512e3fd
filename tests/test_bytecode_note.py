"""A judge says when torch was imported from source (no compiled bytecode): every checker process then compiles
torch's Python, seconds of each check, which `python -m compileall` removes (judge/bytecode.py, said by
judge/server.py)."""

import importlib
import py_compile
import sys
import types

from repl.checker.judge.bytecode import BYTECODE_NOTE, bytecode_notes


def _imported(tmp_path, monkeypatch, name: str):
    monkeypatch.syspath_prepend(str(tmp_path))
    importlib.invalidate_caches()
    sys.modules.pop(name, None)
    try:
        return importlib.import_module(name)
    finally:
        sys.modules.pop(name, None)


def test_a_module_imported_without_writing_its_bytecode_is_said_and_one_with_it_is_not(tmp_path, monkeypatch):
    (tmp_path / "made_here.py").write_text("VALUE = 1\n")
    monkeypatch.setattr(sys, "dont_write_bytecode", True)  # PYTHONDONTWRITEBYTECODE, as on the H200 machine
    assert bytecode_notes(_imported(tmp_path, monkeypatch, "made_here")) == [BYTECODE_NOTE]
    py_compile.compile(str(tmp_path / "made_here.py"))  # what `python -m compileall` writes
    assert bytecode_notes(_imported(tmp_path, monkeypatch, "made_here")) == []


def test_a_module_with_no_file_behind_it_is_not_said():
    assert bytecode_notes(types.ModuleType("frozen")) == []
    assert bytecode_notes(sys) == []  # built in
