"""Programmatic dependent launch (``quant_kernels.PDL``) on a whole int4 decode step, in a CUDA graph (issue 27).

    python tools/pdl_check.py [--replays 30] [--retune] [--out DIR]

Three checks, one summary line at the end (``PDL SUMMARY ...``):
1. Whether a graph captured by ``torch.cuda.graph`` keeps PDL: two probe kernels, the second launched with
   ``launch_pdl``; the first spins (up to 20 ms) until the second sets a flag before its ``gdc_wait``. The flag seen
   means the second ran while the first was still running: the launch overlapped. Eager on a stream, then captured
   and replayed. The captured graph is also written in DOT (``CUDAGraph.debug_dump``), and its lines that mention a
   programmatic edge are counted (what the DOT shows of edge types depends on the CUDA version: the probe decides).
2. ms a step: the int4 products of Llama-3.1-8B's 32 layers (8 distinct random layers, each used 4 times: 0.9 GB
   between two reads of one weight, far above the L2) with the step's fusions, as the launcher chooses them (q/k/v
   with the norm, RoPE and cache writes; decode attention; o plus the residual; gate/up after the norm and down after
   SwiGLU, on tensor cores where faster, their input made first or in them) and the output layer, captured in one
   graph and replayed: PDL off, then on with the same tiles and ways (chosen with it off).
3. The outputs (logits, the last hidden state, the caches) with PDL on against off: the same kernels and tiles, so
   they must be identical bits; and every replay with PDL on gives the same bits (a read before the wait of
   something the previous kernel writes would show as a difference from one replay to the next).
``--retune``: also times PDL on with the tiles and ways chosen with it on (then outputs may differ by rounding).
A watchdog ends the run after 150 s, printing where it hung.
"""

import argparse
import faulthandler
import json
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402
import triton  # noqa: E402
import triton.language as tl  # noqa: E402
from triton.language.extra.cuda import gdc_launch_dependents, gdc_wait, globaltimer  # noqa: E402

from repl.fastpath.kernels import quant_kernels  # noqa: E402
from repl.fastpath.kernels.decode_attention import decode_attention  # noqa: E402
from repl.fastpath.kernels.kernel_timing import replay_milliseconds  # noqa: E402

HIDDEN, INTERMEDIATE, VOCAB, LAYERS, DISTINCT = 4096, 14336, 128256, 32, 8
HEADS, KV_HEADS, DIM = 32, 8, 128
CACHE, POSITION = 1024, 700
WATCHDOG_S = 150


# -- 1. does a captured graph keep the programmatic edge? -------------------------------------------------------------

@triton.jit
def _probe_first(flag_ptr, seen_ptr, WAIT_NS: tl.constexpr):
    """Lets the next kernel launch, then waits (at most WAIT_NS) for it to raise the flag; stores what it saw."""
    gdc_launch_dependents()
    start = globaltimer()
    seen = tl.atomic_add(flag_ptr, 0)
    while (seen == 0) & (globaltimer() - start < WAIT_NS):
        seen = tl.atomic_add(flag_ptr, 0)
    tl.store(seen_ptr, seen)


@triton.jit
def _probe_second(flag_ptr):
    """Raises the flag before its wait (a probe: the real kernels write nothing before it)."""
    tl.atomic_xchg(flag_ptr, 1)
    gdc_wait()


def _probe(flag, seen):
    flag.zero_()
    _probe_first[(1,)](flag, seen, WAIT_NS=20_000_000)
    _probe_second[(1,)](flag, launch_pdl=True)


def graph_keeps_pdl(out: Path) -> dict:
    """The probe eager and in a captured graph: whether the second kernel overlapped the first (1) or not (0); and
    the lines of the graph's DOT that mention a programmatic edge."""
    flag = torch.zeros(1, dtype=torch.int32, device="cuda")
    seen = torch.full((1,), -1, dtype=torch.int32, device="cuda")
    _probe(flag, seen)
    torch.cuda.synchronize()
    eager = int(seen.item())
    seen.fill_(-1)
    graph = torch.cuda.CUDAGraph()
    graph.enable_debug_mode()
    with torch.cuda.graph(graph):
        _probe(flag, seen)
    dot = out / "pdl_probe_graph.dot"
    graph.debug_dump(str(dot))
    seen.fill_(-1)
    graph.replay()
    torch.cuda.synchronize()
    captured = int(seen.item())
    lines = programmatic_lines(dot)
    return dict(eager_overlap=eager, graph_overlap=captured, dot=str(dot), dot_programmatic_lines=len(lines),
                dot_examples=lines[:3])


# -- 2. a decode step's int4 products ---------------------------------------------------------------------------------

def random_int4(n: int, k: int, generator) -> tuple:
    """An int4 weight of ``quantization``'s layout with random fields, scaled so that its rows have about unit gain
    (as k**-0.5 Gaussian weights): quantizing 8 GB of random weights would take longer than the timing."""
    words = torch.randint(-2**31, 2**31 - 1, (n, k // 8), dtype=torch.int32, device="cuda", generator=generator)
    scale = torch.full((n, k // 128), k ** -0.5 / 4.6, dtype=torch.bfloat16, device="cuda")
    offset = (-7.5 * scale.float()).to(torch.bfloat16)  # fields 0..15 centred on 0
    return words, scale, offset


def build(seed: int = 0):
    generator = torch.Generator(device="cuda").manual_seed(seed)

    def norm(k):
        return (1 + 0.1 * torch.randn(k, device="cuda", generator=generator)).to(torch.bfloat16)

    layers = [dict(qkv=random_int4((HEADS + 2 * KV_HEADS) * DIM, HIDDEN, generator),
                   o=random_int4(HIDDEN, HIDDEN, generator), gate_up=random_int4(2 * INTERMEDIATE, HIDDEN, generator),
                   down=random_int4(HIDDEN, INTERMEDIATE, generator), attention_norm=norm(HIDDEN),
                   mlp_norm=norm(HIDDEN)) for _ in range(DISTINCT)]
    angles = torch.rand(DIM, device="cuda", generator=generator) * 6.28
    cos, sin = angles.cos().to(torch.bfloat16), angles.sin().to(torch.bfloat16)
    caches = [tuple(0.1 * torch.randn((1, KV_HEADS, CACHE, DIM), device="cuda", generator=generator)
                    .to(torch.bfloat16) for _ in range(2)) for _ in range(LAYERS)]
    return layers, random_int4(VOCAB, HIDDEN, generator), norm(HIDDEN), cos, sin, caches


def step(h, layers, lm_head, final_norm, cos, sin, caches, position, eps=1e-5):
    """One decode step's products as the quantized fast path runs them (``quant_pieces``), attention included."""
    launch = quant_kernels.quant_matvec_launch
    for i in range(LAYERS):
        layer, (k_cache, v_cache) = layers[i % DISTINCT], caches[i]
        q = quant_kernels.quant_qkv_rope_cache_launch(h, layer["attention_norm"], *layer["qkv"], cos, sin, k_cache,
                                                      v_cache, position, HEADS, KV_HEADS, eps)
        attention = decode_attention(q, k_cache, v_cache, position, CACHE)
        h = launch(attention.reshape(-1), *layer["o"], None, h, False, eps)
        gate_up = launch(h, *layer["gate_up"], layer["mlp_norm"], None, False, eps)
        h = launch(gate_up, *layer["down"], None, h, True, eps)
    return launch(h, *lm_head, final_norm, None, False, eps), h


def captured_step(run, dot: Path = None):
    """``run`` twice on a side stream (tuning, compiling, the arrival counts made there), then captured on it in one
    CUDA graph, as ``FastDecoder._capture`` does: the graph and what the captured run returned; the graph written in
    DOT to ``dot`` if given."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        run()
        run()
    side.synchronize()
    graph = torch.cuda.CUDAGraph()
    if dot is not None:
        graph.enable_debug_mode()
    with torch.cuda.graph(graph, stream=side):
        outputs = run()
    if dot is not None:
        graph.debug_dump(str(dot))
    return graph, outputs


def programmatic_lines(dot: Path) -> list[str]:
    """The lines of a graph's DOT that mention a programmatic dependency (none where no DOT was written: torch
    2.11 on CUDA 13 wrote none in run 40; the probe decides)."""
    if not dot.exists():
        return []
    return [line.strip() for line in dot.read_text(errors="replace").splitlines() if "rogrammatic" in line]


def snapshot(outputs, caches) -> list[torch.Tensor]:
    return [tensor.clone() for tensor in outputs] + [cache.clone() for pair in caches for cache in pair]


def largest_difference(a: list, b: list) -> float:
    return max((x.float() - y.float()).abs().max().item() for x, y in zip(a, b))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--replays", type=int, default=30)
    parser.add_argument("--retune", action="store_true", help="also time PDL on with tiles and ways chosen with it on")
    parser.add_argument("--out", default=os.environ.get("OUT", "/tmp"), help="where the DOT files and JSON go")
    options = parser.parse_args()
    faulthandler.dump_traceback_later(WATCHDOG_S, exit=True)
    began = time.time()
    out = Path(options.out)
    out.mkdir(parents=True, exist_ok=True)
    results = dict(device=torch.cuda.get_device_name(), torch=torch.__version__, triton=triton.__version__,
                   cuda=torch.version.cuda)
    print(f"{results}", flush=True)

    results["probe"] = probe = graph_keeps_pdl(out)
    print(f"probe: overlap eager {probe['eager_overlap']}, in the captured graph {probe['graph_overlap']} "
          f"(1: the PDL launch ran alongside; 0: serialized); DOT lines naming a programmatic edge: "
          f"{probe['dot_programmatic_lines']} {probe['dot_examples']}", flush=True)

    layers, lm_head, final_norm, cos, sin, caches = build()
    h = (torch.randn(HIDDEN, device="cuda") * 0.5).to(torch.bfloat16)
    position = torch.tensor([POSITION], device="cuda")
    run = lambda: step(h, layers, lm_head, final_norm, cos, sin, caches, position)  # noqa: E731
    print(f"built in {time.time() - began:.0f} s", flush=True)

    timings, snapshots = {}, {}
    settings = [("off", False), ("on", True)] + ([("on retuned", True)] if options.retune else [])
    for name, pdl in settings:
        quant_kernels.PDL = pdl
        if name == "on retuned":
            quant_kernels._chosen_ways.clear()
            for tuner in (quant_kernels._int4_tuned, quant_kernels._int4_rope_tuned):
                tuner.cache.clear()
        dot = out / "pdl_step_graph.dot" if name == "on" else None
        graph, outputs = captured_step(run, dot)
        if dot is not None:
            results["step_dot_programmatic_lines"] = len(programmatic_lines(dot))
        times = replay_milliseconds(graph, options.replays)
        timings[name] = (statistics.median(times), min(times))
        snapshots[name] = snapshot(outputs, caches)
        if pdl:  # every replay the same bits
            graph.replay()
            torch.cuda.synchronize()
            snapshots[name + " again"] = snapshot(outputs, caches)
        print(f"PDL {name:10}: {timings[name][0]:.3f} ms a step (best {timings[name][1]:.3f}), "
              f"{time.time() - began:.0f} s in", flush=True)
        del graph
    quant_kernels.PDL = False

    results["ms"] = {name: median for name, (median, _) in timings.items()}
    same = largest_difference(snapshots["off"], snapshots["on"])
    replays_same = largest_difference(snapshots["on"], snapshots["on again"])
    results.update(difference_on_off=same, difference_between_replays=replays_same,
                   choices=quant_kernels.tuned_configs())
    if options.retune:
        results["difference_retuned"] = largest_difference(snapshots["off"], snapshots["on retuned"])
    for key, choice in results["choices"].items():
        print(f"chosen: {key}: {choice}", flush=True)
    (out / "pdl_check.json").write_text(json.dumps(results, indent=1, default=str))
    off, on = results["ms"]["off"], results["ms"]["on"]
    print(f"PDL SUMMARY: step {off:.3f} ms off, {on:.3f} ms on ({100 * (off - on) / off:+.1f}%)"
          + (f", {results['ms']['on retuned']:.3f} ms on retuned (differs by {results['difference_retuned']:.2e})"
             if options.retune else "")
          + f"; outputs on vs off differ by {same:.2e} (must be 0), between replays {replays_same:.2e}; "
          f"graph keeps PDL: {'yes' if probe['graph_overlap'] == 1 else 'NO'} (eager {probe['eager_overlap']}; "
          f"DOT programmatic lines: probe {probe['dot_programmatic_lines']}, step "
          f"{results['step_dot_programmatic_lines']}); "
          f"{time.time() - began:.0f} s", flush=True)
    faulthandler.cancel_dump_traceback_later()


if __name__ == "__main__":
    main()
