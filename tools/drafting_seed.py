"""Writes the drafting seed (repl/fastpath/drafting_seed.py): a reply in KernelLLM's format for each seed problem.

The seed problems (tools/drafting_seed/problems, modules written for the seed) are compiled by Inductor on a CUDA GPU
(tools/inductor_corpus.py); here, without a GPU, each problem's output code is rewritten as KernelBook writes it
(repl/bench/kernelbook_format.py's ``kernelbook_reply``) and the replies are written to
repl/fastpath/drafting_seed.txt, in the problems' order. Only the ``default`` variant is used (the problem's own
shapes, as KernelBook's replies have them), one reply per problem.

    python tools/inductor_corpus.py tools/drafting_seed/problems --out seed_corpus.jsonl.gz --seconds 120
    python tools/drafting_seed.py seed_corpus.jsonl.gz
"""

import argparse
import gzip
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from drafting_acceptance import SEED_PROBLEMS  # noqa: E402
from repl.bench.kernelbook_format import kernelbook_reply  # noqa: E402
from repl.fastpath.drafting_seed import SEED_FILE, format_seed  # noqa: E402


def read_corpus(path: Path) -> list[dict]:
    """The records of a JSONL corpus, gzipped or not."""
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8") as lines:
        return [json.loads(line) for line in lines if line.strip()]


def seed_replies(records: list[dict], problems: Path) -> dict[str, str]:
    """Problem file name -> its reply in KernelBook's format, for each problem the corpus compiled (``default``
    variant, no error), sorted by name. inductor_corpus.py names a record's problem by its file name, and its
    "level" is the folder's name, so the source is read from ``problems`` whatever that folder is called."""
    replies = {}
    for record in records:
        if record.get("variant") != "default" or "error" in record or not record.get("codes"):
            continue
        source = (problems / record["problem"]).read_text()
        replies[record["problem"]] = kernelbook_reply(source, record["codes"][0], record["configs"])
    return dict(sorted(replies.items()))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("corpus", type=Path, help="tools/inductor_corpus.py's output for the seed problems")
    parser.add_argument("--problems", type=Path, default=SEED_PROBLEMS, help="the folder the corpus was made from")
    parser.add_argument("--out", type=Path, default=SEED_FILE)
    args = parser.parse_args()
    replies = seed_replies(read_corpus(args.corpus), args.problems)
    missing = sorted({path.name for path in args.problems.glob("*.py")} - set(replies))
    if missing:
        print(f"no reply (not compiled, or an error): {', '.join(missing)}")
    if not replies:
        print("no replies: nothing written")
        return 1
    args.out.write_text(format_seed(list(replies.values())), encoding="utf-8")
    print(f"{len(replies)} replies, {sum(map(len, replies.values()))} characters -> {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
