"""Attack: turn the shared memory that carries large blobs against the judge. The candidate finds the memfds it
shares with the judge and tries to shrink them (the judge reading a truncated mapping would die of SIGBUS) and to
seal them against writes (the judge's next write would fail); the memfds are sealed against both, so each try must
fail. Then it forges a reply frame that claims a terabyte in shared memory: the judge must refuse it before reading
anything (its cap on a reply comes first; a frame within the cap but beyond the buffer is refused too, see
test_checker_parts)."""
import fcntl
import gc
import os
import struct

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def relu_kernel(x_ptr, out_ptr, n_elements, BLOCK_SIZE: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offsets < n_elements
    tl.store(out_ptr + offsets, tl.maximum(tl.load(x_ptr + offsets, mask=mask), 0.0), mask=mask)


def shared_fds():
    for name in os.listdir("/proc/self/fd"):
        try:
            if "kernelllm-wire" in os.readlink(f"/proc/self/fd/{name}"):
                yield int(name)
        except OSError:
            pass


class ModelNew(nn.Module):
    def forward(self, x):
        fds = list(shared_fds())
        if len(fds) != 2:
            raise RuntimeError(f"expected the two shared buffers, found {fds}")
        sizes = {fd: os.fstat(fd).st_size for fd in fds}
        if not any(sizes.values()):
            raise RuntimeError("the judge made no room for the reply")
        for fd, size in sizes.items():
            attempts = [lambda: fcntl.fcntl(fd, fcntl.F_ADD_SEALS, fcntl.F_SEAL_WRITE)]
            if size:  # an empty buffer cannot shrink anyway
                attempts.append(lambda: os.ftruncate(fd, size - 1))
            for attempt in attempts:
                try:
                    attempt()
                except OSError:
                    continue
                raise RuntimeError(f"the shared buffer {fd} could be shrunk or sealed")
        # The reply pipe, found through the candidate's own Channel (its command line is no longer in sys.argv).
        replies = next(obj.write_fd for obj in gc.get_objects() if type(obj).__name__ == "Channel")
        text = b'{"outputs": []}'
        os.write(replies, struct.pack("!IQ", len(text), (1 << 63) | (1 << 40)) + text)
        out = torch.empty_like(x)
        relu_kernel[(triton.cdiv(x.numel(), 64),)](x, out, x.numel(), BLOCK_SIZE=64)
        return out
