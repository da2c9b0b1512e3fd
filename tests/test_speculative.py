"""Speculative decoding with model-free drafts: the drafter's lookups, greedy tokens identical to generate() whatever
the drafts (accepted, rejected, partly accepted: the cache after a rejection), the sampled distribution exactly the
plain sampler's (nucleus, frequencies, the acceptance probability p(draft) itself), seeded replies reproducible, and
the window attention kernel against torch. CPU, eager; the window attention also under Triton's interpreter."""

import pytest
import torch

from repl.fastpath import speculative
from repl.fastpath.drafting import SEPARATOR, Drafter, DraftPlanner, NgramIndex, SessionReplies, joined
from repl.generation.local import encode_prompt
from repl.generation.model_loading import load_model
from repl.fastpath.speculative import Speculation
from repl.fastpath.decoder import FastDecoder
from repl.core.prompt import build_prompt
from repl.core.settings import SamplingSettings
from test_fast_decode import generate_ids, warped_probabilities
from tiny_models import RELU_MODULE


# -- the drafter --------------------------------------------------------------------------------------------------

def test_the_suffix_is_never_its_own_match_and_the_latest_occurrence_wins():
    index = NgramIndex([1, 2, 3, 9, 1, 2, 3, 8, 1, 2], min_n=2, max_n=3)
    assert index.continuation((1, 2), 5) == [3, 8, 1, 2]  # the latest earlier (1, 2), not the suffix itself
    assert index.continuation((2, 3), 2) == [8, 1]
    assert index.continuation((7, 7), 3) == []
    assert NgramIndex([5, 6], min_n=2, max_n=2).continuation((5, 6), 3) == []  # only the suffix: nothing followed it


def test_the_longest_match_is_drafted_from_the_reply_before_the_siblings():
    drafter = Drafter(prompt=[1, 2, 3, 4, 5, 1, 9, 3, 4, 6], siblings=[[7, 3, 4, 5, 40, 41]], min_n=2, max_n=3)
    drafter.add([9, 3, 4])  # suffix (9, 3, 4) occurred in the prompt, followed by 6
    assert drafter.propose(3)[:1] == [6]
    drafter.add([8, 3, 4, 5])  # (3, 4, 5): prompt -> 1 9 3 ...; the reply's own later (4, 5)? no: longest first
    assert drafter.propose(2) == [1, 9]
    lone = Drafter(prompt=[0, 0], siblings=[[7, 3, 4, 5, 40, 41]], min_n=2, max_n=3)
    lone.add([3, 4, 5])
    assert lone.propose(4) == [40, 41]  # only the sibling holds it
    assert lone.propose(0) == []


def test_the_planner_pauses_after_failed_drafts_and_resumes_after_a_good_one():
    planner = DraftPlanner(Drafter(prompt=[1, 2, 3, 1, 2]), max_pause=4)
    assert planner.propose(4) == [3, 1, 2]
    planner.record([3, 1, 2], [5])  # rejected at once: pause 1 step
    assert planner.propose(4) == [] and planner.propose(4) == [3, 1, 2]
    planner.record([3, 1, 2], [6])  # again: pause 2
    assert [planner.propose(4) for _ in range(3)] == [[], [], [3, 1, 2]]
    planner.record([3, 1, 2], [3, 7])  # one accepted: no pause
    assert planner.propose(4) == [3, 1, 2]


def test_sources_come_in_order_and_no_draft_runs_from_one_reply_into_the_next():
    drafter = Drafter(prompt=[0, 0], siblings=[[3, 4, 50, 51]], others=[[3, 4, 60], [9, 3, 4, 61, 62]], min_n=2)
    drafter.add([3, 4])
    assert drafter.propose(4) == [50, 51]  # the sibling before the other prompts' replies
    other = Drafter(prompt=[0, 0], others=[[1, 3, 4, 60], [9, 3, 4, 61, 62]], min_n=2)
    other.add([3, 4])
    assert other.propose(4) == [60]  # the newest reply first, and its end ends the draft


def test_session_replies_are_kept_per_prompt_newest_first_and_bounded():
    replies = SessionReplies(prompts=2, per_prompt=2)
    for reply in ([1], [2], [3]):
        replies.remember([9], reply)
    assert replies.siblings([9]) == [[3], [2]]
    replies.remember([8], [4])
    replies.remember([7], [5])  # the third prompt drops the least recently used ([9])
    assert replies.siblings([9]) == [] and replies.siblings([8]) == [[4]] and replies.siblings([7]) == [[5]]
    replies.remember([7], [6])
    replies.remember([7], [])
    assert replies.siblings([7]) == [[6], [5]] and replies.others([7]) == [[4]]
    assert replies.others([1]) == [[6], [5], [4]]
    own, everything = replies.sources([7])
    assert own.tokens == [5, SEPARATOR, 6, SEPARATOR] and everything.tokens[-4:] == [5, SEPARATOR, 6, SEPARATOR]
    bounded = SessionReplies(budget=10)
    for i in range(6):
        bounded.remember([i], [100 + i] * 3)
    kept = bounded.sources([9])[0].tokens
    assert len(kept) <= 10 and kept[-4:] == [105, 105, 105, SEPARATOR]  # the newest replies survive the budget


def test_the_seed_is_searched_last_and_never_evicted_and_no_draft_spans_two_seed_replies():
    seed = [[1, 3, 4, 70], [9, 3, 4, 80, 81], [5, 6, 90]]
    replies = SessionReplies(budget=10, seed=seed)

    def draft(suffix, prompt=(8,)):
        drafter = Drafter(prompt=[0, 0], sources=replies.sources(list(prompt)), min_n=2)
        drafter.add(suffix)
        return drafter.propose(4)

    assert draft([3, 4]) == [70]  # the first seed reply is the newest: its end ends the draft
    assert draft([9, 3]) == [4, 80, 81] and draft([81, 1]) == [] and draft([90, 9]) == []  # nothing across replies
    replies.remember([7], [2, 3, 4, 60])
    assert draft([3, 4]) == [60]  # the session's own reply wins over the seed (at equal length)
    assert draft([3, 4], prompt=(7,)) == [60]
    for i in range(6):  # far past the budget: the session's index is rebuilt, the seed's is kept as it was
        replies.remember([i], [100 + i] * 4)
    assert replies.sources([8])[-1].tokens == joined(seed).tokens and draft([9, 3]) == [4, 80, 81]
    assert len(SessionReplies().sources([8])) == len(SessionReplies(seed=[]).sources([8])) == 1  # no seed, no index


def test_the_backend_drafts_later_replies_from_earlier_ones_but_a_seeded_reply_from_itself_only(tiny, monkeypatch,
                                                                                                tmp_path):
    from repl.fastpath import drafting_seed
    from repl.fastpath.backend import FastLocalBackend

    seed_file = tmp_path / "drafting_seed.txt"
    seed_file.write_text(drafting_seed.format_seed(["def seed(x):\n    return x"]))
    monkeypatch.setattr(drafting_seed, "SEED_FILE", seed_file)
    seed = tiny.tokenizer.encode("def seed(x):\n    return x", add_special_tokens=False) + [SEPARATOR]
    backend = FastLocalBackend(tiny, compile=False, max_seq_len=1024, batch_sizes=(1,))
    assert backend.wait_until_ready(60) and backend.decoder.speculation is not None
    assert "drafting" in backend.warm_up_seconds
    seen = []
    generate = Speculation.generate
    monkeypatch.setattr(Speculation, "generate",
                        lambda self, *args: seen.append([list(index.tokens) for index in args[-1]])
                        or generate(self, *args))
    first = backend.stream("def relu(x):", SamplingSettings(temperature=0, max_new_tokens=12))
    text = "".join(first)
    again = backend.stream("def relu(x):", SamplingSettings(temperature=0, max_new_tokens=12))
    assert "".join(again) == text  # greedy: the same tokens, drafted from the first reply this time
    "".join(backend.stream("def add(x):", SamplingSettings(temperature=0, max_new_tokens=5)))
    "".join(backend.stream("def relu(x):", SamplingSettings(max_new_tokens=5, seed=1)))
    assert seen[0] == [[], seed] and seen[1] == [first.sent + [SEPARATOR]] * 2 + [seed]
    assert seen[2] == [first.sent + [SEPARATOR] + again.sent + [SEPARATOR], seed] and seen[3] == []


# -- greedy: generate()'s tokens whatever the drafts ------------------------------------------------------------------

@pytest.fixture(scope="module")
def tiny(tiny_model_dir):
    return load_model(str(tiny_model_dir), device="cpu")


def speculating_decoder(model, max_seq_len=1024):
    decoder = FastDecoder(model, max_seq_len)
    decoder.prepare(1, "eager")
    decoder.speculation = Speculation(decoder)
    decoder.speculation.prepare("eager")
    return decoder


def decode_ids(decoder, prompt_ids, settings, siblings=()):
    tokens = []
    assert decoder.decode(prompt_ids, settings, 1, settings.max_new_tokens,
                          lambda step: tokens.append(step[0]) or True, draft_sources=[joined(list(siblings))])
    return tokens


@pytest.mark.parametrize("prompt", [build_prompt(RELU_MODULE), "def relu(x):"], ids=["kernel-prompt", "short"])
def test_greedy_tokens_are_generates_with_right_wrong_and_half_right_drafts(tiny, prompt):
    decoder = speculating_decoder(tiny.model)
    prompt_ids = encode_prompt(tiny.tokenizer, prompt)
    expected = generate_ids(tiny.model, prompt_ids, 40)
    greedy = SamplingSettings(temperature=0, max_new_tokens=40)
    # Right: the reply itself as a sibling, so nearly every window is accepted whole.
    assert decode_ids(decoder, prompt_ids, greedy, [expected]) == expected
    right = decoder.last_speculation
    assert right["verify_steps"] >= 3 and right["accepted"] == right["drafted"]
    assert right["plain_steps"] + right["verify_steps"] < 15
    # Half right: the sibling goes wrong every 5th token, so windows are cut short and the cache keeps the keys and
    # values of rejected drafts past the accepted prefix, which the next window must overwrite.
    corrupted = [token if i % 5 != 3 else (token + 1) % 2000 for i, token in enumerate(expected)]
    assert decode_ids(decoder, prompt_ids, greedy, [corrupted]) == expected
    half = decoder.last_speculation
    assert 0 < half["accepted"] < half["drafted"]
    # Wrong: drafts that are never right.
    wrong = [(token + 7) % 2000 for token in expected]
    assert decode_ids(decoder, prompt_ids, greedy, [wrong]) == expected
    # Only the prompt and the reply so far.
    assert decode_ids(decoder, prompt_ids, greedy) == expected


def test_a_reply_stops_at_max_new_tokens_and_at_what_emit_refuses_inside_a_window(tiny):
    decoder = speculating_decoder(tiny.model)
    prompt_ids = encode_prompt(tiny.tokenizer, "def relu(x):")
    expected = generate_ids(tiny.model, prompt_ids, 30)
    for limit in (1, 2, 9, 30):
        assert decode_ids(decoder, prompt_ids, SamplingSettings(temperature=0, max_new_tokens=limit),
                          [expected]) == expected[:limit]
    taken = []
    decoder.decode(prompt_ids, SamplingSettings(temperature=0, max_new_tokens=30), 1, 30,
                   lambda step: taken.append(step[0]) or len(taken) < 6, draft_sources=[joined([expected])])
    assert taken == expected[:6]


def test_near_the_end_of_the_cache_plain_steps_finish_the_reply(tiny):
    decoder = speculating_decoder(tiny.model, max_seq_len=64)
    prompt_ids = encode_prompt(tiny.tokenizer, "def relu(x):")
    new = 64 - prompt_ids.shape[1]
    expected = generate_ids(tiny.model, prompt_ids, new)
    assert decode_ids(decoder, prompt_ids, SamplingSettings(temperature=0, max_new_tokens=new), [expected]) == expected


# -- sampling: exactly the plain sampler's distribution ---------------------------------------------------------

class FixedDraft:
    """A drafter that always proposes the same tokens (a test double for ``drafting.Drafter``)."""
    tokens: list[int] = []

    def __init__(self, *sources, **named_sources):
        pass

    def add(self, tokens):
        pass

    def propose(self, limit):
        return self.tokens[:limit]


def test_sampled_tokens_follow_the_plain_samplers_distribution_and_accept_a_draft_with_probability_p(
        tiny_model_dir, monkeypatch):
    """200 seeded replies of 3 tokens, the 2nd and 3rd chosen by verify steps of a fixed 2-token draft (a, b), on the
    tiny model with peaked logits: every token inside generate()'s nucleus given the tokens before it; the 2nd and
    3rd tokens' frequencies against the sums of those conditional distributions; and the draft taken exactly as often
    as the target's probability of it: count(2nd == a) against sum p(a | prefix), count(3rd == b | 2nd == a) against
    sum p(b | prefix, a) (each within 4.5 standard deviations)."""
    loaded = load_model(str(tiny_model_dir), device="cpu", dtype="fp32")
    loaded.model.lm_head.weight.data *= 20  # a nucleus of a few tokens (the random model's logits are flat)
    model, temperature, top_p = loaded.model, 0.7, 0.8
    decoder = speculating_decoder(model, max_seq_len=256)
    prompt_ids = encode_prompt(loaded.tokenizer, "def relu(x):")
    probabilities = {}

    def p(prefix):
        if prefix not in probabilities:
            ids = torch.cat([prompt_ids, torch.tensor([list(prefix)], dtype=torch.long)], dim=1)
            with torch.no_grad():
                probabilities[prefix] = warped_probabilities(model(ids).logits[0, -1], temperature, top_p)
        return probabilities[prefix]

    first_likely = int(p(()).argmax())
    a = int(p((first_likely,)).argmax())
    b = int(p((first_likely, a)).argsort(descending=True)[1])  # the second most likely: rejected often
    FixedDraft.tokens = [a, b]
    monkeypatch.setattr(speculative, "Drafter", FixedDraft)
    monkeypatch.setattr(speculative, "DraftPlanner", lambda drafter: DraftPlanner(drafter, max_pause=0))
    replies, verify_steps = [], 0
    for seed in range(200):
        settings = SamplingSettings(temperature=temperature, top_p=top_p, max_new_tokens=3, seed=seed)
        replies.append(tuple(decode_ids(decoder, prompt_ids, settings)))
        verify_steps += decoder.last_speculation["verify_steps"]
    assert verify_steps >= 200
    assert all(p(reply[:i])[reply[i]] > 0 for reply in replies for i in range(3))  # inside every nucleus

    def within(observed, expected, n):
        spread = (expected * (1 - expected / n)).sqrt()
        return ((observed - expected).abs() <= 4.5 * spread + 1e-9).all()

    vocab = p(()).numel()
    for i in (1, 2):
        expected = sum(p(reply[:i]) for reply in replies)
        observed = torch.bincount(torch.tensor([reply[i] for reply in replies]), minlength=vocab).float()
        likely = expected >= 10
        assert likely.sum() >= 2 and within(observed[likely], expected[likely], len(replies)), (i, observed[likely],
                                                                                                expected[likely])
    took_a = [reply for reply in replies if reply[1] == a]
    assert 20 <= len(took_a) <= 180  # the draft is accepted sometimes and rejected sometimes
    assert within(torch.tensor(float(len(took_a))), sum(p(reply[:1])[a] for reply in replies), len(replies))
    took_b = sum(reply[2] == b for reply in took_a)
    assert within(torch.tensor(float(took_b)), sum(p(reply[:2])[b] for reply in took_a), len(took_a))


def test_the_acceptance_rule_is_speculative_samplings_for_a_deterministic_draft():
    """One window's decision 2000 times on fixed logits (the same distribution p after every prefix): the first draft
    token accepted with probability p(d1); after a rejection the token follows the residual (p without d1,
    renormalised); after an acceptance, d2 with probability p(d2); the window's rows draw independent noise (a token
    chosen after two prefixes repeats at the rate sum p^2, not always)."""
    torch.manual_seed(0)
    logits = torch.tensor([2.0, 1.5, 1.0, 0.2, -0.5, -3.0]).expand(3, -1)
    temperature, top_p = torch.full((1, 1), 0.7), torch.full((1, 1), 0.8)
    p = warped_probabilities(logits[0], 0.7, 0.8)
    d1, d2 = 1, 0
    draft = torch.tensor([d1, d2])
    runs = 2000
    outcomes = [speculative.choose_and_accept(logits, draft, torch.tensor(2), False, temperature, top_p)
                for _ in range(runs)]
    counts = torch.tensor([int(count) for count, _ in outcomes])
    chosen = torch.stack([choice for _, choice in outcomes])
    accepted_1 = counts >= 2
    assert abs(accepted_1.float().mean() - p[d1]) < 4.5 * (p[d1] * (1 - p[d1]) / runs).sqrt()
    residual = p.clone()
    residual[d1] = 0
    residual /= residual.sum()
    rejected = chosen[~accepted_1, 0]
    observed = torch.bincount(rejected, minlength=6).float() / len(rejected)
    assert observed[d1] == 0 and torch.allclose(observed, residual, atol=4.5 * (0.25 / len(rejected)) ** 0.5)
    accepted_2 = (counts[accepted_1] == 3).float().mean()
    assert abs(accepted_2 - p[d2]) < 4.5 * (p[d2] * (1 - p[d2]) / accepted_1.sum()).sqrt()
    same = (chosen[:, 0] == chosen[:, 1]).float().mean()
    assert abs(same - (p ** 2).sum()) < 4.5 * ((p ** 2).sum() / runs).sqrt()


def test_a_seeded_reply_is_reproducible_with_drafts(tiny):
    decoder = speculating_decoder(tiny.model)
    prompt_ids = encode_prompt(tiny.tokenizer, build_prompt(RELU_MODULE))
    settings = SamplingSettings(max_new_tokens=40, seed=11)
    first = decode_ids(decoder, prompt_ids, settings)
    assert decode_ids(decoder, prompt_ids, settings) == first
    assert decoder.last_speculation["plain_steps"] > 0


# -- the window attention kernel ------------------------------------------------------------------------------------

WINDOW_ATTENTION_CHECK = """
import torch
from repl.fastpath.kernels.decode_attention import decode_attention
from repl.fastpath.llama_math import attend_cache
torch.manual_seed(0)
device, dtype = {device!r}, {dtype}
for batch, heads, kv_heads, dim, length, position, window, attended in {cases}:
    q = torch.randn(batch, heads, window, dim, device=device, dtype=dtype)
    k_cache, v_cache = (torch.randn(batch, kv_heads, length, dim, device=device, dtype=dtype) for _ in range(2))
    at = torch.tensor([position], device=device)
    out = decode_attention(q, k_cache, v_cache, at, attended).double()
    ref = attend_cache(q.double(), k_cache.double(), v_cache.double(), at, attended)
    error = ((out - ref).norm() / ref.norm()).item()
    assert error < {tolerance}, (batch, heads, position, window, error)
    # each query sees its own position and no further: query i against the one-query form at position + i
    for i in range(window):
        one = attend_cache(q[:, :, i:i + 1].double(), k_cache.double(), v_cache.double(), at + i, attended)
        assert torch.allclose(ref[:, :, i:i + 1], one)
print("ok")
"""


# (batch, heads, kv heads, head dim, cache, position, window, attended): windows that start at 0, end at the cache's
# end, cross a slice boundary (slices of 64 positions), and groups of 2 and 1 query heads; the GPU adds the 8B's
# shapes.
SMALL_CASES = [(2, 4, 2, 16, 256, 0, 3, 256), (1, 4, 2, 16, 256, 250, 6, 256), (1, 4, 4, 16, 256, 62, 5, 256)]


def test_window_attention_kernel_matches_torch_in_the_interpreter():
    from interpreter import run_under_interpreter

    run_under_interpreter(WINDOW_ATTENTION_CHECK.format(device="cpu", dtype="torch.float32", tolerance=1e-5,
                                                        cases=SMALL_CASES))


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("dtype,tolerance", [("torch.float32", 1e-5), ("torch.bfloat16", 1e-2)])
def test_cuda_window_attention_matches_torch(dtype, tolerance):
    exec(WINDOW_ATTENTION_CHECK.format(device="cuda", dtype=dtype, tolerance=tolerance,
                                       cases=[(1, 32, 8, 128, 1024, 300, 8, 512), *SMALL_CASES]), {})


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_cuda_graph_verify_steps_give_the_greedy_tokens_of_generate(tiny_model_dir):
    loaded = load_model(str(tiny_model_dir), device="cuda", dtype="fp32")
    decoder = FastDecoder(loaded.model, 1024)
    decoder.prepare(1, "graphs")
    decoder.speculation = Speculation(decoder)
    decoder.speculation.prepare("graphs")
    prompt_ids = encode_prompt(loaded.tokenizer, build_prompt(RELU_MODULE)).cuda()
    expected = generate_ids(loaded.model, prompt_ids, 40)
    corrupted = [token if i % 5 != 3 else (token + 1) % 2000 for i, token in enumerate(expected)]
    greedy = SamplingSettings(temperature=0, max_new_tokens=40)
    for siblings in ([expected], [corrupted], []):
        assert decode_ids(decoder, prompt_ids, greedy, siblings) == expected
    assert 0 < decoder.last_speculation["plain_steps"]


def test_drive_emits_the_reply_once_keeps_plain_steps_ahead_and_checks_a_drafts_first_token_for_free():
    from repl.fastpath.drafting import drive
    from tool_scripts import load_tool

    TeacherForcedSteps = load_tool("teacher_forcing").TeacherForcedSteps

    prompt = [5, 1, 2, 3, 4, 9, 9]
    reply = [1, 2, 3, 4, 8, 1, 2, 3, 4, 8, 6, 1, 2, 7, 7]
    for limit in (1, 2, 5, len(reply)):
        emitted, device = [], TeacherForcedSteps(reply)
        stats = drive(DraftPlanner(Drafter(prompt, min_n=2, max_n=3)), reply[0], limit,
                      lambda token: emitted.append(token) or True, device)
        assert emitted == reply[:limit] and device.at <= limit  # no step beyond what the limit needs
    assert stats == {"plain_steps": 9, "verify_steps": 2, "drafted": 9, "accepted": 3, "free_hits": 2}  # traced by hand
    assert stats["plain_steps"] + stats["verify_steps"] < len(reply) - 1
    stopped = []
    drive(DraftPlanner(Drafter(prompt)), reply[0], len(reply), lambda token: stopped.append(token) or len(stopped) < 7,
          TeacherForcedSteps(reply))
    assert stopped == reply[:7]


def test_bench_measures_drafting_with_real_weights_and_projects_it_with_random_ones(trained_model_dir, tiny,
                                                                                    monkeypatch, tmp_path):
    """Real weights (the trained tiny model, which writes one prepared reply): the second reply to the benchmark's
    module is drafted from the first and accepts most drafts; random weights: the projection from the corpus's
    step counts and the costs measured here, never a measured figure."""
    from types import SimpleNamespace

    from repl.bench.drafting import CORPUS_STEPS, measure_drafting, project
    from repl.fastpath import drafting_seed
    from repl.fastpath.backend import FastLocalBackend
    from repl.generation.random_weights import synthetic_prompt_ids

    import repl.bench.drafting

    monkeypatch.setattr(drafting_seed, "SEED_FILE", tmp_path / "absent.txt")  # the first reply has no seed here
    repl.bench.drafting.REPEATS, repl.bench.drafting.WARM = 2, 1  # timings are not checked here
    options = SimpleNamespace(arch=None, new_tokens=8, temperature=1.0, top_p=0.97, runs=1)
    sampling = SamplingSettings(max_new_tokens=8, seed=0)
    for loaded, arch in ((load_model(str(trained_model_dir), device="cpu"), None), (tiny, "tiny")):
        fast = FastLocalBackend(loaded, compile=False, max_seq_len=2048, batch_sizes=(1,), drafting=False)
        assert fast.wait_until_ready(60) and fast.decoder.speculation is None
        prompt_ids = synthetic_prompt_ids(loaded.model.config, 40)
        run_options = SimpleNamespace(**{**vars(options), "arch": arch})
        result = measure_drafting(fast, loaded, prompt_ids, sampling, run_options, lambda message: None,
                                  plain_tokens_per_s=100.0)
        assert result["verify_step_ms"] > 0 and result["all_rejected_tokens_per_s"] > 0
        if arch is None:
            first, second = result["measured"]["first reply"], result["measured"]["second reply"]
            assert "projected_tokens_per_s" not in result and first["tokens"] == second["tokens"] > 20
            assert second["steps"]["accepted"] > first["tokens"] // 2
        else:
            assert "measured" not in result and set(result["projected_tokens_per_s"]) == set(CORPUS_STEPS)
    steps = {"plain_steps": 10, "verify_steps": 5, "tokens": 31, "replies": 1}
    assert project(steps, 5.0, 6.0, 1.0) == pytest.approx(30 / 0.085)


def test_bench_drafts_its_first_reply_from_the_seed(trained_model_dir, monkeypatch, tmp_path):
    """As a session's first reply does: with the trained tiny model's own reply as the seed, most of the benchmark's
    first reply comes from accepted drafts."""
    from types import SimpleNamespace

    from repl.bench.drafting import _measure_real
    from repl.fastpath import drafting_seed
    from repl.fastpath.backend import FastLocalBackend
    from tiny_models import PREPARED_REPLY

    seed_file = tmp_path / "drafting_seed.txt"
    seed_file.write_text(drafting_seed.format_seed([PREPARED_REPLY]))
    monkeypatch.setattr(drafting_seed, "SEED_FILE", seed_file)
    loaded = load_model(str(trained_model_dir), device="cpu")
    fast = FastLocalBackend(loaded, compile=False, max_seq_len=2048, batch_sizes=(1,))
    assert fast.wait_until_ready(60) and fast.decoder.speculation is not None
    measured = _measure_real(fast, loaded, SimpleNamespace(temperature=1.0, top_p=0.97), lambda message: None)
    first = measured["first reply"]
    assert first["tokens"] > 20 and first["steps"]["accepted"] > first["tokens"] // 2


def test_repeatable_steps_feed_the_prompts_end_again_on_every_call(tiny):
    """The bench times a plain and a verify step by calling them again and again: each call runs at the prompt's end
    (one token, or a full window of which 1 to 8 are accepted), so the position never walks past it."""
    from repl.fastpath.backend import FastLocalBackend
    from repl.generation.random_weights import synthetic_prompt_ids

    fast = FastLocalBackend(tiny, compile=False, max_seq_len=1024, batch_sizes=(1,), drafting=False)
    assert fast.wait_until_ready(60)
    decoder = fast.decoder
    speculation = Speculation(decoder)
    speculation.prepare(decoder.batches[1].tier)
    prompt_ids = synthetic_prompt_ids(tiny.model.config, 30)
    batch = decoder.batches[1]
    with torch.no_grad():
        plain, verify, on_cuda = speculation.repeatable_steps(prompt_ids, SamplingSettings(temperature=0))
        assert on_cuda is False
        positions = []
        for _ in range(3):
            plain()
            positions.append(int(batch.position))
        assert positions == [31, 31, 31]
        for _ in range(3):
            verify()
            count = int(speculation.result[0])
            assert 1 <= count <= speculation.windows[-1] and int(batch.position) == 30 + count


def test_verify_steps_decode_a_quantized_model_as_its_plain_steps_do(tiny_model_dir):
    """int8 weights (issue 27; the tiny model is too narrow for int4's groups): the verify step's products, logits
    included, take the quantized weights too; its greedy tokens are the plain fast path's (CPU: both dequantize)."""
    loaded = load_model(str(tiny_model_dir), device="cpu", quantize="int8")
    assert type(loaded.model.lm_head).__name__ == "QuantizedLinear"
    plain = FastDecoder(loaded.model, 1024)
    plain.prepare(1, "eager")
    prompt_ids = encode_prompt(loaded.tokenizer, "def relu(x):")
    greedy = SamplingSettings(temperature=0, max_new_tokens=24)
    expected = decode_ids(plain, prompt_ids, greedy)
    decoder = speculating_decoder(loaded.model)
    assert decode_ids(decoder, prompt_ids, greedy, [expected]) == expected
    assert decoder.last_speculation["accepted"] > 10
