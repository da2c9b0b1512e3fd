"""Asks for 6 GiB in forward. torch.empty only reserves address space, so without a memory limit this would quietly
succeed; under the worker's limit (set to 3 GiB by the test) it must fail as an error."""
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, x):
        hoard = torch.empty(6 * 1024**3, dtype=torch.uint8)
        return x + hoard[:1].float() * 0
