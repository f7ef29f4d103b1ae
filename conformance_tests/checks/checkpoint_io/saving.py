"""CKPT-4 ... CKPT-6: a save does not modify its input, refuses unsupported storage options
with TypeError, and a write the storage refuses (at open, write, fsync or rename) raises
CheckpointWriteError and keeps the old checkpoint."""

from __future__ import annotations

import contextlib
import copy
import os
from typing import TYPE_CHECKING, Final

import torch

from trainspec.conformance._helpers import (
    checkpoint_differences,
    describe_exception,
    describe_value,
    expect_raises,
    failure,
)
from trainspec.conformance._storage_refusals import Stage, refusing
from trainspec.conformance.checks.checkpoint_io._fixtures import (
    _caps,
    _io_snippet,
    _location,
    _opened,
    _random,
    _require_local,
    _sample,
    _save,
    _Target,
)
from trainspec.conformance.core import CheckSkipped, check
from trainspec.errors import CheckpointWriteError

if TYPE_CHECKING:
    from trainspec.types import Checkpoint

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
def check_checkpoint_io_refused_parent_path_raises_checkpoint_write_error(target: _Target) -> None:
    """A write that storage refuses (a file where a parent directory should be) raises.

    Saving where storage refuses (a regular file in place of a parent directory) raises
    CheckpointWriteError; the refusals at each stage of a write have their own checks below.
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


# A refusal injected at each stage of a write (open, write, fsync, rename): storage refuses,
# so the save raises CheckpointWriteError and the old checkpoint stays (see _storage_refusals).

_REFUSAL_ERRORS: Final[dict[Stage, str]] = {
    "open": "PermissionError(EACCES) from opening a file for writing",
    "write": "OSError(ENOSPC) from writing",
    "fsync": "OSError(EIO) from fsync of a file",
    "rename": "PermissionError(EACCES) from os.replace / os.rename / os.link",
}


def _files_under(path: str) -> set[tuple[int, int]]:
    """(st_dev, st_ino) of the file at ``path``, or of every file of a directory layout."""
    found: set[tuple[int, int]] = set()
    names = [path]
    if os.path.isdir(path):
        names = [os.path.join(root, f) for root, _, files in os.walk(path) for f in files]
    for name in names:
        with contextlib.suppress(OSError):
            info = os.stat(name)
            found.add((info.st_dev, info.st_ino))
    return found


def _refused_stage_keeps_the_old_checkpoint(target: _Target, stage: Stage) -> None:
    old, new = _sample(target, 31), _sample(target, 32)
    with _location(target) as where:
        _require_local(where)
        path = where.path("refused", "model.ckpt")
        repro = _io_snippet(
            target,
            f"""
            from trainspec.conformance._storage_refusals import refusing
            io.save_checkpoint({{"w": torch.zeros(4)}}, path)
            with refusing({stage!r}, os.path.dirname(path)):  # {_REFUSAL_ERRORS[stage]}
                io.save_checkpoint({{"w": torch.ones(4)}}, path)  # must raise CheckpointWriteError
            print(io.load_checkpoint(path))  # must still be the zeros
            """,
        )
        with _opened(target) as io:
            _save(io, old, path)
            outcome: BaseException | None = None
            with refusing(stage, os.path.dirname(path)) as refusals:
                try:
                    _save(io, new, path)
                except Exception as exc:
                    outcome = exc
        if not refusals.fired:
            raise CheckSkipped(
                f"inconclusive: the save never met the injected {stage} refusal (it writes by "
                f"other means than the Python calls the kit can refuse: {_REFUSAL_ERRORS[stage]})"
            )
        refused = f"{_REFUSAL_ERRORS[stage]} ({', '.join(refusals.calls)})"
        with _opened(target) as reader:
            try:
                loaded: object = reader.load_checkpoint(path)
            except Exception as exc:
                loaded = exc
        if outcome is None:
            # The IO says it saved. Only a complete new checkpoint, written by other means,
            # makes that true; a file whose fsync was refused is not durable, so the
            # checkpoint must not be one (a refused fsync of some other file may be ignored).
            recovered = (
                not isinstance(loaded, BaseException)
                and not checkpoint_differences(new, loaded)
                and not (_files_under(path) & refusals.files)
            )
            if not recovered:
                raise failure(
                    target,
                    "CKPT-6",
                    expected=f"raise CheckpointWriteError when storage refuses the {stage} stage "
                    "of a save",
                    actual=f"storage refused with {refused}, and save_checkpoint returned "
                    f"normally; the path then held "
                    + (
                        describe_exception(loaded)
                        if isinstance(loaded, BaseException)
                        else "the old checkpoint"
                        if not checkpoint_differences(old, loaded)
                        else "the new checkpoint, not durable (its fsync failed)"
                        if not checkpoint_differences(new, loaded)
                        else describe_value(loaded)
                    ),
                    hint="Never swallow an OSError from open, write, fsync or the final rename: "
                    "remove the temporary file and raise CheckpointWriteError from it.",
                    snippet=repro,
                )
            return
        if not isinstance(outcome, CheckpointWriteError):
            raise failure(
                target,
                "CKPT-6",
                expected=f"raise CheckpointWriteError when storage refuses the {stage} stage of "
                "a save",
                actual=f"storage refused with {refused}; save_checkpoint raised "
                + describe_exception(outcome),
                hint="Translate OSError from storage into CheckpointWriteError naming the path, "
                "keeping it as __cause__.",
                snippet=repro,
            ) from outcome
        if isinstance(loaded, BaseException) or checkpoint_differences(old, loaded):
            raise failure(
                target,
                "CKPT-6",
                expected=f"keep the old checkpoint when storage refuses the {stage} stage of a "
                "save",
                actual=f"after {refused} and CheckpointWriteError, loading gave "
                + (
                    describe_exception(loaded)
                    if isinstance(loaded, BaseException)
                    else "; ".join(checkpoint_differences(old, loaded)[:3])
                ),
                hint="Write a temporary file and replace the old checkpoint only after every "
                "write succeeded.",
                snippet=repro,
            )


@check("CKPT-6", "checkpoint_io", requires=("local_paths",))
def check_checkpoint_io_refused_open_raises_write_error_and_keeps_the_old(target: _Target) -> None:
    """A refused open raises CheckpointWriteError and keeps the old checkpoint.

    Opening a file for writing in the checkpoint's directory fails with EACCES; skipped
    (counted, inconclusive) when the save opens files by means the kit cannot refuse.
    """
    _refused_stage_keeps_the_old_checkpoint(target, "open")


@check("CKPT-6", "checkpoint_io", requires=("local_paths",))
def check_checkpoint_io_refused_write_raises_write_error_and_keeps_the_old(target: _Target) -> None:
    """A refused write raises CheckpointWriteError and keeps the old checkpoint.

    Writing to a file in the checkpoint's directory fails with ENOSPC; skipped (counted,
    inconclusive) when the save writes by means the kit cannot refuse.
    """
    _refused_stage_keeps_the_old_checkpoint(target, "write")


@check("CKPT-6", "checkpoint_io", requires=("local_paths",))
def check_checkpoint_io_refused_fsync_raises_write_error_and_keeps_the_old(target: _Target) -> None:
    """A refused fsync raises CheckpointWriteError and keeps the old checkpoint.

    fsync of a file in the checkpoint's directory fails with EIO; a save that returns normally
    must not leave at the path a file whose fsync failed (it is not durable). Skipped (counted,
    inconclusive) when the save never fsyncs through os.fsync / os.fdatasync.
    """
    _refused_stage_keeps_the_old_checkpoint(target, "fsync")


@check("CKPT-6", "checkpoint_io", requires=("local_paths",))
def check_checkpoint_io_refused_rename_raises_write_error_and_keeps_the_old(
    target: _Target,
) -> None:
    """A refused rename or commit raises CheckpointWriteError and keeps the old checkpoint.

    os.replace / os.rename / os.link into the checkpoint's directory fail with EACCES; a save
    that returns normally must have left the complete new checkpoint by other means. Skipped
    (counted, inconclusive) when the save commits by means the kit cannot refuse.
    """
    _refused_stage_keeps_the_old_checkpoint(target, "rename")
