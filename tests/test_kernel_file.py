"""Saving a kernel: atomic, no silent overwrite, failures leave the old file alone."""

import errno
import os

import pytest

from repl.core.kernel_file import kernel_header, write_kernel_file, write_text_atomically
from repl.core.settings import SamplingSettings


def test_writes_the_text_and_leaves_no_temporary_file(tmp_path):
    written = write_kernel_file(tmp_path / "k.py", "print(1)\n")
    assert written.read_text() == "print(1)\n"
    assert os.listdir(tmp_path) == ["k.py"]


def test_refuses_to_overwrite_without_force(tmp_path):
    target = tmp_path / "k.py"
    target.write_text("old")
    with pytest.raises(FileExistsError):
        write_kernel_file(target, "new")
    assert target.read_text() == "old"
    write_kernel_file(target, "new", force=True)
    assert target.read_text() == "new"
    assert os.listdir(tmp_path) == ["k.py"]


def test_a_path_that_cannot_be_written_raises_oserror_and_leaves_nothing(tmp_path):
    # A regular file where a directory should be: fails for every user, root included (unlike a read-only dir).
    (tmp_path / "not_a_dir").write_text("x")
    with pytest.raises(OSError):
        write_kernel_file(tmp_path / "not_a_dir" / "k.py", "x")
    assert os.listdir(tmp_path) == ["not_a_dir"]


def test_full_disk_leaves_the_existing_file_untouched(tmp_path, monkeypatch):
    target = tmp_path / "k.py"
    target.write_text("old")

    def disk_full(descriptor):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "fsync", disk_full)
    with pytest.raises(OSError) as error:
        write_kernel_file(target, "new", force=True)
    assert error.value.errno == errno.ENOSPC
    assert target.read_text() == "old"
    assert os.listdir(tmp_path) == ["k.py"]


def test_a_symbolic_link_is_never_written_through(tmp_path):
    real = tmp_path / "shared" / "kernel.py"
    real.parent.mkdir()
    real.write_text("old")
    link = tmp_path / "kernel.py"
    link.symlink_to(real)
    with pytest.raises(FileExistsError):
        write_kernel_file(link, "new")
    with pytest.raises(OSError) as refused:
        write_kernel_file(link, "new", force=True)
    assert refused.value.errno == errno.ELOOP and "symbolic link" in str(refused.value)
    assert link.is_symlink() and real.read_text() == "old"
    assert sorted(os.listdir(tmp_path)) == ["kernel.py", "shared"] and os.listdir(real.parent) == ["kernel.py"]


def test_a_dangling_link_creates_nothing_outside_the_folder(tmp_path):
    outside = tmp_path / "outside" / "planted.py"
    outside.parent.mkdir()
    folder = tmp_path / "folder"
    folder.mkdir()
    (folder / "kernel.py").symlink_to(outside)
    for force in (False, True):
        with pytest.raises(OSError):
            write_kernel_file(folder / "kernel.py", "import os\n", force=force)
        with pytest.raises(OSError):
            write_text_atomically(folder / "kernel.py", "import os\n", replace=force)
    assert not outside.exists() and os.listdir(folder) == ["kernel.py"]


def test_an_existing_file_keeps_its_permissions(tmp_path):
    target = tmp_path / "k.py"
    target.write_text("old")
    target.chmod(0o600)
    write_kernel_file(target, "new", force=True)
    assert target.read_text() == "new" and (target.stat().st_mode & 0o777) == 0o600
    assert (write_kernel_file(tmp_path / "fresh.py", "x").stat().st_mode & 0o777) == 0o644


def test_what_is_not_a_regular_file_is_written_in_place_not_replaced(tmp_path):
    # :save /dev/full --force renamed a regular file over the device (root may): "Saved /dev/full", and the machine
    # had no /dev/full. A FIFO stands in for a device here (a test must not risk /dev).
    import stat

    fifo = tmp_path / "kernel.fifo"
    os.mkfifo(fifo)
    reader = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)  # a reader, so that opening it to write does not wait
    try:
        write_kernel_file(fifo, "print(1)\n", force=True)
        assert stat.S_ISFIFO(os.stat(fifo).st_mode)
        assert os.read(reader, 100) == b"print(1)\n"
    finally:
        os.close(reader)
    assert os.listdir(tmp_path) == ["kernel.fifo"]


def test_header_says_whether_the_kernel_was_checked():
    settings = SamplingSettings(seed=3)
    assert "Not checked" in kernel_header("m", settings)
    assert "seed 3" in kernel_header("m", settings)

    class Check:
        verdict, device, message = "correct", "cpu-interpreter", "5 trials"

    assert "# Checked: correct on cpu-interpreter (5 trials)" in kernel_header("m", settings, Check())


LINE_ENDS = ["\n", "\r", "\r\n", "\x0b", "\x0c", "\x1c", "\x1d", "\x1e", "\x85", "\u2028", "\u2029"]


@pytest.mark.parametrize("line_end", LINE_ENDS)
def test_nothing_a_check_message_holds_leaves_the_header_comment(line_end, tmp_path):
    """A candidate controls its error text: a line end in it must not turn the rest into code that runs on import."""
    import io
    import tokenize

    from types import SimpleNamespace

    planted = tmp_path / "pwned"
    check = SimpleNamespace(verdict="mismatch", device=f"cpu{line_end}import sys",
                            message=f"boom{line_end}open({str(planted)!r}, 'w').write('x'){line_end}#")

    header = kernel_header(f"model{line_end}import os", SamplingSettings(), check)
    assert all(line.startswith("# ") for line in header.splitlines())
    tokens = [token.type for token in tokenize.generate_tokens(io.StringIO(header).readline)]
    assert set(tokens) <= {tokenize.COMMENT, tokenize.NL, tokenize.NEWLINE, tokenize.ENDMARKER}
    written = write_kernel_file(tmp_path / "k.py", header + "x = 1\n")
    namespace = {}
    exec(compile(written.read_text(), str(written), "exec"), namespace)
    assert not planted.exists() and "os" not in namespace and "sys" not in namespace
