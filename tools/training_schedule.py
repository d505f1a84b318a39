"""The optimiser and learning-rate schedule the reference checkpoints are trained with.

Shared by `train_reference_model.py` (from scratch) and `train_long_context.py` (continued
training): AdamW (betas 0.9/0.95, weight decay 0.01 on matrices only) and a linear warm-up into
a cosine decay to a tenth of the peak rate.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch

__all__ = ["adamw", "warmup_cosine"]


def adamw(model: torch.nn.Module, lr: float) -> torch.optim.AdamW:
    import torch

    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    return torch.optim.AdamW(
        [{"params": decay, "weight_decay": 0.01}, {"params": no_decay, "weight_decay": 0.0}],
        lr=lr,
        betas=(0.9, 0.95),
        eps=1e-8,
    )


def warmup_cosine(lr: float, warmup: int, steps: int) -> Callable[[int], float]:
    """The rate at each step: linear warm-up, then cosine from ``lr`` down to ``lr / 10``."""

    def at(step: int) -> float:
        if step < warmup:
            return lr * (step + 1) / warmup
        frac = (step - warmup) / max(1, steps - warmup)
        return lr * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * frac)))

    return at
