"""`bench`: decode speed of the plain generate() path and the fast path side by side, time to first token, warm-up,
start-up time and render overhead; a table on the terminal and every figure in JSON (--json OUT).

Runs standalone too: python -m repl.cli.bench --random-weights --arch tiny --device cpu
"""

import argparse
import json
import sys
import time
from pathlib import Path

from repl.cli.options import model_options
from repl.ui.option_values import positive_int

DESCRIPTION = """\
Benchmark generation: tokens/s of one stream and of K samples at once, for model.generate() (the plain path) and the
fast decode path in one run; time to first token; compile/capture warm-up; seconds until the interactive prompt is
drawn; the streaming view's CPU cost at a given token rate. Medians over --runs.

--random-weights --arch llama-3.1-8b builds KernelLLM's exact architecture with random weights (no download; speed
does not depend on the weights' values). --arch tiny runs in seconds on a CPU. --quantize int8,int4 measures each
weight-only setting's fast path beside the full-precision model in the same run (speed, memory held, warm-up, and
its logits against the full-precision ones).
"""


def add_parser(subparsers) -> argparse.ArgumentParser:
    # --model, --device and --dtype are the main command line's (defaults=False: given before or after `bench`).
    parser = subparsers.add_parser("bench", help="benchmark generation speed, start-up and rendering",
                                   description=DESCRIPTION, formatter_class=argparse.RawDescriptionHelpFormatter,
                                   parents=[model_options(defaults=False, several_quantizations=True)])
    add_arguments(parser)
    return parser


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--random-weights", action="store_true",
                        help="random weights of --arch instead of loading --model")
    parser.add_argument("--arch", type=_architecture, default="llama-3.1-8b",
                        help="architecture for --random-weights, e.g. tiny (default: llama-3.1-8b)")
    parser.add_argument("--json", metavar="OUT", help="write every figure to this JSON file")
    parser.add_argument("--prompt-tokens", type=positive_int, default=1000, help="prompt length (default: 1000)")
    parser.add_argument("--new-tokens", type=positive_int, default=256, help="tokens generated per run (default: 256)")
    parser.add_argument("--samples", type=positive_int, default=8, help="K, samples decoded at once (default: 8)")
    parser.add_argument("--runs", type=positive_int, default=3, help="runs per figure; medians reported (default: 3)")
    parser.add_argument("--max-seq-len", type=positive_int, default=4096,
                        help="fast path's static cache length (default: 4096, as in the REPL)")
    parser.add_argument("--render-tokens", type=int, default=2048,
                        help="length of the synthetic reply for the render overhead, 0 to skip (default: 2048)")
    parser.add_argument("--render-rate", type=float, default=200.0, help="its tokens/s (default: 200)")
    parser.add_argument("--skip-plain", action="store_true", help="measure the fast path only")
    parser.add_argument("--skip-startup", action="store_true", help="do not measure start-up time")
    parser.add_argument("--profile-steps", type=int, default=0,
                        help="CUDA: profile this many fast decode steps (kernel time by kind)")
    parser.add_argument("--compare-matvec", action="store_true",
                        help="CUDA: also measure the compiled tier with Inductor's products instead of ours (A/B)")
    parser.add_argument("--skip-drafting", action="store_true",
                        help="do not measure speculative decoding with drafts (projected with random weights)")


def _architecture(name: str) -> str:
    from repl.generation.random_weights import ARCHITECTURES  # imports torch: only when --arch is given

    if name not in ARCHITECTURES:
        raise argparse.ArgumentTypeError(f"must be one of {', '.join(ARCHITECTURES)}, not {name!r}")
    return name


def run(args) -> int:
    from repl.bench.decode import BenchOptions, run_benchmark
    from repl.ui.console import report_console
    from repl.bench.render import measure_render

    console = report_console(sys.stderr)
    options = BenchOptions(
        arch=args.arch if args.random_weights else None, model=getattr(args, "model", None),
        device=getattr(args, "device", None) or "auto", dtype=getattr(args, "dtype", None) or "auto",
        prompt_tokens=args.prompt_tokens, new_tokens=args.new_tokens, samples=args.samples, runs=args.runs,
        max_seq_len=args.max_seq_len, render_tokens=args.render_tokens, render_rate=args.render_rate,
        plain=not args.skip_plain, startup=not args.skip_startup, profile_steps=args.profile_steps,
        compare_matvec=args.compare_matvec, quantize=_quantize_settings(getattr(args, "quantize", None)),
        drafting=not args.skip_drafting)
    if options.arch is None and not options.model:
        console.print("error: give --random-weights --arch ARCH, or --model for real weights", style="red")
        return 2
    started = time.monotonic()
    save = lambda results: Path(args.json).expanduser().write_text(json.dumps(results, indent=2) + "\n")
    results = run_benchmark(options, report=lambda message: console.print(
        f"{time.monotonic() - started:6.1f}s · {message}", style="dim"), save=save if args.json else lambda r: None,
        measure_render=measure_render)
    output = report_console(sys.stdout)
    if output.is_terminal:
        output.width = max(output.width, 110)
    output.print(results_table(results))
    if results.get("quantized"):
        output.print(quantized_table(results))
    if args.json:
        console.print(f"wrote {args.json}", style="dim")
    return 0


def _quantize_settings(value) -> tuple[str, ...]:
    """--quantize as given to bench (a list) or before it (one setting); the full-precision run always happens."""
    modes = [value] if isinstance(value, str) else list(value or [])
    return tuple(mode for mode in modes if mode != "none")


def results_table(results: dict):
    from rich.table import Table

    from repl.bench.decode import goal_text as text_of_goal

    meta = results["meta"]
    title = (f"{meta.get('gpu') or meta.get('cpu')} · {meta['dtype']} · torch {meta['torch']} · transformers "
             f"{meta['transformers']} · prompt {meta['options']['prompt_tokens']}, {meta['options']['new_tokens']} "
             f"new tokens, K={meta['options']['samples']}, median of {meta['options']['runs']}")
    table = Table(title=title, title_justify="left")
    plain, fast = results.get("plain", {}), results.get("fast", {})
    tiers = fast.get("tiers", {})
    comparable = _compared_with_goals(meta)
    goal_heading = "goal" if comparable else "goal (8B on a GPU)"
    for column in ("", "plain generate()", *(f"fast: {tier}" for tier in tiers or ["-"]), goal_heading):
        table.add_column(column, justify="right" if column else "left")
    if not comparable:
        table.caption = "The goals are the 8B model's on a GPU: this run is not compared with them."

    def goal_text(key: str) -> str:  # the goal, and on a comparable run whether it was met
        met = next((goal["met"] for goal in results.get("goals", []) if goal["key"] == key), None)
        return text_of_goal(key) + ("" if not comparable or met is None else " met" if met else " MISSED")

    number = lambda value, spec: "-" if value is None else format(value, spec)
    per_tier = lambda key, spec: [number(figures.get(key), spec) for figures in tiers.values()] or ["-"]
    blank = [""] * max(len(tiers), 1)
    table.add_row("tokens/s, one stream", number(plain.get("tokens_per_s"), ".1f"), *per_tier("tokens_per_s", ".1f"),
                  goal_text("fast.tokens_per_s"))
    table.add_row(f"tokens/s, K={meta['options']['samples']} aggregate", number(plain.get("k_tokens_per_s"), ".1f"),
                  *per_tier("k_tokens_per_s", ".1f"), goal_text("fast.k_tokens_per_s"))
    table.add_row("time to first token, ms", number(plain.get("ttft_ms"), ".1f"), *per_tier("ttft_ms", ".1f"),
                  goal_text("fast.ttft_ms"))
    warm = [", ".join(f"K={size}: {seconds:.1f}" for size, seconds in fast.get("warm_up_s", {}).get(tier, {}).items())
            for tier in tiers] or ["-"]
    table.add_row("warm-up of the tier (compile + capture), s", "-", *warm, "background")
    table.add_row("fast path serving after the model is loaded, s", "", number(fast.get("serving_after_s"), ".1f"),
                  *blank[1:], goal_text("fast.serving_after_s"))
    if "greedy" in results:
        greedy = results["greedy"]
        table.add_row("greedy tokens identical to plain", "", f"{greedy['identical_prefix']}/{greedy['tokens']}",
                      *blank[1:], "")
    for label, value, goal in drafting_rows(results.get("drafting")):
        table.add_row(label, "", value, *blank[1:], goal)
    if "ceiling_tokens_per_s" in meta:
        table.add_row("bandwidth ceiling, tokens/s", "", f"{meta['ceiling_tokens_per_s']:.0f}", *blank[1:],
                      f"at {meta['copy_bandwidth_gb_s']:.0f} GB/s")
    if results.get("startup"):
        table.add_row("start-up to prompt, s", number(results["startup"]["seconds"], ".2f"), *blank,
                      goal_text("startup.seconds"))
    if results.get("render"):
        render = results["render"]
        table.add_row(f"render overhead at {render['rate']:g} tok/s, %", number(render["overhead_percent"], ".2f"),
                      *blank, goal_text("render.overhead_percent"))
    if fast.get("reason"):
        table.caption = fast["reason"] + (f" {table.caption}" if table.caption else "")
    return table


def _compared_with_goals(meta: dict) -> bool:
    """The goals are the 8B model's on a GPU: a run of another model, or on a CPU, is not measured against them."""
    options = meta.get("options", {})
    eight_b = options.get("arch") == "llama-3.1-8b" or (options.get("arch") is None and "KernelLLM" in
                                                         str(options.get("model")))
    return bool(meta.get("gpu")) and eight_b


def quantized_table(results: dict):
    """Each quantized setting beside the full-precision model's last fast tier."""
    from rich.table import Table

    from repl.bench.decode import goal_text

    meta, fast, settings = results["meta"], results.get("fast", {}), results["quantized"]
    full = {**fast, "weights_gb": meta.get("weights_gb"), "warm_up_s": fast.get("warm_up_s", {}).get(fast.get("mode")),
            "greedy": results.get("greedy")}
    columns = {meta["dtype"]: full, **settings}
    table = Table(title=f"weight-only quantization, fast path ({fast.get('mode')} tier) · {meta.get('gpu') or meta.get('cpu')}",
                  title_justify="left")
    table.add_column("")
    for name in columns:
        table.add_column(name, justify="right")
    table.add_column("goal (int8 / int4)", justify="right")
    number = lambda value, spec: "-" if value is None else format(value, spec)

    def row(label: str, read, spec: str, goal_key: str | None = None):
        goals = " / ".join(filter(None, (goal_text(f"quantized.{mode}.{goal_key}") for mode in ("int8", "int4"))))
        table.add_row(label, *(number(read(figures), spec) if "error" not in figures else "failed"
                               for figures in columns.values()), goals if goal_key else "")

    row("tokens/s, one stream", lambda f: f.get("tokens_per_s"), ".1f", "tokens_per_s")
    row(f"tokens/s, K={meta['options']['samples']} aggregate", lambda f: f.get("k_tokens_per_s"), ".1f",
        "k_tokens_per_s")
    row("time to first token, ms", lambda f: f.get("ttft_ms"), ".1f", "ttft_ms")
    row("weights held, GB", lambda f: f.get("weights_gb"), ".2f", "weights_gb")
    row("GPU memory after warm-up, GB", lambda f: f.get("allocated_after_warm_up_gb"), ".2f")
    row("fast path serving after load, s", lambda f: f.get("serving_after_s"), ".1f", "serving_after_s")
    table.add_row("warm-up of the last tier, s", *(
        ", ".join(f"K={size}: {seconds:.1f}" for size, seconds in
                  ((figures.get("warm_up_s") or {}).get(figures.get("tier"), figures.get("warm_up_s") or {})
                   if "tier" in figures else figures.get("warm_up_s") or {}).items()) or "-"
        for figures in columns.values()), "background")
    row("top-1 agreement with full precision", lambda f: (f.get("quality") or {}).get("top1_agreement"), ".4f")
    row("KL(full || quantized), nats", lambda f: (f.get("quality") or {}).get("kl_nats"), ".2e")
    table.add_row("greedy tokens identical to plain generate()", *(
        f"{figures['greedy']['identical_prefix']}/{figures['greedy']['tokens']}" if figures.get("greedy") else "-"
        for figures in columns.values()), "")
    failed = [f"{name}: {figures['error'].strip().splitlines()[-1]}" for name, figures in settings.items()
              if figures.get("error")]
    if failed:
        table.caption = "; ".join(failed)
    return table


def drafting_rows(drafting: dict | None) -> list[tuple[str, str, str]]:
    """Rows for the single stream with drafts: with random weights a projection (labelled so), with real weights
    the measured figures."""
    from repl.bench.decode import goal_text

    if not drafting:
        return []
    rows = [(f"drafts: verify step of {drafting['window']} / plain step, ms",
             f"{drafting['verify_step_ms']:.2f} / {drafting['plain_step_ms']:.2f}", ""),
            ("drafts: every draft rejected, tokens/s", f"{drafting['all_rejected_tokens_per_s']:.1f}", "worst case")]
    for name, value in drafting.get("projected_tokens_per_s", {}).items():
        rows.append((f"PROJECTED tokens/s with drafts, {name}", f"{value:.0f}",
                     goal_text(f"drafting.projected_tokens_per_s.{name}") or "corpus acceptance"))
    for name, figures in drafting.get("measured", {}).items():
        rate = figures.get("tokens_per_s")
        rows.append((f"tokens/s with drafts, {name} (measured)", "-" if rate is None else f"{rate:.1f}",
                     f"{figures['tokens']} tokens"))
    return rows


if __name__ == "__main__":  # `python -m repl.cli.bench ARGS` is `python kernelllm.py bench ARGS`
    from repl.cli.main import main

    sys.exit(main(["bench", *sys.argv[1:]]))
