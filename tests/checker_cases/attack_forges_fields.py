"""Attack: at import, before the candidate process answers `load` itself, send the judge a forged `loaded` reply
whose notes are not text (an object and a number) and whose flags are not booleans: a report that trusted them
crashed (AttributeError) and printed no verdict. The forged reply is refused."""
import gc

import torch.nn as nn

from repl.checker.wire import Channel

for thing in gc.get_objects():
    if isinstance(thing, Channel) and thing.write_fd is not None:
        thing.send({"loaded": True, "notes": [{"not": "text"}, 42], "shape_specialised": "yes"})


class ModelNew(nn.Module):
    def forward(self, x):
        return x
