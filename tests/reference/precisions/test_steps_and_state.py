"""PREC-7 ... PREC-11: backward, unscale-once, skipped non-finite steps, state round-trip."""

from __future__ import annotations

import math

import pytest
import torch

from trainspec import PRECISION_FLAGS, ConfigurationError, LifecycleError
from trainspec.reference.precisions import Float16MixedPrecision, precision_for_flag

CPU = torch.device("cpu")
UNSCALED = ["32-true", "64-true", "16-true", "bf16-true", "bf16-mixed"]


def scaled_precision(scale: float) -> Float16MixedPrecision:
    precision = Float16MixedPrecision()
    precision.setup(CPU)
    state = precision.state_dict()
    precision.load_state_dict({**state, "scale": scale})
    return precision


def linear_problem() -> tuple[torch.nn.Parameter, torch.Tensor, torch.optim.SGD]:
    """loss = (w * x).sum(): the true gradient of w is x."""
    weight = torch.nn.Parameter(torch.tensor([1.0, 2.0, 3.0]))
    x = torch.tensor([0.5, -1.0, 2.0])
    return weight, x, torch.optim.SGD([weight], lr=1.0)


@pytest.mark.parametrize("unscale_calls", [0, 1, 2, 3])
def test_gradients_are_unscaled_exactly_once(unscale_calls: int) -> None:
    precision = scaled_precision(8.0)
    weight, x, optimizer = linear_problem()
    precision.backward((weight * x).sum(), None)
    assert torch.equal(weight.grad, x * 8.0), "backward scales the loss (PREC-7)"
    for _ in range(unscale_calls):
        precision.unscale_gradients(optimizer)
        assert torch.equal(weight.grad, x)
    assert precision.optimizer_step(optimizer) is True
    torch.testing.assert_close(weight.detach(), torch.tensor([1.0, 2.0, 3.0]) - x)


@pytest.mark.parametrize("bad", [math.inf, math.nan])
def test_a_non_finite_step_is_skipped_and_lowers_the_scale(bad: float) -> None:
    precision = scaled_precision(1024.0)
    weight, x, _ = linear_problem()
    optimizer = torch.optim.SGD([weight], lr=1.0, momentum=0.9)
    precision.backward((weight * x).sum() * bad, None)
    assert precision.optimizer_step(optimizer) is False
    assert torch.equal(weight.detach(), torch.tensor([1.0, 2.0, 3.0]))
    assert optimizer.state_dict()["state"] == {}, "optimizer state is untouched"
    assert precision.state_dict()["scale"] == 512.0
    # the next finite step goes through with the lowered scale
    optimizer.zero_grad()
    precision.backward((weight * x).sum(), None)
    assert weight.grad is not None
    assert torch.equal(weight.grad, x * 512.0)
    assert precision.optimizer_step(optimizer) is True
    assert not torch.equal(weight.detach(), torch.tensor([1.0, 2.0, 3.0]))


def test_16_mixed_trains_a_module_under_autocast() -> None:
    precision = Float16MixedPrecision()
    precision.setup(CPU)
    precision.load_state_dict({**precision.state_dict(), "scale": 128.0})
    torch.manual_seed(0)
    module = precision.convert_module(torch.nn.Linear(4, 1))
    optimizer = torch.optim.SGD(module.parameters(), lr=0.1)
    before = module.weight.detach().clone()
    with precision.forward_context():
        loss = module(torch.randn(8, 4)).float().pow(2).mean()
    precision.backward(loss, module)
    assert precision.optimizer_step(optimizer) is True
    assert module.weight.dtype == torch.float32
    assert not torch.equal(module.weight.detach(), before)


def test_several_optimizers_unscaled_before_stepping_are_each_unscaled_once() -> None:
    precision = scaled_precision(4.0)
    first, x, first_optimizer = linear_problem()
    second = torch.nn.Parameter(torch.tensor([1.0, 1.0]))
    second_optimizer = torch.optim.SGD([second], lr=1.0)
    precision.backward((first * x).sum() + second.sum() * math.inf, None)
    precision.unscale_gradients(first_optimizer)
    precision.unscale_gradients(second_optimizer)
    assert precision.optimizer_step(first_optimizer) is True
    assert precision.state_dict()["scale"] == 4.0, "the update waits for the second optimizer"
    assert precision.optimizer_step(second_optimizer) is False
    torch.testing.assert_close(first.detach(), torch.tensor([1.0, 2.0, 3.0]) - x)
    assert torch.equal(second.detach(), torch.tensor([1.0, 1.0]))
    assert precision.state_dict()["scale"] == 2.0


def test_stepping_without_gradients_is_a_lifecycle_error_and_recoverable() -> None:
    precision = scaled_precision(2.0)
    weight, x, optimizer = linear_problem()
    with pytest.raises(LifecycleError):
        precision.optimizer_step(optimizer)
    precision.backward((weight * x).sum(), None)
    assert precision.optimizer_step(optimizer) is True


@pytest.mark.parametrize("flag", UNSCALED)
def test_without_scaling_every_step_steps(flag: str) -> None:
    precision = precision_for_flag(flag)
    precision.setup(CPU)
    weight, x, optimizer = linear_problem()
    precision.backward((weight * x).sum(), None)
    assert torch.equal(weight.grad, x), "no scaling (PREC-7)"
    precision.unscale_gradients(optimizer)
    assert torch.equal(weight.grad, x)
    assert precision.optimizer_step(optimizer) is True
    torch.testing.assert_close(weight.detach(), torch.tensor([1.0, 2.0, 3.0]) - x)
    optimizer.zero_grad()
    precision.backward((weight * x).sum() * math.inf, None)
    assert precision.optimizer_step(optimizer) is True  # PREC-10: steps even when non-finite


def test_scaler_state_round_trips_into_a_fresh_instance() -> None:
    trained = scaled_precision(1024.0)
    weight, x, optimizer = linear_problem()
    for loss_factor in (1.0, math.inf, 1.0):
        optimizer.zero_grad()
        trained.backward((weight * x).sum() * loss_factor, None)
        trained.optimizer_step(optimizer)
    state = trained.state_dict()
    fresh = Float16MixedPrecision()
    assert fresh.state_dict() != state, "the trained state differs from the default"
    assert state == {
        "scale": 512.0,
        "growth_factor": 2.0,
        "backoff_factor": 0.5,
        "growth_interval": 2000,
        "growth_tracker": 1,
    }
    fresh.load_state_dict(state)  # before setup: kept until the scaler exists
    assert fresh.state_dict() == state
    fresh.setup(CPU)
    assert fresh.state_dict() == state
    other = Float16MixedPrecision()
    other.setup(CPU)
    other.load_state_dict(state)  # after setup: loaded into the scaler
    assert other.state_dict() == state
    weight.grad = None
    other.backward((weight * x).sum(), None)
    assert torch.equal(weight.grad, x * 512.0), "the loaded scale is the one used"


def test_scaler_state_survives_teardown_and_setup() -> None:
    precision = scaled_precision(64.0)
    precision.teardown()
    assert precision.state_dict()["scale"] == 64.0
    precision.setup(CPU)
    assert precision.state_dict()["scale"] == 64.0


@pytest.mark.parametrize("flag", PRECISION_FLAGS)
def test_state_round_trip_for_every_flag(flag: str) -> None:
    source, target = precision_for_flag(flag), precision_for_flag(flag)
    source.setup(CPU)
    state = source.state_dict()
    target.load_state_dict(state)
    assert target.state_dict() == state


GOOD = {
    "scale": 8.0,
    "growth_factor": 2.0,
    "backoff_factor": 0.5,
    "growth_interval": 10,
    "growth_tracker": 0,
}


@pytest.mark.parametrize(
    "bad",
    [
        None,
        [("scale", 1.0)],
        {},
        {k: v for k, v in GOOD.items() if k != "scale"},
        {**GOOD, "extra": 1},
        {**GOOD, "scale": -1.0},
        {**GOOD, "scale": 0.0},
        {**GOOD, "scale": math.nan},
        {**GOOD, "scale": math.inf},
        {**GOOD, "scale": True},
        {**GOOD, "scale": "8"},
        {**GOOD, "growth_factor": 1.0},
        {**GOOD, "backoff_factor": 1.5},
        {**GOOD, "growth_interval": 0},
        {**GOOD, "growth_interval": 2.0},
        {**GOOD, "growth_tracker": 10},
        {**GOOD, "growth_tracker": -1},
    ],
)
def test_malformed_scaler_state_raises_configuration_error(bad: object) -> None:
    precision = Float16MixedPrecision()
    before = precision.state_dict()
    with pytest.raises(ConfigurationError):
        precision.load_state_dict(bad)  # type: ignore[arg-type]
    assert precision.state_dict() == before
    precision.load_state_dict(GOOD)
    assert precision.state_dict() == GOOD


@pytest.mark.parametrize("flag", UNSCALED)
def test_stateless_precisions_refuse_non_empty_state(flag: str) -> None:
    precision = precision_for_flag(flag)
    precision.load_state_dict({})
    with pytest.raises(ConfigurationError):
        precision.load_state_dict(GOOD)
    with pytest.raises(ConfigurationError):
        precision.load_state_dict(None)  # type: ignore[arg-type]
