"""PREC-1 (with the dtype rules of PREC-3 and PREC-5): each flag has exact parameter and
compute dtypes, in converted modules, in the forward context (autocast where declared) and in
the module-init context."""

from __future__ import annotations

import torch
from torch import nn

from trainspec.conformance._helpers import failure, snippet
from trainspec.conformance.checks.precision._fixtures import (
    _PROBE_SNIPPET,
    FLAG_DTYPES,
    _probe,
    _ready,
    _setting_up,
    _Target,
)
from trainspec.conformance.core import check
from trainspec.types import PRECISION_FLAGS

# --------------------------------------------------------------------------- PREC-1


@check("PREC-1", "precision")
def check_precision_flag_and_dtypes_match_the_flag_table(target: _Target) -> None:
    """flag is a known flag and param_dtype / compute_dtype are that flag's row of the table."""
    precision = target.make()
    flag = precision.flag
    repro = snippet(target, "print(p.flag, p.param_dtype, p.compute_dtype)", var="p")
    if flag not in PRECISION_FLAGS:
        raise failure(
            target,
            "PREC-1",
            expected=f"report one of {list(PRECISION_FLAGS)} as flag",
            actual=repr(flag),
            snippet=repro,
        )
    expected = FLAG_DTYPES[flag]
    actual = (precision.param_dtype, precision.compute_dtype)
    if actual != expected or precision.flag != flag:
        raise failure(
            target,
            "PREC-1",
            expected=f"have param_dtype={expected[0]}, compute_dtype={expected[1]} for "
            f"flag {flag!r}",
            actual=f"param_dtype={actual[0]}, compute_dtype={actual[1]}",
            snippet=repro,
        )


@check("PREC-3", "precision")
def check_precision_convert_module_casts_parameters_to_param_dtype(target: _Target) -> None:
    """convert_module gives every floating-point parameter and buffer param_dtype."""
    precision, device = _ready(target)
    module = precision.convert_module(_probe(device))
    wrong = {
        name: tensor.dtype
        for name, tensor in [*module.named_parameters(), *module.named_buffers()]
        if tensor.is_floating_point() and tensor.dtype != precision.param_dtype
    }
    if wrong:
        raise failure(
            target,
            "PREC-3",
            expected=f"cast floating-point parameters and buffers to {precision.param_dtype}",
            actual=f"dtypes after convert_module: {wrong}",
            hint="Use module.to(dtype=param_dtype), which leaves integer tensors alone.",
            snippet=snippet(
                target,
                "p.setup(torch.device('cpu'))\n"
                "m = p.convert_module(torch.nn.Linear(4, 2))\nprint(m.weight.dtype)",
                var="p",
            ),
        )


@check("PREC-1", "precision")
def check_precision_forward_context_computes_in_compute_dtype(target: _Target) -> None:
    """Inside forward_context, the probe's linear layers and matmul produce compute_dtype."""
    precision, _device_used, module, x = _setting_up(target)
    with precision.forward_context():
        out = module(x)
        product = torch.matmul(x, x.transpose(0, 1))
    got = {"module output": out.dtype, "matmul": product.dtype}
    if any(dtype != precision.compute_dtype for dtype in got.values()):
        raise failure(
            target,
            "PREC-1",
            expected=f"compute in {precision.compute_dtype} inside forward_context "
            f"(flag {precision.flag!r})",
            actual=f"result dtypes {got}",
            hint="Mixed flags enter torch.autocast(device.type, dtype=compute_dtype); true "
            "flags rely on parameters and inputs already being in param_dtype.",
            snippet=snippet(
                target,
                "p.setup(torch.device('cpu'))"
                + _PROBE_SNIPPET
                + "with p.forward_context():\n    print(module(x).dtype)",
                var="p",
            ),
        )


@check("PREC-1", "precision", requires=("autocast",))
def check_precision_forward_context_enables_autocast_in_compute_dtype(target: _Target) -> None:
    """forward_context enables autocast for the device type in compute_dtype, and only inside."""
    precision, device = _ready(target)
    kind = device.type
    with precision.forward_context():
        inside = (torch.is_autocast_enabled(kind), torch.get_autocast_dtype(kind))
    outside = torch.is_autocast_enabled(kind)
    if inside != (True, precision.compute_dtype) or outside:
        raise failure(
            target,
            "PREC-1",
            expected=f"enable autocast for {kind!r} in {precision.compute_dtype} inside "
            "forward_context and not after it",
            actual=f"inside (enabled, dtype)={inside}, enabled after={outside}",
            snippet=snippet(
                target,
                f"p.setup(torch.device({str(device)!r}))\nwith p.forward_context():\n"
                f"    print(torch.is_autocast_enabled({kind!r}), "
                f"torch.get_autocast_dtype({kind!r}))",
                var="p",
            ),
        )


@check("PREC-5", "precision")
def check_precision_module_init_context_creates_parameters_in_param_dtype(
    target: _Target,
) -> None:
    """A module built inside module_init_context has param_dtype floating-point parameters."""
    precision, _device_used = _ready(target)
    with precision.module_init_context():
        module = nn.Linear(3, 3)
    if module.weight.dtype != precision.param_dtype:
        raise failure(
            target,
            "PREC-5",
            expected=f"create floating-point parameters in {precision.param_dtype} inside "
            "module_init_context",
            actual=f"nn.Linear weight dtype {module.weight.dtype}",
            hint="Set the default dtype to param_dtype inside the context (and restore it).",
            snippet=snippet(
                target,
                "with p.module_init_context():\n    print(torch.nn.Linear(3, 3).weight.dtype)",
                var="p",
            ),
        )
