"""PREC-2: an unsupported flag and device pair raises instead of silently disabling itself,
and setup refuses devices the precision cannot compute on."""

from __future__ import annotations

import warnings

import torch

from trainspec.conformance._helpers import describe_exception, failure, snippet
from trainspec.conformance.checks.precision._fixtures import (
    _PROBE_SNIPPET,
    _device,
    _run_probe_step,
    _setup,
    _Target,
)
from trainspec.conformance.core import CheckSkipped, check
from trainspec.errors import UnsupportedError


@check("PREC-2", "precision")
def check_precision_raises_instead_of_silently_disabling(target: _Target) -> None:
    """Setup and forward pass emit no warning; unsupported pairs raise.

    setup and a forward pass on the target device emit no warning: an unsupported pair
    raises UnsupportedError instead.
    """
    precision = target.make()
    device = _device(target)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        _setup(target, precision, device)
        _run_probe_step(precision, device)
    if caught:
        first = caught[0]
        raise failure(
            target,
            "PREC-2",
            expected=f"raise UnsupportedError rather than warn for {precision.flag!r} on {device}",
            actual=f"{len(caught)} warning(s), first {first.category.__name__}: {first.message}",
            hint="Check what torch.autocast / GradScaler support on the device in setup() and "
            "raise UnsupportedError; never let them warn and disable themselves.",
            snippet=snippet(
                target,
                f"import warnings\nwarnings.simplefilter('error')\n"
                f"p.setup(torch.device({str(device)!r}))"
                + _PROBE_SNIPPET.replace(
                    "torch.randn(6, 4)", f"torch.randn(6, 4, device={str(device)!r})"
                )
                + "with p.forward_context():\n    module(x)",
                var="p",
            ),
        )


@check("PREC-2", "precision")
def check_precision_setup_refuses_devices_it_cannot_compute_on(target: _Target) -> None:
    """setup(meta) raises UnsupportedError unless it really computes there.

    setup(meta) either raises UnsupportedError or the precision really computes in
    compute_dtype there.
    """
    precision = target.make()
    meta = torch.device("meta")
    if _device(target).type == "meta":
        raise CheckSkipped("the target device is meta itself")
    repro = snippet(
        target,
        "p.setup(torch.device('meta'))"
        + _PROBE_SNIPPET.replace("torch.randn(6, 4)", "torch.randn(6, 4, device='meta')")
        + "with p.forward_context():\n    print(module.to('meta')(x).dtype)",
        var="p",
    )
    try:
        precision.setup(meta)
    except UnsupportedError:
        return
    except Exception as exc:
        raise failure(
            target,
            "PREC-2",
            expected="raise UnsupportedError from setup() on a device it cannot run on",
            actual=f"setup(meta) raised {describe_exception(exc)}",
            snippet=repro,
        ) from exc
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            dtype = _run_probe_step(precision, meta)
    except Exception as exc:
        raise failure(
            target,
            "PREC-2",
            expected="raise UnsupportedError from setup() on a device it cannot run on",
            actual=f"setup(meta) succeeded, then the forward pass raised {describe_exception(exc)}",
            hint="Validate the flag against the device in setup().",
            snippet=repro,
        ) from exc
    if dtype != precision.compute_dtype:
        raise failure(
            target,
            "PREC-2",
            expected="raise UnsupportedError from setup() on a device it cannot run on",
            actual=f"setup(meta) succeeded but the forward pass computed in {dtype}, "
            f"not {precision.compute_dtype}",
            snippet=repro,
        )
