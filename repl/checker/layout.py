"""A tensor's layout (shape, strides, storage offset) kept wherever the checker copies, moves or changes an input.

KernelBench problems may pass views from ``get_inputs()`` (a transpose, a slice); a kernel that ignores strides must
see them, and an Inductor-style kernel that asserts them must find them. A strided tensor is rebuilt from the span
of its storage it can reach: the elements from the storage's start to the last one it addresses.
"""

import torch


def span_elements(tensor: torch.Tensor) -> int:
    """The storage elements from the start of the storage to the last element tensor addresses (0 when empty)."""
    if tensor.numel() == 0:
        return 0
    return tensor.storage_offset() + 1 + sum((size - 1) * stride for size, stride in zip(tensor.shape,
                                                                                         tensor.stride()))


def is_plain_layout(tensor: torch.Tensor) -> bool:
    """Contiguous from the storage's first element: a dense copy is the same tensor."""
    return tensor.storage_offset() == 0 and tensor.is_contiguous()


def storage_span(tensor: torch.Tensor) -> torch.Tensor:
    """A 1-D view of the storage from its first element to the last one tensor addresses."""
    return tensor.as_strided((span_elements(tensor),), (1,), 0)


def rebuilt_like(span: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    """span (a 1-D storage) seen with like's shape, strides and storage offset."""
    return span.as_strided(like.shape, like.stride(), like.storage_offset())


def map_keeping_layout(tensor: torch.Tensor, elementwise) -> torch.Tensor:
    """elementwise(t) applied to every storage element tensor reaches, in a new storage with tensor's layout.
    elementwise must not care about shape (a product, a sign flip, a mix of two draws)."""
    if tensor.numel() == 0 or is_plain_layout(tensor):
        return elementwise(tensor)
    return rebuilt_like(elementwise(storage_span(tensor)).contiguous(), tensor)


def moved_keeping_layout(tensor: torch.Tensor, device, *, clone: bool = False) -> torch.Tensor:
    """tensor on device (a copy where clone), with the same shape, strides and storage offset."""
    if tensor.numel() == 0 or is_plain_layout(tensor) or (tensor.device == torch.device(device) and not clone):
        return tensor.to(device, copy=clone)
    return rebuilt_like(storage_span(tensor).to(device, copy=True), tensor)
