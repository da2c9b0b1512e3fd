"""Counts that a kernel's programs raise as they finish a share of a result, so that the last one to arrive finishes
it in the same launch (``quant_many_rows``' and ``int4_mma``'s split products, ``decode_attention``'s slices) instead
of a second kernel.
Each kernel sets a count back to zero once its last program has read it, so one zeroed buffer serves every call and
every replay of a captured graph without a memset of its own. (For ``decode_attention``'s combine, every program's
release and the last one's serial reads can outweigh a launch: it wins at eight rows and loses at one,
``decode_attention.form_for``.)

One buffer per CUDA stream: calls on one stream run one after the other, so each finds its counts at zero, whichever
kernel used them before; another thread's calls on another stream (the plain path while the fast path warms up)
have a buffer of their own. A graph keeps the buffer of the stream it was captured on: replaying it while that
stream runs calls of its own would share it, which the engine's one-generation-at-a-time lock rules out. A buffer
made during a capture would be zeroed only when that graph replays, so a capture must follow an uncaptured call on
its stream (as ``FastDecoder._capture``'s first run does).
"""

import torch

COUNTS = 4096  # a count per block of a split product, split only below two programs an SM: GPUs of up to 2048 SMs
_buffers: dict = {}  # (device, stream) -> COUNTS int32 zeros


def arrival_counts(device: torch.device, needed: int, user: str) -> torch.Tensor:
    """The zeroed counts for calls on the current stream of ``device``; ValueError naming ``user`` if it needs more
    than COUNTS, or if the stream is being captured before an uncaptured call made its buffer."""
    if needed > COUNTS:
        raise ValueError(f"{user}: {needed} counts needed, more than the {COUNTS} kept")
    if device.type != "cuda":
        key = (device, 0)
    else:
        key = (device, torch.cuda.current_stream(device).cuda_stream)
        if key not in _buffers and torch.cuda.is_current_stream_capturing():
            raise ValueError(f"{user}: capturing on a stream that has run no uncaptured call; run one on that stream "
                             f"first (the warm-up of a capture) so that its counts exist, zeroed")
    if key not in _buffers:
        _buffers[key] = torch.zeros(COUNTS, dtype=torch.int32, device=device)
    return _buffers[key]


_multiprocessor_counts: dict = {}  # device -> its SMs


def multiprocessors(device: torch.device) -> int:
    """The SMs of a CUDA device: the split products split along K until they have about two programs on each."""
    if device not in _multiprocessor_counts:
        _multiprocessor_counts[device] = torch.cuda.get_device_properties(device).multi_processor_count
    return _multiprocessor_counts[device]
