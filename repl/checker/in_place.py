"""Problems whose reference changes its inputs in place: the changed inputs are part of what a kernel must produce.

A reference such as ``x.relu_()`` returning None computes nothing a comparison of outputs can see; an honest in-place
kernel then looked like one that does nothing ("its Triton kernels did no work"). For a reference whose output holds
no tensor, the judge learns once which inputs it changes (problem_facts.py); every trial then compares, beside the
output, each of those inputs as the forward left it, on both sides: the reference's in the judge, the candidate's sent
back with its output. A reference that returns its result is compared on that alone (KernelBench's way): a kernel
computing it out of place is as right.
"""


def changed_inputs(before: list, after: list) -> list[int]:
    """The indices of the tensor inputs whose bits a forward changed (before: copies made ahead of it)."""
    import torch

    def bits(tensor):
        return tensor.detach().contiguous().reshape(-1).view(torch.uint8)

    return [index for index, (old, new) in enumerate(zip(before, after))
            if isinstance(old, torch.Tensor) and isinstance(new, torch.Tensor) and old.shape == new.shape
            and not torch.equal(bits(old), bits(new))]


def with_changed_inputs(output, inputs: list, indices: list[int]):
    """What a trial compares: the output alone, or beside the inputs the forward changed in place."""
    if not indices:
        return output
    return {"output": output, **{f"input {index} after forward": inputs[index] for index in indices}}
