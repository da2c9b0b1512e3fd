"""Teacher forcing for the drafting tools and tests: ``drafting.drive`` run on a reply known in advance, without a
model, to count the steps that speculative decoding would take on it."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from repl.fastpath.drafting import MAX_DRAFT  # noqa: E402


class TeacherForcedSteps:
    """``drive``'s device for a reply known in advance (teacher forcing): a plain step yields the reply's next token, a
    verify step the draft's prefix that agrees with the reply and the reply's token after it. That is what the
    decoder does when the model chooses the reply's tokens: under greedy decoding, when the reply is its greedy
    output; under sampling, when the reply is a sample of it (a draft token is accepted exactly when the token drawn
    after its prefix equals it: ``speculative``). For tools/drafting_acceptance.py and the tests."""

    def __init__(self, reply: list[int]):
        self.reply, self.at, self._running = reply, 1, []  # reply[0] is chosen after the prefill
        self.accepted: list[int] = []  # per verify step: draft tokens accepted
        self.drafted: list[int] = []  # per verify step: draft length

    def room(self) -> int:
        return MAX_DRAFT

    def launch_plain(self) -> None:
        self._running.append(self.reply[self.at])
        self.at += 1

    def read_plain(self) -> int:
        return self._running.pop(0)

    def agrees(self, token: int, at: int) -> bool:
        """Whether the model would choose ``token`` at reply position ``at`` (teacher forcing: the reply's token)."""
        return token == self.reply[at]

    def verify(self, draft: list[int]) -> list[int]:
        n = 0
        while n < len(draft) and self.agrees(draft[n], self.at + n):
            n += 1
        tokens = self.reply[self.at:self.at + n + 1]
        self.at += len(tokens)
        self.accepted.append(n)
        self.drafted.append(len(draft))
        return tokens
