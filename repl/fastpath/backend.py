"""Routing between the plain generate() path and fast decoding, for the local backend.

``FastLocalBackend`` is a ``Backend``. It starts the fast decoder's warm-up in the background (``static_decoder``:
CUDA graphs of the eager step within seconds, then the compiled step) and sends each request where it is served
best: to the fast decoder once a batch that holds its K rows can serve, otherwise (still warming up, no CUDA, not a
Llama model, a prompt + reply longer than the static cache) to the plain path; ``reason`` says why when the fast
path is off.

A reply with a seed always takes one path, so that a session replayed with the same seeds samples the same
kernels: the fast decoder's last tier (it waits for the warm-up to end) wherever the fast path can serve at all.
The plain path and the fast path draw differently from the same seed, and so do the tiers.
"""

import queue
import threading
import time

from repl.core.errors import one_line
from repl.core.paths import use_user_cache_dir
from repl.generation import Backend, Reply, check_many, fit_to_context
from repl.fastpath.llama_math import unsupported_reason
from repl.generation.local import IncrementalDecoder, LocalBackend, encode_prompt, settle_reply
from repl.generation.model_loading import LoadedModel
from repl.fastpath.drafting import SessionReplies
from repl.fastpath.drafting_seed import drafting_seed
from repl.fastpath.decoder import MAX_SEQ_LEN, FastDecoder
from repl.core.settings import SamplingSettings

BATCH_SIZES = (1, 8)  # warmed up in this order; K candidates run in the smallest batch that holds K rows


_END = object()


class FastReplyStream:
    """A reply fed by the fast decoder's worker thread, which serves all K streams of a ``stream_many`` call."""

    def __init__(self, loaded: LoadedModel, settings: SamplingSettings, prompt_tokens: int, end_ids: set[int],
                 note: str | None = None):
        self.reply = Reply(model=loaded.model_id, settings=settings, note=note)
        self.prompt_tokens = prompt_tokens
        self.open = True  # the worker still sends it tokens
        self._end_ids = end_ids
        self._decoder = IncrementalDecoder(loaded.tokenizer)
        self._tokens: queue.Queue = queue.Queue()
        self._cancelled = threading.Event()
        self._error: BaseException | None = None
        self.sent: list[int] = []  # every token the worker handed over (``ids``: those the reader has taken)

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
        self.sent.append(token)
        return token not in self._end_ids and len(self.sent) < self.reply.settings.max_new_tokens

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


class FastLocalBackend(Backend):
    """The local backend with fast decoding as soon as a tier of it is warm; the plain generate() path before that
    and wherever the fast path cannot run (``reason`` says why, for the UI to show once).

    ``compile=False`` runs the fast path's code eagerly (no compile, no graphs), on any device: for tests and CPU
    benchmarks. ``tiers`` overrides the warm-up's tiers (default: graphs, then compiled; eager without compile);
    ``attention`` the decoder's attention ("triton" on CUDA, "torch" elsewhere).
    ``drafting``: single streams decode speculatively with model-free drafts (``speculative``; the same tokens under
    greedy decoding, the same distribution under sampling), prepared as the warm-up's last stage; K rows never do.
    ``state``: warming up -> ready (a tier serves) ; or off / failed with a ``reason``.
    """

    samples_together = True  # stream_many: k rows of one batch

    def __init__(self, loaded: LoadedModel, *, compile: bool = True, max_seq_len: int = MAX_SEQ_LEN,
                 batch_sizes: tuple[int, ...] = BATCH_SIZES, tiers: tuple[str, ...] | None = None,
                 attention: str | None = None, drafting: bool = True):
        self.loaded = loaded
        self.drafting = drafting
        # What this session generated, drafts for later replies; the seed drafts even the first one.
        self.replies = SessionReplies(seed=drafting_seed(loaded.tokenizer) if drafting else None)
        self.device = loaded.device
        self.context_tokens = loaded.context_tokens
        self.plain = LocalBackend(loaded)
        self.reason: str | None = unsupported_reason(loaded.model)
        if self.reason is None and compile and not str(loaded.device).startswith("cuda"):
            self.reason = "no CUDA device: fast decoding needs CUDA graphs"
        self.tiers = tiers or (("graphs", "compiled") if compile else ("eager",))
        self.batch_sizes = batch_sizes
        self.warm_up_seconds: dict[str, dict[int, float]] = {}  # tier -> batch size -> seconds (compile + capture)
        self.serving_after_s: float | None = None  # from this backend's creation until a fast batch served
        self.warm_up_errors: list[BaseException] = []  # kept for --debug and the benchmark
        self.decoder: FastDecoder | None = None
        self._serving = threading.Event()  # a fast batch can serve, or the warm-up has ended
        self._settled = threading.Event()  # the warm-up has ended, either way
        eos = loaded.model.generation_config.eos_token_id
        eos = eos if eos is not None else getattr(loaded.tokenizer, "eos_token_id", None)
        self.end_ids = set(eos) if isinstance(eos, list) else {eos} - {None}
        if self.reason is not None:
            self.reason += "; using the plain generate() path"
            self.state = "off"
            self._serving.set()
            self._settled.set()
            return
        self.state = "warming up"
        self._created = time.monotonic()
        self.decoder = FastDecoder(loaded.model, min(max_seq_len, loaded.model.config.max_position_embeddings),
                                   attention=attention)
        threading.Thread(target=self._warm_up, name="fast-decode-warm-up", daemon=True).start()

    @property
    def description(self) -> str:
        suffix = {"ready": ", fast decoding", "warming up": ", fast decoding warming up"}.get(self.state, "")
        return f"{self.loaded.description}{suffix}"

    @property
    def tier(self) -> dict[int, str]:
        """Batch size -> the tier it serves at now."""
        return {size: batch.tier for size, batch in (self.decoder.batches if self.decoder else {}).items()}

    # -- for measurements (kernelllm.py bench): the warm fast path without streams or text ---------------------
    @property
    def attention(self) -> str | None:
        """The decoder's attention ("triton" or "torch"); None where the fast path is off."""
        return self.decoder.attention if self.decoder is not None else None

    @property
    def matvec(self) -> str | None:
        """The compiled tier's matrix-vector products ("triton": decode_matvec's, "inductor"); None where off."""
        return self.decoder.matvec if self.decoder is not None else None

    def warm_up_tier(self, tier: str, size: int, matvec: str | None = None) -> float:
        """Prepare `tier` for batches of `size` now (bench measures the tiers one after another), its compiled tier
        with `matvec`'s products (None: as it is); the seconds it took."""
        if matvec is not None:
            self.decoder.matvec = matvec
        started = time.monotonic()
        self.decoder.prepare(size, tier)
        return time.monotonic() - started

    def decode_tokens(self, prompt_ids, settings: SamplingSettings, rows: int, new_tokens: int, on_tokens) -> None:
        """Decode `rows` samples of prompt_ids at the tier that serves them, handing each step's token ids (one per
        row) to on_tokens(ids), which returns False to stop: a reply's cost without its stream or text."""
        self.decoder.decode(prompt_ids, settings, rows, new_tokens, on_tokens)

    def _warm_up(self) -> None:
        try:
            use_user_cache_dir()
            prefills_tried = False
            for tier in self.tiers:
                for size in self.batch_sizes:
                    started = time.monotonic()
                    try:
                        self.decoder.prepare(size, tier)
                    except Exception as error:  # an earlier tier, or the plain path, goes on serving
                        self._note_failure(tier, error)
                        continue
                    self.warm_up_seconds.setdefault(tier, {})[size] = time.monotonic() - started
                    if self.state == "warming up":
                        self.serving_after_s = time.monotonic() - self._created
                        self.state = "ready"
                        self._serving.set()
                if tier != "eager" and not prefills_tried:  # right after the first graphs: every first token waits on
                    prefills_tried = True  # a prefill (once: a capture that failed would fail again)
                    self._prepare_prefills()
            if self.drafting:
                self._prepare_drafting()
        except BaseException as error:  # e.g. the cache directory cannot be set up: never leave "warming up"
            self._note_failure("warm-up", error)
        finally:
            if self.state == "warming up":
                self.state = "failed"
            self._serving.set()
            self._settled.set()

    def _prepare_prefills(self) -> None:
        """Prefill graphs for every batch that serves with graphs (``FastDecoder.prepare_prefill``); a failure
        leaves the prompts of the lengths not captured to prefill op by op."""
        for size, batch in sorted(self.decoder.batches.items()):
            if batch.tier == "eager":
                continue
            started = time.monotonic()
            try:
                self.decoder.prepare_prefill(size)
            except Exception as error:
                self._note_failure("prefill graphs", error)
                return
            self.warm_up_seconds.setdefault("prefill", {})[size] = time.monotonic() - started

    def _prepare_drafting(self) -> None:
        """Verify steps at the tier the batch of one reached; before the warm-up ends, so that a seeded reply (which
        waits for that) always decodes with drafts."""
        from repl.fastpath.speculative import Speculation

        batch = self.decoder.batches.get(1)
        if batch is None:
            return
        started = time.monotonic()
        try:
            speculation = Speculation(self.decoder)
            speculation.prepare(batch.tier)
        except Exception as error:  # single streams decode without drafts
            self._note_failure("drafting", error)
            return
        self.decoder.speculation = speculation
        self.warm_up_seconds.setdefault("drafting", {})[1] = time.monotonic() - started

    def _note_failure(self, tier: str, error: BaseException) -> None:
        self.warm_up_errors.append(error)
        if self.reason is None:
            fallback = "the plain generate() path" if self.state == "warming up" else "the tiers already warm"
            self.reason = f"fast decoding failed to warm up ({tier}: {one_line(error, with_type=True)}); " \
                          f"using {fallback}"

    def wait_until_serving(self, timeout: float | None = None) -> bool:
        """True once a fast batch serves or the warm-up has ended; generation never needs to wait for it."""
        return self._serving.wait(timeout)

    def wait_until_ready(self, timeout: float | None = None) -> bool:
        """True once the whole warm-up has ended (either way)."""
        return self._settled.wait(timeout)

    def stream(self, prompt: str, settings: SamplingSettings):
        streams = self._stream(prompt, settings, 1)
        return streams[0] if streams else self.plain.stream(prompt, settings)

    def most_samples(self, prompt: str, settings: SamplingSettings):
        return self.plain.most_samples(prompt, settings)  # the plain path serves any k the fast one does not

    def stream_many(self, prompt: str, settings: SamplingSettings, k: int) -> list:
        """k samples of one prompt decoded as one batch (the prompt is prefilled once), as LocalBackend.stream_many."""
        check_many(settings, k)
        return self._stream(prompt, settings, k) or self.plain.stream_many(prompt, settings, k)

    def _stream(self, prompt: str, settings: SamplingSettings, k: int) -> list | None:
        """Fast streams, or None where the plain path serves. Without a seed: the fast path once a batch of at least
        k rows serves. With a seed: the fast path wherever it can serve at all (not off, not failed, k rows within
        the warmed batch sizes, the reply fits the cache), after the warm-up has ended, so that the same seed always
        meets the same tier."""
        if self.decoder is None or self.state == "failed":
            return None
        if settings.seed is None and self.decoder.batch_for(k) is None:
            return None
        if k > max(self.batch_sizes):  # more rows than any batch the warm-up makes: the plain path, seed or not
            return None
        prompt_ids = encode_prompt(self.loaded.tokenizer, prompt)
        settings, note = fit_to_context(prompt_ids.shape[1], settings, self.context_tokens)
        if not self.decoder.fits(prompt_ids.shape[1], settings.max_new_tokens):
            return None
        streams = [FastReplyStream(self.loaded, settings, prompt_ids.shape[1], self.end_ids, note) for _ in range(k)]
        threading.Thread(target=self._generate, args=(prompt_ids, settings, streams), name="fast-decode",
                         daemon=True).start()
        return streams

    def _generate(self, prompt_ids, settings: SamplingSettings, streams) -> None:
        def emit(tokens: list[int]) -> bool:
            done = [stream for stream, token in zip(streams, tokens) if stream.open and not stream.take(token)]
            if all(stream in done or not stream.open for stream in streams):
                return False  # the last streams close below, once the model is free for the next request
            for stream in done:
                stream.close()
            return True

        error = None
        prompt = prompt_ids[0].tolist()
        # A seeded reply drafts from its prompt and itself only: with earlier replies as drafts, the same seed would
        # sample a different reply once the session had generated another.
        sources = self.replies.sources(prompt) if settings.seed is None else []
        try:
            if settings.seed is not None:
                self._settled.wait()
            self.decoder.decode(prompt_ids, settings, len(streams), settings.max_new_tokens, emit, eager_fallback=True,
                                draft_sources=sources)
        except BaseException as failure:  # reported through the replies, never lost in the thread
            error = failure
        finally:
            for stream in streams:
                stream.close(error)
                self.replies.remember(prompt, stream.sent)
