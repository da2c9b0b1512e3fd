"""Triton's launchers built once per fork server (candidate/prebuilt_launchers.py): the builder's frames reach the
candidates' caches intact, and on a GPU a candidate seeded with them builds no launcher for a common kernel."""

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

from repl.checker.candidate import prebuilt_launchers
from repl.checker.candidate.prebuilt_launchers import CONSTEXPR, INT32, POINTER, PREBUILT, Harvest, forms

ROOT = Path(__file__).resolve().parents[1]

FAKE_BUILDER = textwrap.dedent("""
    import json, sys, time
    out = sys.stdout.buffer
    frames = [("k1" * 16, "__triton_launcher.so", b"\\x7fELF" + bytes(range(256)) * 40),
              ("k2" * 16, "cuda_utils.so", b"\\n" * 5000 + b"end")]
    blob = b"".join(json.dumps({"key": k, "name": n, "size": len(d)}).encode() + b"\\n" + d for k, n, d in frames)
    for start in range(0, len(blob), 777):  # torn across writes, as a pipe may deliver them
        out.write(blob[start:start + 777]); out.flush(); time.sleep(0.001)
""")


@pytest.fixture
def empty_prebuilt():
    saved = dict(PREBUILT)
    PREBUILT.clear()
    yield PREBUILT
    PREBUILT.clear()
    PREBUILT.update(saved)


def harvest_all(harvest: Harvest) -> None:
    import selectors

    selector = selectors.DefaultSelector()
    selector.register(harvest.fd, selectors.EVENT_READ)
    while True:  # until the builder's pipe closes, as the fork server's selector sees it
        selector.select()
        if not harvest.read():
            break
    harvest.close()


def test_frames_torn_across_reads_arrive_whole_and_seed_a_triton_cache(tmp_path, empty_prebuilt, monkeypatch):
    harvest_all(Harvest([sys.executable, "-c", FAKE_BUILDER]))
    assert sorted(name for _, name in PREBUILT) == ["__triton_launcher.so", "cuda_utils.so"]
    assert PREBUILT[("k1" * 16, "__triton_launcher.so")] == b"\x7fELF" + bytes(range(256)) * 40
    assert PREBUILT[("k2" * 16, "cuda_utils.so")].endswith(b"end")
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path))
    assert prebuilt_launchers.seed_triton_cache() == 2
    for (key, name), data in PREBUILT.items():  # where Triton's cache manager looks for them
        assert (tmp_path / key / name).read_bytes() == data


def test_a_builder_that_dies_ends_the_harvest_with_what_it_sent(empty_prebuilt):
    script = FAKE_BUILDER + "\nimport os\nos._exit(3)\n"
    harvest = Harvest([sys.executable, "-c", script])
    harvest_all(harvest)
    assert len(PREBUILT) == 2 and harvest.process.returncode == 3


def test_nothing_to_seed_is_nothing_written(tmp_path, empty_prebuilt, monkeypatch):
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path))
    assert prebuilt_launchers.seed_triton_cache() == 0
    assert not any(tmp_path.iterdir())


def test_the_forms_hold_the_usual_kernels_first():
    listed = forms()
    assert len(listed) == len(set(listed))
    elementwise = (POINTER, POINTER, INT32, CONSTEXPR)  # x, out, n, BLOCK (Inductor's in_ptr0, out_ptr0, xnumel)
    two_inputs_batch_one = (POINTER, POINTER, POINTER, CONSTEXPR, CONSTEXPR)  # n == 1 becomes a constant
    reduction = (POINTER, POINTER, INT32, INT32, CONSTEXPR, CONSTEXPR)  # xnumel, rnumel, XBLOCK, RBLOCK
    assert listed.index(elementwise) < prebuilt_launchers.BATCH  # in the first batch the builder sends
    assert two_inputs_batch_one in listed and reduction in listed


def test_on_a_machine_without_cuda_the_builder_sends_nothing_and_ends():
    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA: the GPU test below covers the builder")
    done = subprocess.run([sys.executable, str(Path(prebuilt_launchers.__file__))], capture_output=True, timeout=120)
    assert done.returncode == 0 and done.stdout == b""


GPU_PROBE = textwrap.dedent("""
    import os, sys, selectors
    sys.path.insert(0, sys.argv[1])
    from repl.checker.candidate.prebuilt_launchers import Harvest, PREBUILT, seed_triton_cache
    harvest = Harvest()
    selector = selectors.DefaultSelector(); selector.register(harvest.fd, selectors.EVENT_READ)
    while True:
        selector.select()
        if not harvest.read():
            break
    harvest.close()
    assert seed_triton_cache() == len(PREBUILT) > 1, len(PREBUILT)
    import torch, triton, triton.language as tl
    from triton.runtime import build
    built = []
    real = build._build
    build._build = lambda *a, **k: built.append(a[0]) or real(*a, **k)

    @triton.jit
    def add(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        m = offs < n
        tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=m) + tl.load(y_ptr + offs, mask=m), mask=m)

    @triton.jit
    def rows(x_ptr, out_ptr, n_rows, n_cols, XBLOCK: tl.constexpr, RBLOCK: tl.constexpr):
        r = tl.program_id(0) * XBLOCK + tl.arange(0, XBLOCK)[:, None]
        c = tl.arange(0, RBLOCK)[None, :]
        m = (r < n_rows) & (c < n_cols)
        tl.store(out_ptr + r, tl.sum(tl.load(x_ptr + r * n_cols + c, mask=m, other=0.0), 1)[:, None],
                 mask=r < n_rows)

    for n in (4096, 4095, 1):  # a divisible size, an odd one, and 1, which Triton makes a constant
        x, y = torch.randn(n, device="cuda"), torch.randn(n, device="cuda")
        out = torch.empty_like(x)
        add[(triton.cdiv(n, 1024),)](x, y, out, n, BLOCK=1024)
        assert torch.equal(out, x + y)
    x = torch.randn(33, 50, device="cuda")
    out = torch.empty(33, device="cuda")
    rows[(triton.cdiv(33, 8),)](x, out, 33, 50, XBLOCK=8, RBLOCK=64)
    torch.testing.assert_close(out, x.sum(1))
    if hasattr(__import__("triton.backends.nvidia.driver", fromlist=["x"]), "make_launcher"):
        assert built == [], built  # every launcher, and cuda_utils, came from the builder
    print("ok", len(PREBUILT))
""")


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_on_a_gpu_a_seeded_process_builds_no_launcher_for_common_kernels(tmp_path):
    env = {**os.environ, "TRITON_CACHE_DIR": str(tmp_path / "cache")}
    probe = tmp_path / "probe.py"  # Triton reads a kernel's source from its file
    probe.write_text(GPU_PROBE)
    done = subprocess.run([sys.executable, str(probe), str(ROOT)], capture_output=True, text=True, env=env,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.startswith("ok")


def test_a_builder_that_cannot_start_is_no_builder(monkeypatch):
    import subprocess as subprocess_module

    def refuse(*args, **kwargs):
        raise OSError(11, "Resource temporarily unavailable")

    monkeypatch.setattr(subprocess_module, "Popen", refuse)
    assert Harvest.start() is None  # the fork server goes on; its candidates build their own launchers


def test_what_is_not_a_frame_ends_the_harvest_without_an_error(empty_prebuilt):
    harvest = Harvest([sys.executable, "-c", FAKE_BUILDER + "\nout.write(b'not json\\n'); out.flush()\n"])
    harvest_all(harvest)
    assert len(PREBUILT) == 2  # the frames before it were kept
