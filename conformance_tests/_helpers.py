"""Shared helpers for the behaviour checks: failure construction, snippets, checkpoint equality.

Nothing here needs pytest. The checks in ``trainspec.conformance.checks`` build their
:class:`~trainspec.conformance.core.CheckFailure` through :func:`failure` and :func:`expect_raises`
so that every message has the same shape::

    <implementation> must <expected> (<clause>); got <actual>. <how to fix>

    To reproduce:
    <snippet>

:func:`assert_checkpoints_equal` is public (re-exported by ``trainspec.conformance.strategies``):
plugin authors use it in their own round-trip tests.
"""

from __future__ import annotations

import math
import textwrap
from collections.abc import Callable, Iterator, Mapping
from typing import TYPE_CHECKING, TypeVar

from trainspec.conformance.core import CheckFailure, Target

if TYPE_CHECKING:
    import torch
    from hypothesis.strategies import SearchStrategy

__all__ = [
    "CheckpointMismatch",
    "assert_checkpoints_equal",
    "checkpoint_differences",
    "describe_exception",
    "describe_value",
    "expect_raises",
    "failure",
    "int_option",
    "run_examples",
    "snippet",
]

_E = TypeVar("_E", bound=BaseException)
_V = TypeVar("_V")


# --------------------------------------------------------------------------- failures & snippets


def _factory_lines(target: Target[object], var: str) -> list[str]:
    """Lines that rebuild ``var`` from the target's factory, importable when possible."""
    module = getattr(target.factory, "__module__", None)
    qualname = getattr(target.factory, "__qualname__", None)
    if isinstance(module, str) and isinstance(qualname, str) and "<" not in qualname:
        head, _, rest = qualname.partition(".")
        access = f"{head}.{rest}" if rest else head
        return [f"from {module} import {head}", f"{var} = {access}()"]
    return [f"{var} = factory()  # the factory of {target.display_name}"]


def snippet(target: Target[object], body: str, *, var: str = "obj", imports: str = "") -> str:
    """A minimal script reproducing a failure: imports, ``var = <factory>()``, then ``body``.

    ``body`` is dedented; ``imports`` are extra import lines placed first.
    """
    lines = ["import torch", "import trainspec"]
    lines.extend(line for line in textwrap.dedent(imports).strip().splitlines() if line)
    lines.extend(_factory_lines(target, var))
    lines.extend(textwrap.dedent(body).strip("\n").splitlines())
    return "\n".join("    " + line for line in lines)


def failure(
    target: Target[object],
    clause: str,
    *,
    expected: str,
    actual: str,
    hint: str = "",
    snippet: str = "",
) -> CheckFailure:
    """A :class:`CheckFailure` naming ``target``; the caller raises it."""
    return CheckFailure(
        clause,
        expected=expected,
        actual=actual,
        hint=hint,
        snippet=snippet,
        subject=target.display_name,
    )


def describe_exception(exc: BaseException) -> str:
    """``TypeName('message')`` with the message shortened: what a failure reports as *actual*."""
    text = str(exc)
    if len(text) > 200:
        text = text[:197] + "..."
    return f"{type(exc).__qualname__}({text!r})"


def expect_raises(
    target: Target[object],
    clause: str,
    types: type[_E] | tuple[type[_E], ...],
    call: Callable[[], object],
    *,
    expected: str,
    hint: str = "",
    snippet: str = "",
) -> _E:
    """Run ``call`` and return the exception it raises, which must be one of ``types``.

    Returns normally only with a matching exception; a missing or wrong exception becomes a
    :class:`CheckFailure` whose *actual* names what happened (the return value, or the
    exception type and message). Exception *types* are asserted, never message text.
    """
    try:
        result = call()
    except types as exc:
        return exc
    except Exception as exc:
        raise failure(
            target,
            clause,
            expected=expected,
            actual=describe_exception(exc),
            hint=hint,
            snippet=snippet,
        ) from exc
    raise failure(
        target,
        clause,
        expected=expected,
        actual=f"no exception (returned {describe_value(result)})",
        hint=hint,
        snippet=snippet,
    )


def int_option(target: Target[object], name: str, default: int) -> int:
    """An integer option of ``target`` (``default`` when absent); a non-int is a usage error."""
    value = target.options.get(name, default)
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"conformance option {name!r} must be an int, got {value!r}")
    return value


def run_examples(
    strategy: SearchStrategy[_V], test: Callable[[_V], None], *, max_examples: int
) -> None:
    """Run ``test`` on up to ``max_examples`` values of ``strategy``, derandomized.

    No example database, no deadline: the same examples on every run and machine. The first
    failure is shrunk and re-raised (a :class:`CheckFailure` stays one, about the smallest
    failing value).
    """
    from hypothesis import HealthCheck, given, settings

    @settings(
        max_examples=max_examples,
        derandomize=True,
        database=None,
        deadline=None,
        print_blob=False,
        suppress_health_check=[
            HealthCheck.too_slow,
            HealthCheck.data_too_large,
            HealthCheck.filter_too_much,
            HealthCheck.large_base_example,
        ],
    )
    @given(strategy)
    def run(value: _V) -> None:
        test(value)

    run()


# --------------------------------------------------------------------------- value descriptions


def describe_value(value: object, *, limit: int = 120) -> str:
    """A short description of ``value`` for failure messages (tensors by metadata)."""
    import torch

    if isinstance(value, torch.Tensor):
        return (
            f"tensor(dtype={value.dtype}, shape={tuple(value.shape)}, "
            f"stride={value.stride()}, device={value.device})"
        )
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


# --------------------------------------------------------------------------- checkpoint equality


class CheckpointMismatch(AssertionError):
    """Two checkpoints differ; ``differences`` lists every difference found (path: what)."""

    def __init__(self, differences: list[str]) -> None:
        self.differences = differences
        shown = differences[:10]
        more = f"\n  ... and {len(differences) - 10} more" if len(differences) > 10 else ""
        super().__init__("checkpoints differ:\n  " + "\n  ".join(shown) + more)


def _tensor_bytes(tensor: torch.Tensor) -> torch.Tensor:
    """The tensor's values as a flat uint8 tensor (bit-exact, NaN payloads included)."""
    import torch

    if tensor.numel() == 0:
        # An empty tensor may keep a non-unit stride after contiguous(); it has no bytes.
        return torch.empty(0, dtype=torch.uint8)
    source = tensor.detach().to("cpu")
    # contiguous() keeps odd strides on size-1 dims (the tensor already counts as contiguous),
    # and view(uint8) needs a unit last stride: copy into freshly laid-out memory.
    flat = torch.empty(source.shape, dtype=source.dtype).copy_(source).reshape(-1)
    if flat.dtype == torch.uint8:
        return flat
    return flat.view(torch.uint8)


def _compare_tensors(
    path: str, a: torch.Tensor, b: torch.Tensor, check_device: bool, out: list[str]
) -> None:
    if type(a) is not type(b):
        out.append(f"{path}: type {type(a).__qualname__} != {type(b).__qualname__}")
    if a.dtype != b.dtype:
        out.append(f"{path}: dtype {a.dtype} != {b.dtype}")
        return
    if a.shape != b.shape:
        out.append(f"{path}: shape {tuple(a.shape)} != {tuple(b.shape)}")
        return
    if a.stride() != b.stride() and a.numel() > 1:
        out.append(f"{path}: stride {a.stride()} != {b.stride()}")
    if check_device and a.device != b.device:
        out.append(f"{path}: device {a.device} != {b.device}")
    if a.is_meta or b.is_meta:
        return
    bytes_a, bytes_b = _tensor_bytes(a), _tensor_bytes(b)
    if not bool((bytes_a == bytes_b).all()):
        # Report the first differing element, not the first differing byte.
        size = max(a.element_size(), 1)
        first = int((bytes_a != bytes_b).nonzero()[0, 0]) // size
        flat_a = a.detach().to("cpu").contiguous().reshape(-1)
        flat_b = b.detach().to("cpu").contiguous().reshape(-1)
        out.append(
            f"{path}: values differ (first at flat index {first}: "
            f"{flat_a[first].item()!r} != {flat_b[first].item()!r})"
        )


def _is_float_value(value: object) -> bool:
    return type(value) is float


def _walk(
    path: str,
    a: object,
    b: object,
    check_device: bool,
    out: list[str],
    tensors: list[tuple[str, torch.Tensor, torch.Tensor]],
) -> None:
    import torch

    if type(a) is not type(b) and not (isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor)):
        out.append(f"{path}: type {type(a).__qualname__} != {type(b).__qualname__}")
        return
    if isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor):
        _compare_tensors(path, a, b, check_device, out)
        tensors.append((path, a, b))
    elif isinstance(a, Mapping) and isinstance(b, Mapping):
        keys_a, keys_b = list(a.keys()), list(b.keys())
        if set(keys_a) != set(keys_b):
            missing = [k for k in keys_a if k not in b]
            extra = [k for k in keys_b if k not in a]
            out.append(f"{path}: keys differ (missing {missing!r}, unexpected {extra!r})")
        for key in keys_a:
            if key in b:
                _walk(f"{path}[{key!r}]", a[key], b[key], check_device, out, tensors)
    elif isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        if len(a) != len(b):
            out.append(f"{path}: length {len(a)} != {len(b)}")
            return
        for index, (item_a, item_b) in enumerate(zip(a, b, strict=True)):
            _walk(f"{path}[{index}]", item_a, item_b, check_device, out, tensors)
    elif _is_float_value(a) and _is_float_value(b):
        fa, fb = float(a), float(b)  # type: ignore[arg-type]
        same = (math.isnan(fa) and math.isnan(fb)) or (
            fa == fb and math.copysign(1.0, fa) == math.copysign(1.0, fb)
        )
        if not same:
            out.append(f"{path}: {fa!r} != {fb!r}")
    else:
        try:
            equal = bool(a == b)
        except Exception as exc:  # an object whose __eq__ fails cannot be shown equal
            out.append(f"{path}: cannot compare ({describe_exception(exc)})")
            return
        if not equal:
            out.append(f"{path}: {describe_value(a)} != {describe_value(b)}")


def _sharing_groups(
    tensors: list[tuple[str, torch.Tensor]],
) -> Iterator[list[tuple[str, torch.Tensor]]]:
    """Groups (size >= 1) of tensors sharing one storage; empty and meta storages excluded."""
    groups: dict[tuple[str, int], list[tuple[str, torch.Tensor]]] = {}
    for path, tensor in tensors:
        if tensor.is_meta or tensor.untyped_storage().nbytes() == 0:
            continue
        key = (str(tensor.device), tensor.untyped_storage().data_ptr())
        groups.setdefault(key, []).append((path, tensor))
    yield from groups.values()


def _compare_sharing(tensors: list[tuple[str, torch.Tensor, torch.Tensor]], out: list[str]) -> None:
    def partition(which: int) -> dict[str, tuple[int, int]]:
        """path -> (group id, byte offset within the group relative to its first member)."""
        members = [(p, pair[which]) for p, *pair in tensors]
        result: dict[str, tuple[int, int]] = {}
        for group_id, group in enumerate(_sharing_groups(members)):
            first = group[0][1]
            for path, tensor in group:
                rel = int(tensor.storage_offset() - first.storage_offset()) * tensor.element_size()
                result[path] = (group_id, rel)
        return result

    part_a, part_b = partition(0), partition(1)
    paths = [p for p, _, _ in tensors]
    for i, first in enumerate(paths):
        for second in paths[i + 1 :]:
            if first not in part_a or second not in part_a:
                continue
            shared_a = part_a[first][0] == part_a[second][0]
            shared_b = (
                first in part_b and second in part_b and part_b[first][0] == part_b[second][0]
            )
            if shared_a and not shared_b:
                out.append(f"{first} and {second} share storage in the original but not after")
            elif shared_b and not shared_a:
                out.append(f"{first} and {second} share storage after but not in the original")
            elif shared_a and shared_b:
                offset_a = part_a[second][1] - part_a[first][1]
                offset_b = part_b[second][1] - part_b[first][1]
                if offset_a != offset_b:
                    out.append(
                        f"{first} and {second} share storage at relative byte offset "
                        f"{offset_a} in the original but {offset_b} after"
                    )


def checkpoint_differences(
    expected: object,
    actual: object,
    *,
    check_sharing: bool = True,
    check_device: bool = True,
) -> list[str]:
    """Every difference between two checkpoints, as ``"<path>: <what>"`` strings.

    Compared: exact Python types (``tuple`` is not ``list``, ``bool`` is not ``int``), mapping
    keys, sequence lengths; tensors by type, dtype, shape, strides, device (unless
    ``check_device`` is false) and bit-exact values (so NaN positions and ``-0.0`` count);
    floats with NaN equal to NaN; other values with ``==``. With ``check_sharing``, tensors that
    share storage in ``expected`` must share it (at the same relative offset) in ``actual`` and
    vice versa. An empty list means equal.
    """
    out: list[str] = []
    tensors: list[tuple[str, torch.Tensor, torch.Tensor]] = []
    _walk("checkpoint", expected, actual, check_device, out, tensors)
    if check_sharing:
        _compare_sharing(tensors, out)
    return out


def assert_checkpoints_equal(
    expected: object,
    actual: object,
    *,
    check_sharing: bool = True,
    check_device: bool = True,
) -> None:
    """Raise :class:`CheckpointMismatch` (an ``AssertionError``) unless the checkpoints are equal.

    Equality is :func:`checkpoint_differences` finding nothing: structure and exact Python types,
    tensor dtype, shape, strides, device and bit-exact values, and the storage-sharing structure.
    """
    differences = checkpoint_differences(
        expected, actual, check_sharing=check_sharing, check_device=check_device
    )
    if differences:
        raise CheckpointMismatch(differences)
