"""Behaviour checks for :class:`trainspec.Precision` (clauses PREC-1 ... PREC-12).

Every check makes a fresh precision with ``target.make()``, calls ``setup(device)`` and drives
a small probe module (two ``Linear`` layers, a float buffer, an ``int64`` and a ``bool``
buffer) through the lifecycle. When ``setup`` raises :class:`~trainspec.UnsupportedError` for
the device (allowed by PREC-2) the device-bound checks are skipped.

Gradient checks compare with a reference computed by plain autograd on a deep copy of the
converted module, in the parameter dtype, outside any precision context; tolerances are loose
(5 %) because mixed precisions compute in half precision, and the faults they catch (a missing
or doubled unscale) are off by the loss scale.

Options read from ``target.options``:

``device`` (str or torch.device, default ``"cpu"``)
    The device training runs on: passed to ``setup`` and used for every tensor.
"""

from __future__ import annotations

import copy
import functools
import warnings
from contextlib import AbstractContextManager, contextmanager
from typing import TYPE_CHECKING, Final

import torch
from torch import nn

from trainspec.conformance._helpers import (
    checkpoint_differences,
    describe_exception,
    describe_value,
    expect_raises,
    failure,
    snippet,
)
from trainspec.conformance.core import CheckSkipped, Target, check
from trainspec.errors import ConfigurationError, UnsupportedError
from trainspec.precision import Precision
from trainspec.types import PRECISION_FLAGS, PrecisionFlag

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator, Mapping

__all__ = ["CAPABILITIES", "FLAG_DTYPES"]

CAPABILITIES: Final[dict[str, str]] = {
    "gradient_scaling": "backward scales the loss; optimizer_step unscales, skips steps with "
    "non-finite gradients and lowers the scale (PREC-9); without it every step is taken "
    "(PREC-10)",
    "autocast": "forward_context enables torch.autocast for the device in compute_dtype",
}

FLAG_DTYPES: Final[Mapping[PrecisionFlag, tuple[torch.dtype, torch.dtype]]] = {
    "32-true": (torch.float32, torch.float32),
    "64-true": (torch.float64, torch.float64),
    "16-true": (torch.float16, torch.float16),
    "bf16-true": (torch.bfloat16, torch.bfloat16),
    "16-mixed": (torch.float32, torch.float16),
    "bf16-mixed": (torch.float32, torch.bfloat16),
}
"""PREC-1: flag -> (parameter dtype, compute dtype)."""

_Target = Target[Precision]
_RTOL: Final = 0.05


class _BodyError(Exception):
    """Raised inside a precision context to test exit by exception."""


def _device(target: _Target) -> torch.device:
    value = target.options.get("device", "cpu")
    if not isinstance(value, (str, torch.device)):
        raise TypeError(f"conformance option 'device' must be a str or torch.device: {value!r}")
    return torch.device(value)


def _setup(target: _Target, precision: Precision, device: torch.device) -> None:
    """``precision.setup(device)``; UnsupportedError skips, anything else fails PREC-2."""
    try:
        precision.setup(device)
    except UnsupportedError as exc:
        raise CheckSkipped(
            f"{precision.flag!r} is not supported on {device} ({describe_exception(exc)})"
        ) from exc
    except Exception as exc:
        raise failure(
            target,
            "PREC-2",
            expected=f"either set up on {device} or raise UnsupportedError",
            actual=describe_exception(exc),
            snippet=snippet(target, f"p.setup(torch.device({str(device)!r}))", var="p"),
        ) from exc


def _ready(target: _Target) -> tuple[Precision, torch.device]:
    precision = target.make()
    device = _device(target)
    _setup(target, precision, device)
    return precision, device


class _Probe(nn.Module):
    """Two linear layers with a float, an int64 and a bool buffer."""

    def __init__(self) -> None:
        super().__init__()
        self.first = nn.Linear(4, 8)
        self.second = nn.Linear(8, 2)
        self.register_buffer("running", torch.ones(3))
        self.register_buffer("steps", torch.tensor([7, -3], dtype=torch.int64))
        self.register_buffer("mask", torch.tensor([True, False]))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        hidden: torch.Tensor = torch.relu(self.first(x))
        out: torch.Tensor = self.second(hidden)
        return out


def _probe(device: torch.device) -> _Probe:
    generator = torch.Generator().manual_seed(0)
    module = _Probe()
    with torch.no_grad():
        for param in module.parameters():
            param.copy_(torch.randn(param.shape, generator=generator) * 0.5)
    return module.to(device)


def _probe_input(device: torch.device) -> torch.Tensor:
    generator = torch.Generator().manual_seed(1)
    return torch.randn(6, 4, generator=generator).to(device)


_PROBE_SNIPPET = """
module = p.convert_module(torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(),
                                              torch.nn.Linear(8, 2)))
x = p.convert_input(torch.randn(6, 4))
"""


def _loss(output: torch.Tensor) -> torch.Tensor:
    # Small enough that a 2**16 loss scale does not overflow float16 gradients.
    return output.float().mean() * 2.0**-6


def _forward_loss(precision: Precision, module: nn.Module, x: torch.Tensor) -> torch.Tensor:
    with precision.forward_context():
        return _loss(module(x))


def _reference_grads(
    precision: Precision, module: nn.Module, x: torch.Tensor
) -> list[torch.Tensor]:
    """Gradients of the probe loss by plain autograd on a copy, in the parameter dtype."""
    reference = copy.deepcopy(module)
    for param in reference.parameters():
        param.grad = None
    dtype = next(reference.parameters()).dtype
    torch.autograd.backward(_loss(reference(x.to(dtype))))
    return [
        (p.grad if p.grad is not None else torch.zeros_like(p)).detach().float().clone()
        for p in reference.parameters()
    ]


def _grads(module: nn.Module) -> list[torch.Tensor]:
    return [
        (p.grad if p.grad is not None else torch.zeros_like(p)).detach().float().clone()
        for p in module.parameters()
    ]


def _close(actual: list[torch.Tensor], expected: list[torch.Tensor]) -> bool:
    scale = max(float(e.abs().max()) for e in expected) if expected else 0.0
    return all(
        bool(torch.isfinite(a).all())
        and torch.allclose(a, e, rtol=_RTOL, atol=_RTOL * max(scale, 1e-12))
        for a, e in zip(actual, expected, strict=True)
    )


def _ratio(actual: list[torch.Tensor], expected: list[torch.Tensor]) -> float:
    """|actual| / |expected| summed over all gradients: the applied loss scale."""
    num = sum(float(a.abs().sum()) for a in actual)
    den = sum(float(e.abs().sum()) for e in expected)
    return num / den if den else float("nan")


def _setting_up(target: _Target) -> tuple[Precision, torch.device, nn.Module, torch.Tensor]:
    precision, device = _ready(target)
    module = precision.convert_module(_probe(device))
    x = precision.convert_input(_probe_input(device))
    return precision, device, module, x


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


@check("PREC-1", "precision")
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
            "PREC-1",
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


@check("PREC-1", "precision")
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
            "PREC-1",
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


# --------------------------------------------------------------------------- PREC-2


def _run_probe_step(precision: Precision, device: torch.device) -> torch.dtype:
    module = precision.convert_module(_probe(device))
    x = precision.convert_input(_probe_input(device))
    with precision.forward_context():
        out: torch.Tensor = module(x)
    return out.dtype


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


# --------------------------------------------------------------------------- PREC-3, PREC-4


@check("PREC-3", "precision")
def check_precision_convert_module_leaves_non_float_tensors_unchanged(target: _Target) -> None:
    """convert_module keeps integer and bool buffers' dtypes and values."""
    precision, device = _ready(target)
    module = precision.convert_module(_probe(device))
    buffers = dict(module.named_buffers())
    expected = {
        "steps": torch.tensor([7, -3], dtype=torch.int64),
        "mask": torch.tensor([True, False]),
    }
    bad = {
        name: describe_value(buffers.get(name))
        for name, value in expected.items()
        if name not in buffers
        or buffers[name].dtype != value.dtype
        or not torch.equal(buffers[name].cpu(), value)
    }
    if bad:
        raise failure(
            target,
            "PREC-3",
            expected="leave non-floating-point buffers unchanged in convert_module",
            actual=f"{bad}",
            hint="Cast only tensors with is_floating_point(); module.to(dtype) does this.",
            snippet=snippet(
                target,
                """
                m = torch.nn.Module()
                m.register_buffer("steps", torch.tensor([7, -3]))
                print(p.convert_module(m).steps)
                """,
                var="p",
            ),
        )


def _converted_parts(
    out: object, keys: set[str]
) -> tuple[object, object, object, tuple[object, ...]] | None:
    """(x, ids, nested[0], nested[1]) of convert_input's result, or None if its structure
    differs from the input's."""
    if type(out) is not dict or set(out) != keys:
        return None
    nested = out["nested"]
    if type(nested) is not list or len(nested) != 2:
        return None
    leaf = nested[1]
    if type(leaf) is not tuple or len(leaf) != 5:
        return None
    return out["x"], out["ids"], nested[0], leaf


def _conversion_problems(
    parts: tuple[object, object, object, tuple[object, ...]],
    originals: tuple[torch.Tensor, torch.Tensor, torch.Tensor, tuple[object, ...]],
    allowed: set[torch.dtype],
) -> list[str]:
    new_x, new_ids, new_doubles, leaf = parts
    floats, ids, doubles, old_leaf = originals
    problems: list[str] = []
    for name, old, new in (("x", floats, new_x), ("nested[0]", doubles, new_doubles)):
        if not isinstance(new, torch.Tensor) or new.dtype not in allowed:
            problems.append(f"{name}: {describe_value(new)} (allowed dtypes {allowed})")
        elif not torch.allclose(new.double().cpu(), old.double().cpu(), rtol=1e-2, atol=1e-2):
            problems.append(f"{name}: values changed beyond rounding")
    if (
        isinstance(new_x, torch.Tensor)
        and isinstance(new_doubles, torch.Tensor)
        and new_x.dtype != new_doubles.dtype
    ):
        problems.append(f"floating tensors got different dtypes {new_x.dtype}, {new_doubles.dtype}")
    mask = old_leaf[4]
    assert isinstance(mask, torch.Tensor)
    for name, old, new in (("ids", ids, new_ids), ("nested[1][4]", mask, leaf[4])):
        if (
            not isinstance(new, torch.Tensor)
            or new.dtype != old.dtype
            or not torch.equal(new.cpu(), old.cpu())
        ):
            problems.append(f"{name}: {describe_value(new)} changed (was {old.dtype})")
    for index, old_value in enumerate(old_leaf[:4]):
        if type(leaf[index]) is not type(old_value) or leaf[index] != old_value:
            problems.append(f"nested[1][{index}]: {leaf[index]!r} (was {old_value!r})")
    return problems


@check("PREC-4", "precision")
def check_precision_convert_input_casts_only_floating_tensors(target: _Target) -> None:
    """convert_input casts only floating-point tensors, keeping the structure.

    convert_input casts floating tensors to one module dtype and keeps everything else, and
    the structure, unchanged.
    """
    precision, device = _ready(target)
    floats = torch.linspace(-2, 2, 6, device=device).reshape(2, 3)
    doubles = torch.arange(3, dtype=torch.float64, device=device)
    ids = torch.tensor([1, 2, 3], device=device)
    mask = torch.tensor([True, False], device=device)
    text, number, nothing, ratio = "text", 3, None, 1.5
    data = {"x": floats, "ids": ids, "nested": [doubles, (text, number, nothing, ratio, mask)]}
    repro = snippet(
        target,
        f"""
        p.setup(torch.device({str(device)!r}))
        out = p.convert_input({{"x": torch.ones(2, 3), "ids": torch.tensor([1, 2, 3]),
                               "nested": [torch.arange(3.0, dtype=torch.float64),
                                          ("text", 3, None, 1.5, torch.tensor([True]))]}})
        print(out)
        """,
        var="p",
    )
    try:
        out = precision.convert_input(data)
    except Exception as exc:
        raise failure(
            target,
            "PREC-4",
            expected="convert nested dicts, lists and tuples with non-tensor leaves",
            actual=describe_exception(exc),
            snippet=repro,
        ) from exc
    allowed = {precision.param_dtype, precision.compute_dtype}
    parts = _converted_parts(out, set(data))
    if parts is None:
        problems = [f"structure changed: got {describe_value(out, limit=200)}"]
    else:
        problems = _conversion_problems(
            parts, (floats, ids, doubles, (text, number, nothing, ratio, mask)), allowed
        )
    if problems:
        raise failure(
            target,
            "PREC-4",
            expected="cast only floating-point tensors, to the module's dtype, keeping the "
            "structure and every other value",
            actual="; ".join(problems),
            hint="Recurse into dicts, lists and tuples, rebuilding each container with its "
            "own type; cast tensors with is_floating_point() only.",
            snippet=repro,
        )


# --------------------------------------------------------------------------- PREC-5, PREC-6


@contextmanager
def _default_dtype(dtype: torch.dtype) -> Iterator[None]:
    saved = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        yield
    finally:
        torch.set_default_dtype(saved)


def _exit_both_ways(
    target: _Target,
    clause: str,
    context_name: str,
    state_name: str,
    make_context: Callable[[], AbstractContextManager[None]],
    state: Callable[[], object],
    arrange: Callable[[], Iterator[None]],
    repro: str,
) -> None:
    """Enter the context (normal exit, then exit by exception) under each arrangement and
    compare ``state()`` before and after."""
    for how in ("normally", "by an exception"):
        with contextmanager(arrange)():
            before = state()
            context = make_context()
            try:
                with context:
                    if how != "normally":
                        raise _BodyError("raised inside the context by the conformance check")
            except _BodyError:
                pass
            else:
                if how != "normally":
                    raise failure(
                        target,
                        clause,
                        expected=f"propagate an exception raised inside {context_name}",
                        actual="the exception was swallowed",
                        hint="Do not return True from __exit__ / catch in the generator.",
                        snippet=repro,
                    )
            after = state()
        if before != after:
            raise failure(
                target,
                clause,
                expected=f"restore {state_name} on exit from {context_name}, exited {how}",
                actual=f"before {before}, after {after}",
                hint="Save the state on entry and restore it in a finally block (or use "
                "torch's own context managers).",
                snippet=repro,
            )


@check("PREC-5", "precision")
def check_precision_module_init_context_restores_default_dtype(target: _Target) -> None:
    """module_init_context restores the default dtype on exit, even when the body raises."""
    precision, _ = _ready(target)
    for start in (torch.float32, torch.float64):

        def arrange(start: torch.dtype = start) -> Iterator[None]:
            with _default_dtype(start):
                yield

        _exit_both_ways(
            target,
            "PREC-5",
            "module_init_context()",
            "the default dtype",
            precision.module_init_context,
            torch.get_default_dtype,
            arrange,
            snippet(
                target,
                f"""
                torch.set_default_dtype({start})
                try:
                    with p.module_init_context():
                        raise RuntimeError
                except RuntimeError:
                    pass
                print(torch.get_default_dtype())  # expected {start}
                """,
                var="p",
            ),
        )


@check("PREC-5", "precision")
def check_precision_forward_context_restores_default_dtype(target: _Target) -> None:
    """forward_context restores the default dtype on exit, even when the body raises."""
    precision, _ = _ready(target)
    for start in (torch.float32, torch.float64):

        def arrange(start: torch.dtype = start) -> Iterator[None]:
            with _default_dtype(start):
                yield

        _exit_both_ways(
            target,
            "PREC-5",
            "forward_context()",
            "the default dtype",
            precision.forward_context,
            torch.get_default_dtype,
            arrange,
            snippet(
                target,
                f"""
                torch.set_default_dtype({start})
                try:
                    with p.forward_context():
                        raise RuntimeError
                except RuntimeError:
                    pass
                print(torch.get_default_dtype())  # expected {start}
                """,
                var="p",
            ),
        )


@contextmanager
def _restoring_autocast(device: torch.device) -> Iterator[None]:
    """Put every device type's autocast state back afterwards, so that a leaking precision
    does not break the checks that run after this one."""
    kinds = [k for k in dict.fromkeys(("cpu", "cuda", device.type)) if k != "meta"]
    saved = [(k, torch.is_autocast_enabled(k), torch.get_autocast_dtype(k)) for k in kinds]
    cache = torch.is_autocast_cache_enabled()
    try:
        yield
    finally:
        for kind, enabled, dtype in saved:
            torch.set_autocast_enabled(kind, enabled)
            torch.set_autocast_dtype(kind, dtype)
        torch.set_autocast_cache_enabled(cache)


def _autocast_state(device: torch.device) -> dict[str, object]:
    state: dict[str, object] = {"cache_enabled": torch.is_autocast_cache_enabled()}
    for kind in dict.fromkeys(("cpu", "cuda", device.type)):
        try:
            state[kind] = (torch.is_autocast_enabled(kind), torch.get_autocast_dtype(kind))
        except RuntimeError:  # a device type without autocast (meta)
            continue
    return state


@check("PREC-6", "precision")
def check_precision_forward_context_restores_autocast_state(target: _Target) -> None:
    """forward_context restores the autocast state, even when the body raises.

    forward_context restores every device type's autocast state on exit, even when the body
    raises, also when an outer autocast is active.
    """
    precision, device = _ready(target)

    def plain() -> Iterator[None]:
        yield

    def outer_autocast() -> Iterator[None]:
        with torch.autocast("cpu", dtype=torch.bfloat16, cache_enabled=False):
            yield

    for arrange, label in ((plain, "no outer autocast"), (outer_autocast, "outer cpu autocast")):
        with _restoring_autocast(device):
            _exit_both_ways(
                target,
                "PREC-6",
                f"forward_context() ({label})",
                "every device type's autocast state",
                precision.forward_context,
                lambda: _autocast_state(device),
                arrange,
                snippet(
                    target,
                    f"""
                    p.setup(torch.device({str(device)!r}))
                    try:
                        with p.forward_context():
                            raise RuntimeError
                    except RuntimeError:
                        pass
                    print(torch.is_autocast_enabled({device.type!r}),
                          torch.get_autocast_dtype({device.type!r}))
                    """,
                    var="p",
                ),
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


# --------------------------------------------------------------------------- PREC-9, PREC-10


def _measure_scale(
    precision: Precision, module: nn.Module, x: torch.Tensor, optimizer: torch.optim.Optimizer
) -> float:
    optimizer.zero_grad(set_to_none=True)
    expected = _reference_grads(precision, module, x)
    precision.backward(_forward_loss(precision, module, x), module)
    return _ratio(_grads(module), expected)


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
            "call optimizer.step() unconditionally.",
            snippet=_step_snippet(
                target,
                device,
                "p.backward(loss, module)\nmodule[0].weight.grad[0, 0] = float('inf')\n"
                "print(p.optimizer_step(opt))",
            ),
        )


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
