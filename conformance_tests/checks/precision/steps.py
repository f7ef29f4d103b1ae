"""PREC-7 ... PREC-10: backward computes true gradients after unscaling, gradients are unscaled
exactly once per step, non-finite steps are skipped with gradient scaling and every step is
taken without it."""

from __future__ import annotations

import copy
from typing import TYPE_CHECKING

import torch
from torch import nn

from trainspec.conformance._helpers import checkpoint_differences, describe_value, failure, snippet
from trainspec.conformance.checks.precision._fixtures import (
    _PROBE_SNIPPET,
    _RTOL,
    _forward_loss,
    _grads,
    _measure_scale,
    _ratio,
    _reference_grads,
    _setting_up,
    _Target,
)
from trainspec.conformance.core import CheckSkipped, check

if TYPE_CHECKING:
    from trainspec.precision import Precision


def _close(actual: list[torch.Tensor], expected: list[torch.Tensor]) -> bool:
    scale = max(float(e.abs().max()) for e in expected) if expected else 0.0
    return all(
        bool(torch.isfinite(a).all())
        and torch.allclose(a, e, rtol=_RTOL, atol=_RTOL * max(scale, 1e-12))
        for a, e in zip(actual, expected, strict=True)
    )


# --------------------------------------------------------------------------- PREC-7, PREC-8


def _step_snippet(target: _Target, device: torch.device, body: str) -> str:
    return snippet(
        target,
        f"p.setup(torch.device({str(device)!r}))"
        + _PROBE_SNIPPET
        + "opt = torch.optim.SGD(module.parameters(), lr=1.0)\n"
        + "with p.forward_context():\n    loss = module(x).float().mean() / 64\n"
        + body,
        var="p",
    )


@check("PREC-7", "precision")
def check_precision_backward_produces_true_gradients_after_unscaling(target: _Target) -> None:
    """backward(loss) then unscale_gradients() leaves the true gradients of the loss."""
    precision, device, module, x = _setting_up(target)
    optimizer = torch.optim.SGD(module.parameters(), lr=1.0)
    expected = _reference_grads(precision, module, x)
    precision.backward(_forward_loss(precision, module, x), module)
    precision.unscale_gradients(optimizer)
    actual = _grads(module)
    if not _close(actual, expected):
        raise failure(
            target,
            "PREC-7",
            expected="produce the loss's gradients (scaled only by the loss scale, removed by "
            "unscale_gradients)",
            actual=f"gradients {_ratio(actual, expected):.6g} times the reference",
            hint="Scale the loss before backward exactly by the factor unscale divides by.",
            snippet=_step_snippet(
                target,
                device,
                "p.backward(loss, module)\np.unscale_gradients(opt)\n"
                "print([q.grad for q in module.parameters()])",
            ),
        )


def _apply_and_compare(
    target: _Target,
    precision: Precision,
    device: torch.device,
    module: nn.Module,
    x: torch.Tensor,
    optimizer: torch.optim.Optimizer,
    unscale_calls: int,
) -> None:
    optimizer.zero_grad(set_to_none=True)
    expected = _reference_grads(precision, module, x)
    # An update as large as the parameters keeps half-precision rounding of p - lr * g small
    # compared with the update itself.
    lr = 1.0 / max(max(float(e.abs().max()) for e in expected), 1e-12)
    for group in optimizer.param_groups:
        group["lr"] = lr
    before = [p.detach().float().clone() for p in module.parameters()]
    precision.backward(_forward_loss(precision, module, x), module)
    for _ in range(unscale_calls):
        precision.unscale_gradients(optimizer)
    body = "p.backward(loss, module)\n" + "p.unscale_gradients(opt)\n" * unscale_calls
    if unscale_calls and not _close(_grads(module), expected):
        raise failure(
            target,
            "PREC-8",
            expected=f"unscale gradients exactly once when unscale_gradients() is called "
            f"{unscale_calls} time(s)",
            actual=f"gradients {_ratio(_grads(module), expected):.6g} times the true ones",
            hint="Remember per optimizer that this step was unscaled; reset it in optimizer_step.",
            snippet=_step_snippet(target, device, body + "print(module[0].weight.grad)"),
        )
    stepped = precision.optimizer_step(optimizer)
    if stepped is not True:
        raise failure(
            target,
            "PREC-10",
            expected="return True from optimizer_step with finite gradients",
            actual=describe_value(stepped),
            snippet=_step_snippet(target, device, body + "print(p.optimizer_step(opt))"),
        )
    applied = [
        (b - p.detach().float()) / lr for b, p in zip(before, module.parameters(), strict=True)
    ]
    if not _close(applied, expected):
        raise failure(
            target,
            "PREC-8",
            expected=f"step with gradients unscaled exactly once (after {unscale_calls} "
            "unscale_gradients() call(s))",
            actual=f"the update was {_ratio(applied, expected):.6g} times the true gradient",
            hint="optimizer_step must unscale only if unscale_gradients was not called this step.",
            snippet=_step_snippet(target, device, body + "p.optimizer_step(opt)"),
        )


@check("PREC-8", "precision")
def check_precision_unscales_exactly_once_per_step(target: _Target) -> None:
    """Steps with zero, one or two unscale_gradients() calls all apply the true gradients."""
    precision, device, module, x = _setting_up(target)
    optimizer = torch.optim.SGD(module.parameters(), lr=1.0)
    for calls in (2, 0, 1):
        _apply_and_compare(target, precision, device, module, x, optimizer, calls)


@check("PREC-9", "precision", requires=("gradient_scaling",))
def check_precision_skips_steps_with_non_finite_gradients(target: _Target) -> None:
    """With gradient scaling, a step with inf or NaN gradients is skipped.

    With gradient scaling, a step with inf or NaN gradients returns False, changes no
    parameter or optimizer state, and lowers the loss scale.
    """
    precision, device, module, x = _setting_up(target)
    optimizer = torch.optim.SGD(module.parameters(), lr=0.1, momentum=0.9)
    # A first real step creates momentum buffers that a wrong step would change.
    precision.backward(_forward_loss(precision, module, x), module)
    precision.optimizer_step(optimizer)
    for bad in (float("inf"), float("nan")):
        scale_before = _measure_scale(precision, module, x, optimizer)
        first = next(module.parameters())
        assert first.grad is not None
        with torch.no_grad():
            first.grad.view(-1)[0] = bad
        params = [p.detach().clone() for p in module.parameters()]
        state = copy.deepcopy(optimizer.state_dict())
        repro = _step_snippet(
            target,
            device,
            f"p.backward(loss, module)\nmodule[0].weight.grad[0, 0] = float({str(bad)!r})\n"
            "print(p.optimizer_step(opt))  # expected False, parameters unchanged",
        )
        stepped = precision.optimizer_step(optimizer)
        changed = [
            name
            for (name, p), old in zip(module.named_parameters(), params, strict=True)
            if not torch.equal(p.detach(), old)
        ]
        if stepped is not False or changed:
            raise failure(
                target,
                "PREC-9",
                expected=f"skip the step (return False, parameters unchanged) when a "
                f"gradient is {bad}",
                actual=f"optimizer_step returned {stepped!r}, changed parameters {changed}",
                hint="Check the unscaled gradients for inf/NaN (GradScaler.step does) and "
                "do not call optimizer.step() then.",
                snippet=repro,
            )
        diffs = checkpoint_differences(state, optimizer.state_dict(), check_sharing=False)
        if diffs:
            raise failure(
                target,
                "PREC-9",
                expected=f"leave the optimizer state unchanged on a skipped step ({bad})",
                actual="; ".join(diffs[:3]),
                snippet=repro,
            )
        scale_after = _measure_scale(precision, module, x, optimizer)
        if not scale_after < scale_before:
            raise failure(
                target,
                "PREC-9",
                expected=f"lower the loss scale after a step with {bad} gradients",
                actual=f"scale {scale_before:.6g} before, {scale_after:.6g} after",
                hint="Call GradScaler.update() (or back off the scale) after every step.",
                snippet=repro,
            )
        if precision.optimizer_step(optimizer) is not True:
            raise failure(
                target,
                "PREC-9",
                expected="step normally again after a skipped step",
                actual="the next finite step was skipped too",
                snippet=repro,
            )


@check("PREC-10", "precision")
def check_precision_optimizer_step_returns_true_when_it_steps(target: _Target) -> None:
    """optimizer_step with finite gradients updates the parameters and returns True."""
    precision, device, module, x = _setting_up(target)
    optimizer = torch.optim.SGD(module.parameters(), lr=1.0)
    before = [p.detach().clone() for p in module.parameters()]
    precision.backward(_forward_loss(precision, module, x), module)
    stepped = precision.optimizer_step(optimizer)
    changed = any(
        not torch.equal(p.detach(), old) for p, old in zip(module.parameters(), before, strict=True)
    )
    if stepped is not True or not changed:
        raise failure(
            target,
            "PREC-10",
            expected="update the parameters and return True from optimizer_step with finite "
            "gradients",
            actual=f"returned {describe_value(stepped)}, parameters "
            f"{'changed' if changed else 'unchanged'}",
            snippet=_step_snippet(
                target, device, "p.backward(loss, module)\nprint(p.optimizer_step(opt))"
            ),
        )


@check("PREC-10", "precision")
def check_precision_without_scaling_always_steps(target: _Target) -> None:
    """Without gradient scaling, optimizer_step always steps and returns True.

    Without gradient scaling, optimizer_step steps and returns True even with inf gradients.
    """
    if "gradient_scaling" in target.capabilities:
        raise CheckSkipped("declares gradient_scaling: non-finite steps are skipped (PREC-9)")
    precision, device, module, x = _setting_up(target)
    optimizer = torch.optim.SGD(module.parameters(), lr=1.0)
    precision.backward(_forward_loss(precision, module, x), module)
    first = next(module.parameters())
    assert first.grad is not None
    with torch.no_grad():
        first.grad.view(-1)[0] = float("inf")
    before = first.detach().clone()
    stepped = precision.optimizer_step(optimizer)
    if stepped is not True or torch.equal(first.detach(), before):
        raise failure(
            target,
            "PREC-10",
            expected="always step and return True when it does not scale gradients",
            actual=f"returned {describe_value(stepped)} with an inf gradient, parameters "
            f"{'unchanged' if torch.equal(first.detach(), before) else 'changed'}",
            hint="Declare the 'gradient_scaling' capability if the precision scales, else "
            "call optimizer.step() unconditionally."
            if stepped is False
            else "Call optimizer.step() and return True.",
            snippet=_step_snippet(
                target,
                device,
                "p.backward(loss, module)\nmodule[0].weight.grad[0, 0] = float('inf')\n"
                "print(p.optimizer_step(opt))",
            ),
        )
