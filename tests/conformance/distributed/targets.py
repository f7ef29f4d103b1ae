"""Correct distributed targets for the harness tests: module-level factories, so that every
rank of a world can import them by name."""

from __future__ import annotations

import os
from datetime import timedelta

import torch

from trainspec.reference.collectives.torch_dist import TorchCollective
from trainspec.reference.strategies.ddp import DDPStrategy

__all__ = ["COLLECTIVE_TIMEOUT", "ddp_strategy", "torch_collective"]

COLLECTIVE_TIMEOUT = timedelta(seconds=60)
"""Default timeout of the collectives in these tests: a mistake fails in a minute, not 30."""


def torch_collective() -> TorchCollective:
    """The reference c10d collective."""
    return TorchCollective(timeout=COLLECTIVE_TIMEOUT)


def ddp_strategy() -> DDPStrategy:
    """The reference DDP strategy on this rank's world of CPU ranks (WORLD_SIZE from the
    harness)."""
    world_size = int(os.environ.get("WORLD_SIZE", "1"))
    return DDPStrategy(
        parallel_devices=[torch.device("cpu")] * world_size, timeout=COLLECTIVE_TIMEOUT
    )
