"""How far model-free drafts would take KernelLLM, estimated without its weights (docs/performance.md, "Drafting").

1. Replies in the model's trained format, made as its training targets were: Inductor's output code for KernelBench
   problems (tools/inductor_corpus.py, on the GPU), rewritten as KernelBook writes it (torch 2.5's header and launch
   syntax, ``call(args)``, a ``ModelNew`` that restates the module's ``__init__``), in a code fence after the
   trained prompt (``repl.core.prompt.build_prompt``), ended by <|eot_id|>.
2. Tokenised with Meta's Llama-3 tokenizer (``tokenizer.model`` of the ``llama-models`` wheel, read by tiktoken).
3. Teacher forcing: the shipped host loop (``drafting.drive``, ``DraftPlanner``, ``Drafter``) decodes each reply
   with a device that answers as the model would if the reply were its own output (``TeacherForcedSteps``).
   Greedy: the reply stands for the greedy output. Sampling at T=1.0 / top_p 0.97: exact if the reply were a sample
   of the model (a draft token is accepted exactly when the token drawn after its prefix equals it); a sensitivity
   row rejects each agreeing draft token with probability eps, for samples that stray from the corpus.
4. Projection: plain steps at the measured plain decode rate, verify steps at the measured verify-step time plus the
   measured per-step host overhead (tools/verify_step_timing.py's JSON).
5. With ``--seed`` (repl/fastpath/drafting_seed.txt), rows that draft from the seed too, searched last as the
   shipped ``SessionReplies`` does; replies to problems that share a seed problem's file name are then left out.

    python tools/drafting_acceptance.py corpus.jsonl.gz KernelBench/ tokenizer.model timing.json --json out.json
"""

import argparse
import base64
import gzip
import json
import random
import statistics
import sys
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from repl.fastpath.drafting import Drafter, DraftPlanner, NgramIndex, drive, joined  # noqa: E402
from teacher_forcing import TeacherForcedSteps  # noqa: E402
from repl.fastpath.drafting_seed import split_seed  # noqa: E402
from repl.core.prompt import build_prompt  # noqa: E402
from repl.bench.kernelbook_format import kernelbook_reply  # noqa: E402

LLAMA3_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
                  r"|\s*[\r\n]+|\s+(?!\S)|\s+")
BOS, EOT = 128000, 128009
SEED_PROBLEMS = Path(__file__).resolve().parent / "drafting_seed" / "problems"

def llama3_tokenizer(path: str):
    import tiktoken

    ranks = {base64.b64decode(token): int(rank) for token, rank in
             (line.split() for line in Path(path).read_text().splitlines() if line.strip())}
    return tiktoken.Encoding("llama3", pat_str=LLAMA3_PATTERN, mergeable_ranks=ranks, special_tokens={})


# -- teacher forcing and the projection -------------------------------------------------------------------------------

class StrayingSamples(TeacherForcedSteps):
    """Teacher forcing where each agreeing draft token is still rejected with probability ``eps`` (samples that stray
    from the corpus where a drafter would have followed it); the reply's own token is emitted either way."""

    def __init__(self, reply, eps: float, rng: random.Random):
        super().__init__(reply)
        self.eps, self.rng = eps, rng

    def agrees(self, token, at):
        return super().agrees(token, at) and self.rng.random() >= self.eps


# Words naming the seed problems' operations (tools/drafting_seed/problems), as KernelBench's file names spell them
SEED_OPERATIONS = ("gelu", "softmax", "layernorm", "rmsnorm", "sum", "mean", "relu", "conv", "maxpool", "pooling",
                   "matmul", "matrix", "gemm", "linear", "add", "multiply", "scale", "residual")


def seed_subsets(names: list[str]) -> dict[str, list[int]]:
    """Indexes of the corpus's replies (problems with their own shapes) by level, and the level-1 problems whose file
    names share no operation with the seed's."""
    subsets: dict[str, list[int]] = {"level1": [], "level2": [], "level1, no operation of the seed's": []}
    for i, name in enumerate(names):
        where, variant = name.rsplit(":", 1)
        level, problem = where.split("/", 1)
        if variant != "default" or level not in subsets:
            continue
        subsets[level].append(i)
        if level == "level1" and not any(word in problem.lower().replace("_", "") for word in SEED_OPERATIONS):
            subsets["level1, no operation of the seed's"].append(i)
    return subsets


def simulate(items, drafter_for, planner_for, device_for, max_draft: int = 7) -> dict:
    totals, accepted = Counter(), []
    for index, (prompt, reply) in enumerate(items):
        device = device_for(reply)
        stats = drive(planner_for(drafter_for(index, prompt)), reply[0], len(reply), lambda token: True, device,
                      max_draft)
        totals.update(stats)
        totals["tokens"] += len(reply)
        accepted += device.accepted
    steps = totals["plain_steps"] + totals["verify_steps"]
    return {**totals, "tokens_per_step": totals["tokens"] / (steps + len(items)),  # + the prefill's token
            "accepted_per_verify": totals["accepted"] / max(totals["verify_steps"], 1),
            "acceptance_histogram": dict(sorted(Counter(accepted).items()))}


def session_drafter(count: int, everyone: list[list[int]], seed: NgramIndex | None = None):
    """The drafter of reply i in a session that generated ``count`` replies to other problems before it (a sample of
    ``everyone`` but reply i), with ``seed`` searched after them as ``SessionReplies.sources`` orders it."""
    def drafter_for(i, prompt):
        others = [reply for j, reply in enumerate(everyone) if j != i]
        chosen = random.Random(i).sample(others, min(count, len(others)))
        if seed is None:
            return Drafter(prompt, others=chosen)
        return Drafter(prompt, sources=[joined(chosen), seed])
    return drafter_for


def projected(sim: dict, plain_ms: float, verify_ms: float, overhead_ms: float) -> float:
    """Tokens/s of the simulated steps: plain steps at the plain decode rate, verify steps at their time + overhead."""
    seconds = (sim["plain_steps"] * plain_ms + sim["verify_steps"] * (verify_ms + overhead_ms)) / 1e3
    return (sim["tokens"] - sim["replies"]) / seconds


def arguments():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("corpus")
    parser.add_argument("kernelbench", help="the KernelBench checkout's KernelBench/ folder (level1/, level2/)")
    parser.add_argument("tokenizer")
    parser.add_argument("timing")
    parser.add_argument("--json")
    parser.add_argument("--show", type=int, default=0, help="print this many converted replies")
    parser.add_argument("--seed", help="a drafting seed file (repl/fastpath/drafting_seed.txt): rows drafted from "
                                       "it too")
    return parser.parse_args()


def corpus_items(args, encoder, left_out: set) -> tuple[list, list]:
    """(prompt tokens, reply tokens) of each corpus record, and their names; records of a seed problem left out."""
    items, names = [], []
    for record in [json.loads(line) for line in gzip.open(args.corpus, "rt")]:
        if "error" in record or not record["codes"]:
            continue
        if record["problem"] in left_out:
            print(f"left out (a seed problem's name): {record['level']}/{record['problem']}")
            continue
        source = (Path(args.kernelbench) / record["level"] / record["problem"]).read_text()
        reply = kernelbook_reply(source, record["codes"][0], record["configs"])
        if args.show > len(names):
            print(reply, "\n" + "=" * 100)
        prompt = [BOS] + encoder.encode(build_prompt(source))
        items.append((prompt, encoder.encode(reply) + [EOT]))
        names.append(f"{record['level']}/{record['problem']}:{record['variant']}")
    return items, names


def step_costs(timing: dict) -> tuple[dict, dict, float]:
    """(plain step ms, verify step of 8 ms, by greedy and sampled; a verify step's host overhead ms)."""
    plain = {mode: 1e3 / timing["plain"][mode]["tokens_per_s"] for mode in ("greedy", "sampled")}
    verify = {mode: timing["steps_ms"][mode]["8"] for mode in ("greedy", "sampled")}
    # Host overhead of a verify step, end to end: drafts rejected at every step (each step a verify step of 8).
    wrong = timing["speculative"]["greedy_all_wrong_every_step"]["tokens_per_s"]
    return plain, verify, 1e3 / wrong - verify["greedy"]


def drafter_rows(items, seed) -> dict:
    """Each row's (drafter for a reply, its planner)."""
    everyone = [reply for _, reply in items]
    earlier = lambda count: session_drafter(count, everyone)
    drafters = {
        "prompt + reply (first reply of a session)": (lambda i, p: Drafter(p), DraftPlanner),
        "reply only": (lambda i, p: Drafter([]), DraftPlanner),
        "prompt + reply, no pause after misses": (lambda i, p: Drafter(p), lambda d: DraftPlanner(d, max_pause=0)),
        "prompt + reply, pause at most 4": (lambda i, p: Drafter(p), lambda d: DraftPlanner(d, max_pause=4)),
        "prompt + reply, n 1-3": (lambda i, p: Drafter(p, min_n=1, max_n=3), DraftPlanner),
        "prompt + reply, n 3-6": (lambda i, p: Drafter(p, min_n=3, max_n=6), DraftPlanner),
        **{f"+ {count} earlier replies to other problems": (earlier(count), DraftPlanner) for count in (1, 4, 16)},
        "+ all other replies (leave one out)": (earlier(len(items)), DraftPlanner),
        "+ all other replies, no pause": (earlier(len(items)), lambda d: DraftPlanner(d, max_pause=0)),
    }
    if seed is not None:
        drafters["first reply + seed"] = (lambda i, p: Drafter(p, sources=[seed]), DraftPlanner)
        drafters["+ 4 earlier replies + seed"] = (session_drafter(4, everyone, seed), DraftPlanner)
    return drafters


def sampled_row(items, drafter_for, device_for, costs) -> dict:
    """The simulated steps of ``items`` and their projected sampled tokens/s."""
    plain, verify, overhead = costs
    sim = simulate(items, drafter_for, DraftPlanner, device_for)
    sim["replies"] = len(items)
    sim["projected_sampled_tokens_per_s"] = projected(sim, plain["sampled"], verify["sampled"], overhead)
    return sim


def seed_rows(items, names, seed, costs) -> dict:
    """Is the seed's gain its operations' overlap with the corpus's, or the text they share? By subset."""
    rows = {}
    for subset, chosen in seed_subsets(names).items():
        chosen_items = [items[i] for i in chosen]
        if not chosen_items:
            continue
        for row, drafter_for in (("first reply", lambda i, p: Drafter(p)),
                                 ("first reply + seed", lambda i, p: Drafter(p, sources=[seed]))):
            sim = rows[f"{subset}, {row}"] = sampled_row(chosen_items, drafter_for, TeacherForcedSteps, costs)
            print(f"{subset} ({len(chosen_items)} replies), {row}: tokens/step {sim['tokens_per_step']:.2f}, "
                  f"projected sampled {sim['projected_sampled_tokens_per_s']:.0f} tokens/s")
    return rows


def straying_rows(items, configurations: dict, costs) -> dict:
    """Sampling rows where each agreeing draft token is rejected with probability eps."""
    rows = {}
    for label, drafter_for in configurations.items():
        for eps in (0.05, 0.1, 0.2, 0.3):
            straying = lambda reply: StrayingSamples(reply, eps, random.Random(0))
            sim = rows[f"{label}, eps {eps}"] = sampled_row(items, drafter_for, straying, costs)
            print(f"sampling, {label}, agreeing drafts rejected with p={eps}: tokens/step "
                  f"{sim['tokens_per_step']:.2f}, projected {sim['projected_sampled_tokens_per_s']:.0f} tokens/s")
    return rows


def k8_rows(items, configurations: dict, k8: dict) -> dict:
    """K = 8 (not implemented: rows would need positions of their own): every batch step a verify step of window w."""
    rows = {"plain_tokens_per_s": 8e3 / k8["1"]}
    for label, drafter_for in configurations.items():
        for window in (2, 4, 8):
            sim = simulate(items, drafter_for, lambda d: DraftPlanner(d, max_pause=0), TeacherForcedSteps, window - 1)
            per_step = sim["tokens"] / (sim["plain_steps"] + sim["verify_steps"] + len(items))
            rows[f"{label}, window {window}"] = {"tokens_per_row_step": per_step,
                                                 "projected_tokens_per_s": 8e3 * per_step / k8[str(window)]}
    print("K=8: " + ", ".join(f"{key}: {value if isinstance(value, float) else value['projected_tokens_per_s']:.0f}"
                              for key, value in rows.items()))
    return rows


def main() -> int:
    args = arguments()
    encoder = llama3_tokenizer(args.tokenizer)
    seed, left_out = None, set()
    if args.seed:
        seed = joined([encoder.encode(reply) for reply in split_seed(Path(args.seed).read_text())])
        left_out = {path.name for path in SEED_PROBLEMS.glob("*.py")}  # a reply must not draft from itself
    items, names = corpus_items(args, encoder, left_out)
    timing = json.loads(Path(args.timing).read_text())
    costs = plain, verify, overhead = step_costs(timing)
    lengths = [len(reply) for _, reply in items]
    out = {"replies": len(items), "problems": names, "reply_tokens": {"total": sum(lengths),
           "median": statistics.median(lengths), "min": min(lengths), "max": max(lengths)},
           "prompt_tokens_median": statistics.median(len(prompt) for prompt, _ in items),
           "costs_ms": {"plain": plain, "verify_8": verify, "verify_overhead": overhead}, "drafters": {}}
    drafters = drafter_rows(items, seed)
    if seed is not None:
        out["seed_tokens"] = len(seed.tokens)
    for name, (drafter_for, planner_for) in drafters.items():
        sim = simulate(items, drafter_for, planner_for, TeacherForcedSteps)
        sim["replies"] = len(items)
        sim["projected_tokens_per_s"] = {mode: projected(sim, plain[mode], verify[mode], overhead)
                                         for mode in ("greedy", "sampled")}
        out["drafters"][name] = sim
        print(f"{name:52s} tokens/step {sim['tokens_per_step']:.2f}  accepted/verify "
              f"{sim['accepted_per_verify']:.2f}  verify {sim['verify_steps']} plain {sim['plain_steps']}  "
              f"projected greedy {sim['projected_tokens_per_s']['greedy']:.0f}, sampled "
              f"{sim['projected_tokens_per_s']['sampled']:.0f} tokens/s")
    if seed is not None:
        out["seed_by_subset"] = seed_rows(items, names, seed, costs)
    configurations = {"first reply": lambda i, p: Drafter(p),
                      "after 4 replies": session_drafter(4, [reply for _, reply in items])}
    if seed is not None:
        configurations["first reply + seed"] = drafters["first reply + seed"][0]
    out["straying"] = straying_rows(items, configurations, costs)
    if timing["steps_ms"].get("k8_sampled"):
        out["k8"] = k8_rows(items, configurations, timing["steps_ms"]["k8_sampled"])
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
