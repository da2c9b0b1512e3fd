"""A prelude (checker_suite's Case.prelude) put before a kernel whose weights no mapping can give (two renamed ones of
one shape): at import it forges what its process reports on loading, that it was given both reference weights by
name. Only the judge's own decision may word the mapping."""
import sys

FORGED = "candidate given 2 of 2 reference weights (same names and shapes)"

wire = sys.modules.get("repl.checker.wire")
if wire is not None:
    honest_send = wire.Channel.send

    def send(self, message, data=b"", **options):
        if isinstance(message, dict) and message.get("loaded"):
            message["notes"] = [FORGED]
        return honest_send(self, message, data, **options)

    wire.Channel.send = send
