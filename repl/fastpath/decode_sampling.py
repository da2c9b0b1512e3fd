"""The decode step's sampling (``static_decoder.sample`` and ``greedy``) as Triton kernels, on CUDA tensors.

torch's softmax and argmax of one long row are single-block kernels: profiled on an H100 at Llama 3's
vocabulary (128256 float32 logits, one row), the softmax took 34 us and the argmax 28 us of a ~3.7 ms step, plus ~3 us
for each elementwise op around them. Here every row is split over programs of ``BLOCK`` entries (63 per row at
128256): a first kernel reduces each block (its maximum and sum of exponentials, or its first maximum and where it
is), a second combines the row's few partials. The sort, the cumulative sum, the noise and the final gather stay
torch's, so the draw uses the global RNG exactly as the torch path does: from the same probabilities the same
token, bit for bit. The probabilities themselves are torch's within float32 rounding (the sum is added in another
order, the exponential is Triton's), so against torch's path a seed gives the same tokens except where two
probabilities, or a top-p cut and the cumulative mass, lie within that rounding of each other.

Every launch has a grid fixed by the shapes and nothing waits on the host, so the step stays capturable as a CUDA
graph.
"""

import torch
import triton
import triton.language as tl

BLOCK = 2048  # entries of a row per program
INT32_MAX = tl.constexpr(2 ** 31 - 1)  # the index of a missing partial: never the first


@triton.jit
def _first_maximum(values, indices):
    """The first maximum of a block and its index, in torch.argmax's order (CPU and CUDA): NaN above every number,
    so the first NaN wins a row holding one; among equal maxima, the smallest index."""
    is_nan = values != values
    first_nan = tl.min(tl.where(is_nan, indices, INT32_MAX), 0)
    best = tl.max(tl.where(is_nan, float("-inf"), values), 0)
    first_best = tl.min(tl.where(values == best, indices, INT32_MAX), 0)
    has_nan = first_nan < INT32_MAX
    return tl.where(has_nan, float("nan"), best), tl.where(has_nan, first_nan, first_best)


@triton.jit
def _store_block_argmax(values, cols, value_ptr, index_ptr):
    # Lanes past the row's end must carry -inf and their own (larger) column, so that they never win.
    slot = tl.program_id(0) * tl.num_programs(1) + tl.program_id(1)
    value, index = _first_maximum(values, cols)
    tl.store(value_ptr + slot, value)
    tl.store(index_ptr + slot, index)


@triton.jit
def _argmax_partials(values_ptr, value_ptr, index_ptr, length, stride_row, stride_col, BLOCK: tl.constexpr):
    cols = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    values = tl.load(values_ptr + tl.program_id(0) * stride_row + cols * stride_col, mask=cols < length,
                     other=float("-inf")).to(tl.float32)
    _store_block_argmax(values, cols, value_ptr, index_ptr)


@triton.jit
def _top_p_draw_partials(probs_ptr, cumsum_ptr, noise_ptr, top_p_ptr, value_ptr, index_ptr, length, stride_top_p,
                         BLOCK: tl.constexpr):
    cols = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    inside = cols < length
    at = tl.program_id(0) * length + cols
    probs = tl.load(probs_ptr + at, mask=inside, other=0.0)
    cumsum = tl.load(cumsum_ptr + at, mask=inside, other=0.0)
    noise = tl.load(noise_ptr + at, mask=inside, other=1.0)
    top_p = tl.load(top_p_ptr + tl.program_id(0) * stride_top_p)
    # torch's expression to the bit: masked_fill(cumsum - p >= top_p, 0), then an IEEE division (Triton's "/" on
    # float32 is an approximate one).
    kept = tl.where(cumsum - probs >= top_p, 0.0, probs)
    scores = tl.where(inside, tl.math.div_rn(kept, noise), float("-inf"))
    _store_block_argmax(scores, cols, value_ptr, index_ptr)


@triton.jit
def _argmax_combine(value_ptr, index_ptr, out_ptr, BLOCKS: tl.constexpr, PARTS: tl.constexpr):
    parts = tl.arange(0, PARTS)
    inside = parts < BLOCKS
    at = tl.program_id(0) * BLOCKS + parts
    values = tl.load(value_ptr + at, mask=inside, other=float("-inf"))
    indices = tl.load(index_ptr + at, mask=inside, other=INT32_MAX)
    _, index = _first_maximum(values, indices)
    tl.store(out_ptr + tl.program_id(0), index.to(tl.int64))


@triton.jit
def _scaled_logits(logits_ptr, temperature_ptr, cols, length, stride_row, stride_col, stride_temperature):
    logits = tl.load(logits_ptr + tl.program_id(0) * stride_row + cols * stride_col, mask=cols < length,
                     other=float("-inf")).to(tl.float32)
    temperature = tl.load(temperature_ptr + tl.program_id(0) * stride_temperature)
    return tl.math.div_rn(logits, temperature)  # as torch's logits / temperature


@triton.jit
def _softmax_partials(logits_ptr, temperature_ptr, max_ptr, sum_ptr, length, stride_row, stride_col,
                      stride_temperature, BLOCK: tl.constexpr):
    cols = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    scaled = _scaled_logits(logits_ptr, temperature_ptr, cols, length, stride_row, stride_col, stride_temperature)
    best = tl.max(scaled, 0)
    shift = tl.where(best == float("-inf"), 0.0, best)  # a block of -inf sums to 0, not to exp(-inf + inf) = NaN
    slot = tl.program_id(0) * tl.num_programs(1) + tl.program_id(1)
    tl.store(max_ptr + slot, best)
    tl.store(sum_ptr + slot, tl.sum(tl.exp(scaled - shift), 0))


@triton.jit
def _softmax_probs(logits_ptr, temperature_ptr, max_ptr, sum_ptr, probs_ptr, length, stride_row, stride_col,
                   stride_temperature, BLOCK: tl.constexpr, BLOCKS: tl.constexpr, PARTS: tl.constexpr):
    parts = tl.arange(0, PARTS)
    at = tl.program_id(0) * BLOCKS + parts
    maxima = tl.load(max_ptr + at, mask=parts < BLOCKS, other=float("-inf"))
    best = tl.max(maxima, 0)
    total = tl.sum(tl.load(sum_ptr + at, mask=parts < BLOCKS, other=0.0) * tl.exp(maxima - best), 0)
    cols = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    scaled = _scaled_logits(logits_ptr, temperature_ptr, cols, length, stride_row, stride_col, stride_temperature)
    probs = tl.math.div_rn(tl.exp(scaled - best), total)  # torch's exp(x - max) / sum
    tl.store(probs_ptr + tl.program_id(0) * length + cols, probs, mask=cols < length)


def softmax_rows(logits, temperature):
    """torch.softmax(logits / temperature, dim=-1) in float32: logits (B, V), temperature a (B, 1) or (1, 1) device
    tensor."""
    rows, length = logits.shape
    blocks = triton.cdiv(length, BLOCK)
    temperature = temperature.expand(rows, 1)
    maxima, sums = (torch.empty((rows, blocks), dtype=torch.float32, device=logits.device) for _ in range(2))
    probs = torch.empty((rows, length), dtype=torch.float32, device=logits.device)
    inputs = (logits, temperature, maxima, sums)
    shape = (length, logits.stride(0), logits.stride(1), temperature.stride(0))
    _softmax_partials[(rows, blocks)](*inputs, *shape, BLOCK=BLOCK)
    _softmax_probs[(rows, blocks)](*inputs, probs, *shape, BLOCK=BLOCK, BLOCKS=blocks,
                                   PARTS=triton.next_power_of_2(blocks))
    return probs


def _combine_argmax(value, index):
    """The (B, 1) int64 positions of the rows' first maxima, from the blocks' (B, blocks) partials."""
    rows, blocks = value.shape
    out = torch.empty((rows, 1), dtype=torch.int64, device=value.device)
    _argmax_combine[(rows,)](value, index, out, BLOCKS=blocks, PARTS=triton.next_power_of_2(blocks))
    return out


def _partials(rows, length, device):
    blocks = triton.cdiv(length, BLOCK)
    return (torch.empty((rows, blocks), dtype=torch.float32, device=device),
            torch.empty((rows, blocks), dtype=torch.int32, device=device))


def argmax_rows(values):
    """values.argmax(dim=-1, keepdim=True) of (B, V) values: (B, 1) int64, the first maximum of each row."""
    rows, length = values.shape
    value, index = _partials(rows, length, values.device)
    _argmax_partials[value.shape](values, value, index, length, values.stride(0), values.stride(1), BLOCK=BLOCK)
    return _combine_argmax(value, index)


def top_p_draw(probs, cumsum, noise, top_p):
    """The sorted position each row draws: (probs.masked_fill(cumsum - probs >= top_p, 0) / noise).argmax(dim=-1,
    keepdim=True), as (B, 1) int64. probs, cumsum and noise (B, V) float32, contiguous; top_p (B, 1) or (1, 1)."""
    rows, length = probs.shape
    top_p = top_p.expand(rows, 1)
    value, index = _partials(rows, length, probs.device)
    _top_p_draw_partials[value.shape](probs, cumsum, noise, top_p, value, index, length, top_p.stride(0),
                                      BLOCK=BLOCK)
    return _combine_argmax(value, index)


def sample(logits, temperature, top_p):
    """``static_decoder.sample`` with the softmax and the top-p draw as kernels: the same steps, the same RNG use."""
    probs, order = softmax_rows(logits, temperature).sort(dim=-1, descending=True)
    cumsum = probs.cumsum(dim=-1)
    noise = torch.empty_like(probs).exponential_()
    return order.gather(-1, top_p_draw(probs, cumsum, noise, top_p))
