"""PREC-11, PREC-12: precision state round-trips and malformed state is refused; teardown is
idempotent and the precision can be set up again."""

from __future__ import annotations

import copy
import functools
from typing import TYPE_CHECKING

import torch

from trainspec.conformance._helpers import (
    checkpoint_differences,
    describe_exception,
    describe_value,
    expect_raises,
    failure,
    snippet,
)
from trainspec.conformance.checks.precision._fixtures import (
    _RTOL,
    _forward_loss,
    _measure_scale,
    _ready,
    _run_probe_step,
    _setting_up,
    _Target,
)
from trainspec.conformance.core import CheckSkipped, check
from trainspec.errors import ConfigurationError

if TYPE_CHECKING:
    from collections.abc import Callable

# --------------------------------------------------------------------------- PREC-11


@check("PREC-11", "precision")
def check_precision_state_dict_round_trips(target: _Target) -> None:
    """load_state_dict(state_dict()) on a fresh instance restores the state.

    load_state_dict(state_dict()) on a fresh instance restores an equal state (and, with
    gradient scaling, the same loss scale).
    """
    precision, device, module, x = _setting_up(target)
    optimizer = torch.optim.SGD(module.parameters(), lr=0.1)
    scaling = "gradient_scaling" in target.capabilities
    precision.backward(_forward_loss(precision, module, x), module)
    if scaling:  # a skipped step moves the loss scale away from its initial value
        first = next(module.parameters())
        assert first.grad is not None
        with torch.no_grad():
            first.grad.view(-1)[0] = float("inf")
    precision.optimizer_step(optimizer)
    state = precision.state_dict()
    repro = snippet(
        target,
        f"""
        # ... train a step with p (set up on {device}), then:
        state = p.state_dict()
        q = type(p)()  # a fresh instance of the same flag
        q.setup(torch.device({str(device)!r}))
        q.load_state_dict(state)
        print(state, q.state_dict())
        """,
        var="p",
    )
    if not isinstance(state, dict) or not all(isinstance(k, str) for k in state):
        raise failure(
            target,
            "PREC-11",
            expected="return a dict with str keys from state_dict()",
            actual=describe_value(state),
            snippet=repro,
        )
    fresh, _ = _ready(target)
    if scaling and not checkpoint_differences(state, fresh.state_dict(), check_sharing=False):
        raise failure(
            target,
            "PREC-11",
            expected="include the loss scale in state_dict()",
            actual="the state after a skipped step equals a fresh instance's state",
            hint="Return the GradScaler's state_dict (scale, growth tracker).",
            snippet=repro,
        )
    fresh.load_state_dict(copy.deepcopy(state))
    diffs = checkpoint_differences(state, fresh.state_dict(), check_sharing=False)
    if diffs:
        raise failure(
            target,
            "PREC-11",
            expected="restore an equal state with load_state_dict(state_dict())",
            actual="; ".join(diffs[:3]),
            snippet=repro,
        )
    if scaling:
        module2 = fresh.convert_module(copy.deepcopy(module))
        optimizer2 = torch.optim.SGD(module2.parameters(), lr=0.1)
        original = _measure_scale(precision, module, x, optimizer)
        restored = _measure_scale(fresh, module2, x, optimizer2)
        if abs(original - restored) > _RTOL * abs(original):
            raise failure(
                target,
                "PREC-11",
                expected="scale the loss by the restored scale after load_state_dict",
                actual=f"original scale {original:.6g}, restored instance scales by {restored:.6g}",
                snippet=repro,
            )


@check("PREC-11", "precision")
def check_precision_load_state_dict_rejects_malformed_state(target: _Target) -> None:
    """load_state_dict with a wrongly typed value for any key raises ConfigurationError."""
    precision, _ = _ready(target)
    state = precision.state_dict()
    if not state:
        raise CheckSkipped("state_dict() is empty: there is no value to corrupt")
    for key in state:
        corrupted = dict(state)
        corrupted[key] = "not a valid value"
        fresh, _ = _ready(target)
        expect_raises(
            target,
            "PREC-11",
            ConfigurationError,
            functools.partial(fresh.load_state_dict, corrupted),
            expected=f"raise ConfigurationError for state with {key!r} set to a string",
            hint="Validate every value's type before applying any of them.",
            snippet=snippet(
                target,
                f"state = p.state_dict()\nstate[{key!r}] = 'not a valid value'\n"
                "p.load_state_dict(state)",
                var="p",
            ),
        )


# --------------------------------------------------------------------------- PREC-12


@check("PREC-12", "precision")
def check_precision_teardown_is_idempotent_and_allows_setup_again(target: _Target) -> None:
    """teardown twice, then setup again: the precision works as before."""
    precision, device = _ready(target)
    repro = snippet(
        target,
        f"""
        d = torch.device({str(device)!r})
        p.setup(d); p.setup(d); p.teardown(); p.teardown(); p.setup(d)
        with p.forward_context():
            ...
        """,
        var="p",
    )
    steps: list[tuple[str, Callable[[], object]]] = [
        ("setup(device) a second time", lambda: precision.setup(device)),
        ("teardown()", precision.teardown),
        ("teardown() again", precision.teardown),
        ("setup(device) after teardown", lambda: precision.setup(device)),
        ("a forward pass after re-setup", lambda: _run_probe_step(precision, device)),
        ("teardown() at the end", precision.teardown),
    ]
    for name, step in steps:
        try:
            step()
        except Exception as exc:
            raise failure(
                target,
                "PREC-12",
                expected="allow teardown() twice and setup() again afterwards",
                actual=f"{name} raised {describe_exception(exc)}",
                snippet=repro,
            ) from exc
