"""`eval --ray [ADDRESS]`: what the eval subcommand needs to run on a Ray cluster (repl/workflows/ray/driver.py, docs/ray.md):
its options, the run itself in place of the local evaluate(), the progress line per node and the closing lines.
Nothing here imports Ray; repl.workflows.ray.driver does, when the run starts."""

import argparse
import os
from functools import partial

from rich.text import Text

from repl.ui.option_values import positive_int

RAY_HELP = ("run on a Ray cluster: ADDRESS is its head (HOST:PORT), auto (the cluster this machine belongs to) or "
            "ray://HOST:PORT (Ray Client); without one, $RAY_ADDRESS or else a new local cluster. Workers: one per "
            "GPU, or one per CPU with --device cpu (docs/ray.md); needs `pip install -r requirements-ray.txt`")


def add_options(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("cluster")
    group.add_argument("--ray", nargs="?", const="", metavar="ADDRESS", help=RAY_HELP)
    group.add_argument("--workers", type=positive_int, metavar="N",
                       help="with --ray: the number of workers, each checking one kernel at a time (default: as the "
                            "cluster's GPUs, or CPUs, allow)")


def argument_problem(args) -> str | None:
    """A one-line reason the cluster options cannot work, or None."""
    if args.ray is None:
        return "--workers needs --ray (locally, --jobs sets the checks at once)" if args.workers else None
    if getattr(args, "jobs", 1) > 1:
        return "with --ray, --workers N sets how many workers check at once (each one kernel at a time), not --jobs"
    return None


def cluster_runner(args):
    """The stand-in for repl.workflows.evaluate.evaluate: (problems, check=, out_path=, cancel=, on_progress=) -> report.
    ValueError (one line) for a server URL that cannot be one."""
    from repl.cli.eval_report import run_record
    from repl.workflows.ray.driver import evaluate_on_ray

    generation = None if args.candidates else generation_spec(args)
    return partial(evaluate_on_ray, address=args.ray or None, candidates_dir=args.candidates, samples=args.samples,
                   generation=generation, workers=args.workers, concurrency=args.concurrency, debug=args.debug,
                   tune=args.tune, run_record=run_record(args))


def cluster_errors() -> tuple[type, ...]:
    """The errors that end a cluster run with exit status 1 and their one line."""
    from repl.workflows.ray.worker import WorkerStartError
    from repl.workflows.ray.driver import ClusterUnavailable

    return ClusterUnavailable, WorkerStartError


def generation_spec(args) -> dict:
    """Where the workers sample from: the server (its URL checked here) or the model each worker loads once. The API
    key travels with the spec: the workers need it, and their hosts may not have $OPENAI_API_KEY."""
    from repl.cli.options import settings_from

    settings = settings_from(args).__dict__
    server = args.server or os.environ.get("KERNELLLM_SERVER")
    if server:
        from repl.generation.server import server_backend_from

        spec = {"server": server, "server_model": args.server_model,
                "api_key": args.api_key or os.environ.get("OPENAI_API_KEY"), "settings": settings}
        server_backend_from(spec).close()  # ValueError for a URL that is not http(s)://HOST[:PORT]/...
        return spec
    return {"model": args.model, "dtype": args.dtype, "settings": settings}


NODES_SHOWN = 4  # in the progress bar; the closing line names them all


def status_line(state) -> str:
    """The progress bar's description: workers, and problems done per node in this run (the busiest first)."""
    workers = f"{state.workers}/{state.workers_wanted} workers"
    counts = sorted(state.by_node.items(), key=lambda item: (-item[1], item[0]))
    shown = counts if len(counts) <= NODES_SHOWN else counts[:NODES_SHOWN - 1]
    nodes = " · ".join(f"{node} {count}" for node, count in shown)
    if len(shown) < len(counts):
        nodes += f" · {len(counts) - len(shown)} more nodes {sum(count for _, count in counts[len(shown):])}"
    return f"{workers}  {nodes}" if nodes else f"{workers}  {len(state.running)} running"


def closing_lines(report, json_out: str | None) -> list[Text]:
    """After the table: where the problems ran, which were redone, which are left for a rerun."""
    lines = []
    if report.by_node:
        lines.append(Text("problems per node: " + ", ".join(f"{node} {count}" for node, count
                                                            in sorted(report.by_node.items())), style="hint"))
    if report.retried:
        lines.append(Text(f"redone after their worker was lost: {', '.join(report.retried)}", style="hint"))
    if report.unfinished:
        rerun = f"; rerun the same command to try them again (finished ones are in {json_out})" if json_out else ""
        lines.append(Text(f"{len(report.unfinished)} problem(s) left unfinished: "
                          + "; ".join(f"{name}: {why}" for name, why in report.unfinished.items()) + rerun,
                          style="bad"))
    return lines
