"""Keystroke latency of the module prompt with a big paste in the box (the goal: typing stays under 50 ms a key).

    python -m repl.bench.typing [--lines 2000] [--keys 40]

Drives the real ModuleInput (toolbar, lexer, key bindings) through a pipe input and a VT100 output of 120x40 written
to /dev/null, pastes a module of --lines lines, then types --keys characters one at a time, each after the previous
one was rendered, and prints the median and worst time from key to rendered screen.
"""

import argparse
import asyncio
import statistics
import time

from prompt_toolkit.application import create_app_session
from prompt_toolkit.data_structures import Size
from prompt_toolkit.input import create_pipe_input
from prompt_toolkit.output.vt100 import Vt100_Output

from repl.ui.prompt_input import InputOptions, ModuleInput


def big_module(lines: int) -> str:
    body = "".join(f"        x = x + {n}  # step {n}\n" for n in range(lines - 12))
    return ("import torch\nimport torch.nn as nn\n\nclass Model(nn.Module):\n    def forward(self, x):\n" + body +
            "        return x\n\n\ndef get_inputs():\n    return [torch.randn(4)]\n\n\ndef get_init_inputs():\n"
            "    return []\n")


def measure(lines: int, keys: int) -> list[float]:
    sink = open("/dev/null", "w")
    output = Vt100_Output(sink, lambda: Size(rows=40, columns=120), term="xterm-256color", enable_cpr=False)
    timings: list[float] = []
    with create_pipe_input() as pipe, create_app_session(input=pipe, output=output):
        module_input = ModuleInput(InputOptions(toolbar=lambda: "model: facebook/KernelLLM on cuda (bfloat16)"),
                                   input=pipe, output=output)
        app = module_input.session.app
        state = {"sent": 0, "at": 0.0}

        def after_render(_):
            if state["sent"] == 0 or state["at"] == 0.0:
                return
            timings.append(time.perf_counter() - state["at"])
            state["at"] = 0.0

        async def driver():
            paste = "\x1b[200~" + big_module(lines) + "\x1b[201~"
            await asyncio.get_running_loop().run_in_executor(None, pipe.send_text, paste)  # more than a pipe holds
            while len(module_input.session.default_buffer.text) < len(paste) - 20:
                await asyncio.sleep(0.05)
            await asyncio.sleep(0.5)
            for _ in range(keys):
                state["sent"] += 1
                state["at"] = time.perf_counter()
                pipe.send_text("y")
                while state["at"]:
                    await asyncio.sleep(0.001)
            await asyncio.sleep(0.3)  # a debounced hint lands here, outside the measured keystrokes
            app.exit(result="")

        app.after_render += after_render

        async def main():
            task = asyncio.ensure_future(driver())
            await module_input.session.prompt_async()
            await task

        asyncio.run(main())
    return timings


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--lines", type=int, default=2000)
    parser.add_argument("--keys", type=int, default=40)
    args = parser.parse_args()
    timings = measure(args.lines, args.keys)
    print(f"{args.lines} lines in the box, {len(timings)} keystrokes: median {statistics.median(timings) * 1000:.1f} ms,"
          f" worst {max(timings) * 1000:.1f} ms")


if __name__ == "__main__":
    main()
