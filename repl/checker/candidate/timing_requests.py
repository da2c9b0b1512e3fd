"""The candidate's side of timing (timing.py's harness, driven by the judge's speed.py), as request handlers:

``ping`` -> ``pong`` (sent before any candidate code is loaded: the judge's measure of a round trip);
``warm`` (two base draws, a seed) -> the warm-up calls' estimate;
``time`` (a seed, the first call's index, how many) -> each call's time by this process's clock, each output's sums
and Triton launches; the outputs are kept;
``collect`` (call indices) -> those calls' outputs, then every kept output is let go.
"""

from repl.checker.timing import WARMUP_CALLS, Clock, MixedInputs, estimate_ms, time_calls
from repl.checker.wire import decode, encode


class CandidateTiming:
    def __init__(self, device, forward, recorder):
        self.device, self.forward, self.recorder = device, forward, recorder
        self.clock = Clock(device)  # made while the process gets ready: before any candidate code exists
        self.bases = None
        self.kept: dict[int, object] = {}

    def handlers(self) -> dict:
        return {"ping": self.ping, "warm": self.warm, "time": self.time, "collect": self.collect}

    def ping(self, request: dict, blob) -> dict:
        return {"pong": True}

    def _call(self, inputs):
        return self.forward(inputs)

    def warm(self, request: dict, blob) -> dict:
        self.bases = decode(request["bases"], blob, device=self.device)
        inputs = MixedInputs(self.bases, self.device, int(request["seed"]), scales=bool(request.get("scales")))
        warmups = int(request.get("warmups", WARMUP_CALLS))
        return {"estimate_ms": estimate_ms(self._call, inputs, self.clock, warmups)}

    def time(self, request: dict, blob) -> dict:
        if self.bases is None:
            raise RuntimeError("timed calls asked for before the base inputs")
        inputs = MixedInputs(self.bases, self.device, int(request["seed"]), scales=bool(request.get("scales")))
        first, count = int(request["first"]), int(request["count"])
        self.kept = {}
        self.recorder.counting = True
        try:
            timed = time_calls(self._call, inputs, range(first, first + count), self.clock,
                               count_launches=lambda: self.recorder.launches)
        finally:
            self.recorder.counting = False
        self.kept = dict(zip(range(first, first + count), timed.outputs))
        return {"call_ms": timed.call_ms, "digests": timed.digests, "launches": timed.launches}

    def collect(self, request: dict, blob) -> tuple[dict, object]:
        wanted = [int(index) for index in request["calls"]]
        try:
            outputs = [self.kept[index] for index in wanted]
        finally:
            self.kept = {}
        tree, data = encode(outputs)
        return {"outputs": tree}, data
