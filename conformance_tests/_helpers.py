"""Shared helpers for the behaviour checks: failure construction, snippets, checkpoint equality.

Nothing here needs pytest. The checks in ``trainspec.conformance.checks`` build their
:class:`~trainspec.conformance.core.CheckFailure` through :func:`failure` and :func:`expect_raises`
so that every message has the same shape::

    <implementation> must <expected> (<clause>); got <actual>. <how to fix>

    To reproduce:
    <snippet>

:func:`assert_checkpoints_equal` is public (re-exported by
``trainspec.conformance.hypothesis_strategies``): plugin authors use it in their own round-trip
tests.
"""

from __future__ import annotations

import math
import sys
import textwrap
from collections.abc import Callable, Iterator, Mapping
from typing import TYPE_CHECKING, TypeVar, cast

from trainspec.conformance.core import CheckFailure, Target
from trainspec.reference._messages import describe_value as _describe_any

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
    "importable_path",
    "int_option",
    "qualified_name",
    "refusal_or_bug_hint",
    "run_examples",
    "snippet",
    "value_source",
]

_E = TypeVar("_E", bound=BaseException)
_V = TypeVar("_V")


# --------------------------------------------------------------------------- failures & snippets


def qualified_name(obj: object) -> tuple[str, str] | None:
    """``(obj.__module__, obj.__qualname__)`` when both are strings and the name is not
    local (a lambda, a function defined inside another, ``<locals>``); else ``None``.

    The one place the kit reads a factory's import path (``"module:qualname"``) from:
    :func:`importable_path` (snippets, the CKPT-3 kill server) and
    :func:`trainspec.conformance.distributed.factory_path` build on it.
    """
    module = getattr(obj, "__module__", None)
    qualname = getattr(obj, "__qualname__", None)
    if not isinstance(module, str) or not isinstance(qualname, str) or "<" in qualname:
        return None
    return module, qualname


def importable_path(obj: object) -> tuple[str, str] | None:
    """``(module, qualname)`` under which ``obj`` can be imported, or ``None``.

    Follows ``__wrapped__`` (a wrapper the runner or a decorator put around a factory; never
    on a class) and accepts a path only if importing it gives back the very same object, so a
    snippet, or a fresh process, never imports something else under the right name.
    """
    obj = _unwrap(obj)
    named = qualified_name(obj)
    if named is None:
        return None
    module, qualname = named
    if module == "__main__":  # a script's own objects: another script cannot import them
        return None
    found: object = sys.modules.get(module)
    for part in qualname.split("."):
        found = getattr(found, part, None)
    return (module, qualname) if found is obj else None


def _unwrap(obj: object) -> object:
    for _ in range(100):  # a cycle of __wrapped__ must not hang a failure message
        inner = getattr(obj, "__wrapped__", None)
        if inner is None or inner is obj or isinstance(obj, type):
            return obj
        obj = inner
    return obj


def _factory_expression(target: Target[object]) -> tuple[list[str], str] | None:
    """Import lines and an expression that is the target's factory, when it is importable."""
    path = importable_path(target.factory)
    if path is None:
        return None
    module, qualname = path
    head = qualname.partition(".")[0]
    return [f"from {module} import {head}"], qualname


def _factory_lines(target: Target[object], var: str) -> list[str]:
    """Lines that rebuild ``var`` from the target's factory, imported by its path."""
    found = _factory_expression(target)
    if found is None:
        return [
            f"{var} = factory()  # the factory of {target.display_name}: not importable by "
            "its path (a lambda or local function); define it here"
        ]
    imports, expression = found
    return [*imports, f"{var} = {expression}()"]


def _source_literal(value: object) -> str | None:
    """Python source that evaluates to ``value`` (an option value), or ``None``."""
    if value is None or isinstance(value, (bool, int, str, bytes)):
        return repr(value)
    if isinstance(value, float):
        return repr(value) if math.isfinite(value) else f"float({str(value)!r})"
    if isinstance(value, (list, tuple, set, frozenset)):
        items = [_source_literal(item) for item in value]
        if any(item is None for item in items):
            return None
        body = ", ".join(str(item) for item in items)
        if isinstance(value, list):
            return f"[{body}]"
        if isinstance(value, tuple):
            return f"({body}{',' if len(items) == 1 else ''})"
        return f"{type(value).__name__}({{{body}}})" if items else f"{type(value).__name__}()"
    if isinstance(value, Mapping):
        pairs = [(_source_literal(k), _source_literal(v)) for k, v in value.items()]
        if any(k is None or v is None for k, v in pairs):
            return None
        return "{" + ", ".join(f"{k}: {v}" for k, v in pairs) + "}"
    return None


def _calling_check() -> tuple[str, str] | None:
    """``(module, name)`` of the registered check function this call is running inside."""
    frame = sys._getframe(1)
    while frame is not None:
        code = frame.f_code
        if code.co_name.startswith("check_"):
            func = frame.f_globals.get(code.co_name)
            module = frame.f_globals.get("__name__")
            if getattr(func, "__code__", None) is code and isinstance(module, str):
                return module, code.co_name
        frame = frame.f_back  # type: ignore[assignment]
    return None


def _public_check_module(module: str) -> str:
    """The module a script imports check functions from: a module of a kind's check package
    (``trainspec.conformance.checks.checkpoint_io.roundtrip``) is re-exported by the package."""
    prefix = "trainspec.conformance.checks."
    if module.startswith(prefix) and module.count(".") > prefix.count("."):
        return module.rsplit(".", module.count(".") - prefix.count("."))[0]
    return module


def _rerun_lines(target: Target[object], check: tuple[str, str]) -> tuple[list[str], str] | None:
    """Import lines and the call that runs the kit's check ``check`` on ``target`` again."""
    module, name = check
    if module.startswith("trainspec.conformance.distributed"):
        return None  # runs on the ranks of a world, not in a script
    found = _factory_expression(target)
    if found is None:
        return None
    imports, expression = found
    public = _public_check_module(module)
    imports = [*imports, "from trainspec.conformance import Target", f"from {public} import {name}"]
    options: list[str] = []
    for key, value in target.options.items():
        source = _source_literal(value)
        if source is None:
            path = importable_path(value)
            if path is None:
                return None  # an option the script cannot rebuild: no re-run
            imports.append(f"from {path[0]} import {path[1].partition('.')[0]}")
            source = path[1]
        options.append(f"{key!r}: {source}")
    capabilities = ", ".join(repr(c) for c in sorted(target.capabilities))
    call = (
        f"{name}(Target({target.kind!r}, {expression}, name={target.display_name!r}, "
        f"capabilities=frozenset({{{capabilities}}}), options={{{', '.join(options)}}}))"
    )
    return imports, call


def snippet(target: Target[object], body: str, *, var: str = "obj", imports: str = "") -> str:
    """A script reproducing a failure, runnable as printed.

    It imports torch, trainspec, the extra ``imports`` and the target's factory by its import
    path. When the snippet is built inside a registered check, it first runs that check on the
    same target (factory, name, capabilities, options), which raises the same
    :class:`~trainspec.conformance.core.CheckFailure` (an ``AssertionError``) as the kit; then,
    in a ``finally``, the minimal illustration: ``var = <factory>()`` and ``body`` (dedented),
    whose own exception (if the implementation raises one) is printed. Running the check
    first keeps the illustration's side effects (an environment variable, a default dtype)
    from changing the check's verdict. Otherwise the snippet is the illustration alone.
    """
    lines = ["import torch", "import trainspec"]
    lines.extend(line for line in textwrap.dedent(imports).strip().splitlines() if line)
    illustration = textwrap.dedent(body).strip("\n").splitlines()
    check = _calling_check()
    rerun = _rerun_lines(target, check) if check is not None else None
    if rerun is None:
        lines.extend(_factory_lines(target, var))
        lines.extend(illustration)
        return "\n".join("    " + line if line else "" for line in lines)
    rerun_imports, call = rerun
    lines.extend(line for line in dict.fromkeys(rerun_imports) if line not in lines)
    make = _factory_lines(target, var)[-1]
    lines.extend(
        [
            "try:",
            "    # The kit's check on the same target: raises the AssertionError reported above.",
            f"    {call}",
            "finally:",
            "    # What the check does, in short (the implementation's own errors are printed):",
            "    try:",
            f"        {make}",
            *(f"        {line}" if line.strip() else "" for line in illustration),
            "    except Exception as error:",
            "        print(f'raised {type(error).__name__}: {error}')",
        ]
    )
    return "\n".join("    " + line if line else "" for line in lines)


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


def refusal_or_bug_hint(exc: BaseException, declare: str) -> str:
    """The hint for ``exc``, raised by an implementation on input inside its declared set.

    A ``TypeError``, ``ValueError`` or ``NotImplementedError`` may be the format refusing a
    value it cannot store: then ``declare`` (how to declare less) is the advice, next to
    fixing it. Any other exception is a plain bug, and declaring fewer capabilities would
    only hide it.
    """
    name = type(exc).__name__
    if isinstance(exc, (TypeError, ValueError, NotImplementedError)):
        return f"If the format cannot store this value, {declare}; otherwise fix the {name}."
    return (
        f"The implementation raised {name} on a value inside its declared set: a bug to fix "
        "(the traceback shows where), not a capability to declare."
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
    """A short description of ``value`` for failure messages: tensors by metadata, anything
    else by :func:`trainspec.reference._messages.describe_value` (the one value describer:
    never raises, cut after ``limit`` characters)."""
    import torch

    if isinstance(value, torch.Tensor):
        return (
            f"tensor(dtype={value.dtype}, shape={tuple(value.shape)}, "
            f"stride={value.stride()}, device={value.device})"
        )
    return _describe_any(value, limit)


# --------------------------------------------------------------------------- exact inputs

_INLINE_BYTES_LIMIT = 1 << 16
"""Storages up to this size are written into a snippet byte for byte; larger ones are not."""


def value_source(value: object, var: str) -> str:
    """Lines of Python that rebuild ``value`` exactly as ``var``, for a "To reproduce" snippet.

    Tensors keep their dtype, shape, strides, storage offset, device and bit-exact values
    (NaN payloads, ``-0.0``): each storage is written once as bytes and every tensor is an
    ``as_strided`` view of it, so tensors that share storage in ``value`` share it in the
    rebuilt value too. Containers (dict, list, tuple), scalars, strings, bytes and None are
    written as literals; anything else as ``repr`` with a comment. Storages larger than 64 KiB
    are rebuilt with zeros (the values are left out, with a comment).
    """
    import torch

    lines: list[str] = []
    storages: dict[tuple[str, int], str] = {}

    def storage_name(tensor: torch.Tensor) -> str:
        storage = tensor.untyped_storage()
        key = (str(tensor.device), storage.data_ptr())
        name = storages.get(key)
        if name is not None:
            return name
        name = f"_storage{len(storages)}"
        storages[key] = name
        nbytes = storage.nbytes()
        if nbytes <= _INLINE_BYTES_LIMIT:
            data = bytes(
                torch.empty(0, dtype=torch.uint8, device=storage.device)
                .set_(storage)
                .cpu()
                .tolist()
            )
            lines.append(
                f"{name} = torch.frombuffer(bytearray(bytes.fromhex({data.hex()!r})), "
                "dtype=torch.uint8)"
                if data
                else f"{name} = torch.empty(0, dtype=torch.uint8)"
            )
        else:
            lines.append(
                f"{name} = torch.zeros({nbytes}, dtype=torch.uint8)  # {nbytes} bytes: values "
                "left out"
            )
        return name

    def tensor_source(tensor: torch.Tensor) -> str:
        if tensor.is_meta or tensor.layout != torch.strided or tensor.is_quantized:
            return f"{describe_value(tensor)!r}  # not rebuilt: {tensor.layout}"
        base = storage_name(tensor)
        size = tuple(tensor.shape)
        stride = tensor.stride()
        text = (
            f"{base}.view({tensor.dtype}).as_strided({size}, {stride}, {tensor.storage_offset()})"
            if tensor.element_size() > 1 or tensor.dtype != torch.uint8
            else f"{base}.as_strided({size}, {stride}, {tensor.storage_offset()})"
        )
        if tensor.device.type != "cpu":
            text += f".to({str(tensor.device)!r})"
        if isinstance(tensor, torch.nn.Parameter):
            text = f"torch.nn.Parameter({text}, requires_grad={tensor.requires_grad})"
        elif tensor.requires_grad:
            text += ".requires_grad_()"
        return text

    def source(item: object) -> str:
        if isinstance(item, torch.Tensor):
            return tensor_source(item)
        if isinstance(item, dict) and type(item) is dict:
            return "{" + ", ".join(f"{source(k)}: {source(v)}" for k, v in item.items()) + "}"
        if type(item) is list:
            return "[" + ", ".join(source(v) for v in cast("list[object]", item)) + "]"
        if type(item) is tuple:
            items = [source(v) for v in cast("tuple[object, ...]", item)]
            return "(" + ", ".join(items) + ("," if len(items) == 1 else "") + ")"
        literal = _source_literal(item)
        if literal is not None:
            return literal
        return f"{describe_value(item)!r}  # not rebuilt: a {type(item).__qualname__}"

    expression = source(value)
    lines.append(f"{var} = {expression}")
    return "\n".join(lines)


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
