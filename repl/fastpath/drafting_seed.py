"""The drafting seed: replies in KernelLLM's format that every session drafts from, after its own replies.

A session's first reply has only its prompt to draft from, yet replies to different modules share much of their text
(the header of imports, kernel preambles, ``call``, ``ModelNew``). The seed is Inductor's output for a dozen small
modules written for it (tools/drafting_seed/problems), rewritten as KernelBook writes it (tools/drafting_seed.py), in
``drafting_seed.txt`` beside this file: the replies one after another, each ended by a line ``<<<END OF REPLY>>>``.
"""

from pathlib import Path

SEED_FILE = Path(__file__).with_name("drafting_seed.txt")
END_OF_REPLY = "<<<END OF REPLY>>>"


def format_seed(replies: list[str]) -> str:
    """The seed file's text for these replies (``split_seed`` gives them back)."""
    return "".join(f"{reply}\n{END_OF_REPLY}\n" for reply in replies)


def split_seed(text: str) -> list[str]:
    """The replies of a seed file's text; blank ones are dropped (an empty file has none)."""
    replies, lines = [], []
    for line in text.splitlines():
        if line == END_OF_REPLY:
            replies.append("\n".join(lines))
            lines = []
        else:
            lines.append(line)
    replies.append("\n".join(lines))  # text after the last separator, if any
    return [reply for reply in replies if reply.strip()]


def drafting_seed(tokenizer, path: Path | None = None) -> list[list[int]]:
    """The seed's replies as token ids of ``tokenizer`` (a Hugging Face tokenizer), or none at all.

    Drafts only make decoding faster, so the seed must never keep the model from loading: a missing or unreadable
    file, or a tokenizer that cannot encode it, gives no seed."""
    try:
        text = (path or SEED_FILE).read_text(encoding="utf-8")
        return [tokenizer.encode(reply, add_special_tokens=False) for reply in split_seed(text)]
    except Exception:
        return []
