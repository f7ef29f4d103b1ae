"""CKPT-7 ... CKPT-10: loading places tensors by ``map_location``, is safe by default
(pickled content only by an explicit opt-in), and a missing or corrupted checkpoint raises
the matching trainspec error."""

from __future__ import annotations

import contextlib
import functools
import os
import uuid
from collections.abc import Sequence
from typing import TYPE_CHECKING

import torch

from trainspec.checkpoint_io import CheckpointIO
from trainspec.conformance._helpers import (
    checkpoint_differences,
    describe_exception,
    describe_value,
    expect_raises,
    failure,
)
from trainspec.conformance.checks.checkpoint_io._fixtures import (
    _EXECUTED,
    UnsafePayload,
    _big,
    _caps,
    _io_snippet,
    _location,
    _opened,
    _require_local,
    _sample,
    _save,
    _Target,
)
from trainspec.conformance.core import CheckSkipped, check
from trainspec.errors import (
    CheckpointCorruptedError,
    CheckpointError,
    CheckpointNotFoundError,
    UnsafeCheckpointError,
)

if TYPE_CHECKING:
    from trainspec.types import Checkpoint

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
                    hint=(
                        "Pass map_location through to torch.load, or move"
                        if "pickle" in _caps(target)
                        else "Move"
                    )
                    + " each tensor with .to(device) after loading. Narrow the "
                    "'map_location_devices' option if a device cannot be used here.",
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
                hint="Catch the decoder's errors ("
                + (
                    "UnpicklingError, RuntimeError from the zip reader, "
                    if "pickle" in _caps(target)
                    else "the format library's own errors, "
                )
                + "EOFError, IsADirectoryError) and raise CheckpointCorruptedError naming the "
                "path.",
                snippet=_io_snippet(
                    target,
                    f"# {label}\nopen(path, 'wb').write(b'\\x00garbage')\nio.load_checkpoint(path)",
                ),
            )
