"""The candidate process: runs one untrusted kernel, confined, and answers the judge in plain data.

Started by the judge ahead of need (`python repl/checker/candidate/main.py`, a script: no PYTHONPATH names the
checkout), it gets ready before any candidate exists:
1. torch and triton imported (Triton's interpreter on the CPU), the CUDA-to-CPU mapping (CPU) or the CUDA context
   and the timer (GPU), one small kernel compiled and launched (triton_warmup.py), the Inductor compat names and the
   launch recorder installed;
2. it confines itself (sandbox.confine_self: Landlock with signal/socket scoping, rlimits) and says "ready";
3. then it waits. The judge sends, on a private pipe, in order:
   ``load`` (the kernel's source, the init arguments, the reference's weights) -> ``loaded`` with its own state's
   names and shapes, or an error; ``weights`` (which of the reference's weights go to which of its names: the
   judge's decision, judge/weights.py) -> ``given``;
   (large blobs travel through the two shared buffers of wire.py, not the pipes)
   ``run`` (inputs; ``skip_launches`` for the extra trial) -> ``outputs`` (dtype, shape, raw bytes), the Triton
   kernels launched and what the forward ran beside them (work.py), or an error;
   ``ping``, ``warm``, ``time``, ``collect`` (candidate_timing.py) -> timed calls on fresh inputs.
It never sees the reference's source, the judge's objects or the seeds that made its inputs; what it patches in its
own process can change nothing but its own answers. One kernel per process: the judge kills it afterwards.
When the judge goes away (its end of the request pipe closes), this process exits.
"""

import argparse
import os
import queue
import sys
import threading
import time
from pathlib import Path

if __name__ == "__main__" and not __package__:  # started as a script: no PYTHONPATH naming the checkout (a tell)
    sys.path[0] = str(Path(__file__).resolve().parents[3])

from repl.checker.loading import (describe, import_source, init_arguments, is_triton_compilation_error,  # noqa: E402
                                  traceback_text)
from repl.checker.sandbox.limits import limit_cpu_time  # noqa: E402
from repl.core.extract import extract_kernel_code  # noqa: E402
from repl.checker.wire import Channel, PeerGone, SharedBuffer, WireError, decode, encode  # noqa: E402

MODEL_SEED = 42  # KernelBench seeds 42 before each constructor
KERNEL_FILES: set[str] = set()  # the kernel's file, its name drawn per check (disguise.py)
MAX_REQUEST_BYTES = 1 << 40  # the judge is trusted; its frames are as large as the problem


class Failure(Exception):
    def __init__(self, kind: str, message: str, error: BaseException | None = None):
        super().__init__(message)
        self.kind, self.message = kind, message
        self.traceback = traceback_text(error, tuple(KERNEL_FILES)) if error is not None else None


class Candidate:
    def __init__(self, device: str, channel: Channel):
        self.channel = channel
        self.on_cuda = device == "cuda"
        self.model = None
        self.offered: dict = {}  # the reference's weights, until the judge says which go where
        self.timing = None

    def prepare(self) -> None:
        import torch

        if not self.on_cuda:
            from repl.checker.cuda_on_cpu import enable_triton_interpreter, install_cuda_on_cpu

            enable_triton_interpreter()  # before triton is imported: it reads the switch once
            install_cuda_on_cpu(KERNEL_FILES)
            from repl.checker.candidate.interpreter_libdevice import install_interpreter_libdevice

            install_interpreter_libdevice()  # Inductor's libdevice.erf, tanh, pow... return None there otherwise
        from repl.checker.candidate.compat import install_inductor_compat
        from repl.checker.candidate.timing_requests import CandidateTiming
        from repl.checker.candidate.launches import LaunchRecorder
        from repl.checker.candidate.triton_warmup import warm_up

        self.device = torch.device("cuda" if self.on_cuda else "cpu")
        if self.on_cuda:
            torch.empty(1, device=self.device)  # the CUDA context, now
        self.recorder = LaunchRecorder()
        self.timing = CandidateTiming(self.device, self.forward, self.recorder)  # its clock, before candidate code
        if self.on_cuda:  # the launchers the fork server had built (prebuilt_launchers.py), before the warm-up's
            from repl.checker.candidate.prebuilt_launchers import seed_triton_cache

            seed_triton_cache()
        # Triton's driver helper and compiler (on a CPU, its front end for a GPU too) ready, not on a check's clock.
        self.recorder.front_end = warm_up(self.device)
        install_inductor_compat(preload=self.on_cuda)  # see its docstring: on a CPU, only when a kernel imports it
        self.recorder.install()
        self.precision = (torch.get_float32_matmul_precision(), torch.backends.cudnn.allow_tf32)

    # ---- requests -----------------------------------------------------------------------------------------------

    def load(self, request: dict, blob: bytes) -> dict:
        import torch

        try:
            code = extract_kernel_code(request["kernel_code"])
        except BaseException as error:  # the parser's recursion or memory, on text made to exhaust them
            raise Failure("compile_error", f"kernel cannot be parsed: {describe(error)}", error)
        if code is None:
            raise Failure("compile_error", "no Python code defining ModelNew found in the kernel")
        try:  # the judge's own data, decoded before any of the kernel's code runs
            data = decode(request["data"], blob)
        except Exception as error:
            raise Failure("checker_error", f"the reference's weights and init arguments cannot be decoded here: "
                                           f"{describe(error)}", error)
        if request.get("cpu_seconds"):
            limit_cpu_time(float(request["cpu_seconds"]))
        from repl.checker.candidate.disguise import draw_kernel_path, look_like_a_users_run

        path = draw_kernel_path(os.environ.get("HOME") or os.getcwd())
        KERNEL_FILES.add(path)
        look_like_a_users_run(path)  # the checker's folder, arguments and command line are tells
        try:
            module = import_source(code, path, write_file=True)
        except BaseException as error:
            raise Failure("compile_error", f"kernel does not import: {describe(error)}", error)
        if not hasattr(module, "ModelNew"):
            raise Failure("compile_error", "kernel defines no ModelNew")
        args, kwargs = init_arguments(data["init_inputs"])
        try:
            torch.manual_seed(MODEL_SEED)
            self.model = module.ModelNew(*args, **kwargs).to(self.device)
        except BaseException as error:
            raise Failure("runtime_error", f"ModelNew cannot be built: {describe(error)}", error)
        self.offered = data["weights"]
        return {"loaded": True, **self.own_state()}

    def own_state(self) -> dict:
        """Its state's names and shapes, from which the judge decides which reference weights it gets: data about
        itself (a lie only costs it the weights)."""
        if not self.offered:
            return {}
        try:
            return {"state": {key: list(value.shape) for key, value in self.model.state_dict().items()}}
        except Exception as error:  # a ModelNew that is not quite an nn.Module; it keeps its own weights
            return {"state_refused": describe(error)}

    def take_weights(self, request: dict, blob: bytes) -> dict:
        """The reference's weights under the names the judge chose (pairs: its own name -> the reference's)."""
        try:
            given = {own: self.offered[reference].to(self.device) for own, reference in request["pairs"].items()}
            self.model.load_state_dict(given, strict=False)
        except Exception as error:
            return {"given": False, "state_refused": describe(error)}
        return {"given": True}

    def forward(self, inputs: list):
        import torch

        torch.set_float32_matmul_precision(self.precision[0])
        torch.backends.cudnn.allow_tf32 = self.precision[1]
        with torch.no_grad():
            return self.model(*inputs)

    def run(self, request: dict, blob: bytes) -> tuple[dict, bytes]:
        from repl.checker.candidate.frontend import FrontEndRejected
        from repl.checker.candidate.launches import protected_storages
        from repl.checker.work import observe

        inputs = decode(request["inputs"], blob, device=self.device)
        recorder = self.recorder
        recorder.launched.clear()
        recorder.launches = 0
        recorder.skipping = bool(request.get("skip_launches"))
        recorder.protected = protected_storages(inputs, self.model) if recorder.skipping else set()
        recorder.recording = True
        output = None
        try:
            output, work = observe(self.forward, inputs, recorder, self.timing.clock if self.on_cuda else None)
        except FrontEndRejected as error:
            raise Failure(error.kind, str(error))
        except BaseException as error:
            kind = "compile_error" if is_triton_compilation_error(error) else "runtime_error"
            raise Failure(kind, describe(error), error)
        finally:
            recorder.recording = False
            if recorder.skipping:
                recorder.skipping = False
                output = _detached(output)  # the poisoned buffers get their contents back below
                recorder.restore()
        rejected = recorder.front_end.rejected if recorder.front_end is not None else None
        if rejected is not None:
            raise Failure(rejected.kind, str(rejected))  # however the forward handled the error
        if request.get("inputs_back"):  # a problem whose reference changes inputs in place (in_place.py)
            from repl.checker.in_place import with_changed_inputs

            output = with_changed_inputs(output, inputs, [int(index) for index in request["inputs_back"]])
        try:
            tree, data = encode(output)
        except WireError as error:
            raise Failure("bad_output", str(error))
        return {"outputs": tree, "launched": list(recorder.launched), "launches": recorder.launches,
                "work": work}, data


def _detached(value):
    """A copy of every tensor in value (lists, tuples, dicts kept), so later writes to the originals change nothing."""
    import torch

    if isinstance(value, torch.Tensor):
        return value.detach().clone()
    if type(value) in (list, tuple):
        return type(value)(_detached(item) for item in value)
    if type(value) is dict:
        return {key: _detached(item) for key, item in value.items()}
    return value


def _requests(channel: Channel) -> "queue.Queue":
    """Frames from the judge, read on a thread; when the judge's end closes, the process exits at once (a
    candidate stuck in its kernel included)."""
    frames: queue.Queue = queue.Queue()

    def read():
        while True:
            try:
                frames.put(channel.receive(max_blob=MAX_REQUEST_BYTES))
            except (PeerGone, WireError, OSError):
                os._exit(0)

    threading.Thread(target=read, daemon=True).start()
    return frames


def main() -> None:
    sys.dont_write_bytecode = True  # the checkout is read-only in the sandbox (no variable says so: it would be a tell)
    parser = argparse.ArgumentParser()
    parser.add_argument("--requests", type=int, required=True)
    parser.add_argument("--replies", type=int, required=True)
    parser.add_argument("--shared-requests", type=int, required=True)
    parser.add_argument("--shared-replies", type=int, required=True)
    parser.add_argument("--device", choices=("cpu", "cuda"), required=True)
    parser.add_argument("--sandbox", required=True)
    parser.add_argument("--memory-limit", type=int, default=0)
    options = parser.parse_args()
    devnull = os.open(os.devnull, os.O_RDONLY)  # the candidate's input() gets EOF instead of waiting
    os.dup2(devnull, 0)
    os.close(devnull)
    for fd in (options.requests, options.replies, options.shared_requests, options.shared_replies):
        os.set_inheritable(fd, False)  # processes the candidate starts do not get them
    channel = Channel(options.requests, options.replies,
                      shared_in=SharedBuffer(options.shared_requests, may_grow=False),
                      shared_out=SharedBuffer(options.shared_replies, may_grow=False))
    started = time.monotonic()
    candidate = Candidate(options.device, channel)
    try:
        candidate.prepare()
        from repl.checker.sandbox import confine_self

        notes = confine_self(options.sandbox, memory_limit_bytes=options.memory_limit or None,
                             gpu=options.device == "cuda")
    except BaseException as error:
        channel.send({"error": {"kind": "crash", "message": f"candidate process failed to start: {describe(error)}"}})
        os._exit(1)
    channel.send({"ready": True, "notes": notes, "prepare_s": round(time.monotonic() - started, 3)})
    frames = _requests(channel)
    handlers = {"load": candidate.load, "weights": candidate.take_weights, "run": candidate.run,
                **candidate.timing.handlers()}
    while True:
        request, blob = frames.get()
        op = request.get("op")
        if op not in handlers:
            break
        try:
            reply = handlers[op](request, blob)
            message, data = reply if isinstance(reply, tuple) else (reply, b"")
        except Failure as failure:
            message = {"error": {"kind": failure.kind, "message": failure.message, "traceback": failure.traceback}}
            data = b""
        except BaseException as error:  # the candidate broke the process's own machinery
            message = {"error": {"kind": "runtime_error", "message": describe(error),
                                 "traceback": traceback_text(error, tuple(KERNEL_FILES))}}
            data = b""
        try:
            channel.send(message, data)
        except PeerGone:
            break
    # Skip interpreter shutdown: the candidate's atexit hooks and stray threads get no chance to run or hang.
    os._exit(0)


if __name__ == "__main__":
    sys.exit(main())
