"""The product of a quantized weight for any number of rows, on the fast path's kernels: what ``QuantizedLinear``
computes on the plain generate() path where its loader passes it in, and the fast path's own prompt products."""

import os

import torch

from repl.generation.quantization import QuantizedWeight
from repl.generation.quantized_model import dequantized_product


def quantized_linear(x: torch.Tensor, weight: QuantizedWeight) -> torch.Tensor:
    """x @ W.T for a quantized W: the Triton kernels on CUDA (and under Triton's interpreter, for the tests), else
    the weights dequantized and multiplied (the CPU)."""
    if x.is_cuda or os.environ.get("TRITON_INTERPRET") == "1":
        from repl.fastpath.kernels import quant_many_rows  # imports Triton: only where it runs

        return quant_many_rows.linear(x, weight)
    return dequantized_product(x, weight)
