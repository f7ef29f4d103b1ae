"""PREC-3, PREC-4: convert_module leaves non-float tensors unchanged, and convert_input casts
only floating-point tensors."""

from __future__ import annotations

import torch

from trainspec.conformance._helpers import describe_exception, describe_value, failure, snippet
from trainspec.conformance.checks.precision._fixtures import _probe, _ready, _Target
from trainspec.conformance.core import check

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
