"""Shared pieces of the Lightning bridge tests: a tiny model, fixed batches, a Fabric loop."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch

if TYPE_CHECKING:
    from collections.abc import Callable

    from lightning.fabric import Fabric

FLAGS = ("32-true", "64-true", "16-true", "bf16-true", "16-mixed", "bf16-mixed")
"""Every trainspec flag; all six run on CPU through the bridge (Lightning's own Fabric turns
``16-mixed`` on CPU into ``bf16-mixed`` with a warning)."""

LIGHTNING_WARNINGS = (
    "ignore:.*isinstance\\(treespec, LeafSpec\\).*",
    "ignore:.*Checkpoint directory .* exists and is not empty.*",
    "ignore:.*does not have many workers.*",
    "ignore:.*ckpt_path.*callbacks used to create the checkpoint.*",
    "ignore:.*weights_only.*",
    "ignore:.*The number of training batches.*",
)
"""Lightning's own advisory warnings (pytest runs with warnings as errors)."""


def make_model(seed: int = 0) -> torch.nn.Module:
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 2))


def batches(count: int, size: int = 8, seed: int = 1) -> list[torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    return [torch.randn(size, 4, generator=generator) for _ in range(count)]


def fabric_steps(fabric: Fabric, model: Any, optimizer: Any, data: list[torch.Tensor]) -> None:
    """One optimizer step per batch: loss = mean squared output (computed in float32)."""
    for batch in data:
        loss = model(batch).float().pow(2).mean()
        fabric.backward(loss)
        optimizer.step()
        optimizer.zero_grad()


def weights(module: torch.nn.Module) -> dict[str, torch.Tensor]:
    inner = getattr(module, "module", module)
    return {k: v.detach().clone() for k, v in inner.state_dict().items()}


def assert_bit_equal(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> None:
    assert a.keys() == b.keys()
    for key in a:
        assert a[key].dtype == b[key].dtype, key
        assert torch.isfinite(a[key]).all(), key
        assert torch.equal(a[key], b[key]), f"{key} differs after resume"


def resume_matches(
    make_fabric: Callable[[], Fabric], path: str, steps: int = 4, split: int = 2
) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor], dict[str, torch.Tensor]]:
    """(initial, uninterrupted, resumed) weights: ``steps`` steps in one run, and ``split``
    steps, save, a fresh Fabric and differently initialised model load, the rest."""
    data = batches(steps)

    fabric = make_fabric()
    model, optimizer = fabric.setup(*_model_and_optimizer(fabric, seed=0))
    initial = weights(model)
    fabric_steps(fabric, model, optimizer, data)
    uninterrupted = weights(model)

    fabric = make_fabric()
    model, optimizer = fabric.setup(*_model_and_optimizer(fabric, seed=0))
    fabric_steps(fabric, model, optimizer, data[:split])
    fabric.save(
        path, {"model": model, "optimizer": optimizer, "precision": fabric.strategy.precision}
    )
    fabric.strategy.checkpoint_io.teardown()  # an async IO finishes its write

    fabric = make_fabric()
    model, optimizer = fabric.setup(*_model_and_optimizer(fabric, seed=7))
    state = {"model": model, "optimizer": optimizer, "precision": fabric.strategy.precision}
    fabric.load(path, state)
    fabric_steps(fabric, model, optimizer, data[split:])
    return initial, uninterrupted, weights(model)


def _model_and_optimizer(
    fabric: Fabric, seed: int
) -> tuple[torch.nn.Module, torch.optim.Optimizer]:
    model = make_model(seed)
    return model, torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
