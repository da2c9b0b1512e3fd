"""Attack: import the reference from the working directory and call it. The candidate's directory holds only its
own file, and the reference never exists as a file it could reach."""
import reference  # noqa: F401
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, x):
        return reference.Model()(x)
