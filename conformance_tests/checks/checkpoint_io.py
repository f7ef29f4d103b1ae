"""Behaviour checks for :class:`trainspec.CheckpointIO` (CKPT-1 ... CKPT-12) and
:class:`trainspec.AsyncCheckpointIO` (ACKPT-1 ... ACKPT-5, capability ``"async"``).

Every check makes fresh instances with ``target.make()`` and a fresh location: a directory
(or URL prefix) of its own, removed afterwards. The checkpoints it saves are built from the
declared capabilities: flat ``dict[str, Tensor]`` of contiguous tensors unless the target
declares ``python_objects`` (nested containers and scalars), ``strided_tensors``
(non-contiguous views keep their strides) or ``shared_storage`` (views keep sharing storage).
For an asynchronous IO the synchronous checks call ``wait()`` after each save, so a
background error counts as the save's error.

Options read from ``target.options``:

``base_path`` (str, default: a fresh temporary directory per check)
    Where checks put their checkpoints: a local directory or a URL prefix
    (``"memory://ckpts"``, ``"s3://bucket/prefix"``). Each check uses a unique child of it and
    removes that child afterwards (URLs through fsspec).
``max_examples`` (int, default 20)
    Hypothesis examples for the generated round-trip check.
``dtypes`` (sequence of torch.dtype, default: every dtype the CPU supports)
    The tensor dtypes the checkpoints contain (narrow it for formats that store fewer).
``map_location_devices`` (sequence of str, default ``("cpu", "meta")``)
    Devices the map-location check loads onto; ``meta`` makes a misplaced tensor visible on
    a machine with only a CPU.
``atomicity_rounds`` (int, default 12)
    Saves made while a concurrent reader loads, in the atomicity check.
``trusted_factory`` (callable returning a CheckpointIO, optional)
    An instance explicitly configured to trust pickled content (e.g.
    ``TorchCheckpointIO(weights_only=False)``); with it the ``pickle`` check also verifies the
    opt-in loads that content.
"""

from __future__ import annotations

import contextlib
import copy
import functools
import os
import pathlib
import shutil
import tempfile
import textwrap
import threading
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final, NoReturn, SupportsIndex

import torch

from trainspec.checkpoint_io import AsyncCheckpointIO, CheckpointIO
from trainspec.conformance._helpers import (
    checkpoint_differences,
    describe_exception,
    describe_value,
    expect_raises,
    failure,
    int_option,
    run_examples,
    snippet,
)
from trainspec.conformance.core import CheckSkipped, Target, check
from trainspec.conformance.strategies import state_dicts, supported_dtypes, tensors
from trainspec.errors import (
    CheckpointCorruptedError,
    CheckpointError,
    CheckpointNotFoundError,
    CheckpointWriteError,
    UnsafeCheckpointError,
)

if TYPE_CHECKING:
    from trainspec.types import Checkpoint

__all__ = ["CAPABILITIES", "UnsafePayload", "executed_payloads"]

CAPABILITIES: Final[dict[str, str]] = {
    "local_paths": "accepts local file-system paths (str and os.PathLike); checkpoints are "
    "files or directories that other instances and processes see",
    "fsspec_urls": "accepts fsspec URLs such as memory://... and s3://...",
    "python_objects": "stores nested dicts, lists and tuples, Python ints, floats, bools, "
    "strings and None besides tensors (without it: a flat dict of tensors, and TypeError "
    "for anything else)",
    "strided_tensors": "non-contiguous tensors load back with their strides",
    "shared_storage": "tensors that share storage load back sharing it",
    "pickle": "the format can carry pickled Python objects: loading them must be an explicit "
    "opt-in (weights-only by default)",
    "async": "saves complete in the background (trainspec.AsyncCheckpointIO)",
}

_Target = Target[CheckpointIO]


# --------------------------------------------------------------------------- locations


@dataclass(frozen=True)
class _Location:
    """A fresh, empty place for one check's checkpoints."""

    root: str
    local: bool

    def path(self, *parts: str) -> str:
        if self.local:
            return os.path.join(self.root, *parts)
        return "/".join([self.root.rstrip("/"), *parts])


@contextlib.contextmanager
def _location(target: _Target) -> Iterator[_Location]:
    base = target.options.get("base_path")
    if base is None:
        with tempfile.TemporaryDirectory(prefix="trainspec-ckpt-") as tmp:
            yield _Location(tmp, local=True)
        return
    if not isinstance(base, (str, os.PathLike)):
        raise TypeError(f"conformance option 'base_path' must be a str or path: {base!r}")
    base = os.fspath(base)
    if "://" in base:
        root = f"{base.rstrip('/')}/{uuid.uuid4().hex}"
        try:
            yield _Location(root, local=False)
        finally:
            with contextlib.suppress(Exception):
                import fsspec

                fs, fs_path = fsspec.core.url_to_fs(root)
                if fs.exists(fs_path):
                    fs.rm(fs_path, recursive=True)
        return
    root = os.path.join(base, uuid.uuid4().hex)
    os.makedirs(root)
    try:
        yield _Location(root, local=True)
    finally:
        shutil.rmtree(root, ignore_errors=True)


def _require_local(location: _Location) -> None:
    if not location.local:
        raise CheckSkipped("base_path is a URL; this check inspects local files")


@contextlib.contextmanager
def _opened(target: _Target) -> Iterator[CheckpointIO]:
    """A fresh instance, torn down afterwards (teardown errors are left to CKPT-12)."""
    io = target.make()
    try:
        yield io
    finally:
        with contextlib.suppress(Exception):
            io.teardown()


def _settle(io: CheckpointIO) -> None:
    """Wait for background saves of an asynchronous IO, raising their errors."""
    if isinstance(io, AsyncCheckpointIO):
        io.wait()


def _save(
    io: CheckpointIO, checkpoint: Checkpoint, path: str, storage_options: object = None
) -> None:
    """Save and, for an asynchronous IO, wait: the save's errors surface here."""
    io.save_checkpoint(checkpoint, path, storage_options)  # type: ignore[arg-type]
    _settle(io)


# --------------------------------------------------------------------------- checkpoints


def _dtypes(target: _Target) -> tuple[torch.dtype, ...]:
    value = target.options.get("dtypes")
    if value is None:
        return supported_dtypes("cpu")
    if not isinstance(value, Sequence) or not all(isinstance(d, torch.dtype) for d in value):
        raise TypeError(f"conformance option 'dtypes' must be a sequence of torch.dtype: {value!r}")
    return tuple(value)


def _caps(target: _Target) -> frozenset[str]:
    return target.capabilities


def _random(shape: tuple[int, ...], seed: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    generator = torch.Generator().manual_seed(seed)
    return torch.randn(shape, generator=generator).to(dtype)


def _sample(target: _Target, seed: int = 0, *, size: int = 16) -> Checkpoint:
    """A small, deterministic checkpoint within the declared value set."""
    weight = _random((size, 4), seed)
    checkpoint: Checkpoint = {"weight": weight, "bias": _random((4,), seed + 1)}
    if "python_objects" in _caps(target):
        checkpoint.update(
            {
                "optimizer": {"state": {0: {"step": torch.tensor(3.0)}}, "lr": 0.1},
                "epoch": seed,
                "name": f"run-{seed}",
                "history": [1.5, float("nan"), None, True],
                "shape": (size, 4),
            }
        )
    return checkpoint


def _big(fill: float, *, megabytes: int = 2) -> Checkpoint:
    return {"weight": torch.full((megabytes * 1024, 256), fill)}


def _equal_or_fail(
    target: _Target,
    clause: str,
    expected: Checkpoint,
    loaded: object,
    *,
    what: str,
    repro: str,
    hint: str = "",
) -> None:
    differences = checkpoint_differences(
        expected, loaded, check_sharing="shared_storage" in _caps(target)
    )
    if differences:
        raise failure(
            target,
            clause,
            expected=what,
            actual="; ".join(differences[:4]) + (" ..." if len(differences) > 4 else ""),
            hint=hint,
            snippet=repro,
        )


def _saved_checkpoints_load_back(
    target: _Target,
    clause: str,
    io: CheckpointIO,
    saved: Mapping[str, Checkpoint],
    *,
    fresh_reader: bool,
    what: str,
    repro: str,
) -> None:
    """Every ``saved`` checkpoint loads back equal, read by a fresh instance on local storage
    (so nothing cached in ``io`` can answer) or by ``io`` itself elsewhere."""
    reader = target.make() if fresh_reader else io
    try:
        for path, checkpoint in saved.items():
            _equal_or_fail(
                target, clause, checkpoint, reader.load_checkpoint(path), what=what, repro=repro
            )
    finally:
        if reader is not io:
            with contextlib.suppress(Exception):
                reader.teardown()


_IO_SNIPPET_IMPORTS = "import os, tempfile"


def _io_snippet(target: _Target, body: str) -> str:
    return snippet(
        target,
        "path = os.path.join(tempfile.mkdtemp(), 'model.ckpt')\n"
        + textwrap.dedent(body).strip("\n"),
        var="io",
        imports=_IO_SNIPPET_IMPORTS,
    )


# --------------------------------------------------------------------------- CKPT-1


@check("CKPT-1", "checkpoint_io")
def check_checkpoint_io_round_trips_generated_checkpoints(target: _Target) -> None:
    """Generated checkpoints load back equal.

    Generated checkpoints (every dtype, 0-d and empty tensors, NaN, nesting as declared)
    load back equal.
    """
    caps = _caps(target)
    strategy = state_dicts(
        tensor_strategy=tensors(_dtypes(target), non_contiguous="strided_tensors" in caps),
        python_objects="python_objects" in caps,
        shared_views="shared_storage" in caps,
    )
    with _location(target) as where, _opened(target) as io:
        path = where.path("generated.ckpt")

        def round_trip(checkpoint: Checkpoint) -> None:
            repro = _io_snippet(
                target,
                "# checkpoint: the smallest failing example hypothesis found:\n"
                f"# {describe_value(checkpoint, limit=400).replace(chr(10), ' ')}\n"
                "io.save_checkpoint(checkpoint, path)\nloaded = io.load_checkpoint(path)",
            )
            try:
                _save(io, checkpoint, path)
                loaded = io.load_checkpoint(path)
            except Exception as exc:
                raise failure(
                    target,
                    "CKPT-1",
                    expected="save and load every checkpoint within its declared value set",
                    actual=describe_exception(exc),
                    hint="Declare fewer capabilities, or narrow the 'dtypes' option, if the "
                    "format stores less.",
                    snippet=repro,
                ) from exc
            _equal_or_fail(
                target,
                "CKPT-1",
                checkpoint,
                loaded,
                what="load back a checkpoint equal to the one saved",
                repro=repro,
            )

        run_examples(strategy, round_trip, max_examples=int_option(target, "max_examples", 20))


def _every_dtype_checkpoint(target: _Target) -> Checkpoint:
    checkpoint: Checkpoint = {}
    for dtype in _dtypes(target):
        name = str(dtype).removeprefix("torch.")
        raw = torch.arange(24, dtype=torch.uint8).view(torch.uint8)
        if dtype == torch.bool:
            values = (raw % 2 == 0).reshape(2, 3, 4)
        else:
            size = torch.empty((), dtype=dtype).element_size()
            values = torch.arange(24 * size, dtype=torch.uint8).mul(37).view(dtype)[:24]
            values = values.reshape(2, 3, 4).clone()
        checkpoint[f"{name}/3d"] = values
        checkpoint[f"{name}/0d"] = values.reshape(-1)[5].clone()
        checkpoint[f"{name}/empty"] = values[:0].clone()
    return checkpoint


@check("CKPT-1", "checkpoint_io")
def check_checkpoint_io_round_trips_every_dtype(target: _Target) -> None:
    """A checkpoint with a 3-d, a 0-d and an empty tensor of every dtype loads back equal."""
    checkpoint = _every_dtype_checkpoint(target)
    with _location(target) as where, _opened(target) as io:
        path = where.path("dtypes.ckpt")
        repro = _io_snippet(
            target,
            """
            checkpoint = {"bfloat16/3d": torch.randn(2, 3, 4).bfloat16(),
                          "int8/0d": torch.tensor(5, dtype=torch.int8),
                          "complex64/empty": torch.empty(0, 3, 4, dtype=torch.complex64)}
            io.save_checkpoint(checkpoint, path)
            print(io.load_checkpoint(path))
            """,
        )
        _save(io, checkpoint, path)
        _equal_or_fail(
            target,
            "CKPT-1",
            checkpoint,
            io.load_checkpoint(path),
            what="keep every tensor's dtype, shape and values",
            repro=repro,
            hint="Store the dtype with each tensor; narrow the 'dtypes' option if the "
            "format cannot hold some.",
        )


@check("CKPT-1", "checkpoint_io", requires=("python_objects",))
def check_checkpoint_io_round_trips_python_values(target: _Target) -> None:
    """Nested containers and Python values load back with their exact types.

    Nested dicts, lists, tuples, ints, floats (NaN, -0.0), bools, strings and None load back
    with their exact types.
    """
    checkpoint: Checkpoint = {
        "ints": [0, -1, 2**62, True, False],
        "floats": (1.5, float("nan"), float("-inf"), -0.0),
        "text": ["", "ünïcödé", "a" * 100],
        "nothing": None,
        "nested": {"a": {"b": [{"c": (1, [2, (3,)])}]}, "int_keys": {0: "zero", 1: [None]}},
        "mixed": [torch.arange(3), {"t": torch.ones(2)}, ("x", 1)],
    }
    with _location(target) as where, _opened(target) as io:
        path = where.path("values.ckpt")
        repro = _io_snippet(
            target,
            """
            checkpoint = {"t": (1, [2, (3,)]), "b": True, "f": -0.0, "n": None}
            io.save_checkpoint(checkpoint, path)
            print(io.load_checkpoint(path))
            """,
        )
        _save(io, checkpoint, path)
        _equal_or_fail(
            target,
            "CKPT-1",
            checkpoint,
            io.load_checkpoint(path),
            what="keep nested containers and Python values with their exact types",
            repro=repro,
            hint="A tuple must not come back as a list, a bool not as an int.",
        )


@check("CKPT-1", "checkpoint_io", requires=("strided_tensors",))
def check_checkpoint_io_preserves_strides(target: _Target) -> None:
    """Transposed, strided and narrowed tensors load back with their strides."""
    base = torch.arange(60.0).reshape(3, 4, 5)
    checkpoint: Checkpoint = {
        "transposed": base[0].t().clone().t(),
        "permuted": base.clone().permute(2, 0, 1),
        "strided": base.clone()[:, ::2, 1::2],
        "expanded": torch.arange(3.0).unsqueeze(0).expand(4, 3),
    }
    with _location(target) as where, _opened(target) as io:
        path = where.path("strides.ckpt")
        repro = _io_snippet(
            target,
            """
            t = torch.arange(12.0).reshape(3, 4).t()
            io.save_checkpoint({"t": t}, path)
            print(t.stride(), io.load_checkpoint(path)["t"].stride())
            """,
        )
        _save(io, checkpoint, path)
        _equal_or_fail(
            target,
            "CKPT-1",
            checkpoint,
            io.load_checkpoint(path),
            what="keep each tensor's strides",
            repro=repro,
            hint="Store the storage and each view's (offset, size, stride), as torch.save does.",
        )


@check("CKPT-1", "checkpoint_io", requires=("shared_storage",))
def check_checkpoint_io_preserves_storage_sharing(target: _Target) -> None:
    """Views that share storage load back sharing one storage, at the same offsets."""
    base = torch.arange(24.0).reshape(4, 6)
    checkpoint: Checkpoint = {"base": base, "row": base[1], "flat": base.view(-1)}
    if "python_objects" in _caps(target):
        checkpoint["nested"] = {"tail": [base.view(-1)[12:]]}
    with _location(target) as where, _opened(target) as io:
        path = where.path("shared.ckpt")
        repro = _io_snippet(
            target,
            """
            base = torch.arange(24.0).reshape(4, 6)
            io.save_checkpoint({"base": base, "row": base[1]}, path)
            loaded = io.load_checkpoint(path)
            loaded["base"][1, 0] = -1.0
            print(loaded["row"][0])  # -1.0 when the storage is still shared
            """,
        )
        _save(io, checkpoint, path)
        loaded = io.load_checkpoint(path)
        _equal_or_fail(
            target,
            "CKPT-1",
            checkpoint,
            loaded,
            what="keep views sharing one storage",
            repro=repro,
            hint="Serialise each storage once and rebuild views onto it.",
        )


@check("CKPT-1", "checkpoint_io")
def check_checkpoint_io_rejects_values_outside_its_declared_set(target: _Target) -> None:
    """Without python_objects, saving a non-tensor value raises TypeError."""
    if "python_objects" in _caps(target):
        raise CheckSkipped("declares python_objects: the full value set is accepted")
    with _location(target) as where, _opened(target) as io:
        path = where.path("narrow.ckpt")
        for value in (3, "text", None, [torch.ones(1)], {"nested": torch.ones(1)}):
            checkpoint: Checkpoint = {"weight": torch.ones(2), "extra": value}
            expect_raises(
                target,
                "CKPT-1",
                TypeError,
                functools.partial(_save, io, checkpoint, path),
                expected=f"raise TypeError for a value outside its declared set ({value!r})",
                hint="Declare the 'python_objects' capability if the format stores such values.",
                snippet=_io_snippet(
                    target, f"io.save_checkpoint({{'w': torch.ones(2), 'x': {value!r}}}, path)"
                ),
            )


@check("CKPT-1", "checkpoint_io")
def check_checkpoint_io_saved_checkpoint_is_independent_of_mutation(target: _Target) -> None:
    """Mutating the saved objects, or a loaded checkpoint, does not change what loads next."""
    checkpoint = _sample(target, 3)
    expected = copy.deepcopy(checkpoint)
    with _location(target) as where, _opened(target) as io:
        path = where.path("independent.ckpt")
        repro = _io_snippet(
            target,
            """
            w = torch.zeros(3)
            io.save_checkpoint({"w": w}, path)
            w.add_(1)
            print(io.load_checkpoint(path)["w"])  # expected zeros
            """,
        )
        _save(io, checkpoint, path)
        with torch.no_grad():
            checkpoint["weight"].add_(1.0)
        if "python_objects" in _caps(target):
            checkpoint["history"].append("appended after the save")
        first = io.load_checkpoint(path)
        _equal_or_fail(
            target,
            "CKPT-1",
            expected,
            first,
            what="keep what was saved when the caller mutates its objects after the save",
            repro=repro,
            hint="Serialise (or deep-copy) at save time; never keep references to the input.",
        )
        with torch.no_grad():
            first["weight"].mul_(-2.0)
        _equal_or_fail(
            target,
            "CKPT-1",
            expected,
            io.load_checkpoint(path),
            what="return independent copies on every load",
            repro=repro,
            hint="A load must not hand out the stored objects themselves.",
        )


@check("CKPT-1", "checkpoint_io")
def check_checkpoint_io_load_returns_the_latest_save(target: _Target) -> None:
    """Saving to a path replaces what was there: the load returns the last save only."""
    first: Checkpoint = {"old_only": torch.ones(3), "weight": torch.zeros(2)}
    second: Checkpoint = {"weight": torch.full((2,), 7.0)}
    with _location(target) as where, _opened(target) as io:
        path = where.path("latest.ckpt")
        _save(io, first, path)
        _save(io, second, path)
        _equal_or_fail(
            target,
            "CKPT-1",
            second,
            io.load_checkpoint(path),
            what="replace the previous checkpoint at the same path",
            repro=_io_snippet(
                target,
                """
                io.save_checkpoint({"a": torch.ones(1), "w": torch.zeros(1)}, path)
                io.save_checkpoint({"w": torch.ones(1)}, path)
                print(io.load_checkpoint(path))  # expected only "w"
                """,
            ),
        )


@check("CKPT-1", "checkpoint_io", requires=("local_paths",))
def check_checkpoint_io_accepts_str_and_pathlike_paths(target: _Target) -> None:
    """A checkpoint saved under a pathlib.Path loads under the equal str, and vice versa."""
    checkpoint = _sample(target, 5)
    with _location(target) as where, _opened(target) as io:
        _require_local(where)
        path = where.path("pathlike.ckpt")
        repro = _io_snippet(
            target,
            "import pathlib\nio.save_checkpoint({'w': torch.ones(2)}, pathlib.Path(path))\n"
            "print(io.load_checkpoint(str(path)))",
        )
        for save_as, load_as in ((pathlib.Path(path), path), (path, pathlib.Path(path))):
            try:
                io.save_checkpoint(checkpoint, save_as)
                _settle(io)
                loaded = io.load_checkpoint(load_as)
            except Exception as exc:
                raise failure(
                    target,
                    "CKPT-1",
                    expected="accept str and os.PathLike paths alike",
                    actual=f"saving to {type(save_as).__name__}, loading from "
                    f"{type(load_as).__name__} raised {describe_exception(exc)}",
                    hint="Call os.fspath(path) first.",
                    snippet=repro,
                ) from exc
            _equal_or_fail(
                target, "CKPT-1", checkpoint, loaded, what="load what was saved", repro=repro
            )


@check("CKPT-1", "checkpoint_io", requires=("fsspec_urls",))
def check_checkpoint_io_round_trips_through_fsspec_urls(target: _Target) -> None:
    """Save, load and remove work on a memory:// URL."""
    checkpoint = _sample(target, 6)
    url = f"memory://trainspec-conformance/{uuid.uuid4().hex}/nested/model.ckpt"
    repro = snippet(
        target,
        f"""
        url = {url!r}
        io.save_checkpoint({{"w": torch.ones(2)}}, url)
        print(io.load_checkpoint(url))
        io.remove_checkpoint(url)
        """,
        var="io",
    )
    with _opened(target) as io:
        try:
            _save(io, checkpoint, url)
            loaded = io.load_checkpoint(url)
            io.remove_checkpoint(url)
        except Exception as exc:
            raise failure(
                target,
                "CKPT-1",
                expected="save, load and remove a memory:// URL",
                actual=describe_exception(exc),
                hint="Open URLs with fsspec.open / fsspec.core.url_to_fs.",
                snippet=repro,
            ) from exc
        _equal_or_fail(
            target, "CKPT-1", checkpoint, loaded, what="load what was saved", repro=repro
        )
        expect_raises(
            target,
            "CKPT-11",
            CheckpointNotFoundError,
            lambda: io.load_checkpoint(url),
            expected="raise CheckpointNotFoundError for a removed URL",
            snippet=repro,
        )


# --------------------------------------------------------------------------- CKPT-2


@check("CKPT-2", "checkpoint_io")
def check_checkpoint_io_save_creates_missing_parent_directories(target: _Target) -> None:
    """Saving under directories that do not exist yet creates them."""
    checkpoint = _sample(target, 7)
    with _location(target) as where, _opened(target) as io:
        path = where.path("a", "b", "c", "model.ckpt")
        repro = _io_snippet(
            target,
            "deep = os.path.join(os.path.dirname(path), 'a', 'b', 'c', 'model.ckpt')\n"
            "io.save_checkpoint({'w': torch.ones(2)}, deep)",
        )
        try:
            _save(io, checkpoint, path)
            loaded = io.load_checkpoint(path)
        except Exception as exc:
            raise failure(
                target,
                "CKPT-2",
                expected="create missing parent directories when saving",
                actual=describe_exception(exc),
                hint="os.makedirs(os.path.dirname(path), exist_ok=True) (fs.makedirs for URLs).",
                snippet=repro,
            ) from exc
        _equal_or_fail(
            target, "CKPT-2", checkpoint, loaded, what="load what was saved", repro=repro
        )


# --------------------------------------------------------------------------- CKPT-3


class ExplodingValueError(Exception):
    """Raised by :class:`_ExplodingValue` when something tries to serialise or copy it."""


class _ExplodingValue:
    """A value whose serialisation fails part-way through a save."""

    def __reduce_ex__(self, protocol: SupportsIndex) -> NoReturn:
        raise ExplodingValueError("this value cannot be serialised (conformance check)")

    def __deepcopy__(self, memo: object) -> NoReturn:
        raise ExplodingValueError("this value cannot be copied (conformance check)")

    def __repr__(self) -> str:
        return "<value whose pickling raises>"


class _ExplodingTensor(torch.Tensor):
    """A tensor whose serialisation fails part-way through a save."""

    def __reduce_ex__(self, protocol: SupportsIndex) -> NoReturn:
        raise ExplodingValueError("this tensor cannot be serialised (conformance check)")

    def __deepcopy__(self, memo: object) -> NoReturn:
        raise ExplodingValueError("this tensor cannot be copied (conformance check)")


def _failing_checkpoint(target: _Target) -> Checkpoint:
    # A real tensor first, so that a non-atomic writer has already written (or truncated).
    checkpoint = _big(3.0, megabytes=1)
    if "python_objects" in _caps(target):
        checkpoint["zz_exploding"] = _ExplodingValue()
    else:
        checkpoint["zz_exploding"] = torch.ones(4).as_subclass(_ExplodingTensor)
    return checkpoint


@check("CKPT-3", "checkpoint_io")
def check_checkpoint_io_failed_save_leaves_previous_checkpoint_intact(target: _Target) -> None:
    """A save that fails part-way leaves the previous checkpoint intact.

    A save that fails part-way (a value whose pickling raises) leaves the previous
    checkpoint loadable and unchanged.
    """
    previous = _sample(target, 8)
    with _location(target) as where, _opened(target) as io:
        path = where.path("intact.ckpt")
        _save(io, previous, path)
        repro = _io_snippet(
            target,
            """
            class Boom:
                def __reduce_ex__(self, protocol):
                    raise RuntimeError("boom")
            io.save_checkpoint({"w": torch.ones(2)}, path)
            try:
                io.save_checkpoint({"w": torch.zeros(2**20), "boom": Boom()}, path)
            except Exception:
                pass
            print(io.load_checkpoint(path))  # expected the first checkpoint
            """,
        )
        try:
            _save(io, _failing_checkpoint(target), path)
        except Exception:
            pass
        else:
            raise CheckSkipped("the save with an unserialisable value succeeded; nothing failed")
        try:
            loaded = io.load_checkpoint(path)
        except Exception as exc:
            raise failure(
                target,
                "CKPT-3",
                expected="leave the previous checkpoint intact when a save fails part-way",
                actual=f"loading afterwards raised {describe_exception(exc)}",
                hint="Write to a temporary file in the same directory and os.replace() it over "
                "the target only after the write succeeded.",
                snippet=repro,
            ) from exc
        _equal_or_fail(
            target,
            "CKPT-3",
            previous,
            loaded,
            what="leave the previous checkpoint unchanged when a save fails part-way",
            repro=repro,
        )


@check("CKPT-3", "checkpoint_io", requires=("local_paths",))
def check_checkpoint_io_save_leaves_no_temporary_files(target: _Target) -> None:
    """Saves leave no temporary file next to the checkpoint.

    After successful saves, and after a failed save followed by a successful one, the
    directory holds the checkpoint and nothing else.
    """
    with _location(target) as where, _opened(target) as io:
        _require_local(where)
        directory = where.path("only")
        path = os.path.join(directory, "model.ckpt")
        repro = _io_snippet(
            target,
            "for i in range(3):\n    io.save_checkpoint({'w': torch.full((4,), i)}, path)\n"
            "print(os.listdir(os.path.dirname(path)))  # expected ['model.ckpt']",
        )
        for seed in range(3):
            _save(io, _sample(target, seed), path)
        stray = sorted(set(os.listdir(directory)) - {"model.ckpt"})
        if stray:
            raise failure(
                target,
                "CKPT-3",
                expected="leave no temporary file after a successful save",
                actual=f"stray entries {stray}",
                hint="Rename the temporary file over the target (os.replace), or remove it.",
                snippet=repro,
            )
        with contextlib.suppress(Exception):
            _save(io, _failing_checkpoint(target), path)
        _save(io, _sample(target, 9), path)
        stray = sorted(set(os.listdir(directory)) - {"model.ckpt"})
        if stray:
            raise failure(
                target,
                "CKPT-3",
                expected="clean up the temporary file of a failed save (at the latest on the "
                "next save)",
                actual=f"stray entries {stray} after a failed and a successful save",
                hint="Remove the temporary file when writing raises.",
                snippet=repro,
            )


@check("CKPT-3", "checkpoint_io", requires=("local_paths",))
def check_checkpoint_io_concurrent_reader_sees_old_or_new_checkpoint(target: _Target) -> None:
    """A concurrent reader sees the old or the new checkpoint, never a torn one.

    A reader loading (through another instance) while saves replace the file always gets a
    complete old or new checkpoint.
    """
    rounds = int_option(target, "atomicity_rounds", 12)
    versions = [_big(1.0), _big(2.0)]
    problems: list[str] = []
    stop = threading.Event()
    loads = 0
    with _location(target) as where, _opened(target) as writer, _opened(target) as reader:
        _require_local(where)
        path = where.path("concurrent.ckpt")
        _save(writer, versions[0], path)

        def read() -> None:
            nonlocal loads
            while not stop.is_set() and len(problems) < 3:
                try:
                    loaded = reader.load_checkpoint(path)
                except Exception as exc:
                    problems.append(f"load raised {describe_exception(exc)}")
                    continue
                loads += 1
                if all(checkpoint_differences(v, loaded) for v in versions):
                    problems.append(f"loaded a mixture: {describe_value(loaded)}")

        thread = threading.Thread(target=read, name="trainspec-conformance-reader", daemon=True)
        thread.start()
        try:
            for index in range(rounds):
                _save(writer, versions[(index + 1) % 2], path)
        finally:
            stop.set()
            thread.join(timeout=60)
        if problems:
            raise failure(
                target,
                "CKPT-3",
                expected="let a concurrent reader see only complete checkpoints",
                actual=f"{len(problems)} bad load(s) among {loads + len(problems)}: "
                + "; ".join(problems[:2]),
                hint="Write to a temporary file and os.replace() it over the target.",
                snippet=_io_snippet(
                    target,
                    """
                    import threading
                    io.save_checkpoint({"w": torch.ones(2**20)}, path)
                    reader = type(io)()
                    def read():
                        for _ in range(200):
                            reader.load_checkpoint(path)  # raises on a torn file
                    t = threading.Thread(target=read); t.start()
                    for i in range(20):
                        io.save_checkpoint({"w": torch.full((2**20,), float(i))}, path)
                    t.join()
                    """,
                ),
            )


# --------------------------------------------------------------------------- CKPT-4


def _fingerprint(value: object, path: str, out: dict[str, object]) -> None:
    """Identity and metadata of everything reachable, to detect in-place changes."""
    out[path + "#type"] = type(value)
    out[path + "#id"] = id(value)
    if isinstance(value, torch.Tensor):
        out[path + "#meta"] = (
            value.dtype,
            tuple(value.shape),
            value.stride(),
            value.storage_offset(),
            value.device,
            value.requires_grad,
            value.untyped_storage().data_ptr(),
            value._version,
        )
    elif isinstance(value, dict):
        out[path + "#keys"] = list(value.keys())
        for key, item in value.items():
            _fingerprint(item, f"{path}[{key!r}]", out)
    elif isinstance(value, (list, tuple)):
        out[path + "#len"] = len(value)
        for index, item in enumerate(value):
            _fingerprint(item, f"{path}[{index}]", out)


def _mutation_checkpoint(target: _Target) -> Checkpoint:
    caps = _caps(target)
    weight = torch.nn.Parameter(_random((4, 3), 11))
    checkpoint: Checkpoint = {
        "weight": weight.detach() if "python_objects" not in caps else weight,
        "half": _random((5,), 12, torch.float16),
        "grad_tensor": _random((3,), 13).requires_grad_(True),
    }
    if "strided_tensors" in caps:
        checkpoint["transposed"] = _random((3, 5), 14).t()
    if "python_objects" in caps:
        checkpoint["nested"] = {"list": [torch.arange(4), 1, "x"], "tuple": (None, 2.5)}
    if "shared_storage" in caps:
        checkpoint["view"] = checkpoint["half"][1:]
    return checkpoint


@check("CKPT-4", "checkpoint_io")
def check_checkpoint_io_save_does_not_mutate_its_input(target: _Target) -> None:
    """Saving does not modify the checkpoint or anything in it.

    Saving leaves the checkpoint's containers, tensors (data, version counter, storage,
    requires_grad) and values exactly as they were.
    """
    checkpoint = _mutation_checkpoint(target)
    expected = copy.deepcopy(checkpoint)
    before: dict[str, object] = {}
    _fingerprint(checkpoint, "checkpoint", before)
    with _location(target) as where, _opened(target) as io:
        path = where.path("mutation.ckpt")
        _save(io, checkpoint, path)
    after: dict[str, object] = {}
    _fingerprint(checkpoint, "checkpoint", after)
    changed = [key for key in sorted(set(before) | set(after)) if before.get(key) != after.get(key)]
    changed += checkpoint_differences(expected, checkpoint, check_sharing=False)
    if changed:
        raise failure(
            target,
            "CKPT-4",
            expected="not modify the checkpoint it saves",
            actual="changed: " + "; ".join(changed[:5]),
            hint="Build converted copies (detach(), contiguous(), .cpu()) in new containers "
            "instead of assigning into the caller's dicts or tensors.",
            snippet=_io_snippet(
                target,
                """
                checkpoint = {"w": torch.nn.Parameter(torch.ones(3)), "h": torch.ones(2).half()}
                ids = {k: (id(v), v._version) for k, v in checkpoint.items()}
                io.save_checkpoint(checkpoint, path)
                print(ids == {k: (id(v), v._version) for k, v in checkpoint.items()})
                """,
            ),
        )


# --------------------------------------------------------------------------- CKPT-5


@check("CKPT-5", "checkpoint_io")
def check_checkpoint_io_rejects_unknown_storage_options(target: _Target) -> None:
    """storage_options None and {} are accepted; an unknown key raises TypeError."""
    checkpoint = _sample(target, 15)
    with _location(target) as where, _opened(target) as io:
        path = where.path("options.ckpt")
        accepted_options: tuple[dict[str, object] | None, ...] = (None, {})
        for accepted in accepted_options:
            try:
                _save(io, checkpoint, path, accepted)
            except Exception as exc:
                raise failure(
                    target,
                    "CKPT-5",
                    expected=f"accept storage_options={accepted!r}",
                    actual=describe_exception(exc),
                    snippet=_io_snippet(
                        target, f"io.save_checkpoint({{'w': torch.ones(2)}}, path, {accepted!r})"
                    ),
                ) from exc
        unknown = {"trainspec_conformance_unknown_option": True}
        expect_raises(
            target,
            "CKPT-5",
            TypeError,
            lambda: _save(io, checkpoint, path, unknown),
            expected="raise TypeError for a storage_options key it does not support",
            hint="Compare the keys with the supported ones and name those in the message.",
            snippet=_io_snippet(
                target, f"io.save_checkpoint({{'w': torch.ones(2)}}, path, {unknown!r})"
            ),
        )


# --------------------------------------------------------------------------- CKPT-6


@check("CKPT-6", "checkpoint_io", requires=("local_paths",))
def check_checkpoint_io_refused_write_raises_checkpoint_write_error(target: _Target) -> None:
    """A write that storage refuses raises CheckpointWriteError.

    Saving where storage refuses (a regular file in place of a parent directory) raises
    CheckpointWriteError.
    """
    with _location(target) as where, _opened(target) as io:
        _require_local(where)
        blocker = where.path("blocker")
        with open(blocker, "wb") as file:
            file.write(b"a regular file, not a directory")
        path = os.path.join(blocker, "model.ckpt")
        expect_raises(
            target,
            "CKPT-6",
            CheckpointWriteError,
            lambda: _save(io, _sample(target, 16), path),
            expected="raise CheckpointWriteError when the path cannot be written",
            hint="Translate OSError from the write (NotADirectoryError, PermissionError, "
            "ENOSPC) into CheckpointWriteError, keeping it as __cause__.",
            snippet=_io_snippet(
                target,
                "open(path, 'w').close()\n"
                "io.save_checkpoint({'w': torch.ones(2)}, os.path.join(path, 'model.ckpt'))",
            ),
        )


# --------------------------------------------------------------------------- CKPT-7


def _devices_of(value: object, out: list[torch.device]) -> None:
    if isinstance(value, torch.Tensor):
        out.append(value.device)
    elif isinstance(value, dict):
        for item in value.values():
            _devices_of(item, out)
    elif isinstance(value, (list, tuple)):
        for item in value:
            _devices_of(item, out)


@check("CKPT-7", "checkpoint_io")
def check_checkpoint_io_load_places_tensors_by_map_location(target: _Target) -> None:
    """Loaded tensors are placed on the device map_location names.

    Every tensor loads onto the device map_location names (str, torch.device or mapping),
    and stays where it was saved for None.
    """
    value = target.options.get("map_location_devices", ("cpu", "meta"))
    if not isinstance(value, Sequence) or isinstance(value, str):
        raise TypeError(f"conformance option 'map_location_devices' must be a sequence: {value!r}")
    devices = [torch.device(d) for d in value]
    checkpoint = _sample(target, 17)
    with _location(target) as where, _opened(target) as io:
        path = where.path("mapped.ckpt")
        _save(io, checkpoint, path)
        requests: list[tuple[object, torch.device]] = [(None, torch.device("cpu"))]
        for device in devices:
            requests += [(str(device), device), (device, device), ({"cpu": str(device)}, device)]
        for request, device in requests:
            repro = _io_snippet(
                target,
                f"io.save_checkpoint({{'w': torch.ones(2)}}, path)\n"
                f"print(io.load_checkpoint(path, map_location={request!r})['w'].device)",
            )
            try:
                loaded = io.load_checkpoint(path, map_location=request)  # type: ignore[arg-type]
            except Exception as exc:
                raise failure(
                    target,
                    "CKPT-7",
                    expected=f"load with map_location={request!r}",
                    actual=describe_exception(exc),
                    hint="Pass map_location through to torch.load, or move each tensor with "
                    ".to(device) after loading. Narrow the 'map_location_devices' option if a "
                    "device cannot be used here.",
                    snippet=repro,
                ) from exc
            found: list[torch.device] = []
            _devices_of(loaded, found)
            wrong = sorted({str(d) for d in found if d.type != device.type})
            if wrong or not found:
                raise failure(
                    target,
                    "CKPT-7",
                    expected=f"place every tensor on {device} for map_location={request!r}",
                    actual=f"tensors on {wrong or 'no device (no tensors loaded)'}",
                    snippet=repro,
                )
            if device.type != "meta":
                differences = checkpoint_differences(
                    checkpoint, loaded, check_device=False, check_sharing=False
                )
                if differences:
                    raise failure(
                        target,
                        "CKPT-7",
                        expected=f"load equal values with map_location={request!r}",
                        actual="; ".join(differences[:3]),
                        snippet=repro,
                    )


# --------------------------------------------------------------------------- CKPT-8

_EXECUTED: list[str] = []


def _record_execution(token: str) -> str:
    """Called when an :class:`UnsafePayload` is unpickled: proof that loading ran code."""
    _EXECUTED.append(token)
    return token


def executed_payloads() -> tuple[str, ...]:
    """Tokens of every :class:`UnsafePayload` unpickled in this process so far."""
    return tuple(_EXECUTED)


class UnsafePayload:
    """An object whose unpickling calls a function: content a safe load must refuse.

    Unpickling it calls ``_record_execution(token)`` (and yields the token string), so a check
    can tell whether loading executed code.
    """

    def __init__(self, token: str) -> None:
        self.token = token

    def __reduce__(self) -> tuple[Callable[[str], str], tuple[str]]:
        return (_record_execution, (self.token,))

    def __copy__(self) -> UnsafePayload:
        return UnsafePayload(self.token)

    def __deepcopy__(self, memo: object) -> UnsafePayload:
        # A snapshot (deepcopy) must keep the payload, not run it as pickling would.
        return UnsafePayload(self.token)


def _save_unsafe(io: CheckpointIO, path: str, token: str) -> bool:
    """Save a checkpoint holding an UnsafePayload; False when the IO refuses to write it."""
    checkpoint: Checkpoint = {"weight": torch.ones(2), "payload": UnsafePayload(token)}
    try:
        _save(io, checkpoint, path)
    except (TypeError, CheckpointError):
        return False
    return True


@check("CKPT-8", "checkpoint_io", requires=("pickle",))
def check_checkpoint_io_refuses_unsafe_content_by_default(target: _Target) -> None:
    """Loading content that would run code raises UnsafeCheckpointError and runs nothing."""
    token = f"unsafe-{uuid.uuid4().hex}"
    with _location(target) as where, _opened(target) as io:
        path = where.path("unsafe.ckpt")
        if not _save_unsafe(io, path, token):
            raise CheckSkipped("the IO refuses to write code-running content at all")
        repro = _io_snippet(
            target,
            """
            import os as _os
            class Payload:
                def __reduce__(self):
                    return (_os.getcwd, ())  # any callable: runs when unpickled
            io.save_checkpoint({"w": torch.ones(2), "p": Payload()}, path)
            io.load_checkpoint(path)  # expected UnsafeCheckpointError
            """,
        )
        executed_before = _EXECUTED.count(token)
        expect_raises(
            target,
            "CKPT-8",
            UnsafeCheckpointError,
            lambda: io.load_checkpoint(path),
            expected="raise UnsafeCheckpointError for content that would run code, unless "
            "explicitly configured to trust it",
            hint="Load with torch.load(..., weights_only=True) and translate its "
            "UnpicklingError; make weights_only=False an explicit constructor option.",
            snippet=repro,
        )
        if _EXECUTED.count(token) != executed_before:
            raise failure(
                target,
                "CKPT-8",
                expected="not execute any code from a checkpoint it refuses",
                actual="the payload's reduce function ran during the load",
                snippet=repro,
            )


@check("CKPT-8", "checkpoint_io", requires=("pickle",))
def check_checkpoint_io_loads_unsafe_content_only_when_opted_in(target: _Target) -> None:
    """An instance configured to trust pickles loads what a default one refuses.

    An instance explicitly configured to trust pickles (option trusted_factory) loads the
    content a default instance refuses.
    """
    trusted_factory = target.options.get("trusted_factory")
    if trusted_factory is None:
        raise CheckSkipped("no 'trusted_factory' option: the opt-in cannot be exercised")
    if not callable(trusted_factory):
        raise TypeError(
            f"conformance option 'trusted_factory' must be callable: {trusted_factory!r}"
        )
    token = f"trusted-{uuid.uuid4().hex}"
    with _location(target) as where, _opened(target) as io:
        path = where.path("trusted.ckpt")
        if not _save_unsafe(io, path, token):
            raise CheckSkipped("the IO refuses to write code-running content at all")
        trusted = trusted_factory()
        if not isinstance(trusted, CheckpointIO):
            raise TypeError("conformance option 'trusted_factory' must return a CheckpointIO")
        try:
            loaded = trusted.load_checkpoint(path)
        except Exception as exc:
            raise failure(
                target,
                "CKPT-8",
                expected="load pickled content when explicitly configured to trust it",
                actual=describe_exception(exc),
                snippet=_io_snippet(
                    target, "trusted = ...  # the opted-in instance\ntrusted.load_checkpoint(path)"
                ),
            ) from exc
        finally:
            with contextlib.suppress(Exception):
                trusted.teardown()
        if loaded.get("payload") != token:
            raise failure(
                target,
                "CKPT-8",
                expected="return the unpickled object when configured to trust pickles",
                actual=f"payload {describe_value(loaded.get('payload'))}",
            )


# --------------------------------------------------------------------------- CKPT-9


@check("CKPT-9", "checkpoint_io")
def check_checkpoint_io_missing_path_raises_not_found(target: _Target) -> None:
    """Loading a path that does not exist raises CheckpointNotFoundError."""
    with _location(target) as where, _opened(target) as io:
        for path in (where.path("missing.ckpt"), where.path("no", "such", "dir", "model.ckpt")):
            expect_raises(
                target,
                "CKPT-9",
                CheckpointNotFoundError,
                functools.partial(io.load_checkpoint, path),
                expected="raise trainspec.CheckpointNotFoundError for a missing path",
                hint="Translate FileNotFoundError (and fsspec's equivalents) into "
                "CheckpointNotFoundError naming the path.",
                snippet=_io_snippet(target, "io.load_checkpoint(path)  # never saved"),
            )


# --------------------------------------------------------------------------- CKPT-10


def _corruptions(real: bytes | None) -> list[tuple[str, bytes | None]]:
    """(label, content) pairs; ``None`` content means an empty directory at the path."""
    generator = torch.Generator().manual_seed(1234)
    random_bytes = bytes(
        torch.randint(0, 256, (4096,), generator=generator, dtype=torch.uint8).tolist()
    )
    cases: list[tuple[str, bytes | None]] = [
        ("an empty file", b""),
        ("random bytes", random_bytes),
        ("a JSON document", b'{"not": "a checkpoint"}\n'),
        ("an empty directory", None),
    ]
    if real is not None and len(real) > 16:
        cases += [
            ("the first half of a real checkpoint", real[: len(real) // 2]),
            ("a real checkpoint without its last byte", real[:-1]),
            ("the first 16 bytes of a real checkpoint", real[:16]),
        ]
    return cases


@check("CKPT-10", "checkpoint_io", requires=("local_paths",))
def check_checkpoint_io_corrupted_file_raises_corrupted_error(target: _Target) -> None:
    """Loading a corrupted file or a directory raises CheckpointCorruptedError.

    Loading an empty, truncated, random or foreign file, or a directory, raises
    CheckpointCorruptedError.
    """
    with _location(target) as where, _opened(target) as io:
        _require_local(where)
        real_path = where.path("real.ckpt")
        _save(io, _big(5.0, megabytes=1) | _sample(target, 18), real_path)
        real: bytes | None = None
        if os.path.isfile(real_path):
            with open(real_path, "rb") as file:
                real = file.read()
        for index, (label, content) in enumerate(_corruptions(real)):
            path = where.path(f"corrupted-{index}.ckpt")
            if content is None:
                os.makedirs(path)
            else:
                with open(path, "wb") as file:
                    file.write(content)
            expect_raises(
                target,
                "CKPT-10",
                CheckpointCorruptedError,
                functools.partial(io.load_checkpoint, path),
                expected=f"raise CheckpointCorruptedError for {label}",
                hint="Catch the decoder's errors (UnpicklingError, RuntimeError from the zip "
                "reader, EOFError, IsADirectoryError) and raise CheckpointCorruptedError "
                "naming the path.",
                snippet=_io_snippet(
                    target,
                    f"# {label}\nopen(path, 'wb').write(b'\\x00garbage')\nio.load_checkpoint(path)",
                ),
            )


# --------------------------------------------------------------------------- CKPT-11


@check("CKPT-11", "checkpoint_io")
def check_checkpoint_io_remove_is_idempotent(target: _Target) -> None:
    """Removing is idempotent and the removed checkpoint is gone.

    After remove, loading raises CheckpointNotFoundError; removing again, or removing a path
    that never existed, does not raise.
    """
    with _location(target) as where, _opened(target) as io:
        path = where.path("removed.ckpt")
        repro = _io_snippet(
            target,
            "io.save_checkpoint({'w': torch.ones(2)}, path)\n"
            "io.remove_checkpoint(path)\nio.remove_checkpoint(path)\nio.load_checkpoint(path)",
        )
        _save(io, _sample(target, 19), path)
        steps: list[tuple[str, Callable[[], object]]] = [
            ("remove_checkpoint(path)", lambda: io.remove_checkpoint(path)),
            ("remove_checkpoint(path) again", lambda: io.remove_checkpoint(path)),
            (
                "remove_checkpoint of a path never saved",
                lambda: io.remove_checkpoint(where.path("never.ckpt")),
            ),
            (
                "remove_checkpoint under a missing directory",
                lambda: io.remove_checkpoint(where.path("no", "such", "model.ckpt")),
            ),
        ]
        for name, step in steps:
            try:
                step()
            except Exception as exc:
                raise failure(
                    target,
                    "CKPT-11",
                    expected="remove idempotently (a missing path is not an error)",
                    actual=f"{name} raised {describe_exception(exc)}",
                    hint="Ignore FileNotFoundError when deleting.",
                    snippet=repro,
                ) from exc
        if where.local and os.path.exists(path):
            raise failure(
                target,
                "CKPT-11",
                expected="delete the checkpoint from storage",
                actual=f"{path} still exists after remove_checkpoint",
                snippet=repro,
            )
        expect_raises(
            target,
            "CKPT-11",
            CheckpointNotFoundError,
            lambda: io.load_checkpoint(path),
            expected="raise CheckpointNotFoundError when loading a removed checkpoint",
            snippet=repro,
        )


# --------------------------------------------------------------------------- CKPT-12


@check("CKPT-12", "checkpoint_io")
def check_checkpoint_io_teardown_is_idempotent_and_reusable(target: _Target) -> None:
    """teardown is idempotent and the instance is usable afterwards.

    teardown before use and twice in a row does not raise; the instance saves and loads
    afterwards.
    """
    checkpoint = _sample(target, 20)
    with _location(target) as where:
        io = target.make()
        path = where.path("reuse.ckpt")
        steps: list[tuple[str, Callable[[], object]]] = [
            ("teardown() before any use", io.teardown),
            ("teardown() again", io.teardown),
            ("save_checkpoint after teardown", lambda: _save(io, checkpoint, path)),
            ("load_checkpoint after teardown", lambda: io.load_checkpoint(path)),
            ("teardown() after use", io.teardown),
            ("teardown() after use, again", io.teardown),
            ("save_checkpoint after the second teardown", lambda: _save(io, checkpoint, path)),
            ("teardown() at the end", io.teardown),
        ]
        repro = _io_snippet(
            target,
            "io.teardown(); io.teardown()\nio.save_checkpoint({'w': torch.ones(2)}, path)\n"
            "io.load_checkpoint(path); io.teardown(); io.teardown()\n"
            "io.save_checkpoint({'w': torch.ones(2)}, path)",
        )
        for name, step in steps:
            try:
                step()
            except Exception as exc:
                raise failure(
                    target,
                    "CKPT-12",
                    expected="allow teardown() any number of times and be usable afterwards",
                    actual=f"{name} raised {describe_exception(exc)}",
                    hint="Make teardown release resources lazily re-acquired on the next use.",
                    snippet=repro,
                ) from exc


# --------------------------------------------------------------------------- ACKPT-1 ... 5


def _async(target: _Target, io: CheckpointIO) -> AsyncCheckpointIO:
    if not isinstance(io, AsyncCheckpointIO):
        raise CheckSkipped(
            "declares 'async' but is not a trainspec.AsyncCheckpointIO (see the structure layer)"
        )
    return io


def _async_snippet(target: _Target, body: str) -> str:
    return _io_snippet(target, body)


@check("ACKPT-1", "checkpoint_io", requires=("async",))
def check_async_checkpoint_io_snapshots_at_save_time(target: _Target) -> None:
    """An asynchronous save writes the checkpoint as it was at the call.

    Mutating a tensor (or a list) right after save_checkpoint returns does not change what
    is written.
    """
    with _location(target) as where, _opened(target) as opened:
        io = _async(target, opened)
        path = where.path("snapshot.ckpt")
        checkpoint = _big(1.0, megabytes=4)
        if "python_objects" in _caps(target):
            checkpoint["steps"] = [1, 2]
        expected = copy.deepcopy(checkpoint)
        io.save_checkpoint(checkpoint, path)
        with torch.no_grad():
            checkpoint["weight"].fill_(-1.0)
        if "python_objects" in _caps(target):
            checkpoint["steps"].append(3)
        io.wait()
        _equal_or_fail(
            target,
            "ACKPT-1",
            expected,
            io.load_checkpoint(path),
            what="write the checkpoint as it was when save_checkpoint was called",
            repro=_async_snippet(
                target,
                """
                w = torch.ones(2**22)
                io.save_checkpoint({"w": w}, path)
                w.fill_(-1.0)
                io.wait()
                print(io.load_checkpoint(path)["w"][0])  # expected 1.0
                """,
            ),
            hint="Copy tensor storages (and containers) before returning from save_checkpoint.",
        )


# Calls that must wait for the failed save (ACKPT-3/4/5) and so must see its error. A save of
# another path right after the failing one may run before the failure happens, so whether it
# reports the error is timing, not contract; it is not checked.
_ACKPT2_CALLS: Final[tuple[str, ...]] = (
    "wait",
    "load_checkpoint",
    "remove_checkpoint",
    "teardown",
)


@check("ACKPT-2", "checkpoint_io", requires=("async", "local_paths"))
def check_async_checkpoint_io_surfaces_background_errors(target: _Target) -> None:
    """A failed background save raises from the next call that waits for it.

    A background save that fails raises CheckpointWriteError from the next call that waits
    for it: wait, teardown, or a load or remove of its path.
    """
    for call in _ACKPT2_CALLS:
        _surface_background_error(target, call)


def _surface_background_error(target: _Target, call: str) -> None:
    """One ACKPT-2 case: a failing background save, then ``call``."""
    with _location(target) as where, _opened(target) as opened:
        _require_local(where)
        io = _async(target, opened)
        blocker = where.path("blocker")
        with open(blocker, "wb") as file:
            file.write(b"a regular file, not a directory")
        bad = os.path.join(blocker, "model.ckpt")
        argument = "" if call in ("wait", "teardown") else "os.path.join(path, 'x.ckpt')"
        repro = _async_snippet(
            target,
            f"""
            open(path, "w").close()
            io.save_checkpoint({{"w": torch.ones(2)}}, os.path.join(path, "x.ckpt"))
            io.{call}({argument})  # expected CheckpointWriteError
            """,
        )
        try:
            io.save_checkpoint(_sample(target, 22), bad)
        except CheckpointWriteError:
            return  # reported at once: even better
        actions: dict[str, Callable[[], object]] = {
            "wait": io.wait,
            "load_checkpoint": lambda: io.load_checkpoint(bad),
            "remove_checkpoint": lambda: io.remove_checkpoint(bad),
            "teardown": io.teardown,
        }
        expect_raises(
            target,
            "ACKPT-2",
            CheckpointWriteError,
            actions[call],
            expected=f"raise the failed background save's CheckpointWriteError from the "
            f"next {call}()",
            hint="Store the worker's exception and raise it from the next call (after "
            "waiting for the failed save).",
            snippet=repro,
        )


@check("ACKPT-3", "checkpoint_io", requires=("async",))
def check_async_checkpoint_io_load_and_remove_wait_for_pending_save(target: _Target) -> None:
    """load_checkpoint and remove_checkpoint of a path with a pending save wait for it."""
    with _location(target) as where, _opened(target) as opened:
        io = _async(target, opened)
        path = where.path("pending.ckpt")
        io.save_checkpoint(_big(1.0, megabytes=1), path)
        io.wait()
        newer = _big(2.0, megabytes=4)
        io.save_checkpoint(newer, path)
        _equal_or_fail(
            target,
            "ACKPT-3",
            newer,
            io.load_checkpoint(path),
            what="return the pending save's checkpoint from a load of the same path",
            repro=_async_snippet(
                target,
                """
                io.save_checkpoint({"w": torch.zeros(2**20)}, path); io.wait()
                io.save_checkpoint({"w": torch.ones(2**22)}, path)
                print(io.load_checkpoint(path)["w"][0])  # expected 1.0
                """,
            ),
            hint="Track pending saves per path; load and remove wait for that path's saves.",
        )
        removed = where.path("removed.ckpt")
        io.save_checkpoint(_big(3.0, megabytes=4), removed)
        io.remove_checkpoint(removed)
        io.wait()
        expect_raises(
            target,
            "ACKPT-3",
            CheckpointNotFoundError,
            lambda: io.load_checkpoint(removed),
            expected="wait for a pending save before removing its path (so the removal sticks)",
            hint="remove_checkpoint must wait for pending saves of the path first.",
            snippet=_async_snippet(
                target,
                """
                io.save_checkpoint({"w": torch.ones(2**22)}, path)
                io.remove_checkpoint(path)
                io.wait()
                io.load_checkpoint(path)  # expected CheckpointNotFoundError
                """,
            ),
        )


@check("ACKPT-4", "checkpoint_io", requires=("async",))
def check_async_checkpoint_io_teardown_waits_for_pending_saves(target: _Target) -> None:
    """After teardown returns, every checkpoint saved before it is complete on storage."""
    with _location(target) as where, _opened(target) as opened:
        io = _async(target, opened)
        saved = {where.path(f"teardown-{i}.ckpt"): _big(float(i), megabytes=2) for i in range(3)}
        for path, checkpoint in saved.items():
            io.save_checkpoint(checkpoint, path)
        io.teardown()
        repro = _async_snippet(
            target,
            """
            io.save_checkpoint({"w": torch.ones(2**22)}, path)
            io.teardown()
            print(os.path.exists(path))  # expected True, and loadable by a fresh instance
            """,
        )
        missing = [p for p in saved if where.local and not os.path.exists(p)]
        if missing:
            raise failure(
                target,
                "ACKPT-4",
                expected="finish every pending save before teardown returns",
                actual=f"{len(missing)} of {len(saved)} files missing right after teardown",
                hint="Join the worker after the queue is drained in teardown.",
                snippet=repro,
            )
        _saved_checkpoints_load_back(
            target,
            "ACKPT-4",
            io,
            saved,
            fresh_reader=where.local,
            what="finish every pending save before teardown returns",
            repro=repro,
        )


@check("ACKPT-5", "checkpoint_io", requires=("async",))
def check_async_checkpoint_io_wait_completes_every_pending_save(target: _Target) -> None:
    """wait() returns only when every pending save is complete.

    wait() returns only when every pending save is complete; with nothing pending it returns
    at once.
    """
    with _location(target) as where, _opened(target) as opened:
        io = _async(target, opened)
        io.wait()
        saved = {where.path(f"wait-{i}.ckpt"): _big(float(i), megabytes=2) for i in range(3)}
        for path, checkpoint in saved.items():
            io.save_checkpoint(checkpoint, path)
        io.wait()
        repro = _async_snippet(
            target,
            """
            io.save_checkpoint({"w": torch.ones(2**22)}, path)
            io.wait()
            print(os.path.exists(path))  # expected True
            """,
        )
        missing = [p for p in saved if where.local and not os.path.exists(p)]
        if missing:
            raise failure(
                target,
                "ACKPT-5",
                expected="complete every pending save before wait() returns",
                actual=f"{len(missing)} of {len(saved)} files missing right after wait()",
                snippet=repro,
            )
        _saved_checkpoints_load_back(
            target,
            "ACKPT-5",
            io,
            saved,
            fresh_reader=where.local,
            what="complete every pending save before wait() returns",
            repro=repro,
        )


@check("ACKPT-5", "checkpoint_io", requires=("async", "local_paths"))
def check_async_checkpoint_io_wait_raises_a_background_error_once(target: _Target) -> None:
    """wait() raises a background save's error once, then returns normally.

    wait() raises a failed background save's CheckpointWriteError once; the next wait()
    returns normally.
    """
    with _location(target) as where, _opened(target) as opened:
        _require_local(where)
        io = _async(target, opened)
        blocker = where.path("blocker")
        with open(blocker, "wb") as file:
            file.write(b"a regular file, not a directory")
        repro = _async_snippet(
            target,
            """
            open(path, "w").close()
            io.save_checkpoint({"w": torch.ones(2)}, os.path.join(path, "x.ckpt"))
            io.wait()  # expected CheckpointWriteError
            io.wait()  # expected to return
            """,
        )
        try:
            io.save_checkpoint(_sample(target, 24), os.path.join(blocker, "model.ckpt"))
        except CheckpointWriteError as exc:
            raise CheckSkipped(
                "the failing save raised at once; wait() has nothing to report"
            ) from exc
        expect_raises(
            target,
            "ACKPT-5",
            CheckpointWriteError,
            io.wait,
            expected="raise the failed background save's CheckpointWriteError from wait()",
            snippet=repro,
        )
        try:
            io.wait()
        except Exception as exc:
            raise failure(
                target,
                "ACKPT-5",
                expected="raise a background error once, then let wait() return",
                actual=f"the second wait() raised {describe_exception(exc)}",
                hint="Clear the stored error when it is raised.",
                snippet=repro,
            ) from exc
