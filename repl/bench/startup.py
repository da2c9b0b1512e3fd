"""How long until the user can type: seconds to the interactive prompt (in a pseudo-terminal), to `--help` and to
`--version`, next to `python -c "import torch"` on the same machine. Medians over --runs.

    python -m repl.bench.startup [--model DIR] [--runs 5]

The prompt is timed from launch until prompt_toolkit draws its "›" (the model goes on loading in the background).
Not a test: figures depend on the machine; docs/performance.md records them with the machine and date.
"""

import argparse
import os
import pty
import select
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PROMPT = "›".encode()
CURSOR_POSITION_REQUEST = b"\x1b[6n"


def time_command(argv: list[str]) -> float:
    started = time.perf_counter()
    subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True, cwd=REPO)
    return time.perf_counter() - started


def time_to_prompt(argv: list[str], home: str, timeout: float = 60.0) -> float:
    """Seconds from launch until the prompt is on the pseudo-terminal; the program is then ended."""
    environment = {**os.environ, "KERNELLLM_HOME": home, "TERM": "xterm-256color", "COLUMNS": "100", "LINES": "30"}
    leader, follower = pty.openpty()
    started = time.perf_counter()
    process = subprocess.Popen(argv, stdin=follower, stdout=follower, stderr=follower, env=environment, cwd=REPO,
                               start_new_session=True)
    os.close(follower)
    seen = b""
    try:
        while time.perf_counter() - started < timeout:
            ready, _, _ = select.select([leader], [], [], 0.5)
            if not ready:
                continue
            try:
                chunk = os.read(leader, 65536)
            except OSError:
                break
            seen += chunk
            if CURSOR_POSITION_REQUEST in chunk:  # answer as a terminal would, or prompt_toolkit waits for it
                os.write(leader, b"\x1b[1;1R")
            if PROMPT in seen:
                return time.perf_counter() - started
        raise RuntimeError(f"no prompt within {timeout} s; the program wrote: {seen[-500:]!r}")
    finally:
        process.kill()
        process.wait()
        os.close(leader)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m repl.bench.startup", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default=None,
                        help="model for the prompt run (default: a missing directory, so nothing loads)")
    parser.add_argument("--runs", type=int, default=5, help="runs per figure (default 5)")
    args = parser.parse_args(argv)
    import tempfile

    program = [sys.executable, str(REPO / "kernelllm.py")]
    with tempfile.TemporaryDirectory() as home:
        model = args.model or str(Path(home) / "no-model")
        figures = {
            'python -c "import torch"': [time_command([sys.executable, "-c", "import torch"])
                                         for _ in range(args.runs)],
            "kernelllm.py --version": [time_command(program + ["--version"]) for _ in range(args.runs)],
            "kernelllm.py --help": [time_command(program + ["--help"]) for _ in range(args.runs)],
            "kernelllm.py eval --help": [time_command(program + ["eval", "--help"]) for _ in range(args.runs)],
            f"prompt drawn (--model {'given' if args.model else 'missing'})":
                [time_to_prompt(program + ["--model", model], home) for _ in range(args.runs)],
        }
    torch_s = statistics.median(figures['python -c "import torch"'])
    print(f"{'':44} {'median s':>9} {'of import torch':>16}")
    for name, values in figures.items():
        median = statistics.median(values)
        print(f"{name:44} {median:9.2f} {median / torch_s:15.0%}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
