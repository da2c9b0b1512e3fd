"""Which ``@triton.jit`` kernels the candidate actually launched, and a switch that skips every launch.

A reply can define a kernel and never call it, or call PyTorch instead: only a launch counts, and only one made
while ``forward`` runs (a launch at import or in the constructor computes nothing the check sees). Every launch
``kernel[grid](...)`` ends in the ``run`` method of the kernel's class, also through ``@triton.autotune`` and
``@triton.heuristics`` (which call ``self.fn.run``): ``JITFunction.run`` when compiling for a GPU,
``InterpretedFunction.run`` under ``TRITON_INTERPRET=1`` (triton 3.6 and 3.9). Wrapping both at class level sees
every kernel, including ones the candidate defines after the recorder is installed.

With ``skipping`` on (the judge's trial without launches), a launch is compiled but not run (``warmup=True``: the
call returns what a launch returns), and every tensor it was given that the trial did not bring (not an input, not
the model's weights or attributes) is poisoned first (NaN, -1 or 0): a fresh ``torch.empty`` output would otherwise
still hold the previous trial's right answer. The poisoned tensors get their contents back once the output has been
sent (``restore``), so state the kernel keeps between calls is not harmed.

On the CPU every launched kernel is also compiled by Triton's own front end for a GPU (frontend.py), and an
``observer`` (work.py) is told when a launch starts and ends, to split the forward's time. ``inside`` counts nested
Triton calls (autotuning included): PyTorch operations made there are Triton's machinery, not the candidate's.
"""

import functools


class LaunchRecorder:
    def __init__(self):
        self.recording = False
        self.skipping = False
        self.launched: list[str] = []  # kernel names in first-launch order
        self.skipped = 0
        self.launches = 0  # every real launch while recording or counting
        self.counting = False  # timed calls: count launches, nothing else
        self.inside = 0
        self.protected: set[int] = set()  # storages the trial brought: never poisoned
        self.poisoned: list[tuple[object, object]] = []  # (tensor, its contents before)
        self.front_end = None  # frontend.FrontEndCheck on the CPU
        self.observer = None  # work.WorkObserver during a trial

    def install(self) -> None:
        from triton.runtime.interpreter import InterpretedFunction
        from triton.runtime.jit import JITFunction

        for kernel_class in (JITFunction, InterpretedFunction):
            kernel_class.run = self._recording(kernel_class.run)
        try:
            from triton.runtime.autotuner import Autotuner, Heuristics
        except ImportError:
            return
        for machinery in (Autotuner, Heuristics):
            machinery.run = self._inside(machinery.run)

    def restore(self) -> None:
        """Give every poisoned tensor its contents back (after the skipped trial's output was encoded)."""
        for tensor, saved in reversed(self.poisoned):
            try:
                tensor.copy_(saved)
            except Exception:  # a tensor the candidate resized or freed since: nothing to give back to
                pass
        self.poisoned = []

    def _inside(self, run):
        recorder = self

        @functools.wraps(run)
        def inside_run(*args, **kwargs):
            recorder.inside += 1
            try:
                return run(*args, **kwargs)
            finally:
                recorder.inside -= 1

        return inside_run

    def _recording(self, run):
        recorder = self

        @functools.wraps(run)
        def recording_run(kernel, *args, **kwargs):
            # warmup=True compiles without launching (KernelInterface.warmup).
            if not (recorder.recording or recorder.counting) or kwargs.get("warmup", False):
                return run(kernel, *args, **kwargs)
            name = getattr(kernel, "__name__", None) or getattr(kernel.fn, "__name__", "?")
            if recorder.counting:
                recorder.launches += 1
                return run(kernel, *args, **kwargs)
            if name not in recorder.launched:
                recorder.launched.append(name)
            refused = recorder.front_end.check(kernel, args, kwargs) if recorder.front_end is not None else None
            recorder.inside += 1
            try:
                if recorder.skipping:
                    recorder.skipped += 1
                    recorder._poison(args, kwargs)
                    return run(kernel, *args, **{**kwargs, "warmup": True})
                recorder.launches += 1
                observer = recorder.observer
                if observer is not None:
                    observer.launch_started(name)
                result = run(kernel, *args, **kwargs)
                if observer is not None:
                    observer.launch_ended(name)
                if refused:  # the interpreter ran what a GPU's launcher refuses
                    raise recorder.front_end.reject(refused, "runtime_error")
                return result
            finally:
                recorder.inside -= 1

        return recording_run

    def _poison(self, args, kwargs) -> None:
        import torch

        for value in (*args, *kwargs.values()):
            if not isinstance(value, torch.Tensor) or not value.numel():
                continue
            try:
                if value.untyped_storage().data_ptr() in self.protected:
                    continue
                saved = value.detach().clone()
                value.detach().fill_(_poison_value(value.dtype))
            except Exception:  # a tensor that cannot be written (a view of a read-only buffer): left as it is
                continue
            self.poisoned.append((value.detach(), saved))


def _poison_value(dtype):
    import torch

    if dtype.is_floating_point or dtype.is_complex:
        return float("nan")
    if dtype == torch.bool or dtype == torch.uint8:
        return 0
    return -1


def protected_storages(*values) -> set[int]:
    """The storages of every tensor reachable from values: tensors, lists/tuples/dicts of them, nn.Modules (their
    parameters, buffers and tensor attributes, submodules included) and plain objects' tensor attributes."""
    import torch

    found: set[int] = set()
    seen: set[int] = set()

    def visit(value, depth: int) -> None:
        if depth > 4 or id(value) in seen:
            return
        seen.add(id(value))
        if isinstance(value, torch.Tensor):
            try:
                found.add(value.untyped_storage().data_ptr())
            except Exception:
                pass
        elif isinstance(value, torch.nn.Module):
            for tensor in (*value.parameters(), *value.buffers()):
                visit(tensor, depth)
            for item in vars(value).values():
                visit(item, depth + 1)
        elif isinstance(value, (list, tuple, set)):
            for item in value:
                visit(item, depth + 1)
        elif isinstance(value, dict):
            for item in value.values():
                visit(item, depth + 1)
        elif hasattr(value, "__dict__") and not isinstance(value, type):
            for item in vars(value).values():
                visit(item, depth + 1)

    for value in values:
        visit(value, 0)
    return found
