"""CKPT-11, CKPT-12: removal is idempotent; teardown is idempotent and the instance stays
usable."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from trainspec.conformance._helpers import describe_exception, expect_raises, failure
from trainspec.conformance.checks.checkpoint_io._fixtures import (
    _io_snippet,
    _location,
    _opened,
    _sample,
    _save,
    _Target,
)
from trainspec.conformance.core import check
from trainspec.errors import CheckpointNotFoundError

if TYPE_CHECKING:
    from collections.abc import Callable

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
