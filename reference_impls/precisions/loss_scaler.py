"""Dynamic loss scaling over ``torch.amp.GradScaler``, with the guarantees of PREC-7..11.

:class:`LossScaler` adds to ``GradScaler``:

* unscaling is idempotent per optimizer and step (PREC-8): ``GradScaler.unscale_`` raises on a
  second call; here a second call is a no-op;
* :meth:`LossScaler.step` returns whether the parameters were updated (PREC-9): a skipped
  step lowers the scale, so comparing the scale before and after ``update`` tells;
* the state is a validated, documented, flat dict (:class:`ScalerState`, PREC-11).

Several optimizers per backward: each :meth:`~LossScaler.step` updates the scale (the
protocol's ``optimizer_step`` does), except while other optimizers were unscaled this step and
wait for their own step: then the update waits for the last of them, so no gradients are
unscaled twice or with a changed scale.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass
from typing import Final

import torch

from trainspec.errors import ConfigurationError, LifecycleError
from trainspec.reference._messages import describe_value

__all__ = ["DEFAULT_SCALER_STATE", "LossScaler", "ScalerState"]


@dataclass(frozen=True)
class ScalerState:
    """The state of dynamic loss scaling, as ``state_dict`` reports it.

    ``scale`` (finite, > 0) multiplies the loss; after ``growth_interval`` (>= 1) finite
    steps in a row it is multiplied by ``growth_factor`` (> 1), after a non-finite step by
    ``backoff_factor`` (in (0, 1)). ``growth_tracker`` (0 <= it < ``growth_interval``) counts
    the finite steps since the last change.
    """

    scale: float
    growth_factor: float
    backoff_factor: float
    growth_interval: int
    growth_tracker: int

    def as_dict(self) -> dict[str, float | int]:
        """The state as a plain dict of Python numbers (keys are the field names)."""
        return asdict(self)

    @classmethod
    def from_mapping(cls, state: object) -> ScalerState:
        """Validate ``state`` (a mapping with exactly the field names) and build the state.

        Raises:
            ConfigurationError: not a mapping, missing or unknown keys, wrong types, values
                out of range. The message names the offending key and the valid range.
        """
        if not isinstance(state, Mapping):
            raise ConfigurationError(
                f"loss-scaler state must be a mapping with keys {sorted(_FIELDS)}, got "
                f"{type(state).__name__}"
            )
        keys = set(state)
        if keys != _FIELDS:
            raise ConfigurationError(
                f"loss-scaler state must have exactly the keys {sorted(_FIELDS)}; missing "
                f"{sorted(map(str, _FIELDS - keys))}, unknown {sorted(map(str, keys - _FIELDS))}"
            )
        scale = _number(state, "scale", lambda v: v > 0, "a finite number > 0")
        growth = _number(state, "growth_factor", lambda v: v > 1, "a finite number > 1")
        backoff = _number(state, "backoff_factor", lambda v: 0 < v < 1, "a number in (0, 1)")
        interval = _integer(
            state, "growth_interval", lambda v: 1 <= v <= _MAX_INT64, f"an int in 1..{_MAX_INT64}"
        )
        tracker = _integer(
            state, "growth_tracker", lambda v: 0 <= v < interval, f"an int in 0..{interval - 1}"
        )
        return cls(float(scale), float(growth), float(backoff), interval, tracker)


_MAX_INT64: Final = 2**63 - 1
"""The largest ``growth_interval``: torch keeps it as a C ``int64``."""

_FIELDS: Final = frozenset(
    ("scale", "growth_factor", "backoff_factor", "growth_interval", "growth_tracker")
)

DEFAULT_SCALER_STATE: Final = ScalerState(
    scale=2.0**16, growth_factor=2.0, backoff_factor=0.5, growth_interval=2000, growth_tracker=0
)
"""``torch.amp.GradScaler``'s defaults."""


def _number(
    state: Mapping[str, object], key: str, valid: Callable[[float], bool], allowed: str
) -> float:
    value = state[key]
    # Type first, then the float conversion (an int above ~1e308 has none: OverflowError),
    # then the range on the float.
    number: float | None = None
    if not isinstance(value, bool) and isinstance(value, (int, float)):
        try:
            number = float(value)
        except OverflowError:
            number = None
    if number is None or not math.isfinite(number) or not valid(number):
        raise ConfigurationError(
            f"loss-scaler state {key!r} must be {allowed}, got {describe_value(value)}"
        )
    return number


def _integer(
    state: Mapping[str, object], key: str, valid: Callable[[int], bool], allowed: str
) -> int:
    value = state[key]
    if isinstance(value, bool) or not isinstance(value, int) or not valid(value):
        raise ConfigurationError(
            f"loss-scaler state {key!r} must be {allowed}, got {describe_value(value)}"
        )
    return value


class LossScaler:
    """Dynamic loss scaling for one device type (one ``torch.amp.GradScaler``).

    Per step: :meth:`scale` the loss before ``backward``; optionally :meth:`unscale`
    (idempotent); :meth:`step` each optimizer. Not thread-safe: one training loop drives it.
    """

    def __init__(self, device_type: str, state: ScalerState = DEFAULT_SCALER_STATE) -> None:
        self._device_type = device_type
        self._scaler = self._new_scaler(state)
        self._scale = state.scale  # the scale after the last update: skip detection
        self._unscaled: set[torch.optim.Optimizer] = set()
        self._steps_in_round = 0
        self._scaled = False  # whether scale() ran since the last completed step

    def _new_scaler(self, state: ScalerState) -> torch.amp.GradScaler:
        scaler = torch.amp.GradScaler(
            self._device_type,
            init_scale=state.scale,
            growth_factor=state.growth_factor,
            backoff_factor=state.backoff_factor,
            growth_interval=state.growth_interval,
        )
        scaler.load_state_dict(_to_torch_state(state))
        return scaler

    def scale(self, loss: torch.Tensor) -> torch.Tensor:
        """``loss`` multiplied by the current scale."""
        self._scaled = True
        return self._scaler.scale(loss)

    def unscale(self, optimizer: torch.optim.Optimizer) -> None:
        """Divide ``optimizer``'s gradients by the scale, once per step (PREC-8).

        Before any scaled backward in this step the gradients are at their true scale, so
        there is nothing to unscale and this is a no-op.
        """
        if optimizer in self._unscaled or not self._scaled:
            return
        self._scaler.unscale_(optimizer)
        self._unscaled.add(optimizer)

    def step(self, optimizer: torch.optim.Optimizer) -> bool:
        """Unscale if not done, step ``optimizer`` unless its gradients are non-finite, update
        the scale; return whether the parameters were updated (PREC-9).

        Raises:
            LifecycleError: no gradient was produced for ``optimizer`` since the last step,
                or the same optimizer is stepped twice in one step.
        """
        try:
            self._scaler.step(optimizer)
        except (AssertionError, RuntimeError) as error:
            self._recover()
            raise LifecycleError(
                f"optimizer_step could not step {type(optimizer).__name__}: {error}. Call "
                "backward(loss) before each optimizer_step, and step each optimizer once"
            ) from error
        self._unscaled.discard(optimizer)
        self._steps_in_round += 1
        # Several optimizers share this update: ask the gradients directly (rare path).
        stepped = _all_finite(optimizer) if self._unscaled or self._steps_in_round > 1 else None
        if self._unscaled:  # others were unscaled this step and have not stepped yet
            return bool(stepped)
        self._scaler.update()
        self._steps_in_round = 0
        self._scaled = False
        before, self._scale = self._scale, self._scaler.get_scale()
        return stepped if stepped is not None else not self._scale < before

    def state(self) -> ScalerState:
        """The current state (the scale as a Python float)."""
        raw = self._scaler.state_dict()
        return ScalerState(
            scale=float(raw["scale"]),
            growth_factor=float(raw["growth_factor"]),
            backoff_factor=float(raw["backoff_factor"]),
            growth_interval=int(raw["growth_interval"]),
            growth_tracker=int(raw["_growth_tracker"]),
        )

    def load(self, state: ScalerState) -> None:
        """Replace the state; forgets what was unscaled in the current step."""
        self._scaler = self._new_scaler(state)
        self._scale = state.scale
        self._unscaled.clear()
        self._steps_in_round = 0
        self._scaled = False

    def _recover(self) -> None:
        """After a failed step, start a clean step with the same scale state."""
        self.load(self.state())


def _to_torch_state(state: ScalerState) -> dict[str, float | int]:
    raw = state.as_dict()
    raw["_growth_tracker"] = raw.pop("growth_tracker")
    return raw


def _all_finite(optimizer: torch.optim.Optimizer) -> bool:
    return all(
        bool(torch.isfinite(parameter.grad).all())
        for group in optimizer.param_groups
        for parameter in group["params"]
        if parameter.grad is not None
    )
