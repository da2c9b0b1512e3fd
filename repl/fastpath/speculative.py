"""Speculative decoding of one stream with model-free drafts (``drafting``), exact under greedy decoding and sampling.

A verify step feeds the last token and a draft of up to T - 1 tokens in one forward pass through the static cache
(T queries, each attending to the cache up to its own position), and chooses a token after each of the T prefixes
with the plain sampler (``static_decoder.sample``: temperature and top-p exactly as a plain step applies them, fresh
noise for every row) or argmax. Draft token i is accepted when the token chosen after the prefix before it is that
draft token and every draft before it was accepted; the step emits the accepted drafts and the chosen token after
them (a correction, or the bonus token after a fully accepted draft), 1 to T tokens.

Why that is exact: every emitted token is a draw from the target's processed distribution given exactly the tokens
emitted before it, as in plain decoding; only the forward passes are shared. For a deterministic draft d it is the
speculative-sampling rule itself: the draw equals d with probability p(d) (accept), and otherwise it is distributed
as p with d removed and renormalised (the residual). Greedy: the tokens are generate()'s argmax tokens.

The cache needs no rollback: the positions after the accepted prefix hold the rejected drafts' keys and values, but
the next step writes its own tokens there before any query reads them, and every query masks positions after its own.

Windows are padded to a few captured lengths (``WINDOWS``): one CUDA graph per length and attention bucket. The host
reads each step's tokens before it drafts the next (one synchronisation per step, measured in docs/performance.md).
Single streams only: K rows accept different numbers of tokens, so each would need a position of its own.
"""

from functools import partial
from typing import Callable

import torch

from repl.fastpath import llama_math
from repl.fastpath.drafting import MAX_DRAFT, Drafter, DraftPlanner, drive

WINDOWS = (MAX_DRAFT + 1,)  # verify-step lengths (last token + draft), one graph each per bucket; a draft is padded


def window_logits(x, norm, lm_head, eps: float):
    """Float32 logits of every position of x (B, T, hidden): a verify step needs the choice after each prefix."""
    return llama_math.linear(llama_math.rms_norm(x, norm, eps), lm_head).float()


def window_pieces(attention_input=llama_math.attention_input, layer_output=llama_math.layer_output,
                  logits=window_logits, attend=llama_math.attend_cache) -> llama_math.Pieces:
    """The pieces of a verify step: llama_math's (their general T-token forms), eager or compiled, and the logits of
    every position."""
    return llama_math.Pieces(attention_input=attention_input, layer_output=layer_output, final_logits=logits,
                             attend_cache=attend)


def forward_window(w: llama_math.LlamaWeights, tokens, positions, caches, attended: int, pieces: llama_math.Pieces):
    """Float32 logits (B, T, vocab) of tokens (B, T) at positions (T,) = position .. position + T - 1, after the
    cached positions before them; their keys and values are written into the cache."""
    return llama_math.forward(w, tokens, positions, caches, attended, pieces, window=True)


def choose_and_accept(logits, draft, n_draft, is_greedy: bool, temperature, top_p):
    """The verify step's decision, all on the device. logits (T, vocab) after each prefix, draft (T - 1,) of which the
    first ``n_draft`` (a 0-d tensor) are real. Returns (count, tokens): the step emits tokens[:count]."""
    from repl.fastpath.decoder import greedy, sample

    choice = (greedy(logits) if is_greedy else sample(logits, temperature, top_p))[:, 0]
    real = torch.arange(draft.shape[0], device=draft.device) < n_draft
    accepted = ((choice[:-1] == draft) & real).long().cumprod(0).sum()
    return accepted + 1, choice


def compile_window_pieces(attend) -> llama_math.Pieces:
    """The verify step's pieces under torch.compile, once for every window length: T is marked dynamic (the batch,
    hidden and vocabulary sizes stay static), so the window lengths share one compile."""
    options = dict(fullgraph=True, options={"coordinate_descent_tuning": True})
    return window_pieces(attention_input=torch.compile(llama_math.attention_input, **options),
                         layer_output=torch.compile(llama_math.layer_output, **options),
                         logits=torch.compile(window_logits, **options), attend=attend)


def mark_window_dynamic(*tensors_and_dims) -> None:
    for tensor, dim in tensors_and_dims:
        torch._dynamo.maybe_mark_dynamic(tensor, dim)


class Speculation:
    """Verify steps for the decoder's batch of one row, per tier: ``prepare(tier)`` makes its steps (compiling first for
    ``compiled``), ``generate`` decodes a reply with drafts. The batch's plain steps serve where no draft is proposed.
    """

    def __init__(self, decoder, windows: tuple[int, ...] = WINDOWS):
        self.decoder = decoder
        self.windows = tuple(sorted(windows))
        device = decoder.weights.embed.device
        longest = self.windows[-1]
        self.offsets = torch.arange(longest, device=device)
        self.draft_input = torch.zeros(longest, dtype=torch.long, device=device)  # [n_draft, draft..., padding]
        self.host_input = torch.zeros(longest, dtype=torch.long, pin_memory=device.type == "cuda")
        self.result = torch.zeros(longest + 1, dtype=torch.long, device=device)  # [count, tokens...]
        self.tier: str | None = None
        self.steps: dict[tuple[bool, int], list] = {}  # (greedy?, window) -> one step per attention bucket
        self._compiled: llama_math.Pieces | None = None

    # -- warm-up ------------------------------------------------------------------------------------------------
    def eager_pieces(self) -> llama_math.Pieces:
        from repl.fastpath.kernels.decode_attention import decode_attention

        return window_pieces(attend=decode_attention) if self.decoder.attention == "triton" else window_pieces()

    def prepare(self, tier: str) -> None:
        """Verify steps of ``tier`` for the decoder's batch of one (which must exist: ``decoder.prepare(1, tier)``)."""
        decoder = self.decoder
        pieces = self._compile() if tier == "compiled" else self.eager_pieces()
        batch = decoder.batches[1]
        pool = torch.cuda.graph_pool_handle() if tier != "eager" else None
        with decoder.lock, torch.no_grad():
            steps = {}
            for is_greedy in (False, True):
                for window in self.windows:
                    steps[is_greedy, window] = []
                    for attended in decoder.buckets:
                        step = partial(self._step, batch, window, attended, pieces, is_greedy)
                        steps[is_greedy, window].append(step if tier == "eager" else self._capture(batch, step, pool))
            self.steps, self.tier = steps, tier

    def _compile(self) -> llama_math.Pieces:
        """Compile on scratch inputs of the real shapes (one layer's cache), as the decoder compiles its pieces."""
        if self._compiled is None:
            self._compiled = compile_window_pieces(self.eager_pieces().attend_cache)
        w, pieces = self.decoder.weights, self._compiled
        device, dtype = w.embed.device, w.embed.dtype
        layer = w.layers[0]
        scratch = torch.Generator(device).manual_seed(0)
        cache = (1, w.kv_heads, self.decoder.max_seq_len, w.head_dim)
        with torch.no_grad():
            for window in self.windows:
                positions = torch.arange(window, device=device)
                x = torch.randn((1, window, w.embed.shape[1]), dtype=dtype, device=device, generator=scratch)
                cos, sin = w.cos[positions], w.sin[positions]
                attention = torch.randn((1, window, w.heads * w.head_dim), dtype=dtype, device=device,
                                        generator=scratch)
                mark_window_dynamic((x, 1), (cos, 0), (sin, 0), (positions, 0), (attention, 1))
                k_cache, v_cache = (torch.zeros(cache, dtype=dtype, device=device) for _ in range(2))
                pieces.attention_input(x, layer.attn_norm, layer.qkv, cos, sin, k_cache, v_cache, positions, w.heads,
                                       w.kv_heads, w.eps)
                pieces.layer_output(x, attention, layer.o, layer.mlp_norm, layer.gate_up, layer.down, w.eps)
                pieces.final_logits(x, w.norm, w.lm_head, w.eps)
        return pieces

    def _step(self, batch, window: int, attended: int, pieces: llama_math.Pieces, is_greedy: bool) -> None:
        draft = self.draft_input[1:window]
        tokens = torch.cat([batch.tokens[:1, 0], draft])[None]
        positions = batch.position + self.offsets[:window]
        logits = forward_window(self.decoder.weights, tokens, positions, batch.caches, attended, pieces)[0]
        count, choice = choose_and_accept(logits, draft, self.draft_input[0], is_greedy, batch.temperature,
                                          batch.top_p)
        self.result[:1].copy_(count.view(1))
        self.result[1:window + 1].copy_(choice)
        batch.tokens[:1, 0].copy_(choice.gather(0, (count - 1).view(1)))
        batch.position += count

    def _capture(self, batch, step, pool):
        from repl.fastpath.decoder import FastDecoder

        return FastDecoder._capture(batch, step, pool)

    def repeatable_steps(self, prompt_ids, settings) -> tuple[Callable[[], None], Callable[[], None], bool]:
        """For timing (``bench``): the prompt prefilled into the decoder's batch of one, then a plain step and a verify
        step of the longest window (a full draft), each run at the prompt's end on every call (the position is reset;
        the token fed is whatever the last call chose, which costs the same). Returns (plain, verify, on CUDA); call
        them under ``torch.no_grad()``."""
        decoder, batch = self.decoder, self.decoder.batches[1]
        position = decoder.start(batch, prompt_ids, settings)
        window = self.windows[-1]
        self.draft_input[0] = window - 1
        steps = _Steps(self, batch, settings.greedy, position)
        plain_step = steps.plain[steps.bucket(position)]
        verify_step = steps.windows[window][steps.bucket(position + window - 1)]

        def plain() -> None:
            batch.position.fill_(position)
            plain_step()

        def verify() -> None:
            batch.position.fill_(position)
            verify_step()

        return plain, verify, steps.cuda

    # -- generation ---------------------------------------------------------------------------------------------
    def serves(self, batch) -> bool:
        """Whether verify steps are ready for ``batch``: the decoder's batch of one, at their tier."""
        return self.tier is not None and batch is self.decoder.batches.get(1) and self.tier == batch.tier

    def generate(self, batch, prompt_ids, settings, max_new_tokens: int, emit, sources=()) -> dict:
        """Decode one reply with drafts from the prompt, the reply so far and ``sources`` (indexes over earlier
        replies); ``emit`` gets each token as [token] and returns False to stop. Returns the step counts."""
        length = self.decoder.start(batch, prompt_ids, settings)
        planner = DraftPlanner(Drafter(prompt_ids[0].tolist(), sources=list(sources)))
        device = _Steps(self, batch, settings.greedy, length)
        return drive(planner, batch.tokens[0, 0].item(), max_new_tokens, lambda token: emit([token]), device)


class _Steps:
    """The device side of ``drafting.drive`` for one reply: the batch's plain steps and the verify steps, and the
    position of the token fed next (held in ``batch.tokens``)."""

    def __init__(self, speculation: Speculation, batch, is_greedy: bool, position: int):
        self.speculation, self.batch, self.position = speculation, batch, position
        self.decoder = speculation.decoder
        self.plain = batch.steps[is_greedy]
        self.windows = {window: speculation.steps[is_greedy, window] for window in speculation.windows}
        self.cuda = batch.copied is not None
        self._running: list[int] = []  # host slots of the plain steps running, oldest first
        self._next_slot = 0

    def bucket(self, last: int) -> int:
        return min(last // self.decoder.bucket, len(self.decoder.buckets) - 1)

    def room(self) -> int:
        fitting = [size for size in self.windows if self.position + size <= self.decoder.max_seq_len]
        return fitting[-1] - 1 if fitting else 0

    def launch_plain(self) -> None:
        """A plain step, its token copied into a free host slot (two at most run: the slots alternate)."""
        batch = self.batch
        self.plain[self.bucket(self.position)]()
        self.position += 1
        slot = self._next_slot
        self._next_slot ^= 1
        batch.host_tokens[slot].copy_(batch.tokens[:, 0], non_blocking=self.cuda)
        if self.cuda:
            batch.copied[slot].record()
        self._running.append(slot)

    def read_plain(self) -> int:
        slot = self._running.pop(0)
        if self.cuda:
            self.batch.copied[slot].synchronize()
        return int(self.batch.host_tokens[slot, 0])

    def verify(self, draft: list[int]) -> list[int]:
        speculation = self.speculation
        window = next(size for size in self.windows if size > len(draft))
        speculation.host_input[0] = len(draft)
        speculation.host_input[1:1 + len(draft)] = torch.tensor(draft)
        speculation.draft_input.copy_(speculation.host_input, non_blocking=self.cuda)
        self.windows[window][self.bucket(self.position + window - 1)]()
        result = speculation.result.tolist()
        tokens = result[1:1 + result[0]]
        self.position += len(tokens)
        return tokens
