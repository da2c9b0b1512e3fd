"""Which ``@triton.jit`` kernels the candidate actually launched, and a switch that skips every launch.

A reply can define a kernel and never call it, or call PyTorch instead: only a launch counts, and only one made
while ``forward`` runs (a launch at import or in the constructor computes nothing the check sees). Every launch
``kernel[grid](...)`` ends in the ``run`` method of the kernel's class, also through ``@triton.autotune`` and
``@triton.heuristics`` (which call ``self.fn.run``): ``JITFunction.run`` when compiling for a GPU,
``InterpretedFunction.run`` under ``TRITON_INTERPRET=1`` (triton 3.9). Wrapping both at class level sees every kernel,
including ones the candidate defines after the recorder is installed.

With ``skipping`` on, the wrapper records the launch and returns without running it: the judge's extra trial, whose
output must then be wrong if the Triton kernels did the work.
"""

import functools


class LaunchRecorder:
    def __init__(self):
        self.recording = False
        self.skipping = False
        self.launched: list[str] = []  # kernel names in first-launch order
        self.skipped = 0

    def install(self) -> None:
        from triton.runtime.interpreter import InterpretedFunction
        from triton.runtime.jit import JITFunction

        for kernel_class in (JITFunction, InterpretedFunction):
            kernel_class.run = self._recording(kernel_class.run)

    def _recording(self, run):
        recorder = self

        @functools.wraps(run)
        def recording_run(kernel, *args, **kwargs):
            # warmup=True compiles without launching (KernelInterface.warmup).
            if recorder.recording and not kwargs.get("warmup", False):
                name = getattr(kernel, "__name__", None) or getattr(kernel.fn, "__name__", "?")
                if name not in recorder.launched:
                    recorder.launched.append(name)
                if recorder.skipping:
                    recorder.skipped += 1
                    return None
            return run(kernel, *args, **kwargs)

        return recording_run
