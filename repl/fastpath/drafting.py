"""Model-free drafts for speculative decoding: n-gram lookup in the text the reply already repeats.

KernelLLM's replies repeat themselves and their prompt: Inductor-style kernels restate ``xoffset = ...``,
``xindex = ...``, ``xmask = ...`` and ``tl.load(in_ptr0 + ...)`` in every kernel, ``ModelNew`` restates the module's
``__init__`` and shapes, and K samples of one module share most of their text. A drafter looks up the last few
tokens of the reply in that text and proposes what followed them there; the decoder then checks the proposal in one
forward pass (``speculative``), so a wrong draft costs time, never correctness.

Sources, in the order a match is taken from (the longest matching n-gram wins; at equal length the earlier source):
- the prompt and the reply so far (one growing sequence: "prompt lookup");
- sibling replies: what the session generated before for the same prompt (``:regen``, ``:fix``, ``:best K``);
- the session's replies to other prompts (a suffix index over earlier outputs, as SuffixDecoding keeps);
- the drafting seed: a few replies in the model's format shipped with the project (``drafting_seed``), last, so that
  a session's first reply has more than its prompt to draft from and anything the session wrote itself wins over it.
Within a source the most recent occurrence wins: code repeats what it wrote last.
"""

import threading
from dataclasses import dataclass, field

MIN_NGRAM = 2  # tokens that must match before a draft is proposed (tuned on the corpus: docs/performance.md)
MAX_NGRAM = 4
MAX_DRAFT = 7  # tokens proposed per verify step (the window is this + the last token)


class NgramIndex:
    """n-gram -> where its latest occurrence was followed, over one token sequence that may grow at its end.

    The suffix being looked up is never found as its own occurrence: the n-grams that end at the last token enter the
    index only once a token follows them (so every hit has a continuation of at least one token)."""

    def __init__(self, tokens=(), min_n: int = MIN_NGRAM, max_n: int = MAX_NGRAM):
        self.min_n, self.max_n = min_n, max_n
        self.tokens: list[int] = []
        self._follow: dict[tuple[int, ...], int] = {}  # n-gram -> index of the token after its latest occurrence
        self.extend(tokens)

    def extend(self, tokens) -> None:
        seq = self.tokens
        for token in tokens:
            seq.append(token)
            end = len(seq) - 1  # n-grams ending just before the new token are now followed by it
            for n in range(self.min_n, self.max_n + 1):
                if end >= n:
                    self._follow[tuple(seq[end - n:end])] = end

    def continuation(self, key: tuple[int, ...], limit: int) -> list[int]:
        start = self._follow.get(key)
        return [] if start is None else self.tokens[start:start + limit]


SEPARATOR = -1  # between replies in one index: no n-gram spans two replies


@dataclass
class Drafter:
    """Drafts for one reply: its prompt + reply so far, then ``sources`` (indexes over earlier replies: the same
    prompt's first, then the session's), then ``siblings`` and ``others`` (lists of replies, indexed here)."""

    prompt: list[int]
    siblings: list[list[int]] = field(default_factory=list)
    others: list[list[int]] = field(default_factory=list)
    min_n: int = MIN_NGRAM
    max_n: int = MAX_NGRAM
    sources: list[NgramIndex] = field(default_factory=list)

    def __post_init__(self):
        self.context = NgramIndex(self.prompt, self.min_n, self.max_n)
        self._sources = [self.context, *self.sources] + [joined(replies, self.min_n, self.max_n)
                                                         for replies in (self.siblings, self.others) if replies]

    def add(self, tokens) -> None:
        """Tokens the reply gained (accepted drafts and the token after them)."""
        self.context.extend(tokens)

    def propose(self, limit: int = MAX_DRAFT) -> list[int]:
        """Up to ``limit`` tokens that followed the longest matching suffix of the prompt + reply so far."""
        seq = self.context.tokens
        if limit <= 0:
            return []
        for n in range(min(self.max_n, len(seq)), self.min_n - 1, -1):
            key = tuple(seq[-n:])
            for index in self._sources:
                draft = index.continuation(key, limit)
                if draft and SEPARATOR in draft:
                    draft = draft[:draft.index(SEPARATOR)]
                if draft:
                    return draft
        return []


def joined(replies: list[list[int]], min_n: int = MIN_NGRAM, max_n: int = MAX_NGRAM) -> NgramIndex:
    """One index over several replies, given newest first (so the newest occurrence of an n-gram wins)."""
    index = NgramIndex((), min_n, max_n)
    for reply in reversed(replies):
        index.extend([*reply, SEPARATOR])
    return index


class SessionReplies:
    """What the session generated, as drafts for later replies: per prompt the last ``per_prompt`` replies (of the
    last ``prompts`` prompts), and one index over them all, kept as replies arrive (built once, not per reply) and
    bounded to about ``budget`` tokens (rebuilt from the newest replies past it). Inductor-style replies share much
    of their text across modules: headers, kernel preambles, ``call``, ``ModelNew``. ``seed``: replies the session
    starts with (``drafting_seed``), in an index of their own that is searched last and never evicted. Thread-safe."""

    def __init__(self, prompts: int = 64, per_prompt: int = 8, budget: int = 32768,
                 seed: list[list[int]] | None = None):
        # Per prompt, newest first; the dict's order: the least recently used prompt first.
        self._replies: dict[tuple[int, ...], list[list[int]]] = {}
        self._siblings: dict[tuple[int, ...], NgramIndex] = {}
        self._all = NgramIndex()
        self._seed = joined(seed) if seed else None  # never changes: readers share it without the lock
        self._prompts, self._per_prompt, self._budget = prompts, per_prompt, budget
        self._lock = threading.Lock()

    def siblings(self, prompt: list[int]) -> list[list[int]]:
        with self._lock:
            return list(self._replies.get(tuple(prompt), []))

    def others(self, prompt: list[int]) -> list[list[int]]:
        key = tuple(prompt)
        with self._lock:
            return [reply for other in reversed(self._replies) if other != key for reply in self._replies[other]]

    def sources(self, prompt: list[int]) -> list[NgramIndex]:
        """The indexes a reply to ``prompt`` drafts from: that prompt's replies, all of the session's, the seed."""
        with self._lock:
            own = self._siblings.get(tuple(prompt))
            found = [own, self._all] if own is not None else [self._all]
        if self._seed is not None:
            found.append(self._seed)
        return found

    def remember(self, prompt: list[int], reply: list[int]) -> None:
        if not reply:
            return
        key = tuple(prompt)
        with self._lock:
            replies = self._replies.pop(key, [])
            replies.insert(0, list(reply))
            self._replies[key] = replies[:self._per_prompt]  # re-inserted: the most recently used prompt stays longest
            while len(self._replies) > self._prompts:
                oldest = next(iter(self._replies))
                del self._replies[oldest]
                self._siblings.pop(oldest, None)
            self._siblings[key] = joined(self._replies[key])
            if len(self._all.tokens) + len(reply) < self._budget:
                self._all.extend([*reply, SEPARATOR])
            else:  # past the budget: the newest replies that fill half of it, in a new index (readers keep the old)
                newest, size = [], 0
                for other in reversed(self._replies):
                    for each in self._replies[other]:
                        if size + len(each) > self._budget // 2 and newest:
                            break
                        newest.append(each)
                        size += len(each) + 1
                self._all = joined(newest)


class DraftPlanner:
    """When to draft. A draft that is rejected at once still costs a verify step (a little more than a plain step),
    so after one the planner pauses for a number of steps that doubles while drafts keep failing (up to
    ``max_pause``) and resets on a draft that adds a token: a reply that repeats nothing costs a few percent at most,
    and one that does is drafted at every step."""

    def __init__(self, drafter: Drafter, max_pause: int = 32):
        self.drafter = drafter
        self.max_pause = max_pause
        self._pause, self._next_pause = 0, 1

    def add(self, tokens) -> None:
        self.drafter.add(tokens)

    def propose(self, limit: int = MAX_DRAFT) -> list[int]:
        if self._pause > 0:
            self._pause -= 1
            return []
        return self.drafter.propose(limit)

    def record(self, draft: list[int], emitted: list[int]) -> None:
        """A step's outcome: the draft it verified (empty for a plain step) and the tokens it emitted."""
        if not draft:
            return
        if len(emitted) > 1:
            self._next_pause = 1
        elif self.max_pause:
            self._pause, self._next_pause = self._next_pause, min(2 * self._next_pause, self.max_pause)


def drive(planner: DraftPlanner, first: int, max_new_tokens: int, emit, device, max_draft: int = MAX_DRAFT) -> dict:
    """The host side of speculative decoding, for the decoder (``speculative.Speculation``) and for the teacher-forced
    simulation that projects its speed (tools/teacher_forcing.py) alike.

    ``device``: ``launch_plain()`` starts a plain step (it feeds the last token), ``read_plain()`` waits for the
    oldest running plain step's token; ``verify(draft)`` runs a verify step and returns the tokens it emits;
    ``room()`` is the longest draft that fits the cache. Plain steps run ahead of the host as in plain decoding: while
    one runs, the host emits, drafts, and checks the draft's first token against the token that step chose (for free)
    before it verifies the rest; while nothing is drafted, a second plain step starts before the first is read, so
    the GPU never waits for the host. ``emit(token)`` returns False to stop. Returns the step counts."""
    stats = {"plain_steps": 0, "verify_steps": 0, "drafted": 0, "accepted": 0, "free_hits": 0}
    new, produced, running = [first], 0, 0
    while True:
        for token in new:
            produced += 1
            if not emit(token) or produced >= max_new_tokens:
                return stats
        planner.add(new)
        new = []
        if running:
            proposal = planner.propose(max_draft + 1)
            if not proposal and produced + running < max_new_tokens:
                device.launch_plain()
                stats["plain_steps"] += 1
                running += 1
            new, running = [device.read_plain()], running - 1
            hit = bool(proposal) and proposal[0] == new[0]
            stats["free_hits"] += hit
            draft = proposal[1:] if hit else []
            if running:
                continue  # the next token is being chosen already: emit this one and draft again meanwhile
        else:
            draft = planner.propose(max_draft)
        known = produced + len(new)
        draft = draft[:min(max_new_tokens - known - 1, device.room())]
        if draft:
            tokens = device.verify(draft)
            planner.record(draft, tokens)
            stats["verify_steps"] += 1
            stats["drafted"] += len(draft)
            stats["accepted"] += len(tokens) - 1
            new = new + tokens
        elif known < max_new_tokens:
            device.launch_plain()
            stats["plain_steps"] += 1
            running = 1
