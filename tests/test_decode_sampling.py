"""The decode step's sampling kernels (``decode_sampling``) against torch's ops: on the CPU through the Triton
interpreter (TRITON_INTERPRET=1, in a subprocess), on CUDA compiled; and, on CUDA, captured in a graph."""

import pytest
import torch
from interpreter import run_under_interpreter

# What every check script starts with (each runs in a process of its own, or exec'd on CUDA).
CHECK_PREAMBLE = """
import torch
from repl.fastpath import decode_sampling
from repl.fastpath.decoder import torch_sample
torch.manual_seed(0)
device = {device!r}
BLOCK = decode_sampling.BLOCK
"""

SOFTMAX_CHECK = CHECK_PREAMBLE + """
for rows, length in {shapes}:
    logits = torch.randn(rows, length, device=device) * 4
    logits[0, ::7] = float("-inf")  # masked tokens
    if rows > 1 and length > BLOCK:
        logits[1, :BLOCK] = float("-inf")  # a whole block masked: its partial sum is 0, not NaN
    temperature = torch.rand(rows, 1, device=device) * 1.3 + 0.2  # one per row
    for logits, temperature in [(logits, temperature), (logits, temperature[:1]),  # one temperature for all rows
                                (logits[:1].expand(rows, -1), temperature)]:  # start()'s expanded prefill logits
        probs = decode_sampling.softmax_rows(logits, temperature)
        scaled = logits / temperature
        assert probs.dtype == torch.float32 and probs.shape == (rows, length)
        # Against the exact softmax of the same scaled logits, then against torch's (whose CPU exp is itself 1e-5
        # off); atol only forgives denormals.
        torch.testing.assert_close(probs.double(), torch.softmax(scaled.double(), dim=-1), rtol=1e-5, atol=1e-30)
        torch.testing.assert_close(probs, torch.softmax(scaled, dim=-1), rtol=3e-5, atol=1e-30)
print("ok")
"""

ARGMAX_CHECK = CHECK_PREAMBLE + """
def tricky_rows(rows, length):
    values = torch.randn(rows, length, device=device)
    tie = [at for at in (length - 1, 2 * BLOCK + 5, BLOCK, BLOCK - 1, 3) if at < length]
    patterns = [
        lambda row: row.index_fill_(0, torch.tensor(tie, device=device), 9.0),  # equal maxima across blocks
        lambda row: row.fill_(float("-inf")),  # all -inf: the first
        lambda row: row[:-1].fill_(float("-inf")),  # all -inf but the last
        lambda row: row.index_fill_(0, torch.tensor(tie[::2], device=device), float("nan")),  # torch: the first NaN
        lambda row: row[length // 2:].fill_(float("inf")),  # equal infinities
        lambda row: None,  # plain
    ]
    for index in range(rows):
        patterns[index % len(patterns)](values[index])
    return values

for rows, length in {shapes}:
    values = tricky_rows(rows, length)
    for values in (values, values[:1].expand(rows, -1)):
        out = decode_sampling.argmax_rows(values)
        expected = values.argmax(dim=-1, keepdim=True)
        assert out.dtype == torch.int64 and torch.equal(out, expected), (rows, length, out.T, expected.T)
print("ok")
"""

DRAW_CHECK = CHECK_PREAMBLE + """
def torch_draw(probs, cumsum, noise, top_p):  # the tail of torch_sample, on the same inputs
    return (probs.masked_fill(cumsum - probs >= top_p, 0.0) / noise).argmax(dim=-1, keepdim=True)

def check(probs, noise, top_p):
    cumsum = probs.cumsum(dim=-1)
    out = decode_sampling.top_p_draw(probs, cumsum, noise, top_p)
    expected = torch_draw(probs, cumsum, noise, top_p)
    assert torch.equal(out, expected), (out.T, expected.T)
    return out[:, 0].tolist()

for rows, length in {shapes}:
    # Few distinct logits: runs of equal probabilities, so equal scores are common.
    probs = torch.softmax(torch.randint(0, 6, (rows, length), device=device).float(), -1).sort(-1, descending=True)[0]
    top_p = torch.tensor([2.0, 0.9, 0.5, 1e-4, 0.3, 0.999, 0.7, 0.1], device=device)[torch.arange(rows) % 8, None]
    check(probs, torch.empty_like(probs).exponential_(), top_p)
    check(probs, torch.ones_like(probs), top_p)  # scores = probs: ties at the top

# Equal scores in several blocks (powers of two divide exactly): the first wins. A noise of 0 where the mask zeroes
# the probability makes 0 / 0 = NaN, which torch's argmax takes (the first one).
length = 2 * BLOCK + 9
probs = torch.full((2, length), 2.0 ** -13, device=device)
noise = torch.ones(2, length, device=device)
noise[:, [BLOCK + 1, 2 * BLOCK + 3, 2 * BLOCK + 8]] = 0.5
noise[1, [BLOCK + 5, length - 1]] = 0.0
assert check(probs, noise, torch.tensor([[2.0], [2.0 ** -13 * 3]], device=device)) == [BLOCK + 1, BLOCK + 5]

# The top-p boundary, exactly: a token is kept while the mass before it is below top_p. Probabilities 0.5, 0.25,
# 0.25 (exclusive sums 0, 0.5, 0.75) and a noise under which the last kept token wins.
probs = torch.tensor([[0.5, 0.25, 0.25]], device=device).expand(6, -1).contiguous()
noise = torch.tensor([[1.0, 2.0 ** -8, 2.0 ** -10]], device=device).expand(6, -1).contiguous()
top_p = torch.tensor([[0.5], [0.6], [0.75], [0.8], [2.0], [1e-4]], device=device)
assert check(probs, noise, top_p) == [0, 1, 1, 2, 2, 0]
# The same at a block boundary: 2 ** -12 each, the cut between the blocks' last and first tokens, or one later.
probs = torch.full((2, BLOCK + 2), 2.0 ** -12, device=device)
noise = torch.ones_like(probs)
noise[:, BLOCK - 1], noise[:, BLOCK] = 2.0 ** -2, 2.0 ** -4
top_p = torch.tensor([[BLOCK * 2.0 ** -12], [BLOCK * 2.0 ** -12 + 2.0 ** -13]], device=device)
assert check(probs, noise, top_p) == [BLOCK - 1, BLOCK]
print("ok")
"""

SAMPLE_CHECK = CHECK_PREAMBLE + """
def separated_logits(rows, length):
    # Distinct logits 30 / length apart, the likeliest 50 raised by 20 (a nucleus of a few tokens holds most of the
    # mass). Both paths' probabilities (a few float32 roundings apart) then sort in one order, so each token meets
    # the same noise: random logits would leave pairs within rounding of each other, whose order could differ.
    ranks = torch.stack([torch.randperm(length, device=device) for _ in range(rows)]).float()
    return ranks * (30.0 / length) + (ranks >= length - 50) * 20.0

def nucleus_top_p(probs, mass):
    # A top_p reaching at least ``mass``, halfway between two steps of the sorted cumulative mass: the cut is far
    # from where float32 rounding of the sums could move it.
    ordered = probs.double().sort(descending=True)[0]
    assert (ordered[1:] < ordered[:-1] * (1 - 1e-4))[ordered[1:] > 1e-30].all()  # no near ties
    cumsum = ordered.cumsum(0)
    cut = int((cumsum < mass).sum())
    assert ordered[cut] / 2 > 1e-4
    return float((cumsum[cut - 1] if cut else 0.0) + ordered[cut] / 2)

for rows, length in {shapes}:
    logits = separated_logits(rows, length)
    temperature = torch.rand(rows, 1, device=device) * 1.2 + 0.3
    temperature[-1] = 1e-6  # start()'s floor: greedy
    probs = torch.softmax(logits / temperature, dim=-1)
    masses = [2.0, 1e-6, 0.3, 0.6, 0.9, 0.5, 0.75, 0.8]  # 2.0: keep all (top_p = 1), 1e-6: only the likeliest
    top_p = torch.tensor([[nucleus_top_p(probs[row], masses[row % 8]) if row % 8 > 1 else masses[row % 8]]
                          for row in range(rows)], device=device)
    greedy = logits.argmax(dim=-1)
    for seed in range(3):
        torch.manual_seed(seed)
        expected = torch_sample(logits, temperature, top_p)
        torch.manual_seed(seed)
        out = decode_sampling.sample(logits, temperature, top_p)
        assert out.shape == (rows, 1) and torch.equal(out, expected), (seed, out.T, expected.T)
        # A flip would need two scores p / E within rounding of each other: not with these seeds, and below 1e-5
        # per row for others.
        assert out[-1, 0] == greedy[-1]
        assert rows == 1 or out[1, 0] == greedy[1]
    # The batch's logits expanded from one row, as start() samples the prefill's.
    torch.manual_seed(7)
    expected = torch_sample(logits[:1].expand(rows, -1), temperature, top_p)
    torch.manual_seed(7)
    assert torch.equal(decode_sampling.sample(logits[:1].expand(rows, -1), temperature, top_p), expected)

# A speculative verify step: T rows of logits, one temperature and top_p for all.
logits = separated_logits(5, 300)
temperature, top_p = torch.full((1, 1), 0.8, device=device), torch.full((1, 1), 0.9, device=device)
torch.manual_seed(3)
expected = torch_sample(logits, temperature, top_p)
torch.manual_seed(3)
assert torch.equal(decode_sampling.sample(logits, temperature, top_p), expected)
print("ok")
"""

# Blocks that are not full, several blocks, one block, and Llama 3's vocabulary at batch 1.
SHAPES = [(8, 2 * 2048 + 77), (8, 7), (3, 2048), (1, 128256)]
CHECKS = {"softmax": SOFTMAX_CHECK, "argmax": ARGMAX_CHECK, "top_p_draw": DRAW_CHECK, "sample": SAMPLE_CHECK}


@pytest.mark.parametrize("check", CHECKS.values(), ids=CHECKS.keys())
def test_sampling_kernel_matches_torch_in_the_interpreter(check):
    run_under_interpreter(check.format(device="cpu", shapes=SHAPES))


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("check", CHECKS.values(), ids=CHECKS.keys())
def test_cuda_sampling_kernel_matches_torch(check):
    exec(check.format(device="cuda", shapes=SHAPES + [(64, 128256)]), {})


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_cuda_sample_and_greedy_run_the_kernels_and_replay_in_a_graph(monkeypatch):
    from repl.fastpath import decode_sampling
    from repl.fastpath.decoder import greedy, sample

    launched = []
    for name in ("sample", "argmax_rows"):
        kernel_path = getattr(decode_sampling, name)
        monkeypatch.setattr(decode_sampling, name, lambda *args, f=kernel_path, n=name: launched.append(n) or f(*args))
    logits = torch.randn(4, 128256, device="cuda") * 3
    temperature, top_p = torch.full((4, 1), 0.7, device="cuda"), torch.full((4, 1), 0.9, device="cuda")
    drawn, chosen = (torch.zeros((4, 1), dtype=torch.long, device="cuda") for _ in range(2))

    def step():
        drawn.copy_(sample(logits, temperature, top_p))
        chosen.copy_(greedy(logits))

    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # compile the kernels before the capture
        step()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        step()
    assert launched == ["sample", "argmax_rows"] * 2
    for seed in range(3):
        torch.manual_seed(seed)
        graph.replay()
        torch.manual_seed(seed)
        assert torch.equal(drawn, sample(logits, temperature, top_p))
        assert torch.equal(chosen, logits.argmax(dim=-1, keepdim=True))
