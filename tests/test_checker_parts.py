"""The checker's parts on their own: result record, output comparison, compat layer, CUDA-on-CPU mapping, sandbox
environment, report rendering. Fast: no check runs here (the compat and CUDA-on-CPU tests use a fresh interpreter,
because those modules patch PyTorch for the rest of the process they run in)."""

import json
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
from rich.console import Console

from repl.checker.judge.compare import compare_outputs
from repl.checker.result import VERDICTS, CheckResult, Verdict
from repl.checker.sandbox import is_secret_name, worker_environment
from repl.ui.check_view import render_check_result

PROJECT_ROOT = Path(__file__).resolve().parents[1]
ISSUE_KEYS = {"verdict", "correct", "device", "trials", "max_abs_error", "max_rel_error", "message", "triton_kernels",
              "kernel_ms", "eager_ms", "compiled_ms", "speedup_vs_eager", "speedup_vs_compiled"}


def run_fresh_python(code: str) -> str:
    completed = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True,
                               cwd=PROJECT_ROOT, timeout=120)
    assert completed.returncode == 0, completed.stderr
    return completed.stdout


# ---- CheckResult ------------------------------------------------------------------------------------------------


def test_result_json_has_the_issue_keys_and_round_trips():
    result = CheckResult(verdict="correct", device="cuda", trials=5, max_abs_error=1e-6, max_rel_error=2e-6,
                         message="ok", triton_kernels=["k"], kernel_ms=0.01, eager_ms=0.02, compiled_ms=0.015,
                         speedup_vs_eager=2.0, speedup_vs_compiled=1.5, notes=["n"])
    data = json.loads(json.dumps(result.to_json_dict()))
    assert ISSUE_KEYS <= set(data)
    assert CheckResult.from_json_dict({**data, "added_by_a_newer_version": 1}) == result


def test_correct_follows_the_verdict_and_unknown_verdicts_are_refused():
    assert CheckResult(verdict="correct").correct
    assert not CheckResult(verdict="mismatch", correct=True).correct
    assert "cancelled" in VERDICTS
    with pytest.raises(ValueError):
        CheckResult(verdict="probably fine")


# ---- comparing outputs ------------------------------------------------------------------------------------------


def test_outputs_within_tolerance_match_and_errors_are_measured():
    reference = torch.tensor([1.0, -2.0, 0.0])
    comparison = compare_outputs(reference + torch.tensor([0.005, 0.0, 0.001]), reference, atol=1e-2, rtol=1e-2)
    assert comparison.matches
    assert comparison.max_abs_error == pytest.approx(0.005)
    assert comparison.max_rel_error == pytest.approx(0.005)  # the zero element is left out of the relative error


@pytest.mark.parametrize("candidate, reference, problem", [
    (torch.zeros(2, 3), torch.zeros(3, 2), "shape (2, 3), expected (3, 2)"),
    (torch.zeros(3, dtype=torch.float64), torch.zeros(3), "dtype float64, expected float32"),
    (torch.tensor([1.0, float("nan")]), torch.tensor([1.0, 2.0]), "1 NaN"),
    (torch.tensor([1.0, float("inf")]), torch.tensor([1.0, 2.0]), "1 Inf"),
    (torch.tensor([1.0, 2.5]), torch.tensor([1.0, 2.0]), "1 of 2 elements differ"),
    ([torch.zeros(1)], torch.zeros(1), "is a list, expected a tensor"),
    (torch.zeros(1), (torch.zeros(1), torch.zeros(1)), "expected a tuple of 2"),
    ((torch.zeros(1),), (torch.zeros(1), torch.zeros(1)), "has 1 elements, expected 2"),
    ((torch.zeros(1), torch.ones(1)), (torch.zeros(1), torch.zeros(1)), "output[1]"),
])
def test_each_kind_of_difference_is_named(candidate, reference, problem):
    comparison = compare_outputs(candidate, reference, atol=1e-2, rtol=1e-2)
    assert not comparison.matches
    assert problem in comparison.problem


def test_nan_where_the_reference_has_nan_matches():
    reference = torch.tensor([float("nan"), 1.0])
    assert compare_outputs(reference.clone(), reference, atol=1e-2, rtol=1e-2).matches
    assert not compare_outputs(torch.tensor([0.0, 1.0]), reference, atol=1e-2, rtol=1e-2).matches


# ---- the compat layer -------------------------------------------------------------------------------------------


def test_grid_is_torch_2_5s():
    from repl.checker.candidate.compat import grid

    assert grid(256)({"XBLOCK": 128}) == (2, 1, 1)
    assert grid(300)({"XBLOCK": 128}) == (3, 1, 1)
    assert grid(8, 300)({"XBLOCK": 128, "YBLOCK": 4}) == (3, 2, 1)  # x is the last numel
    assert grid(2, 8, 300)({"XBLOCK": 128, "YBLOCK": 4, "ZBLOCK": 1}) == (3, 2, 2)
    assert grid(70000, 16)({"XBLOCK": 16}) == (1, 35000, 2)  # y beyond 65535 spills into z


def test_compat_adds_only_what_is_missing_and_then_every_inductor_style_import_resolves():
    output = run_fresh_python("""
        import torch, torch._inductor.runtime.triton_heuristics as heuristics
        had_grid, had_stream = hasattr(heuristics, "grid"), hasattr(torch._C, "_cuda_getCurrentRawStream")
        from repl.checker.candidate.compat import install_inductor_compat, missing_names
        added = install_inductor_compat()
        assert ("torch._inductor.runtime.triton_heuristics.grid" in added) == (not had_grid)
        assert ("torch._C._cuda_getCurrentRawStream" in added) == (not had_stream)
        assert missing_names() == [], missing_names()
        from torch._inductor.runtime.triton_heuristics import grid
        from torch._C import _cuda_getCurrentRawStream as get_raw_stream
        from torch._inductor.runtime import triton_helpers
        from torch._inductor.runtime.triton_helpers import libdevice, math as tl_math
        from torch._inductor.select_algorithm import extern_kernels
        assert_size_stride = torch._C._dynamo.guards.assert_size_stride
        empty_strided_cuda = torch._C._dynamo.guards._empty_strided_cuda
        reinterpret_tensor = torch._C._dynamo.guards._reinterpret_tensor
        print(grid(64)({"XBLOCK": 32}))
    """)
    assert output.strip() == "(2, 1, 1)"


def test_compat_without_preloading_adds_grid_when_a_kernel_imports_it():
    output = run_fresh_python("""
        import sys
        from repl.checker.candidate.compat import HEURISTICS, install_inductor_compat, missing_names
        install_inductor_compat(preload=False)
        assert HEURISTICS not in sys.modules, "imported before any kernel asked for it"
        from torch._inductor.runtime.triton_heuristics import grid
        assert missing_names() == [], missing_names()
        print(grid(64)({"XBLOCK": 32}))
    """)
    assert output.strip() == "(2, 1, 1)"


# ---- CUDA idioms on the CPU -------------------------------------------------------------------------------------


def test_cuda_idioms_map_to_the_cpu_and_is_cuda_lies_only_to_the_candidate():
    run_fresh_python("""
        import torch
        from repl.checker.cuda_on_cpu import install_cuda_on_cpu
        install_cuda_on_cpu(["/sandbox/kernel.py"])
        x = torch.randn(4)
        assert x.cuda().device.type == "cpu" and x.to("cuda").device.type == "cpu"
        assert torch.empty(3, device="cuda").device.type == "cpu"
        assert torch.zeros(2, device=torch.device("cuda:0")).device.type == "cpu"
        assert torch.nn.Linear(2, 2).cuda().weight.device.type == "cpu"
        buffer = torch._C._dynamo.guards._empty_strided_cuda((2, 3), (3, 1), torch.float32)
        assert buffer.device.type == "cpu" and buffer.stride() == (3, 1)
        with torch.cuda._DeviceGuard(0):
            torch.cuda.set_device(0)
            torch.cuda.synchronize()
        assert torch._C._cuda_getCurrentRawStream(0) == 0
        assert x.is_cuda is False  # to this file: the truth
        candidate = {}
        exec(compile("def is_cuda(t):\\n    return t.is_cuda\\n", "/sandbox/kernel.py", "exec"), candidate)
        assert candidate["is_cuda"](x) is True  # to the candidate's file: what its assertions expect
    """)


# ---- the sandbox environment ------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "GITHUB_TOKEN", "OPENAI_API_KEY", "MY_APIKEY",
                                  "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "CLIENT_SECRET", "DB_PASSWORD",
                                  "SSH_AUTH_SOCK", "HF_HOME", "AZURE_CLIENT_ID", "GOOGLE_APPLICATION_CREDENTIALS"])
def test_secret_names_are_recognised(name):
    assert is_secret_name(name)


@pytest.mark.parametrize("name", ["PATH", "LANG", "CUDA_HOME", "LD_LIBRARY_PATH", "TRITON_PTXAS_PATH", "PYTHONPATH"])
def test_ordinary_names_are_kept(name):
    assert not is_secret_name(name)


def test_worker_environment_moves_home_and_caches_into_the_sandbox(tmp_path):
    env = worker_environment({"HOME": "/home/me", "HF_TOKEN": "x", "PATH": "/bin", "TRITON_INTERPRET": "1"}, tmp_path)
    assert "HF_TOKEN" not in env and "TRITON_INTERPRET" not in env
    assert env["PATH"] == "/bin"
    for name in ("HOME", "TMPDIR"):
        assert env[name].startswith(str(tmp_path)), name
    # Set only where the caller sets them (their defaults lie under HOME and TMPDIR): a variable only the sandbox has
    # would tell a candidate that it is being checked.
    assert not {"XDG_CACHE_HOME", "TRITON_CACHE_DIR", "TORCHINDUCTOR_CACHE_DIR", "TMP", "PYTHONDONTWRITEBYTECODE"} & set(env)
    named = worker_environment({"TRITON_CACHE_DIR": "/home/me/.triton", "XDG_CACHE_HOME": "/home/me/.c"}, tmp_path)
    assert all(named[name].startswith(str(tmp_path)) for name in ("TRITON_CACHE_DIR", "XDG_CACHE_HOME"))
    assert "CUDA_VISIBLE_DEVICES" not in env
    assert worker_environment({}, tmp_path, cuda_visible_devices="")["CUDA_VISIBLE_DEVICES"] == ""


# ---- the report -------------------------------------------------------------------------------------------------


def rendered(result: CheckResult, **options) -> str:
    console = Console(record=True, width=120, color_system=None)
    console.print(render_check_result(result, **options))
    return console.export_text()


def test_report_shows_timings_speedups_and_a_suspicious_speedup():
    text = rendered(CheckResult(verdict="correct", device="cuda", trials=5, max_abs_error=0.0, max_rel_error=0.0,
                                message="matches", triton_kernels=["add_kernel"], kernel_ms=0.0123, eager_ms=0.2,
                                compiled_ms=0.15, speedup_vs_eager=16.26, speedup_vs_compiled=12.2,
                                suspicious="16.3x faster than the reference"))
    for expected in ("correct", "cuda", "add_kernel", "0.0123 ms", "16.26x vs eager", "12.20x vs torch.compile",
                     "16.3x faster"):
        assert expected in text


def test_report_shows_the_users_frames_of_a_traceback_and_hides_the_rest():
    traceback = textwrap.dedent("""\
        Traceback (most recent call last):
          File "/tmp/kernelllm-check-1/work/kernel.py", line 21, in forward
            relu_kernel[grid](x, out)
          File "/site-packages/triton/runtime/jit.py", line 375, in <lambda>
            return self.run(grid=grid)
                   ^^^^^^^^^^^^^^^^^^^
        TypeError: relu_kernel() missing 1 required positional argument: 'n_elements'
        """)
    result = CheckResult(verdict="runtime_error", message="trial 1: TypeError: ...", traceback=traceback)
    text = rendered(result)
    assert 'kernel.py", line 21' in text and "TypeError: relu_kernel()" in text
    assert "jit.py" not in text and "1 frames in Triton/PyTorch not shown" in text
    assert "jit.py" in rendered(result, full_traceback=True)


@pytest.mark.parametrize("verdict", VERDICTS)
def test_every_verdict_renders(verdict):
    assert verdict.replace("_", " ") in rendered(CheckResult(verdict=verdict, message="why"))


def test_verdicts_are_strings_that_carry_their_style_and_whose_fault_they_are():
    assert Verdict.CORRECT == "correct" and Verdict("too_large") is Verdict.TOO_LARGE
    assert CheckResult(verdict="mismatch").verdict is Verdict.MISMATCH
    assert json.loads(json.dumps(CheckResult(verdict="no_triton").to_json_dict()))["verdict"] == "no_triton"
    assert Verdict.MISMATCH.kernels_fault and not Verdict.INVALID_REFERENCE.kernels_fault
    assert not Verdict.TOO_LARGE.kernels_fault and not Verdict.CANCELLED.kernels_fault
    assert {verdict.style for verdict in Verdict} >= {"bold green", "bold red"}


# ---- what crosses between judge and candidate ---------------------------------------------------------------------


def test_plain_data_round_trips_through_a_frame_bit_for_bit():
    import os

    from repl.checker.wire import Channel, decode, encode

    value = (torch.randn(3, 4).to(torch.bfloat16), torch.randn(5, dtype=torch.complex64),
             torch.tensor([True, False]), torch.arange(6, dtype=torch.int64).reshape(2, 3).t(),
             torch.empty(0, 3), [1, 2.5, None, "s"], {"k": torch.ones(2)})
    read_fd, write_fd = os.pipe()
    sender, receiver = Channel(None, write_fd), Channel(read_fd, None)
    tree, blob = encode(value)
    sender.send({"outputs": tree}, blob)
    message, data = receiver.receive(max_blob=len(blob))
    got = decode(message["outputs"], data)
    for original, copy in zip(value[:5], got[:5]):
        assert type(copy) is torch.Tensor and copy.dtype == original.dtype and torch.equal(copy, original)
    assert got[5] == [1, 2.5, None, "s"] and torch.equal(got[6]["k"], torch.ones(2))
    sender.close()
    receiver.close()


def test_a_frame_larger_than_the_receiver_accepts_is_refused_before_its_body_is_read():
    import os

    from repl.checker.wire import Channel, WireError, encode

    read_fd, write_fd = os.pipe()
    sender, receiver = Channel(None, write_fd), Channel(read_fd, None)
    tree, blob = encode(torch.zeros(1000))
    sender.send({"outputs": tree}, bytes(blob)[:64])  # the header announces 64 bytes; the receiver takes at most 16
    with pytest.raises(WireError, match="above the 16 accepted"):
        receiver.receive(max_blob=16)
    sender.close()
    receiver.close()


def test_a_reader_past_its_deadline_still_takes_a_frame_that_is_there_and_only_then_gives_up():
    # A caller reads a judge's answers only at its next check: a preparation's "prepared", sent minutes ago, was
    # lost to a deadline passed meanwhile, and a healthy judge was stopped as stuck.
    import os
    import time

    from repl.checker.wire import Channel, Stopped

    read_fd, write_fd = os.pipe()
    sender, receiver = Channel(None, write_fd), Channel(read_fd, None)
    try:
        sender.send({"prepared": 1, "steps": ["sized"]})
        long_ago = time.monotonic() - 600
        assert receiver.receive(max_blob=0, deadline=long_ago)[0] == {"prepared": 1, "steps": ["sized"]}
        started = time.monotonic()
        with pytest.raises(Stopped):
            receiver.receive(max_blob=0, deadline=long_ago)  # nothing there: no wait
        assert time.monotonic() - started < 5
    finally:
        sender.close()
        receiver.close()


def test_encoding_and_decoding_leave_no_reference_cycle_that_would_keep_tensors_alive():
    import gc

    from repl.checker.wire import decode, encode

    value = [torch.zeros(10), (torch.ones(3), {"k": torch.arange(4)})]
    gc.collect()
    gc.disable()  # what a cycle holds waits for the collector: 6 GB a trial at KernelBench's sizes
    try:
        tree, payload = encode(value)
        decoded = decode(tree, bytes(payload))
        del tree, payload, decoded
        assert gc.collect() == 0, "encode or decode left cyclic garbage behind"
    finally:
        gc.enable()


def _shared_channels():
    """A judge-like sender (may grow both buffers) and a candidate-like receiver over one pipe and one memfd."""
    import os

    from repl.checker.wire import Channel, SharedBuffer

    read_fd, write_fd = os.pipe()
    judge_side = SharedBuffer.create()
    candidate_side = SharedBuffer(os.dup(judge_side.fd), may_grow=False)
    return Channel(None, write_fd, shared_out=judge_side), Channel(read_fd, None, shared_in=candidate_side)


def test_a_large_blob_crosses_through_shared_memory_bit_for_bit_and_only_the_header_through_the_pipe():
    from repl.checker.wire import SHARED_MIN_BYTES, decode, encode

    value = [torch.randn(513, 257), torch.arange(7, dtype=torch.int16), torch.randn(1 << 16).to(torch.bfloat16)]
    tree, blob = encode(value)
    assert len(blob) > SHARED_MIN_BYTES
    sender, receiver = _shared_channels()
    sender.send({"inputs": tree}, blob)
    message, data = receiver.receive(max_blob=len(blob))
    assert not receiver._buffer, "nothing but the frame's header and JSON came through the pipe"
    got = decode(message["inputs"], data)
    data[:] = b"\xff" * len(data)  # the peer may scribble on the buffer afterwards: what was decoded is a copy
    assert all(torch.equal(copy, original) and copy.dtype == original.dtype for copy, original in zip(got, value))
    sender.close()
    receiver.close()


def test_shared_buffers_cannot_be_shrunk_or_sealed_and_a_side_that_may_not_grow_them_uses_the_pipe():
    import fcntl
    import os

    from repl.checker.wire import Channel, SharedBuffer, decode, encode

    judge_side = SharedBuffer.create()
    judge_side.make_room(1 << 20)
    candidate_side = SharedBuffer(os.dup(judge_side.fd), may_grow=False)
    with pytest.raises(PermissionError):
        os.ftruncate(candidate_side.fd, 0)  # the judge would die of SIGBUS reading a truncated mapping
    with pytest.raises(PermissionError):
        fcntl.fcntl(candidate_side.fd, fcntl.F_ADD_SEALS, fcntl.F_SEAL_WRITE)  # the judge's next write would fail
    assert not candidate_side.make_room(2 << 20) and candidate_side.size() == 1 << 20
    read_fd, write_fd = os.pipe()
    sender, receiver = Channel(None, write_fd, shared_out=candidate_side), Channel(read_fd, None, shared_in=judge_side)
    tree, blob = encode(torch.ones(1 << 19))  # 2 MB: more room than the judge made, so it goes through the pipe

    import threading

    threading.Thread(target=sender.send, args=({"outputs": tree}, blob), daemon=True).start()
    message, data = receiver.receive(max_blob=len(blob))
    assert isinstance(data, bytearray) and torch.equal(decode(message["outputs"], data), torch.ones(1 << 19))
    sender.close()
    receiver.close()


def test_room_past_the_file_size_limit_is_refused_not_raised_and_the_judge_asks_for_half():
    # The judge runs under the sandbox's disk limit (RLIMIT_FSIZE), which a memfd counts: room for twice a 1.1 GB
    # output failed a KernelBench check with "OSError: File too large" (a checker_error for an honest kernel).
    script = textwrap.dedent("""
        import resource
        from repl.checker.wire import Channel, SharedBuffer
        resource.setrlimit(resource.RLIMIT_FSIZE, (3 << 20, 3 << 20))
        buffer = SharedBuffer.create()
        print(buffer.make_room(4 << 20), buffer.size())
        Channel(shared_in=buffer).expect(4 << 20)
        print(buffer.size())
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120,
                          cwd=Path(__file__).resolve().parents[1])
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["False", "0", str(2 << 20)]


def test_a_frame_naming_shared_memory_that_is_not_there_is_refused():
    import os
    import struct

    from repl.checker.wire import Channel, SharedBuffer, WireError

    read_fd, write_fd = os.pipe()
    text = b"{}"
    os.write(write_fd, struct.pack("!IQ", len(text), (1 << 63) | 4096) + text)
    with pytest.raises(WireError, match="shared memory this channel does not have"):
        Channel(read_fd, None).receive(max_blob=1 << 20)
    os.write(write_fd, struct.pack("!IQ", len(text), (1 << 63) | 4096) + text)
    with pytest.raises(WireError, match="the buffer holds 0"):
        Channel(read_fd, None, shared_in=SharedBuffer.create()).receive(max_blob=1 << 20)
    os.close(write_fd)


@pytest.mark.parametrize("value, complaint", [
    (torch.zeros(2).as_subclass(type("Lying", (torch.Tensor,), {})), "tensor subclass (Lying)"),
    (torch.zeros(2).to_sparse(), "only dense tensors"),
    (object(), "is a object"),
    (torch.zeros(2, dtype=torch.float8_e4m3fn) if hasattr(torch, "float8_e4m3fn") else object(), "output"),
])
def test_only_plain_data_crosses(value, complaint):
    from repl.checker.wire import WireError, encode

    with pytest.raises(WireError, match=re.escape(complaint)):
        encode(value)


def test_integer_outputs_must_be_equal_and_complex_outputs_are_compared_as_complex():
    reference = torch.tensor([500, -300], dtype=torch.int32)
    assert "int32 outputs must be equal" in compare_outputs(reference + 1, reference, 1e-2, 1e-2).problem
    assert compare_outputs(reference.clone(), reference, 1e-2, 1e-2).matches
    complex_reference = torch.complex(torch.ones(3), torch.ones(3))
    assert not compare_outputs(torch.complex(torch.ones(3), torch.zeros(3)), complex_reference, 1e-2, 1e-2).matches


def test_outputs_compared_a_slice_at_a_time_get_the_same_answers(monkeypatch):
    import repl.checker.judge.compare as compare

    reference = torch.randn(4, 1000)
    wrong = reference.clone()
    wrong[3, 999] += 1.0
    nan = reference.clone()
    nan[0, 5] = float("nan")
    softmax = torch.softmax(torch.randn(4, 1000) * 0.1, dim=1)
    integers = torch.arange(1000, dtype=torch.int32)
    pairs = [(reference * (1 + 1e-5), reference), (wrong, reference), (nan, reference),
             (torch.zeros_like(softmax), softmax), (softmax * (1 + 1e-4), softmax), (integers + (integers == 999), integers)]
    whole = [compare.compare_outputs(got, expected, 1e-2, 1e-2) for got, expected in pairs]
    monkeypatch.setattr(compare, "SLICE_ELEMENTS", 7)
    sliced = [compare.compare_outputs(got, expected, 1e-2, 1e-2) for got, expected in pairs]
    assert sliced == whole
    assert [c.matches for c in whole] == [True, False, False, False, True, False]
    assert "1 of 4000 elements differ" in whole[1].problem and "1 NaN where" in whole[2].problem


def test_outputs_all_below_atol_get_a_tolerance_that_tells_zeros_apart_and_a_note():
    reference = torch.softmax(torch.randn(4, 1000) * 0.1, dim=1)  # every probability about 1e-3
    zeros = compare_outputs(torch.zeros_like(reference), reference, 1e-2, 1e-2)
    honest = compare_outputs(reference * (1 + 1e-4), reference, 1e-2, 1e-2)
    assert not zeros.matches and honest.matches
    assert "every reference magnitude is below atol=0.01" in honest.notes[0]


def test_a_py_file_is_checked_whole_and_a_reply_is_extracted():
    from repl.core.extract import extract_kernel_code

    file_text = '"""Example:\n```python\nclass ModelNew: pass\n```\n"""\nclass ModelNew:\n    x = 1\n'
    assert extract_kernel_code(file_text) == file_text
    reply = "Here it is:\n```python\nclass ModelNew:\n    pass\n```\nDone."
    assert extract_kernel_code(reply) == "class ModelNew:\n    pass\n"


def test_too_large_and_invalid_reference_exit_2():
    from repl.cli.check import exit_status

    assert [exit_status(v) for v in (Verdict.CORRECT, Verdict.MISMATCH, Verdict.TOO_LARGE,
                                     Verdict.INVALID_REFERENCE)] == [0, 1, 2, 2]


def _checker_import_graph() -> dict[str, set[str]]:
    """Which repl.checker modules each one imports, at the top or inside a function."""
    import ast

    root = Path(__file__).resolve().parents[1]
    paths = {}
    for path in (root / "repl" / "checker").rglob("*.py"):
        parts = path.relative_to(root).with_suffix("").parts
        paths[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    graph = {}
    for name, path in paths.items():
        imported = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("repl.checker"):
                # `from package import module` imports the module; `from module import name`, the module
                submodules = {f"{node.module}.{alias.name}" for alias in node.names} & paths.keys()
                imported |= submodules or {node.module}
            elif isinstance(node, ast.Import):
                imported |= {alias.name for alias in node.names if alias.name.startswith("repl.checker")}
        graph[name] = {other for other in imported if other in paths and other != name}
    return graph


def test_the_sandbox_and_the_fork_server_import_nothing_that_imports_them_back():
    graph = _checker_import_graph()

    def reachable(start: str) -> set[str]:
        seen, pending = set(), [start]
        while pending:
            for other in graph[pending.pop()] - seen:
                seen.add(other)
                pending.append(other)
        return seen

    confinement = [name for name in graph
                   if name.startswith("repl.checker.sandbox") or name.endswith((".fork_server", ".fork_server_main"))]
    assert len(confinement) >= 8
    circles = {name: sorted(other for other in reachable(name) if name in reachable(other)) for name in confinement}
    assert {name: circle for name, circle in circles.items() if circle} == {}
    assert "repl.checker.candidate.fork_server" not in set().union(*(graph[name] for name in confinement if "sandbox" in name))


def test_a_candidate_without_a_seccomp_binding_is_told_in_a_note(monkeypatch):
    from repl.checker.sandbox import syscall_filter

    def missing():
        raise ImportError("No module named 'pyseccomp'")

    monkeypatch.setattr(syscall_filter, "load_binding", missing)
    [note] = syscall_filter.install_syscall_filter()
    assert note.startswith("no syscall filter") and "keyrings" in note


SCRIPTED_GRACE_S = 0.3  # the caller's GRACE_S with a scripted judge: its deadlines are fractions of a second


class _ScriptedJudge:
    """The caller's side of a judge (JudgeProcess) talking to a script instead of a judge process: frames written
    to its reply pipe at given times: seconds from the start (the leading frames at 0 are in the pipe before the
    caller reads it: it reads them together, whatever the machine's load); ("ready", s): s after the caller has read
    the judge's ready line (ready=False: a judge still starting); ("read", s): s after the caller has read every
    frame written before it; a threading.Event: once it is set."""

    def __init__(self, monkeypatch, frames: list[tuple[float | tuple, dict]], ready: bool = True):
        import fcntl
        import os
        import struct
        import termios
        import threading
        import time

        from repl.checker.caller import judge_process
        from repl.checker.wire import Channel

        monkeypatch.setattr("repl.checker.caller.judge_process.GRACE_S", SCRIPTED_GRACE_S)
        reply_read, reply_write = os.pipe()
        request_read, request_write = os.pipe()
        self.sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"],
                                        start_new_session=True)
        judge = judge_process.JudgeProcess.__new__(judge_process.JudgeProcess)
        judge.process, judge.channel = self.sleeper, Channel(reply_read, request_write)
        judge.device_label, judge.ready, judge._sending = "cpu-interpreter", ready, threading.Lock()
        judge.confined, judge.notes = False, []
        judge._output = judge_process.PipeCollector(os.open(os.devnull, os.O_RDONLY), limit_bytes=1024, keep="tail")
        self.judge, self.started = judge, time.monotonic()
        writer = Channel(None, reply_write)

        def unread_bytes() -> int:  # what the caller has yet to read of the reply pipe
            return struct.unpack("i", fcntl.ioctl(reply_read, termios.FIONREAD, b"\0\0\0\0"))[0]

        frames = list(frames)
        while frames and not isinstance(frames[0][0], (threading.Event, tuple)) and frames[0][0] == 0:
            writer.send(frames.pop(0)[1])

        def play():
            for at, frame in frames:
                if isinstance(at, threading.Event):
                    at.wait()
                    at = 0.0
                elif isinstance(at, tuple) and at[0] == "read":
                    try:
                        while unread_bytes():
                            time.sleep(0.01)
                    except OSError:  # the caller closed the pipe: it reads nothing more
                        return
                    at = time.monotonic() - self.started + at[1]
                elif isinstance(at, tuple):
                    while not judge.ready:
                        time.sleep(0.01)
                    at = time.monotonic() - self.started + at[1]
                time.sleep(max(0.0, self.started + at - time.monotonic()))
                try:
                    writer.send(frame)
                except Exception:
                    return

        threading.Thread(target=play, daemon=True).start()
        self.requests = Channel(request_read, None)  # what the caller sent

    def stop(self) -> None:
        self.sleeper.kill()
        self.sleeper.wait()

    def check(self, timeout: float):
        request = {"op": "check", "id": 1, "reference_code": "", "kernel_code": "", "trials": 1, "atol": 0.01,
                   "rtol": 0.01, "timeout": timeout}
        try:
            return self.judge.check(request, None)
        finally:
            self.stop()


def test_the_caller_waits_for_a_judge_whose_deadline_grew_and_takes_its_answer(monkeypatch):
    # The judge's deadline grows with the bytes a trial moves (1 s a GB); it says so, and the caller, whose own
    # deadline would have passed at timeout + grace, waits for the judge's own `timeout` verdict instead of killing
    # it and throwing its warm state away. The stages are read together; the answer comes 0.5 s after the caller's
    # first deadline (0.1 s + GRACE_S from its reading them) has passed, 60 s before the grown one.
    answer = CheckResult(verdict=Verdict.TIMEOUT, message="no result within 0.1 s; the candidate was killed")
    scripted = _ScriptedJudge(monkeypatch, [(0.0, {"stage": "received", "deadline_in": 0.1}),
                                            (0.0, {"stage": "candidate", "deadline_in": 60.0}),
                                            (("read", 0.1 + SCRIPTED_GRACE_S + 0.5),
                                             {"result": answer.to_json_dict()})])
    result = scripted.check(timeout=0.1)
    assert result.message == answer.message


@pytest.mark.parametrize("alone, verdict", [(True, "invalid_reference"), (False, "timeout")])
def test_a_judge_stuck_in_the_reference_blames_it_only_when_no_candidate_lived(monkeypatch, alone, verdict):
    scripted = _ScriptedJudge(monkeypatch, [(0.0, {"stage": "received", "deadline_in": 0.2}),
                                            (0.0, {"stage": "reference", "alone": alone, "deadline_in": 0.2})])
    result = scripted.check(timeout=0.2)
    assert result.verdict == verdict and "judge was stopped" in result.message


def test_sizing_counts_the_modules_time_from_the_judges_start_and_stops_no_judge_for_starting_late(monkeypatch):
    import time
    # A judge that starts late (torch imported on a loaded machine) used to leave its module the rest of the wait:
    # the answer came after it, and a healthy judge was stopped as if the module's import hung.
    scripted = _ScriptedJudge(monkeypatch, [(1.5, {"ready": True}),
                                            (("ready", 2.4), {"sized": 7, "too_large": "too large: 4 TiB"})],
                              ready=False)
    try:
        assert scripted.judge.prepare(7, "reference", timeout=3.0) == "too large: 4 TiB"
        assert scripted.judge.alive()
        said, _ = scripted.requests.receive(max_blob=0, deadline=time.monotonic() + 5)
        assert said["op"] == "prepare" and said["id"] == 7
    finally:
        scripted.stop()
    # A module that gets its whole wait and no answer: its judge is stopped (the import hangs).
    scripted = _ScriptedJudge(monkeypatch, [(0.0, {"ready": True})], ready=False)
    try:
        started = time.monotonic()
        assert scripted.judge.prepare(8, "reference", timeout=1.0) is None
        assert time.monotonic() - started >= 1.0 and not scripted.judge.alive()
    finally:
        scripted.stop()


def test_a_judge_still_starting_gets_a_preparation_that_fits_its_pipe_and_its_time_counts_from_its_start(
        monkeypatch):
    import threading
    import time

    from repl.checker.caller import judge_process

    from repl.checker.wire import Stopped

    started = threading.Event()
    scripted = _ScriptedJudge(monkeypatch, [(started, {"ready": True})], ready=False)
    judge = scripted.judge
    try:
        assert judge.prepare(1, "small reference", timeout=0.05) is None  # not started within the wait: left so
        assert judge.alive() and judge.preparing.id == 1
        said, _ = scripted.requests.receive(max_blob=0, deadline=time.monotonic() + 5)
        assert said == {"op": "prepare", "id": 1, "reference_code": "small reference"}
        # One that could be written only in part is not sent (a partial frame: the judge could only be stopped);
        # the caller still counts on the one sent before.
        assert judge.start_preparing(2, "x" * 100_000) is False
        assert judge.preparing.id == 1
        with pytest.raises(Stopped):
            scripted.requests.receive(max_blob=0, deadline=time.monotonic() + 0.3)
        # Its time counts from the judge's start, not from when it was sent.
        judge.preparing.deadline = time.monotonic()  # as if sent long ago
        started.set()
        assert judge._wait_ready(None) is None
        assert judge.preparing.deadline >= time.monotonic() + judge_process.PREPARE_TIMEOUT_S - 5
    finally:
        scripted.stop()


def _frame(text: bytes, blob: bytes = b"") -> bytes:
    from repl.checker.wire import HEADER

    return HEADER.pack(len(text), len(blob)) + text + blob


@pytest.mark.parametrize("body", [b"[" + b"[]," * 400_000 + b"[]]", b"[" + b"1.5," * 250_000 + b"1]",
                                  b"[" * 100_000 + b"]" * 100_000], ids=["empty lists", "numbers", "nesting"])
def test_decoding_a_candidates_frame_holds_at_most_a_small_multiple_of_its_cap(body):
    # A 64 MiB frame of nested empty lists once took the judge from 236 MB to 3.4 GB: from a candidate, a frame's
    # JSON is capped at 1 MiB and its lists and objects at 65,536, so no frame holds more than ~20x the cap.
    import os
    import threading
    import tracemalloc

    from repl.checker.wire import UNTRUSTED_JSON_BYTES, Channel, WireError

    read_end, write_end = os.pipe()
    channel = Channel(read_end, None, untrusted_peer=True)
    frame = _frame(body)
    def write():
        try:
            for start in range(0, len(frame), 65536):
                os.write(write_end, frame[start:start + 65536])
        except OSError:
            pass  # refused before it was all read

    writer = threading.Thread(target=write, daemon=True)
    writer.start()
    tracemalloc.start()
    try:
        try:
            message, _ = channel.receive(max_blob=0, deadline=None)
        except WireError:
            message = None
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
        channel.close()
        os.close(write_end)
    assert peak < 24 * UNTRUSTED_JSON_BYTES, peak
    assert message is None or isinstance(message, dict)


def test_a_forged_reply_is_refused_field_by_field_and_its_text_cut_to_size():
    from repl.checker.judge.candidate_replies import MESSAGE_CHARS, clean_reply
    from repl.checker.wire import WireError

    with pytest.raises(WireError, match=r"notes\[0\] is not text"):
        clean_reply({"loaded": True, "notes": [{"not": "text"}]})
    for forged in ({"state": {"w": "4x8"}}, {"launched": "kernel"}, {"estimate_ms": float("nan")},
                   {"batch_ms": [1.0, -2.0]}, {"error": ["runtime_error"]}, {"ready": 1}):
        with pytest.raises(WireError):
            clean_reply(forged)
    cleaned = clean_reply({"error": {"kind": "anything", "message": "\U0001F600" * 100_000}, "extra": 1})
    assert cleaned["error"]["kind"] == "runtime_error" and len(cleaned["error"]["message"]) <= MESSAGE_CHARS + 10
    assert "extra" not in cleaned


def test_the_judges_answer_never_exceeds_its_cap_whatever_the_text_holds():
    import json

    from repl.checker.result import REPLY_JSON_BYTES, bounded_json_dict

    grows = "\x00\U0001F600" * 300_000  # 6 and 12 bytes each once escaped: 5.4 MB
    result = CheckResult(verdict=Verdict.RUNTIME_ERROR, message=grows, traceback=grows, notes=[grows] * 3,
                         output_tail=grows)
    data = bounded_json_dict(result)
    assert len(json.dumps(data)) <= REPLY_JSON_BYTES
    assert CheckResult.from_json_dict(data).verdict == Verdict.RUNTIME_ERROR


def test_a_result_with_fields_of_the_wrong_type_still_reads_and_renders():
    # A forged note that is not text crashed the plain report (AttributeError) and it printed no verdict.
    result = CheckResult.from_json_dict({"verdict": "mismatch", "message": "m", "notes": [{"a": 1}, "x"],
                                         "kernel_ms": "fast", "trials": True, "phases_s": [1]})
    assert (result.notes, result.kernel_ms, result.trials, result.phases_s) == ([], None, 0, {})
    assert "mismatch" in rendered(result)
