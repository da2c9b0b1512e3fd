"""A prelude (checker_suite's Case.prelude) put before an honest kernel whose tl.dot computes float32 in TF32: at
import it tampers with everything its own process could report about that: the in-process precision scanner (where
its process had one) and the wire writer (every reply loses any precision field). Only a judge that reads the
kernel's text itself still says the precision was lowered."""
import sys

for name in ("repl.checker.candidate.precision", "repl.checker.judge.precision"):
    module = sys.modules.get(name)
    if module is None:
        try:
            __import__(name)
            module = sys.modules[name]
        except ImportError:
            continue
    module.lowered_precision = lambda source: {}

wire = sys.modules.get("repl.checker.wire")
if wire is not None:
    honest_send = wire.Channel.send

    def send(self, message, data=b"", **options):
        if isinstance(message, dict):
            message.pop("lowered_precision", None)
        return honest_send(self, message, data, **options)

    wire.Channel.send = send
