"""End-to-end training through the Runner on CPU: parity with a hand-written PyTorch loop
for every precision flag, and exact resumption from a checkpoint.

Parity tolerances (relative, on the final loss and every parameter after 50 SGD steps):
``32-true`` and ``64-true`` must be bit-identical. The other flags compute the same operations
in the same order as the hand-written loop, so they are bit-identical today too; the
tolerance the spec promises for them is what a conforming precision may differ by through
legitimately different but equivalent kernels or rounding of the loss scale:
``16-true`` 1e-2, ``bf16-true`` 5e-2, ``16-mixed`` 1e-2, ``bf16-mixed`` 5e-2.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest
import torch
import torch.nn.functional as F

from trainspec import PRECISION_FLAGS
from trainspec.reference.checkpoint_io.torch_io import TorchCheckpointIO
from trainspec.reference.connector import resolve
from trainspec.reference.runner import TRAINSPEC_KEY, Runner

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

STEPS = 50
TOLERANCES = {
    "32-true": 0.0,
    "64-true": 0.0,
    "16-true": 1e-2,
    "bf16-true": 5e-2,
    "16-mixed": 1e-2,
    "bf16-mixed": 5e-2,
}
TRUE_DTYPES = {
    "32-true": torch.float32,
    "64-true": torch.float64,
    "16-true": torch.float16,
    "bf16-true": torch.bfloat16,
}
MIXED_DTYPES = {"16-mixed": torch.float16, "bf16-mixed": torch.bfloat16}


def _model(seed: int = 0) -> torch.nn.Module:
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 1))


def _batches(count: int, start: int = 0) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    for step in range(start, start + count):
        generator = torch.Generator().manual_seed(1000 + step)
        x = torch.randn(16, 8, generator=generator)
        yield x, x.sum(dim=1, keepdim=True).sin()


def _plain_loop(flag: str) -> tuple[float, list[torch.Tensor]]:
    """The same training, written by hand with plain PyTorch."""
    model = _model()
    dtype = TRUE_DTYPES.get(flag)
    if dtype is not None:
        model = model.to(dtype)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    scaler = torch.amp.GradScaler("cpu") if flag == "16-mixed" else None
    loss = torch.tensor(0.0)
    for x, y in _batches(STEPS):
        if dtype is not None:
            x, y = x.to(dtype), y.to(dtype)
            loss = F.mse_loss(model(x), y)
        else:
            with torch.autocast("cpu", dtype=MIXED_DTYPES[flag]):
                loss = F.mse_loss(model(x), y)
        if scaler is not None:
            scaler.scale(loss).backward()
            scaler.step(optimizer)
            scaler.update()
        else:
            loss.backward()
            optimizer.step()
        optimizer.zero_grad(set_to_none=True)
    return loss.item(), [p.detach().clone() for p in model.parameters()]


def _runner_loop(runner: Runner) -> tuple[float, list[torch.Tensor]]:
    module, optimizer = runner.setup(
        _model(), torch.optim.SGD(_model().parameters(), lr=0.05, momentum=0.9)
    )
    return _train(runner, module, optimizer, _batches(STEPS))


def _train(
    runner: Runner,
    module: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    batches: Iterator[tuple[torch.Tensor, torch.Tensor]],
) -> tuple[float, list[torch.Tensor]]:
    loss = torch.tensor(0.0)
    for batch in batches:
        x, y = runner.to_device(batch)
        with runner.autocast():
            loss = F.mse_loss(module(x), y)
        runner.backward(loss, module)
        runner.step(optimizer)
    return loss.item(), [p.detach().clone() for p in module.parameters()]


def _setup_with_optimizer_on_module(runner: Runner) -> tuple[float, list[torch.Tensor]]:
    module = _model()
    optimizer = torch.optim.SGD(module.parameters(), lr=0.05, momentum=0.9)
    module, optimizer = runner.setup(module, optimizer)
    return _train(runner, module, optimizer, _batches(STEPS))


@pytest.mark.parametrize("flag", PRECISION_FLAGS)
def test_runner_matches_a_hand_written_loop(flag: str) -> None:
    expected_loss, expected_params = _plain_loop(flag)
    runner = Runner.from_config(accelerator="cpu", precision=flag, checkpoint_io="memory")
    loss, params = runner.launch(_setup_with_optimizer_on_module)
    tolerance = TOLERANCES[flag]
    assert expected_loss == pytest.approx(loss, rel=tolerance, abs=0)
    assert len(params) == len(expected_params)
    for actual, expected in zip(params, expected_params, strict=True):
        assert actual.dtype == expected.dtype
        if tolerance == 0.0:
            assert torch.equal(actual, expected)
        else:
            torch.testing.assert_close(actual, expected, rtol=tolerance, atol=tolerance)
    # training did something: the loss moved away from the untrained one
    assert not torch.equal(params[0], _model().state_dict()["0.weight"].to(params[0].dtype))


@pytest.mark.parametrize("flag", ["32-true", "16-mixed", "bf16-mixed"])
def test_resuming_from_a_checkpoint_continues_exactly(flag: str, tmp_path: Path) -> None:
    path = tmp_path / "ckpt" / "step10.pt"

    def uninterrupted(runner: Runner) -> list[torch.Tensor]:
        module = _model()
        module, optimizer = runner.setup(module, torch.optim.AdamW(module.parameters(), lr=0.01))
        _train(runner, module, optimizer, _batches(10))
        runner.save(path, {"module": module, "optimizer": optimizer, "step": 10})
        return _train(runner, module, optimizer, _batches(10, start=10))[1]

    def resumed(runner: Runner) -> tuple[list[torch.Tensor], int]:
        module = _model(seed=123)  # different weights: only the checkpoint can fix them
        module, optimizer = runner.setup(module, torch.optim.AdamW(module.parameters(), lr=0.5))
        state: dict[str, object] = {"module": module, "optimizer": optimizer, "step": 0}
        rest = runner.load(path, state)
        assert rest == {}
        step = state["step"]
        assert isinstance(step, int)
        return _train(runner, module, optimizer, _batches(10, start=step))[1], step

    def make() -> Runner:
        return Runner.from_config(precision=flag, checkpoint_io=TorchCheckpointIO())

    expected = make().launch(uninterrupted)
    actual, step = make().launch(resumed)
    assert step == 10
    for a, b in zip(actual, expected, strict=True):
        assert torch.equal(a, b)


def test_precision_state_is_saved_and_restored(tmp_path: Path) -> None:
    path = tmp_path / "scaler.pt"
    scale = {"scale": 1024.0, "growth_tracker": 3}

    def save(runner: Runner) -> None:
        precision = runner.strategy.precision
        precision.load_state_dict({**precision.state_dict(), **scale})
        module, _optimizer = runner.setup(_model(), torch.optim.SGD(_model().parameters(), 0.1))
        runner.save(path, {"module": module})

    def load(runner: Runner) -> dict[str, object]:
        module = runner.setup_module(_model())
        runner.load(path, {"module": module})
        return runner.strategy.precision.state_dict()

    Runner.from_config(precision="16-mixed").launch(save)
    checkpoint = TorchCheckpointIO().load_checkpoint(path)
    assert checkpoint[TRAINSPEC_KEY]["precision"]["scale"] == 1024.0
    restored = Runner.from_config(precision="16-mixed").launch(load)
    assert restored["scale"] == 1024.0 and restored["growth_tracker"] == 3


def test_runner_works_with_any_strategy_from_resolve() -> None:
    runner = Runner(resolve(precision="64-true", checkpoint_io="memory"))
    loss, params = runner.launch(_setup_with_optimizer_on_module)
    assert params[0].dtype == torch.float64
    assert loss == _plain_loop("64-true")[0]
