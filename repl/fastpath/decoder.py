"""Decoding with static buffers, after gpt-fast: a static KV cache per batch size, the one-token step (sampling
included) replayed as CUDA graphs, K candidates decoded as one batch, and the host copying token i while the GPU
computes token i+1.

A step comes in tiers, each replacing the one before as the background warm-up reaches it:
- ``eager``: the step run op by op from Python (no CUDA needed: tests and CPU benchmarks);
- ``graphs``: the eager step captured as CUDA graphs, ready seconds after the model is loaded;
- ``compiled``: the step's pieces compiled by Inductor (fused norms, RoPE and SiLU, tuned matrix-vector products),
  then captured the same way.
Attention reads only the filled part of the cache, rounded up to a multiple of ``BUCKET`` positions: each batch has
one graph per bucket (and per greedy/sampled), all sharing one memory pool.

A prompt's prefill (its forward pass up to the first token's logits) runs op by op, or, once ``prepare_prefill`` has
captured them, as a CUDA graph of the prompt padded to the next multiple of ``PREFILL_BUCKET`` tokens: launched op by
op, the ~1400 kernels of a quantized 8B prefill kept the GPU waiting on the host (a 1000-token first token took 42-83
ms for 38 ms of kernels on an H100, docs/performance.md), and a graph replays them without the host.

One generation at a time runs on a model, under the lock the plain generate() path takes (``generation_lock``):
sampling draws from torch's global RNG, which a seed resets, and the buffers are shared by every tier's graphs.
"""

from functools import partial
from typing import Callable

import dataclasses

import torch

from repl.fastpath.llama_math import EAGER, LlamaWeights, Pieces, attention_input, final_logits, forward, \
    layer_output
from repl.generation.local import generation_lock
from repl.core.settings import SamplingSettings

MAX_SEQ_LEN = 4096  # prompt + reply: the REPL's longest is a ~1500-token prompt and a 2048-token reply
BUCKET = 256  # attention reads the cache up to the next multiple of this many positions
TIERS = ("eager", "graphs", "compiled")
MATVECS = ("triton", "inductor")  # who writes the compiled tier's batch-1 products: see compile_pieces()
PREFILL_BUCKET = 64  # prompts are padded to a multiple of this many tokens for a captured prefill
PREFILL_GRAPHS_UP_TO = 2048  # the longest padded prompt with a graph (the REPL's prompts are up to ~1500 tokens);
# longer prompts prefill op by op. The graphs' activations live in one pool they share (as large as the longest
# needs); each takes a first run and a capture to make (32 lengths: 7.5 s for the 8B int8 model on an H100).
PREFILL_HEADROOM = 2 << 30  # bytes of device memory the prefill graphs leave free: they stop at the first length
# that would start with less (a 12-16 GB card holding an 8B model), and longer prompts prefill op by op


def free_bytes(device: torch.device) -> int | None:
    """Device memory a new tensor could take: what the driver has free and what torch's allocator caches unused;
    None off CUDA (no limit)."""
    if device.type != "cuda":
        return None
    free, _ = torch.cuda.mem_get_info(device)
    return free + torch.cuda.memory_reserved(device) - torch.cuda.memory_allocated(device)


def sample(logits, temperature, top_p):
    """Nucleus sampling with transformers' semantics (temperature, then the smallest set of most probable tokens
    whose mass reaches top_p; no top-k). The draw is argmax(p / E) with E ~ Exp(1), as torch.multinomial draws one
    sample, so nothing waits on the host and the whole step fits in a CUDA graph. On CUDA the softmax and the draw
    are ``decode_sampling``'s kernels (torch's are single-block there), the same steps with the same RNG use."""
    if logits.is_cuda:
        from repl.fastpath import decode_sampling

        return decode_sampling.sample(logits, temperature, top_p)
    return torch_sample(logits, temperature, top_p)


def torch_sample(logits, temperature, top_p):
    """``sample`` in torch ops: the CPU's path and the reference of the kernels'."""
    probs = torch.softmax(logits / temperature, dim=-1)
    probs, order = probs.sort(dim=-1, descending=True)
    probs = probs.masked_fill(probs.cumsum(dim=-1) - probs >= top_p, 0.0)
    choice = (probs / torch.empty_like(probs).exponential_()).argmax(dim=-1, keepdim=True)
    return order.gather(-1, choice)


def greedy(logits):
    if logits.is_cuda:  # torch's argmax of a row is a single block: see decode_sampling
        from repl.fastpath.decode_sampling import argmax_rows

        return argmax_rows(logits)
    return logits.argmax(dim=-1, keepdim=True)


class DecodeBatch:
    """Static buffers for decoding ``size`` rows; every tier's step graphs read and write only these."""

    def __init__(self, weights: LlamaWeights, size: int, max_seq_len: int):
        device, dtype = weights.embed.device, weights.embed.dtype
        shape = (size, weights.kv_heads, max_seq_len, weights.head_dim)
        self.size = size
        self.caches = [(torch.zeros(shape, dtype=dtype, device=device), torch.zeros(shape, dtype=dtype, device=device))
                       for _ in weights.layers]
        self.tokens = torch.zeros((size, 1), dtype=torch.long, device=device)
        self.position = torch.zeros(1, dtype=torch.long, device=device)
        self.temperature = torch.ones((size, 1), device=device)
        self.top_p = torch.ones((size, 1), device=device)
        cuda = device.type == "cuda"
        self.host_tokens = torch.zeros((2, size), dtype=torch.long, pin_memory=cuda)  # double buffer, see _decode()
        self.copied = [torch.cuda.Event() for _ in range(2)] if cuda else None
        self.tier: str | None = None
        self.steps: dict[bool, list[Callable[[], None]]] = {}  # greedy? -> one step per attention bucket
        # ``FastDecoder.prepare_prefill``: padded prompt length -> its prefill (captured on CUDA), which reads the
        # prompt from ``prompt`` and writes the logits of position ``prompt_last`` into ``prompt_logits``. Like
        # every tensor a graph reads, they (and the positions) live as long as the batch: a graph holds addresses.
        self.prefills: dict[int, Callable[[], None]] = {}
        self.prompt = self.prompt_positions = self.prompt_last = self.prompt_logits = None


def padded_length(length: int) -> int:
    """The prompt length a prefill graph of ``length`` tokens is captured at."""
    return -(-length // PREFILL_BUCKET) * PREFILL_BUCKET


def compile_pieces(attend, matvec: str = "triton", quantized: bool = False) -> Pieces:
    """The step's pieces under torch.compile. As gpt-fast: with coordinate descent tuning Inductor writes the batch-1
    matrix-vector products as Triton reductions fused with the norm before them and tunes their block sizes.
    ``matvec="triton"``: at batch 1, the q/k/v (with its norm, RoPE and cache write), o and down products (with their
    residuals and SiLU) are our kernels instead (``decode_matvec``), which read the weights faster and launch fewer
    kernels; ``"inductor"``: all products are Inductor's. ``quantized`` weights: at batch 1 the products are
    ``quant_pieces``' (norms, SiLU and residuals fused in) with ``"triton"``, and plain with ``"inductor"``; they
    are always our custom ops, whose kernels suit the number of rows."""
    options = dict(fullgraph=True, dynamic=False, options={"coordinate_descent_tuning": True})
    if matvec not in MATVECS:
        raise ValueError(f"unknown matvec {matvec!r}")
    logits = final_logits
    if matvec == "triton" and quantized:
        from repl.fastpath import quant_pieces

        inputs, output, logits = quant_pieces.attention_input, quant_pieces.layer_output, quant_pieces.final_logits
    elif matvec == "triton":
        from repl.fastpath import matvec_pieces

        inputs, output = matvec_pieces.attention_input, matvec_pieces.layer_output
    else:
        inputs, output = attention_input, layer_output
    return Pieces(attention_input=torch.compile(inputs, **options), layer_output=torch.compile(output, **options),
                  final_logits=torch.compile(logits, **options), attend_cache=attend)


class FastDecoder:
    """Prefill and decode a Llama model with static buffers; ``prepare(size, tier)`` makes (or upgrades) a batch."""

    def __init__(self, model, max_seq_len: int = MAX_SEQ_LEN, bucket: int = BUCKET, attention: str | None = None,
                 matvec: str = "triton"):
        self.weights = LlamaWeights(model, max_seq_len)
        self.matvec = matvec  # for the compiled tier; a later prepare(..., "compiled") compiles anew if it changed
        # Attention over the cache: Triton kernels on CUDA ("triton"), else torch ops ("torch").
        self.attention = attention or ("triton" if self.weights.embed.device.type == "cuda" else "torch")
        if self.attention == "triton":
            from repl.fastpath.kernels.decode_attention import decode_attention

            self._eager = dataclasses.replace(EAGER, attend_cache=decode_attention)
        else:
            self._eager = EAGER
        self.max_seq_len = max_seq_len
        self.buckets = sorted({min(end, max_seq_len) for end in range(bucket, max_seq_len + bucket, bucket)})
        self.bucket = bucket
        self.batches: dict[int, DecodeBatch] = {}  # only batches that can serve appear here
        self.lock = generation_lock(model)  # one generation (plain or fast) at a time on this model
        self._compiled: dict[str, Pieces] = {}  # matvec -> the compiled pieces
        self.speculation = None  # speculative.Speculation: drafts for single streams, where it serves
        self._prefill_pool = None  # the memory pool every batch's prefill graphs share (they never run at once)
        self.last_speculation: dict | None = None  # its step counts for the last reply it decoded

    # -- warm-up ------------------------------------------------------------------------------------------------
    def prepare(self, size: int, tier: str) -> None:
        """Give batch ``size`` the steps of ``tier`` (compiling first for ``compiled``; generations go on meanwhile,
        the capture itself waits for the running generation). From then on the batch serves at that tier."""
        if tier not in TIERS:
            raise ValueError(f"unknown tier {tier!r}")
        pieces = self._compile_for(size) if tier == "compiled" else self._eager
        batch = self.batches.get(size) or DecodeBatch(self.weights, size, self.max_seq_len)
        pool = torch.cuda.graph_pool_handle() if tier != "eager" else None
        with self.lock, torch.no_grad():
            steps = {}
            for is_greedy in (False, True):
                steps[is_greedy] = []
                for attended in self.buckets:
                    step = partial(self._step, batch, is_greedy, attended, pieces)
                    steps[is_greedy].append(step if tier == "eager" else self._capture(batch, step, pool))
            batch.steps, batch.tier = steps, tier
            self.batches[size] = batch

    def prepare_prefill(self, size: int) -> None:
        """Give batch ``size`` (prepared already) a prefill for each prompt length padded to ``PREFILL_BUCKET``, up to
        ``PREFILL_GRAPHS_UP_TO`` tokens: CUDA graphs where the batch's steps are (an eager batch gets the padded
        prefills uncaptured: tests). Each is made under the lock on its own, so a generation waits for one capture
        at most; the prompts of the lengths not yet captured prefill op by op meanwhile. Shorter first, and no
        longer ones once less than ``PREFILL_HEADROOM`` of the device's memory is free."""
        batch = self.batches[size]
        device = batch.tokens.device
        lengths = range(PREFILL_BUCKET, min(PREFILL_GRAPHS_UP_TO, self.max_seq_len) + 1, PREFILL_BUCKET)
        if not lengths:
            return
        captured = batch.tier != "eager"
        if captured and self._prefill_pool is None:
            self._prefill_pool = torch.cuda.graph_pool_handle()
        with self.lock:
            if batch.prompt is None:
                batch.prompt = torch.zeros((1, lengths[-1]), dtype=torch.long, device=device)
                batch.prompt_positions = torch.arange(lengths[-1], device=device)
                batch.prompt_last = torch.zeros(1, dtype=torch.long, device=device)
                batch.prompt_logits = torch.zeros((1, self.weights.embed.shape[0]), dtype=torch.float32,
                                                  device=device)
        # One side stream for every first run: the allocator caches blocks per stream, and a stream of its own per
        # length kept each length's activations cached (9 GB reserved for int8's 32 lengths).
        side = torch.cuda.Stream() if captured else None
        for padded in lengths:
            if padded in batch.prefills:
                continue
            free = free_bytes(device)
            if free is not None and free < PREFILL_HEADROOM:
                break
            prefill = partial(self._prefill, batch, padded)
            with self.lock, torch.no_grad():
                batch.prefills[padded] = self._capture(batch, prefill, self._prefill_pool, side) if captured \
                    else prefill
        if captured:
            with self.lock:
                torch.cuda.empty_cache()  # the first runs' activations, cached for nothing now

    def _prefill(self, batch: DecodeBatch, padded: int) -> None:
        logits = forward(self.weights, batch.prompt[:, :padded], batch.prompt_positions[:padded], batch.caches,
                         last=batch.prompt_last)
        batch.prompt_logits.copy_(logits)

    def _compile_for(self, size: int) -> Pieces:
        """Compile the pieces for batches of ``size`` on scratch inputs of the real shapes (one layer's cache), so
        that compiling and tuning never touch the buffers a generation is using."""
        if self.matvec not in self._compiled:
            self._compiled[self.matvec] = compile_pieces(self._eager.attend_cache, self.matvec,
                                                         self.weights.quantization is not None)
        w, pieces = self.weights, self._compiled[self.matvec]
        device, dtype = w.embed.device, w.embed.dtype
        layer = w.layers[0]
        hidden = w.embed.shape[1]
        cache = (size, w.kv_heads, self.max_seq_len, w.head_dim)
        position = torch.zeros(1, dtype=torch.long, device=device)
        scratch = torch.Generator(device).manual_seed(0)  # the global RNG belongs to the running generation
        with torch.no_grad():
            x = torch.randn((size, 1, hidden), dtype=dtype, device=device, generator=scratch)
            k_cache, v_cache = torch.zeros(cache, dtype=dtype, device=device), torch.zeros(cache, dtype=dtype,
                                                                                          device=device)
            pieces.attention_input(x, layer.attn_norm, layer.qkv, w.cos[position], w.sin[position], k_cache, v_cache,
                                   position, w.heads, w.kv_heads, w.eps)
            attention = torch.randn((size, 1, w.heads * w.head_dim), dtype=dtype, device=device, generator=scratch)
            pieces.layer_output(x, attention, layer.o, layer.mlp_norm, layer.gate_up, layer.down, w.eps)
            pieces.final_logits(x, w.norm, w.lm_head, w.eps)
        return pieces

    def _step(self, batch: DecodeBatch, is_greedy: bool, attended: int, pieces: Pieces) -> None:
        logits = forward(self.weights, batch.tokens, batch.position, batch.caches, attended, pieces)
        batch.tokens.copy_(greedy(logits) if is_greedy else sample(logits, batch.temperature, batch.top_p))
        batch.position += 1

    @staticmethod
    def _capture(batch: DecodeBatch, step: Callable[[], None], pool, side=None) -> Callable[[], None]:
        side = side or torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):  # first runs (cuBLAS handles, autotuning) outside the capture, as required
            batch.position.fill_(0)
            step()
        torch.cuda.current_stream().wait_stream(side)
        batch.position.fill_(0)
        graph = torch.cuda.CUDAGraph()
        # thread_local: the plain path may be using the GPU from another thread meanwhile. On the stream of the first
        # run: kernels that keep zeroed counts per stream (``arrival_counts``) made them there, outside the capture
        # (made inside, they would be zeroed only when this graph replays).
        with torch.cuda.graph(graph, pool=pool, stream=side, capture_error_mode="thread_local"):
            step()
        return graph.replay

    # -- generation ---------------------------------------------------------------------------------------------
    def batch_for(self, rows: int) -> DecodeBatch | None:
        """The smallest batch that can serve ``rows`` rows (busy or not), or None."""
        return next((self.batches[size] for size in sorted(self.batches) if size >= rows), None)

    def fits(self, prompt_tokens: int, max_new_tokens: int) -> bool:
        return prompt_tokens + max_new_tokens <= self.max_seq_len

    def decode(self, prompt_ids: torch.Tensor, settings: SamplingSettings, rows: int, max_new_tokens: int,
               emit: Callable[[list[int]], bool], *, eager_fallback: bool = False, draft_sources=()) -> bool:
        """Prefill the prompt once, then decode ``rows`` samples of it together; ``emit`` receives each step's
        tokens (one per row) and returns False to stop. Waits for the generation running on the model. False (and
        nothing done) when no batch holds ``rows`` rows, unless ``eager_fallback`` decodes eagerly in a batch of
        its own. One row decodes with drafts where ``speculation`` (``speculative.Speculation``) serves its batch;
        ``draft_sources``: indexes over earlier replies to draft from (``drafting.SessionReplies.sources``)."""
        if not self.fits(prompt_ids.shape[1], max_new_tokens):
            raise ValueError(f"{prompt_ids.shape[1]} prompt + {max_new_tokens} new tokens exceed the static cache "
                             f"({self.max_seq_len})")
        with self.lock, torch.no_grad():
            batch = self.batch_for(rows)
            if batch is None:
                if not eager_fallback:
                    return False
                batch = DecodeBatch(self.weights, rows, self.max_seq_len)
                batch.steps = {g: [partial(self._step, batch, g, attended, self._eager) for attended in self.buckets]
                               for g in (False, True)}
                batch.tier = "eager"
            if rows == 1 and self.speculation is not None and self.speculation.serves(batch):
                self.last_speculation = self.speculation.generate(batch, prompt_ids, settings, max_new_tokens, emit,
                                                                  draft_sources)
            else:
                self._generate(batch, prompt_ids, settings, rows, max_new_tokens, emit)
        return True

    def start(self, batch: DecodeBatch, prompt_ids, settings: SamplingSettings) -> int:
        """Seed, set the sampling settings, prefill the prompt and choose the first token (into ``batch.tokens``);
        returns the prompt's length, the position the first token is fed at."""
        if settings.seed is not None:
            torch.manual_seed(settings.seed)
        batch.temperature.fill_(max(settings.temperature, 1e-6))
        batch.top_p.fill_(settings.top_p if settings.top_p < 1 else 2.0)  # 2.0: keep every token
        prompt_ids = prompt_ids.to(batch.tokens.device)
        length = prompt_ids.shape[1]
        prefill = batch.prefills.get(padded_length(length))
        if prefill is not None:  # the padding after the prompt: any tokens (those of an earlier prompt)
            batch.prompt[:, :length].copy_(prompt_ids[:1])
            batch.prompt_last.fill_(length - 1)
            prefill()
            logits = batch.prompt_logits
        else:
            logits = forward(self.weights, prompt_ids, torch.arange(length, device=prompt_ids.device), batch.caches)
        logits = logits.expand(batch.size, -1)
        batch.tokens.copy_(greedy(logits) if settings.greedy else sample(logits, batch.temperature, batch.top_p))
        batch.position.fill_(length)
        return length

    def _generate(self, batch: DecodeBatch, prompt_ids, settings: SamplingSettings, rows: int, max_new_tokens: int,
                  emit) -> None:
        length = self.start(batch, prompt_ids, settings)
        steps = batch.steps[settings.greedy]
        # Token i is copied to the host while the GPU computes token i+1: the GPU never waits for the host.
        # Two pinned host slots alternate; slot i % 2 is read (for emit) before step i+2 overwrites it.

        def send(i):
            batch.host_tokens[i % 2].copy_(batch.tokens[:, 0], non_blocking=batch.copied is not None)
            if batch.copied:
                batch.copied[i % 2].record()

        send(0)
        for i in range(1, max_new_tokens + 1):
            if i < max_new_tokens:
                position = length + i - 1  # of the token this step feeds
                steps[min(position // self.bucket, len(steps) - 1)]()
                send(i)
            if batch.copied:
                batch.copied[(i - 1) % 2].synchronize()
            if not emit(batch.host_tokens[(i - 1) % 2, :rows].tolist()):
                break
        if batch.copied:
            torch.cuda.current_stream().synchronize()

