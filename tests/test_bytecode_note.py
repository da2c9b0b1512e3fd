"""A judge says when torch was imported from source (no compiled bytecode): every checker process then compiles
torch's Python, seconds of each check, which `python -m compileall` removes (devices.py, said by judge/server.py)."""

import types

from repl.checker.devices import BYTECODE_NOTE, bytecode_notes


def test_a_module_imported_from_source_is_said(tmp_path):
    module = types.ModuleType("torch")
    module.__cached__ = str(tmp_path / "__pycache__" / "__init__.cpython-312.pyc")
    assert bytecode_notes(module) == [BYTECODE_NOTE]


def test_a_module_with_its_bytecode_is_not(tmp_path):
    cached = tmp_path / "__init__.cpython-312.pyc"
    cached.write_bytes(b"")
    module = types.ModuleType("torch")
    module.__cached__ = str(cached)
    assert bytecode_notes(module) == []
    assert bytecode_notes(types.ModuleType("frozen")) == []  # no file behind it at all


def test_this_machines_torch_has_its_bytecode():
    import torch

    assert bytecode_notes(torch) == []  # pip compiles it; CI's checks would otherwise carry the note
