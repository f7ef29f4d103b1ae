"""CKPT-1, CKPT-2: a saved checkpoint loads back equal, through every path form the
target declares; missing parent directories are created."""

from __future__ import annotations

import copy
import functools
import pathlib
import uuid
from typing import TYPE_CHECKING

import torch

from trainspec.conformance._helpers import (
    describe_exception,
    expect_raises,
    failure,
    int_option,
    refusal_or_bug_hint,
    run_examples,
    snippet,
    value_source,
)
from trainspec.conformance.checks.checkpoint_io._fixtures import (
    _caps,
    _dtypes,
    _equal_or_fail,
    _io_snippet,
    _location,
    _opened,
    _require_local,
    _sample,
    _save,
    _settle,
    _Target,
)
from trainspec.conformance.core import CheckSkipped, check
from trainspec.conformance.hypothesis_strategies import state_dicts, tensors
from trainspec.errors import CheckpointNotFoundError

if TYPE_CHECKING:
    from trainspec.types import Checkpoint

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
                "# checkpoint: the smallest failing example hypothesis found, rebuilt exactly\n"
                + value_source(checkpoint, "checkpoint")
                + "\nio.save_checkpoint(checkpoint, path)\nloaded = io.load_checkpoint(path)"
                "\nfrom trainspec.conformance.hypothesis_strategies import assert_checkpoints_equal"
                "\nassert_checkpoints_equal(checkpoint, loaded)",
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
                    hint=refusal_or_bug_hint(
                        exc, "declare fewer capabilities or narrow the 'dtypes' option"
                    ),
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
