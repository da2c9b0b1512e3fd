"""Decode attention's variants timed at Llama-3.1-8B's shapes on a GPU, to choose ``decode_attention``'s slicing
(issue 27).

    python tools/attention_check.py [--positions 1000 1128 2000 4000] [--batch 1] [--out DIR]

For each position (attending to the next multiple of 256 positions, the decoder's bucket): every slicing (blocks of
32, 64 or 128 positions x at most 8, 16, 32 or 64 slices: ``decode_attention.slicing``) in four forms (one kernel
or two, ``quant_kernels.PDL`` off or on), each timed as a CUDA graph of 32 launches on distinct caches (a step's 32
layers: 32 x 2 x 8 MB of bf16 cache, far above the L2) and checked on one layer against ``llama_math.attend_cache``;
one kernel against two, and PDL on against off, for equal bits. Prints a table per position, then one line
``ATTENTION SUMMARY`` (per position: the fastest variant, the default's time and rank); JSON to --out.
A graph of attention launches alone shows what PDL gains between them, not after the q/k/v kernel of a step:
``tools/pdl_check.py`` times the whole step. A watchdog ends the run after 500 s, printing where it hung.
"""

import argparse
import faulthandler
import json
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402
import triton  # noqa: E402

from repl.fastpath.kernels import decode_attention as attention, quant_kernels  # noqa: E402
from repl.fastpath.kernels.kernel_timing import time_in_a_graph  # noqa: E402
from repl.fastpath.llama_math import attend_cache  # noqa: E402

HEADS, KV_HEADS, DIM, LAYERS, MAX_SEQ_LEN, BUCKET = 32, 8, 128, 32, 4096, 256
DTYPE = torch.bfloat16
BLOCKS = sorted({32, 64, 128, attention.BLOCK_N})  # the default's always among them
MAX_SPLITS = sorted({8, 16, 32, 64, attention.MAX_SPLITS})
FORMS = [(True, True), (True, False), (False, True), (False, False)]  # (one kernel, PDL)
WATCHDOG_S = 500


def form_name(one_kernel: bool, pdl: bool) -> str:
    return f"{'one' if one_kernel else 'two'} kernel{'' if one_kernel else 's'}, PDL {'on' if pdl else 'off'}"


def variant(block_n: int, max_splits: int, one_kernel: bool, pdl: bool, layers, position, attended: int) -> dict:
    """One variant: its µs a launch in the graph, its error against torch on layer 0, its output there."""
    quant_kernels.PDL = pdl
    options = dict(block_n=block_n, max_splits=max_splits, one_kernel=one_kernel)
    launches = [lambda q=q, k=k, v=v: attention.decode_attention(q, k, v, position, attended, **options)
                for q, k, v in layers]
    us = 1000 * time_in_a_graph(launches)
    q, k, v = layers[0]
    out = attention.decode_attention(q, k, v, position, attended, **options)
    ref = attend_cache(q.double(), k.double(), v.double(), position, attended)
    error = ((out.double() - ref).norm() / ref.norm()).item()
    splits, chunk = attention.slicing(attended, block_n, max_splits)
    return dict(block_n=block_n, max_splits=max_splits, one_kernel=one_kernel, pdl=pdl, splits=splits,
                blocks_a_slice=chunk // block_n, programs=splits * KV_HEADS * q.shape[0], us=us, error=error,
                out=out)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--positions", type=int, nargs="+", default=[1000, 1128, 2000, 4000])
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--out", default=os.environ.get("OUT", "/tmp"), help="where the JSON goes")
    options = parser.parse_args()
    faulthandler.dump_traceback_later(WATCHDOG_S, exit=True)
    began = time.time()
    results = dict(device=torch.cuda.get_device_name(), torch=torch.__version__, triton=triton.__version__,
                   sms=torch.cuda.get_device_properties(0).multi_processor_count, batch=options.batch,
                   default=dict(block_n=attention.BLOCK_N, form=attention.form_for(options.batch)), positions={})
    print({k: v for k, v in results.items() if k != "positions"}, flush=True)
    generator = torch.Generator(device="cuda").manual_seed(0)
    layers = [(torch.randn((options.batch, HEADS, 1, DIM), device="cuda", generator=generator).to(DTYPE),
               *(torch.randn((options.batch, KV_HEADS, MAX_SEQ_LEN, DIM), device="cuda", generator=generator)
                 .to(DTYPE) for _ in range(2))) for _ in range(LAYERS)]
    summary = []
    for at in options.positions:
        attended = min(MAX_SEQ_LEN, triton.cdiv(at + 1, BUCKET) * BUCKET)
        position = torch.tensor([at], device="cuda")
        rows, outs = [], {}
        for block_n in BLOCKS:
            for max_splits in MAX_SPLITS:
                for one_kernel, pdl in FORMS:
                    row = variant(block_n, max_splits, one_kernel, pdl, layers, position, attended)
                    outs[block_n, max_splits, one_kernel, pdl] = row.pop("out")
                    rows.append(row)
                # the same bits whichever form: the combine's sums in one order, PDL changing no arithmetic
                forms = [outs[block_n, max_splits, one, pdl] for one, pdl in FORMS]
                same = all(torch.equal(forms[0], other) for other in forms[1:])
                for row in rows[-len(FORMS):]:
                    row["same_bits_in_every_form"] = same
        quant_kernels.PDL = False
        print(f"\nposition {at} (attending to {attended}), µs a launch in a graph of {LAYERS} on distinct caches:",
              flush=True)
        print(f"{'block':>5} {'max':>4} {'slices':>6} {'blocks':>6} {'programs':>8}  "
              + "  ".join(f"{form_name(*form):>24}" for form in FORMS) + "  same bits  error", flush=True)
        for i in range(0, len(rows), len(FORMS)):
            row = rows[i]
            times = "  ".join(f"{r['us']:24.2f}" for r in rows[i:i + len(FORMS)])
            print(f"{row['block_n']:5d} {row['max_splits']:4d} {row['splits']:6d} {row['blocks_a_slice']:6d} "
                  f"{row['programs']:8d}  {times}  {str(row['same_bits_in_every_form']):>9}  "
                  f"{max(r['error'] for r in rows[i:i + len(FORMS)]):.1e}", flush=True)
        ranked = sorted(rows, key=lambda r: r["us"])
        best = ranked[0]
        most, one = attention.form_for(options.batch)
        default = next(r for r in rows if r["block_n"] == attention.BLOCK_N and r["max_splits"] == most
                       and r["one_kernel"] == one and r["pdl"])
        before = next(r for r in rows if r["block_n"] == 32 and r["max_splits"] == 16 and not r["one_kernel"]
                      and not r["pdl"])
        results["positions"][at] = dict(attended=attended, rows=rows)
        summary.append(f"{at}: best {best['us']:.2f} µs (block {best['block_n']}, max {best['max_splits']}, "
                       f"{form_name(best['one_kernel'], best['pdl'])}), default {default['us']:.2f} "
                       f"(rank {ranked.index(default) + 1}/{len(rows)}), 16 slices of 32 in two kernels without PDL "
                       f"{before['us']:.2f}; worst error {max(r['error'] for r in rows):.1e}, same bits in every "
                       f"form: {all(r['same_bits_in_every_form'] for r in rows)}")
        print(f"  {summary[-1]} ({time.time() - began:.0f} s in)", flush=True)
    out = Path(options.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "attention_check.json").write_text(json.dumps(results, indent=1, default=str))
    print(f"ATTENTION SUMMARY ({results['device']}, batch {options.batch}, µs a layer): " + "; ".join(summary)
          + f"; {time.time() - began:.0f} s", flush=True)
    faulthandler.cancel_dump_traceback_later()


if __name__ == "__main__":
    main()
