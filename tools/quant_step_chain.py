"""The one-row quantized products of a whole decode step, in a CUDA graph, for each candidate kernel (issue 27).

    python tools/quant_step_chain.py [--formats int8,int4] [--variants shipped,early,early_pdl] [--json OUT]

``tools/quant_kernel_variants.py`` times each product alone with the L2 cache flushed; a decode step is 129 products
one after the other, each with a ramp (its first loads wait a full memory latency, after its norm's pass over the
input) and a tail (the last wave leaves SMs idle). This times what the step pays: 32 layers of distinct random weights
at the Llama-3.1-8B shapes with the fusions of the compiled tier (q/k/v after the norm; o plus the residual; gate/up
after the norm; down after SwiGLU plus the residual) and the output layer after the final norm, a small elementwise
kernel standing for RoPE and attention between q/k/v and o, captured in one CUDA graph and replayed. Milliseconds a
step (median of the replays), the bytes read per second, and each candidate's largest difference from the shipped
kernel's output.

Candidates:
- ``early``: a program asks for its first tile of weights before anything else (the norm's pass over the input, the
  inputs), and for the next tile before it uses the current one, so its first memory latency overlaps its own
  prologue.
- ``early_pdl``: the same, launched as a programmatic dependent launch (``launch_pdl``): each product lets the next
  one start as soon as all its programs run (``gdc_launch_dependents``), the next one's programs fill the SMs the
  tail leaves idle and ask for their weights (they do not depend on the previous product), then wait for the
  previous product's results (``gdc_wait``) before reading their inputs.
"""

import argparse
import json
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402
import triton  # noqa: E402
import triton.language as tl  # noqa: E402
from triton.language.extra.cuda import gdc_launch_dependents, gdc_wait  # noqa: E402

from repl.fastpath.kernels import quant_kernels as shipped  # noqa: E402
from repl.fastpath.kernels.kernel_timing import GraphTuner, replay_milliseconds  # noqa: E402
from repl.fastpath.kernels.quant_kernels import (_field_as_float, _input, _int4_block, _inverse_rms,  # noqa: E402
                                           _store_output)
from repl.generation.quantization import quantize, weight_bytes  # noqa: E402

HIDDEN, QKV, INTERMEDIATE, VOCAB, LAYERS = 4096, 6144, 14336, 128256, 32


@triton.heuristics({"EVEN": lambda args: (args["k"] // 4) % args["BLOCK_W"] == 0})
@triton.jit
def int8_early(x_ptr, words_ptr, scale_ptr, norm_ptr, residual_ptr, out_ptr, n, k, eps,
               NORM: tl.constexpr, SWIGLU: tl.constexpr, RESIDUAL: tl.constexpr,
               BLOCK_N: tl.constexpr, BLOCK_W: tl.constexpr, EVEN: tl.constexpr, PDL: tl.constexpr):
    if PDL:
        gdc_launch_dependents()
    rows = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    row_ok = rows < n
    words_per_row = k // 4
    index = tl.arange(0, BLOCK_W)
    row_words = words_ptr + rows[:, None] * words_per_row + index[None, :]
    if EVEN:
        words = tl.load(row_words, mask=row_ok[:, None], other=0, eviction_policy="evict_first")
    else:
        words = tl.load(row_words, mask=row_ok[:, None] & (index < words_per_row)[None, :], other=0,
                        eviction_policy="evict_first")
    if PDL:
        gdc_wait()
    inverse_rms = _inverse_rms(x_ptr, k, eps, NORM, 1024)
    acc = tl.zeros([BLOCK_N, BLOCK_W], tl.float32)
    inputs = tl.zeros([BLOCK_W], tl.float32)
    for start in range(0, words_per_row, BLOCK_W):
        following = start + BLOCK_W
        if EVEN:
            ok = True
            coming = tl.load(row_words + following, mask=row_ok[:, None] & (following < words_per_row), other=0,
                             eviction_policy="evict_first")
        else:
            ok = start + index < words_per_row
            coming = tl.load(row_words + following, mask=row_ok[:, None] & (following + index < words_per_row)[None, :],
                             other=0, eviction_policy="evict_first")
        for j in tl.static_range(4):
            v = _input(x_ptr, norm_ptr, j * words_per_row + start + index, ok, k, inverse_rms, NORM, SWIGLU)
            acc += _field_as_float(words, 15 - 8 * j, 0x007F8000) * v[None, :]
            inputs += v
        words = coming
    total = 256.0 * tl.sum(acc, 1) - 384.0 * tl.sum(inputs, 0)
    total *= tl.load(scale_ptr + rows, mask=row_ok, other=0.0).to(tl.float32)
    _store_output(total, rows, row_ok, residual_ptr, out_ptr, RESIDUAL)


@triton.jit
def int4_early(x_ptr, words_ptr, scale_ptr, offset_ptr, norm_ptr, residual_ptr, out_ptr, n, k, eps,
               NORM: tl.constexpr, SWIGLU: tl.constexpr, RESIDUAL: tl.constexpr,
               BLOCK_N: tl.constexpr, BLOCK_G: tl.constexpr, PDL: tl.constexpr):
    if PDL:
        gdc_launch_dependents()
    rows = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    row_ok = rows < n
    groups_per_row, words_per_row = k // 128, k // 8
    word_in_group = tl.arange(0, 16)
    block = tl.arange(0, BLOCK_G)
    at = rows[:, None, None] * words_per_row + (block[:, None] * 16 + word_in_group[None, :])[None, :, :]
    words = tl.load(words_ptr + at, mask=row_ok[:, None, None] & (block < groups_per_row)[None, :, None], other=0,
                    eviction_policy="evict_first")
    if PDL:
        gdc_wait()
    inverse_rms = _inverse_rms(x_ptr, k, eps, NORM, 1024)
    acc = tl.zeros([BLOCK_N, BLOCK_G], tl.float32)
    for start in range(0, groups_per_row, BLOCK_G):
        coming = tl.load(words_ptr + at + (start + BLOCK_G) * 16,
                         mask=row_ok[:, None, None] & (start + block + BLOCK_G < groups_per_row)[None, :, None],
                         other=0, eviction_policy="evict_first")
        acc = _int4_block(acc, words, start, x_ptr, scale_ptr, offset_ptr, norm_ptr, rows, row_ok, k, inverse_rms,
                          NORM, SWIGLU, BLOCK_N, BLOCK_G)
        words = coming
    _store_output(tl.sum(acc, 1), rows, row_ok, residual_ptr, out_ptr, RESIDUAL)


_int8_early = GraphTuner(int8_early, shipped.INT8_CONFIGS)
_int4_early = GraphTuner(int4_early, shipped.INT4_CONFIGS)


def early_matvec(pdl: bool):
    """A ``quant_matvec_launch`` with the early kernels (same arguments and checks, fewer of them)."""
    def launch(x, words, scale, offset, norm, residual, swiglu, eps):
        n = words.shape[0]
        k = words.shape[1] * (4 if offset is None else 8)
        x = x.reshape(-1)
        out = torch.empty(n, dtype=x.dtype, device=x.device)
        flags = dict(NORM=norm is not None, SWIGLU=swiglu, RESIDUAL=residual is not None, PDL=pdl)
        norm = norm if norm is not None else out
        residual = residual.reshape(-1) if residual is not None else out
        grid = lambda meta: (triton.cdiv(n, meta["BLOCK_N"]),)
        extra = {"launch_pdl": True} if pdl else {}
        key = (n, k, *flags.values(), x.dtype)
        if offset is None:
            _int8_early.launch(grid, (x, words, scale, norm, residual, out, n, k, eps), (1, 2), key, **flags, **extra)
        else:
            _int4_early.launch(grid, (x, words, scale, offset, norm, residual, out, n, k, eps), (1, 2, 3), key,
                               **flags, **extra)
        return out
    return launch


@triton.jit
def prepare_input(x_ptr, norm_ptr, out_ptr, k, eps, NORM: tl.constexpr, SWIGLU: tl.constexpr, BLOCK: tl.constexpr):
    """The product's input, norm * rms_norm(x) or SiLU(x[:k]) * x[k:], written once (a program per BLOCK inputs,
    each with its own pass for the RMS), so that the products' programs read it instead of each making it."""
    inverse_rms = _inverse_rms(x_ptr, k, eps, NORM, BLOCK)
    cols = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    v = _input(x_ptr, norm_ptr, cols, cols < k, k, inverse_rms, NORM, SWIGLU)
    tl.store(out_ptr + cols, v.to(out_ptr.dtype.element_ty), mask=cols < k)


VARIANTS = {"shipped": shipped.quant_matvec_launch, "early": early_matvec(False), "early_pdl": early_matvec(True)}


def build_layers(mode: str, device: str, seed: int = 0):
    generator = torch.Generator(device=device).manual_seed(seed)

    def weight(n, k):
        w = torch.randn(n, k, device=device, dtype=torch.bfloat16, generator=generator) * (k ** -0.5)
        return quantize(w, mode)

    def norm(k):
        return 1 + 0.1 * torch.randn(k, device=device, dtype=torch.bfloat16, generator=generator)

    layers = [dict(qkv=weight(QKV, HIDDEN), o=weight(HIDDEN, HIDDEN), gate_up=weight(2 * INTERMEDIATE, HIDDEN),
                   down=weight(HIDDEN, INTERMEDIATE), attention_norm=norm(HIDDEN), mlp_norm=norm(HIDDEN))
              for _ in range(LAYERS)]
    return layers, weight(VOCAB, HIDDEN), norm(HIDDEN)


def step(matvec, layers, lm_head, final_norm, h, eps=1e-5):
    for layer in layers:
        qkv = matvec(h, *layer["qkv"], layer["attention_norm"], None, False, eps)
        attention = qkv[:HIDDEN] * 0.5  # stands for RoPE and attention: kernels between q/k/v and o
        h = matvec(attention, *layer["o"], None, h, False, eps)
        gate_up = matvec(h, *layer["gate_up"], layer["mlp_norm"], None, False, eps)
        h = matvec(gate_up, *layer["down"], None, h, True, eps)
    return matvec(h, *lm_head, final_norm, None, False, eps)


def replay_times(run, replays: int):
    """``run`` twice outside a capture (tuning and compiling happen there), then captured in one CUDA graph and
    replayed ``replays`` times: the milliseconds of each replay, and what the captured run returned."""
    for _ in range(2):
        run()
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        output = run()
    return replay_milliseconds(graph, replays), output


def time_step(matvec, layers, lm_head, final_norm, replays: int):
    h = torch.randn(HIDDEN, device="cuda", dtype=torch.bfloat16)
    times, logits = replay_times(lambda: step(matvec, layers, lm_head, final_norm, h), replays)
    reference = step(shipped.quant_matvec_launch, layers, lm_head, final_norm, h)
    torch.cuda.synchronize()
    difference = (logits.float() - reference.float()).abs().max().item() / reference.float().abs().max().item()
    return statistics.median(times), min(times), difference


# -- the sweep: each product of a layer with its fusions, every tile, 32 distinct weights in a graph -----------------

KINDS = {"qkv": (dict(NORM=True, SWIGLU=False, RESIDUAL=False), HIDDEN),
         "o": (dict(NORM=False, SWIGLU=False, RESIDUAL=True), HIDDEN),
         "gate_up": (dict(NORM=True, SWIGLU=False, RESIDUAL=False), HIDDEN),
         "down": (dict(NORM=False, SWIGLU=True, RESIDUAL=True), INTERMEDIATE),
         "lm_head": (dict(NORM=True, SWIGLU=False, RESIDUAL=False), HIDDEN)}
TILES = {"int8": [(4, 512, 4), (8, 512, 4), (8, 256, 4), (16, 256, 4), (16, 128, 4), (32, 128, 4), (16, 512, 8),
                  (32, 128, 8), (16, 256, 8), (8, 1024, 8)],
         "int4": [(8, 8, 8), (8, 32, 4), (4, 32, 4), (8, 16, 2), (16, 8, 4), (16, 16, 4), (16, 32, 8), (32, 8, 8),
                  (32, 16, 8), (16, 8, 8)]}


def product_call(family: str, mode: str, tile, flags: dict, x, weight, norm, residual, k, eps=1e-5):
    """One product as a closure: ``family`` fused (the shipped kernel or ``early``) or ``prepared`` (the input made
    by ``prepare_input``, then the shipped kernel without the norm or SwiGLU)."""
    words, scale, offset = weight
    n = words.shape[0]
    rows, width, warps = tile
    meta = dict(BLOCK_N=rows, num_warps=warps, **({"BLOCK_W": width} if mode == "int8" else {"BLOCK_G": width}))
    grid = (triton.cdiv(n, rows),)
    out = torch.empty(n, dtype=x.dtype, device=x.device)
    prepared = torch.empty(k, dtype=x.dtype, device=x.device)
    residual = residual if flags["RESIDUAL"] else out

    def call():
        inputs, used = x, dict(flags)
        if family == "prepared":
            if flags["NORM"] or flags["SWIGLU"]:
                prepare_input[(triton.cdiv(k, 1024),)](x, norm, prepared, k, eps, NORM=flags["NORM"],
                                                       SWIGLU=flags["SWIGLU"], BLOCK=1024, num_warps=4)
                inputs = prepared
            used.update(NORM=False, SWIGLU=False)
        extra = {"PDL": False} if family == "early" else {}
        if mode == "int8":
            kernel = int8_early if family == "early" else shipped._int8_matvec
            kernel[grid](inputs, words, scale, norm, residual, out, n, k, eps, **used, **extra, **meta)
        else:
            kernel = int4_early if family == "early" else shipped._int4_matvec
            kernel[grid](inputs, words, scale, offset, norm, residual, out, n, k, eps, **used, **extra, **meta)
        return out
    return call


def graph_time(calls, replays: int) -> float:
    """Median ms of one replay of a graph of ``calls`` one after the other."""
    return statistics.median(replay_times(lambda: [call() for call in calls], replays)[0])


def sweep(mode: str, layers, lm_head, families, replays: int) -> dict:
    results = {}
    for kind, (flags, k) in KINDS.items():
        weights = [lm_head] * 4 if kind == "lm_head" else [layer[kind] for layer in layers]
        x = torch.randn(2 * k if flags["SWIGLU"] else k, device="cuda", dtype=torch.bfloat16)
        norm = 1 + 0.1 * torch.randn(k, device="cuda", dtype=torch.bfloat16)
        residual = torch.randn(weights[0].words.shape[0], device="cuda", dtype=torch.bfloat16)
        reference = None
        for family in families:
            for tile in TILES[mode]:
                label = f"{mode} {kind:7} {family:8} {str(tile):14}"
                try:
                    calls = [product_call(family, mode, tile, flags, x, w, norm, residual, k) for w in weights]
                    us = graph_time(calls, replays) / len(calls) * 1000
                    out = calls[0]().float()
                    reference = out if reference is None else reference
                    difference = ((out - reference).abs().max() / reference.abs().max()).item()
                except Exception as error:
                    print(f"{label} failed: {type(error).__name__}: {str(error)[:200]}", flush=True)
                    continue
                results[f"{kind}/{family}/{tile}"] = us
                print(f"{label} {us:8.2f} us  {weight_bytes(weights[0]) / us / 1e6:5.2f} TB/s  diff {difference:.1e}",
                      flush=True)
    for family in families:
        best = {kind: min((us, key) for key, us in results.items() if key.startswith(f"{kind}/{family}/"))
                for kind in KINDS if any(key.startswith(f"{kind}/{family}/") for key in results)}
        if len(best) == len(KINDS):
            step_ms = (sum(best[kind][0] for kind in KINDS if kind != "lm_head") * LAYERS + best["lm_head"][0]) / 1000
            print(f"{mode} {family}: best tiles give {step_ms:.3f} ms of products a step: "
                  + ", ".join(f"{kind} {us:.1f} {key.split('/')[2]}" for kind, (us, key) in best.items()), flush=True)
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--formats", default="int8,int4")
    parser.add_argument("--variants", default="shipped,early,early_pdl")
    parser.add_argument("--replays", type=int, default=30)
    parser.add_argument("--sweep", help="families to sweep over every tile, product by product (shipped,early,"
                        "prepared) instead of timing whole steps")
    parser.add_argument("--json")
    options = parser.parse_args()
    results = {"device": torch.cuda.get_device_name(), "torch": torch.__version__, "triton": triton.__version__}
    for mode in options.formats.split(","):
        layers, lm_head, final_norm = build_layers(mode, "cuda")
        if options.sweep:
            results[mode] = sweep(mode, layers, lm_head, options.sweep.split(","), options.replays)
            continue
        read = sum(weight_bytes(w) for layer in layers for w in layer.values() if isinstance(w, tuple)) \
            + weight_bytes(lm_head)
        for name in options.variants.split(","):
            try:
                median, best, difference = time_step(VARIANTS[name], layers, lm_head, final_norm, options.replays)
            except Exception as error:  # a candidate that fails to compile or capture is a result too
                print(f"{mode:5} {name:10} failed: {type(error).__name__}: {str(error)[:300]}", flush=True)
                continue
            results[f"{mode}/{name}"] = dict(ms=median, best_ms=best, tb_s=read / median / 1e9, difference=difference)
            print(f"{mode:5} {name:10} {median:7.3f} ms a step (best {best:.3f}), {read / median / 1e9:5.2f} TB/s, "
                  f"logits differ by {difference:.1e} of their largest", flush=True)
        del layers, lm_head
        torch.cuda.empty_cache()
    # What the shipped tuning chose in this process: the sweep's winners are what it should choose
    results["tuned"] = shipped.tuned_configs()
    for key, choice in results["tuned"].items():
        print(f"tuned: {key}: {choice}", flush=True)
    if options.json:
        Path(options.json).write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
