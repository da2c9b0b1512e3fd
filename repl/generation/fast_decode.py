"""The fast decode path of the local backend, after gpt-fast: static KV cache, the one-token step compiled and
captured as one CUDA graph with its sampling, and K candidates decoded as one batch.

A token must read every weight once (15 GB for Llama-3.1-8B in bf16: about 5 ms at the H100's measured 2.95 TB/s);
the rest is overhead, and generate() is mostly overhead (27-41 tokens/s measured against a 195 ceiling). Here the
whole step, sampling included, is replayed as one CUDA graph, so the GPU runs back to back from one token to the
next; torch.compile fuses the norms, RoPE and SiLU into the matrix-vector products; q/k/v and gate/up are fused into
single matrices; attention groups the query heads that share a cached key (the cache is read once); and the host
copies token i while the GPU computes token i+1. docs/performance.md has the measurements and the profile.

``FastLocalBackend`` is a ``Backend``: until the background warm-up (compile + capture) has finished, and wherever
the fast path cannot run (no CUDA, not a Llama model, a prompt + reply longer than the static cache), it generates
with the plain path; ``reason`` says why when the fast path is off.
"""

import os
import queue
import threading
import time
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Callable

import torch
import torch.nn.functional as F

from repl.generation import Backend, Reply
from repl.generation.local import IncrementalDecoder, LocalBackend, encode_prompt, settle_reply
from repl.generation.model_loading import LoadedModel
from repl.settings import SamplingSettings

MAX_SEQ_LEN = 4096  # prompt + reply: the REPL's longest is a ~1500-token prompt and a 2048-token reply
BATCH_SIZES = (1, 8)  # warmed up in this order; K candidates run in the smallest warmed batch that holds K rows


def unsupported_reason(model) -> str | None:
    """Why the fast path cannot decode this model, or None when it can."""
    config = model.config
    if getattr(config, "model_type", None) != "llama":
        return f"fast decoding supports Llama models, not {getattr(config, 'model_type', type(model).__name__)!r}"
    rope_type = (getattr(config, "rope_parameters", None) or {}).get("rope_type", "default")
    if (config.attention_bias or config.mlp_bias or config.hidden_act != "silu"
            or rope_type not in ("default", "llama3") or getattr(config, "pretraining_tp", 1) != 1):
        return "fast decoding supports the plain Llama-3 layer (no biases, SiLU, default or llama3 RoPE)"
    return None


# -- the model, as gpt-fast writes it ---------------------------------------------------------------------------

def fuse_rows(*linears) -> torch.Tensor:
    """One weight matrix for several projections of the same input. The modules keep views into it (nothing is
    copied and the plain path still works); a second call finds them fused already."""
    weights = [linear.weight for linear in linears]
    rows = sum(weight.shape[0] for weight in weights)
    first = weights[0]
    if all(w.untyped_storage().data_ptr() == first.untyped_storage().data_ptr() for w in weights):
        return first.as_strided((rows, first.shape[1]), first.stride(), first.storage_offset())
    fused = torch.cat([weight.data for weight in weights])
    start = 0
    for weight in weights:
        weight.data = fused[start:start + weight.shape[0]]
        start += weight.shape[0]
    return fused


@dataclass
class LayerWeights:
    qkv: torch.Tensor
    o: torch.Tensor
    gate_up: torch.Tensor
    down: torch.Tensor
    attn_norm: torch.Tensor
    mlp_norm: torch.Tensor


class LlamaWeights:
    """A transformers Llama's weights, laid out for decoding, and its RoPE tables."""

    def __init__(self, model, max_seq_len: int):
        config, inner = model.config, model.model
        self.heads, self.kv_heads = config.num_attention_heads, config.num_key_value_heads
        self.head_dim = getattr(config, "head_dim", None) or config.hidden_size // self.heads
        self.eps = config.rms_norm_eps
        self.embed, self.norm, self.lm_head = inner.embed_tokens.weight, inner.norm.weight, model.lm_head.weight
        self.layers = [
            LayerWeights(qkv=fuse_rows(layer.self_attn.q_proj, layer.self_attn.k_proj, layer.self_attn.v_proj),
                         o=layer.self_attn.o_proj.weight,
                         gate_up=fuse_rows(layer.mlp.gate_proj, layer.mlp.up_proj),
                         down=layer.mlp.down_proj.weight,
                         attn_norm=layer.input_layernorm.weight, mlp_norm=layer.post_attention_layernorm.weight)
            for layer in inner.layers]
        # The model's own rotary module computes the tables, so llama3 RoPE scaling is exactly transformers'.
        with torch.no_grad():
            cos, sin = inner.rotary_emb(self.embed[:1], torch.arange(max_seq_len, device=self.embed.device)[None])
        self.cos, self.sin = cos[0], sin[0]  # (max_seq_len, head_dim), in the model's dtype


def rms_norm(x, weight, eps):
    """LlamaRMSNorm: normalised in float32, cast back, then scaled."""
    dtype = x.dtype
    x = x.float()
    x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)
    return weight * x.to(dtype)


def rotate(x, cos, sin):
    """transformers' apply_rotary_pos_emb (the rotate-half layout)."""
    half = x.shape[-1] // 2
    return x * cos + torch.cat((-x[..., half:], x[..., :half]), dim=-1) * sin


def attend_cache(q, k_cache, v_cache, position):
    """One query per row against the whole static cache, masked after ``position``. The query heads that share a
    key/value head are grouped into one matrix, so each cached key is read once (no repeat_kv copy of the cache)."""
    batch, heads, _, dim = q.shape
    kv_heads, length = k_cache.shape[1], k_cache.shape[2]
    q = q.reshape(batch, kv_heads, heads // kv_heads, dim)
    scores = (q @ k_cache.transpose(-1, -2)) * dim ** -0.5
    scores = scores.masked_fill(torch.arange(length, device=q.device) > position, float("-inf"))
    probs = torch.softmax(scores.float(), dim=-1).to(q.dtype)
    return (probs @ v_cache).reshape(batch, heads, 1, dim)


def forward(w: LlamaWeights, tokens, positions, caches):
    """Float32 logits of each row's last position. tokens (B, T) at positions (T,): a prompt (T > 1, from position
    0, attending to itself) or one decode step (T == 1, attending to the cache). K/V go into the static cache,
    broadcast over its rows when one prompt row fills a batch of K."""
    batch, length = tokens.shape
    heads, kv_heads, dim = w.heads, w.kv_heads, w.head_dim
    cos, sin = w.cos[positions], w.sin[positions]
    x = F.embedding(tokens, w.embed)
    for layer, (k_cache, v_cache) in zip(w.layers, caches):
        q, k, v = (rms_norm(x, layer.attn_norm, w.eps) @ layer.qkv.T).split(
            [heads * dim, kv_heads * dim, kv_heads * dim], dim=-1)
        q = rotate(q.view(batch, length, heads, dim).transpose(1, 2), cos, sin)
        k = rotate(k.view(batch, length, kv_heads, dim).transpose(1, 2), cos, sin)
        v = v.view(batch, length, kv_heads, dim).transpose(1, 2)
        k_cache[:, :, positions] = k
        v_cache[:, :, positions] = v
        if length > 1:
            attention = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
        else:
            attention = attend_cache(q, k_cache, v_cache, positions)
        x = x + attention.transpose(1, 2).reshape(batch, length, heads * dim) @ layer.o.T
        gate, up = (rms_norm(x, layer.mlp_norm, w.eps) @ layer.gate_up.T).chunk(2, dim=-1)
        x = x + (F.silu(gate) * up) @ layer.down.T
    return (rms_norm(x[:, -1], w.norm, w.eps) @ w.lm_head.T).float()


def sample(logits, temperature, top_p):
    """Nucleus sampling with transformers' semantics (temperature, then the smallest set of most probable tokens
    whose mass reaches top_p; no top-k). The draw is argmax(p / E) with E ~ Exp(1), as torch.multinomial draws one
    sample, so nothing waits on the host and the whole step fits in a CUDA graph."""
    probs = torch.softmax(logits / temperature, dim=-1)
    probs, order = probs.sort(dim=-1, descending=True)
    probs = probs.masked_fill(probs.cumsum(dim=-1) - probs >= top_p, 0.0)
    choice = (probs / torch.empty_like(probs).exponential_()).argmax(dim=-1, keepdim=True)
    return order.gather(-1, choice)


def greedy(logits):
    return logits.argmax(dim=-1, keepdim=True)


# -- decoding -----------------------------------------------------------------------------------------------------

class DecodeBatch:
    """Static buffers for decoding ``size`` rows; the captured step graphs read and write only these."""

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
        self.steps: dict[bool, Callable[[], None]] = {}  # greedy? -> one decode step (a graph replay, or eager)
        self.lock = threading.Lock()  # one generation at a time per batch


class FastDecoder:
    """Prefill and decode with static buffers; with ``use_graphs`` the decode step is compiled and captured."""

    def __init__(self, model, max_seq_len: int = MAX_SEQ_LEN, use_graphs: bool = True):
        self.weights = LlamaWeights(model, max_seq_len)
        self.max_seq_len = max_seq_len
        self.use_graphs = use_graphs
        self.batches: dict[int, DecodeBatch] = {}  # only warmed-up batches appear here
        # As gpt-fast: with coordinate descent tuning Inductor writes the batch-1 matrix-vector products as Triton
        # reductions fused with the norm before them and tunes their block sizes (cuBLAS keeps batch 8).
        self._decode_forward = torch.compile(forward, fullgraph=True, dynamic=False,
                                             options={"coordinate_descent_tuning": True}) if use_graphs else forward

    def prepare(self, size: int) -> None:
        """Allocate a batch of ``size`` rows and make its steps; compiles and captures with ``use_graphs``."""
        batch = DecodeBatch(self.weights, size, self.max_seq_len)
        with torch.no_grad():
            for is_greedy in (False, True):
                step = partial(self._step, batch, is_greedy)
                batch.steps[is_greedy] = self._capture(step) if self.use_graphs else step
        self.batches[size] = batch

    def _step(self, batch: DecodeBatch, is_greedy: bool) -> None:
        logits = self._decode_forward(self.weights, batch.tokens, batch.position, batch.caches)
        batch.tokens.copy_(greedy(logits) if is_greedy else sample(logits, batch.temperature, batch.top_p))
        batch.position += 1

    @staticmethod
    def _capture(step: Callable[[], None]) -> Callable[[], None]:
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):  # compile, autotune and warm up outside the capture, as graphs require
            for _ in range(3):
                step()
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        # thread_local: the plain path may be generating in another thread meanwhile.
        with torch.cuda.graph(graph, capture_error_mode="thread_local"):
            step()
        return graph.replay

    def batch_for(self, rows: int) -> DecodeBatch | None:
        """A warmed-up batch of at least ``rows`` rows, now locked for the caller; None if none is free."""
        for size in sorted(self.batches):
            if size >= rows and self.batches[size].lock.acquire(blocking=False):
                return self.batches[size]
        return None

    def generate(self, batch: DecodeBatch, prompt_ids: torch.Tensor, settings: SamplingSettings, rows: int,
                 max_new_tokens: int, emit: Callable[[list[int]], bool]) -> None:
        """Prefill the prompt once, then decode ``rows`` samples of it together. ``emit`` receives each step's
        tokens (one per row) and returns False to stop. The caller holds ``batch.lock``."""
        length = prompt_ids.shape[1]
        if length + max_new_tokens > self.max_seq_len:
            raise ValueError(f"{length} prompt + {max_new_tokens} new tokens exceed the static cache "
                             f"({self.max_seq_len})")
        with torch.no_grad():
            if settings.seed is not None:
                torch.manual_seed(settings.seed)
            batch.temperature.fill_(max(settings.temperature, 1e-6))
            batch.top_p.fill_(settings.top_p if settings.top_p < 1 else 2.0)  # 2.0: keep every token
            prompt_ids = prompt_ids.to(batch.tokens.device)
            logits = forward(self.weights, prompt_ids, torch.arange(length, device=prompt_ids.device),
                             batch.caches).expand(batch.size, -1)
            batch.tokens.copy_(greedy(logits) if settings.greedy else sample(logits, batch.temperature, batch.top_p))
            batch.position.fill_(length)
            self._decode(batch, batch.steps[settings.greedy], rows, max_new_tokens, emit)

    @staticmethod
    def _decode(batch: DecodeBatch, step, rows: int, max_new_tokens: int, emit) -> None:
        # Token i is copied to the host while the GPU computes token i+1: the GPU never waits for the host.
        # Two pinned host slots alternate; slot i % 2 is read (for emit) before step i+2 overwrites it.
        def send(i):
            batch.host_tokens[i % 2].copy_(batch.tokens[:, 0], non_blocking=batch.copied is not None)
            if batch.copied:
                batch.copied[i % 2].record()

        send(0)
        for i in range(1, max_new_tokens + 1):
            if i < max_new_tokens:
                step()
                send(i)
            if batch.copied:
                batch.copied[(i - 1) % 2].synchronize()
            if not emit(batch.host_tokens[(i - 1) % 2, :rows].tolist()):
                break
        if batch.copied:
            torch.cuda.current_stream().synchronize()


# -- the backend --------------------------------------------------------------------------------------------------

_END = object()


class FastReplyStream:
    """A reply fed by the fast decoder's worker thread, which serves all K streams of a ``stream_many`` call."""

    def __init__(self, loaded: LoadedModel, settings: SamplingSettings, prompt_tokens: int, end_ids: set[int]):
        self.reply = Reply(model=loaded.model_id, settings=settings)
        self.prompt_tokens = prompt_tokens
        self.open = True  # the worker still sends it tokens
        self._end_ids = end_ids
        self._decoder = IncrementalDecoder(loaded.tokenizer)
        self._tokens: queue.Queue = queue.Queue()
        self._cancelled = threading.Event()
        self._error: BaseException | None = None
        self._sent = 0

    def cancel(self) -> None:
        self._cancelled.set()

    @property
    def ids(self) -> list[int]:
        return list(self._decoder.ids)

    def take(self, token: int) -> bool:
        """Worker side: hand over one token; False once this stream wants no more (then the worker closes it)."""
        if self._cancelled.is_set():
            return False
        self._tokens.put([token])
        self._sent += 1
        return token not in self._end_ids and self._sent < self.reply.settings.max_new_tokens

    def close(self, error: BaseException | None = None) -> None:
        if self.open:
            self.open, self._error = False, error
            self._tokens.put(_END)

    def __iter__(self):
        reply = self.reply
        while True:
            try:
                item = self._tokens.get(timeout=0.1)  # a timeout keeps KeyboardInterrupt deliverable
            except queue.Empty:
                continue
            if item is _END:
                break
            if reply.first_token_at is None:
                reply.first_token_at = time.monotonic()
            reply.tokens += len(item)
            piece = self._decoder.add(item)
            if piece:
                reply.text += piece
                yield piece
        held_back = settle_reply(reply, self._decoder, self._end_ids, cancelled=self._cancelled.is_set(),
                                 error=self._error)
        if held_back:
            yield held_back


def use_user_cache_dir() -> None:
    """Compiled kernels outlive the process: Inductor's cache (Triton's inside it) under the user's cache dir."""
    import platformdirs

    root = Path(platformdirs.user_cache_dir("kernelllm", appauthor=False))
    os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", str(root / "inductor"))


class FastLocalBackend(Backend):
    """The local backend with fast decoding once warmed up; the plain generate() path before that and wherever
    the fast path cannot run (``reason`` says why, for the UI to show once).

    ``compile=False`` runs the same fast-path code eagerly (no compile, no graphs), on any device: for tests and CPU
    benchmarks. ``state``: warming up -> ready, or off / failed with a ``reason``.
    """

    def __init__(self, loaded: LoadedModel, *, compile: bool = True, max_seq_len: int = MAX_SEQ_LEN,
                 batch_sizes: tuple[int, ...] = BATCH_SIZES):
        self.loaded = loaded
        self.device = loaded.device
        self.plain = LocalBackend(loaded)
        self.reason: str | None = unsupported_reason(loaded.model)
        if self.reason is None and compile and not str(loaded.device).startswith("cuda"):
            self.reason = "no CUDA device: fast decoding needs CUDA graphs"
        self.warm_up_seconds: dict[int, float] = {}  # batch size -> compile + capture time
        self.warm_up_error: BaseException | None = None  # kept for --debug and the benchmark
        self.decoder: FastDecoder | None = None
        self._ready = threading.Event()
        eos = loaded.model.generation_config.eos_token_id
        eos = eos if eos is not None else getattr(loaded.tokenizer, "eos_token_id", None)
        self.end_ids = set(eos) if isinstance(eos, list) else {eos} - {None}
        if self.reason is not None:
            self.reason += "; using the plain generate() path"
            self.state = "off"
            self._ready.set()
            return
        self.state = "warming up"
        self.decoder = FastDecoder(loaded.model, min(max_seq_len, loaded.model.config.max_position_embeddings),
                                   use_graphs=compile)
        threading.Thread(target=self._warm_up, args=(batch_sizes,), name="fast-decode-warm-up", daemon=True).start()

    @property
    def description(self) -> str:
        suffix = {"ready": ", fast decoding", "warming up": ", fast decoding warming up"}.get(self.state, "")
        return f"{self.loaded.description}{suffix}"

    def _warm_up(self, batch_sizes) -> None:
        use_user_cache_dir()
        try:
            for size in batch_sizes:
                started = time.monotonic()
                self.decoder.prepare(size)
                self.warm_up_seconds[size] = time.monotonic() - started
            self.state = "ready"
        except Exception as error:  # the plain path goes on; say why once
            self.warm_up_error = error
            first_line = (str(error).strip().splitlines() or [""])[0]
            self.reason = f"fast decoding failed to warm up ({type(error).__name__}: {first_line}); " \
                          "using the plain generate() path"
            self.state = "failed"
        finally:
            self._ready.set()

    def wait_until_ready(self, timeout: float | None = None) -> bool:
        """True once the warm-up has ended (either way); generation never needs to wait for it."""
        return self._ready.wait(timeout)

    def stream(self, prompt: str, settings: SamplingSettings):
        streams = self._stream(prompt, settings, 1)
        return streams[0] if streams else self.plain.stream(prompt, settings)

    def stream_many(self, prompt: str, settings: SamplingSettings, k: int) -> list:
        """k samples of one prompt decoded as one batch (the prompt is prefilled once), as LocalBackend.stream_many."""
        if settings.greedy and k > 1:
            raise ValueError("greedy decoding (temperature 0) gives the same reply k times; use a temperature > 0")
        return self._stream(prompt, settings, k) or self.plain.stream_many(prompt, settings, k)

    def _stream(self, prompt: str, settings: SamplingSettings, k: int) -> list | None:
        """Fast streams, or None where the plain path must serve: not warmed up, busy, too long, unsupported."""
        batch = self.decoder.batch_for(k) if self.decoder else None
        if batch is None:
            return None
        prompt_ids = encode_prompt(self.loaded.tokenizer, prompt)
        if prompt_ids.shape[1] + settings.max_new_tokens > self.decoder.max_seq_len:
            batch.lock.release()
            return None
        streams = [FastReplyStream(self.loaded, settings, prompt_ids.shape[1], self.end_ids) for _ in range(k)]
        threading.Thread(target=self._generate, args=(batch, prompt_ids, settings, streams), name="fast-decode",
                         daemon=True).start()
        return streams

    def _generate(self, batch: DecodeBatch, prompt_ids, settings: SamplingSettings, streams) -> None:
        def emit(tokens: list[int]) -> bool:
            done = [stream for stream, token in zip(streams, tokens) if stream.open and not stream.take(token)]
            if all(stream in done or not stream.open for stream in streams):
                return False  # the last streams close below, once the batch is free for the next request
            for stream in done:
                stream.close()
            return True

        error = None
        try:
            self.decoder.generate(batch, prompt_ids, settings, len(streams), settings.max_new_tokens, emit)
        except BaseException as failure:  # reported through the replies, never lost in the thread
            error = failure
        finally:
            batch.lock.release()
            for stream in streams:
                stream.close(error)
