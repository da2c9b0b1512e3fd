"""What one kernel boundary costs a decode step on the GPU: chains of small kernels in a CUDA graph (issue 27).

    python tools/boundary_cost.py [--launches 64] [--programs 264] [--json OUT]

A decode step of the int4 8B is ~225 kernels, each depending on the one before: a program of kernel i + 1 reads
what kernel i wrote. On an H200 every layer product spends 5-8 us more than its bytes (docs/performance.md, "a step
timeline"). This separates what a boundary itself costs from what a product adds to it: chains of ``--launches``
kernels of ``--programs`` programs (4 warps), each kernel reading the previous one's output, captured in one graph;
us a kernel (median of the replays):

- ``empty``: PDL (``gdc_launch_dependents`` first, ``gdc_wait``), nothing read or written: the boundary alone.
- ``hop``: PDL; after the wait a program reads the previous kernel's 4096 bfloat16 values (8 KB, as a product reads
  x), sums them and stores one value of the next vector: one dependent load from the L2 a kernel.
- ``hop_plain``: ``hop`` without PDL (plain launches in the graph).
- ``hop2``: ``hop`` then a second load whose address depends on the first (two L2 round trips after the wait).
- ``split``: ``hop``, then the split's reduction as the int4 products do it (``int4_mma._arrived_last``): a partial
  sum stored, a barrier, an acq_rel atomic count of 4 parts, the last part reading the 4 partials from the L2 and
  storing the value.
- ``weights``: ``hop`` with each program also reading 32 KB of weights of its own before the wait (8.7 MB a kernel
  at 264 programs: about o's int4 bytes), distinct for each launch: the boundary with bytes to hide.
- ``weights_alone``: the same bytes without the chain: programs do not wait nor read the previous output.
"""

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402
import triton  # noqa: E402
import triton.language as tl  # noqa: E402
from triton.language.extra.cuda import gdc_launch_dependents, gdc_wait  # noqa: E402

from repl.fastpath.kernels.kernel_timing import time_in_a_graph  # noqa: E402

VALUES = 4096  # the vector each kernel hands the next (the 8B's hidden size)
WEIGHT_WORDS = 8192  # int32 words a program reads in ``weights`` (32 KB)
PARTS = 4


@triton.jit
def _chain(x_ptr, out_ptr, weights_ptr, partial_ptr, counts_ptr, PDL: tl.constexpr, READ: tl.constexpr,
           SECOND: tl.constexpr, SPLIT: tl.constexpr, WEIGHTS: tl.constexpr, VALUES: tl.constexpr,
           WEIGHT_WORDS: tl.constexpr, PARTS: tl.constexpr):
    if PDL:
        gdc_launch_dependents()
    program = tl.program_id(0)
    weight_sum = 0
    if WEIGHTS:
        at = weights_ptr + program * WEIGHT_WORDS + tl.arange(0, WEIGHT_WORDS)
        weight_sum = tl.sum(tl.load(at, eviction_policy="evict_first"), 0)
    if PDL:
        gdc_wait()
    value = weight_sum.to(tl.float32) * 0.0
    if READ:
        x = tl.load(x_ptr + tl.arange(0, VALUES)).to(tl.float32)
        value += tl.sum(x, 0) * (1.0 / VALUES)
        if SECOND:
            index = (value.to(tl.int32) & (VALUES - 1))
            value += tl.load(x_ptr + index).to(tl.float32)
    slot = program % VALUES
    if SPLIT:
        block = program // PARTS
        tl.store(partial_ptr + program, value)
        tl.debug_barrier()
        arrived = tl.atomic_add(counts_ptr + block, 1, sem="acq_rel", scope="gpu")
        if arrived == PARTS - 1:
            parts = tl.load(partial_ptr + block * PARTS + tl.arange(0, PARTS), cache_modifier=".cg")
            tl.store(out_ptr + block, tl.sum(parts, 0).to(out_ptr.dtype.element_ty))
            tl.atomic_xchg(counts_ptr + block, 0, sem="relaxed", scope="gpu")
    else:
        tl.store(out_ptr + slot, value.to(out_ptr.dtype.element_ty))


VARIANTS = {
    "empty": dict(PDL=True, READ=False, SECOND=False, SPLIT=False, WEIGHTS=False),
    "hop": dict(PDL=True, READ=True, SECOND=False, SPLIT=False, WEIGHTS=False),
    "hop_plain": dict(PDL=False, READ=True, SECOND=False, SPLIT=False, WEIGHTS=False),
    "hop2": dict(PDL=True, READ=True, SECOND=True, SPLIT=False, WEIGHTS=False),
    "split": dict(PDL=True, READ=True, SECOND=False, SPLIT=True, WEIGHTS=False),
    "weights": dict(PDL=True, READ=True, SECOND=False, SPLIT=False, WEIGHTS=True),
    "weights_alone": dict(PDL=True, READ=False, SECOND=False, SPLIT=False, WEIGHTS=True),
}


def time_chain(flags: dict, launches: int, programs: int) -> float:
    """Microseconds a kernel of a graph of ``launches`` chained kernels (``kernel_timing.time_in_a_graph``: the median
    of its replays)."""
    vectors = [torch.randn(VALUES, device="cuda").to(torch.bfloat16) for _ in range(2)]
    copies = 8 if flags["WEIGHTS"] else 1  # 8 x 8.7 MB of weights: far above the L2 between two reads of one
    weights = [torch.randint(0, 7, (programs * WEIGHT_WORDS,), dtype=torch.int32, device="cuda")
               for _ in range(copies)]
    partial = torch.zeros(programs, dtype=torch.float32, device="cuda")
    counts = torch.zeros(programs, dtype=torch.int32, device="cuda")
    options = dict(flags, VALUES=VALUES, WEIGHT_WORDS=WEIGHT_WORDS, PARTS=PARTS, num_warps=4)
    if flags["PDL"]:
        options["launch_pdl"] = True

    def launch(i):
        _chain[(programs, )](vectors[i % 2], vectors[(i + 1) % 2], weights[i % copies], partial, counts, **options)

    return 1000 * time_in_a_graph([lambda i=i: launch(i) for i in range(launches)])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--launches", type=int, default=64)
    parser.add_argument("--programs", type=int, default=264)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    results = {"device": torch.cuda.get_device_name(), "torch": torch.__version__, "triton": triton.__version__,
               "launches": args.launches, "programs": args.programs}
    for name, flags in VARIANTS.items():
        results[name] = round(time_chain(flags, args.launches, args.programs), 3)
        print(f"{name:>14}: {results[name]:.3f} us a kernel", flush=True)
    print("BOUNDARY " + json.dumps(results))
    if args.json:
        args.json.write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
