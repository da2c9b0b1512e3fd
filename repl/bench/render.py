"""The streaming view's render cost (``kernelllm.py bench``'s "render overhead"): a synthetic reply streamed at a
given rate through the real StreamView into a recorded terminal."""

import io
import re
import time


def measure_render(tokens: int, rate: float, runs: int) -> dict:
    """A synthetic reply streamed at ``rate`` tokens/s through the real StreamView into a recorded 120x40 terminal.
    Overhead = CPU time of the view's update() calls / stream duration (median of ``runs``)."""
    measured = [_render_once(tokens, rate) for _ in range(max(runs, 1))]
    median_run = sorted(measured, key=lambda run: run["overhead_percent"])[len(measured) // 2]
    return {**median_run, "runs": [run["overhead_percent"] for run in measured], "tokens": tokens, "rate": rate}


def _render_once(tokens: int, rate: float) -> dict:
    from repl.generation import Reply
    from repl.core.settings import SamplingSettings
    from repl.ui.console import make_console
    from repl.ui.stream_view import StreamView

    pieces = synthetic_reply_pieces(tokens)
    console = make_console(file=io.StringIO(), force_terminal=True, width=120, height=40, color_system="truecolor")
    reply = Reply(model="bench", settings=SamplingSettings(max_new_tokens=tokens))
    cpu = 0.0
    with StreamView(console, reply) as view:
        started = time.perf_counter()
        reply.first_token_at = time.monotonic()
        for i, piece in enumerate(pieces):
            delay = started + (i + 1) / rate - time.perf_counter()
            if delay > 0:
                time.sleep(delay)
            reply.text += piece
            reply.tokens += 1
            before = time.thread_time()
            view.update()
            cpu += time.thread_time() - before
        duration = time.perf_counter() - started
    return {"overhead_percent": 100 * cpu / duration, "update_cpu_s": cpu, "render_seconds": view.render_seconds,
            "frames": view.frames, "stream_s": duration}


def synthetic_reply_pieces(tokens: int) -> list[str]:
    """About ``tokens`` token-sized pieces of a KernelLLM-like reply (Inductor-style Triton code)."""
    from repl.core.prompt import TRAINED_PROMPT_TEMPLATE

    text = TRAINED_PROMPT_TEMPLATE
    pieces = re.findall(r" ?\w{1,6}|\n+| +|[^\w\s]{1,2}", text)
    return [pieces[i % len(pieces)] for i in range(tokens)]
