"""The kill server of CKPT-3's kill check (trainspec.conformance._checkpoint_kill): one server
process per run (one ``import torch``), a fresh factory process per factory, forked from it."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

import pytest
import torch

from trainspec.conformance import _checkpoint_kill
from trainspec.conformance._checkpoint_kill import KillServer, KillServerError
from trainspec.reference.checkpoint_io.torch_io import TorchCheckpointIO

if TYPE_CHECKING:
    from pathlib import Path

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="POSIX only")

_VARIABLE = "TRAINSPEC_TEST_KILL_SERVER_ENV"
_MODULE = __name__


def env_checking_io() -> TorchCheckpointIO:
    """A factory that works only with the variable the test sets after the server started."""
    if os.environ.get(_VARIABLE) != "set":
        raise RuntimeError(f"{_VARIABLE} is not set in the factory process")
    return TorchCheckpointIO()


def _server_pid() -> int:
    shared = _checkpoint_kill._shared
    assert shared is not None
    return shared.process.pid


def _trial(server: KillServer, path: Path) -> _checkpoint_kill.KillOutcome:
    return server.trial(str(path), first=0, delay_s=0.01, timeout_s=30.0)


def test_one_server_serves_every_factory_with_the_callers_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with KillServer(_MODULE, "TorchCheckpointIO", numel=16, dtype=torch.float32) as server:
        first_pid = _server_pid()
        outcome = _trial(server, tmp_path / "a.ckpt")
        assert outcome.started and outcome.killed, outcome
    # Set after the server started: the factory process takes the caller's environment of now.
    monkeypatch.setenv(_VARIABLE, "set")
    with KillServer(_MODULE, "env_checking_io", numel=16, dtype=torch.float32) as server:
        assert _server_pid() == first_pid  # no second `import torch`
        outcome = _trial(server, tmp_path / "b.ckpt")
        assert outcome.started and outcome.killed, outcome


def test_a_factory_that_cannot_be_imported_leaves_the_server_serving(tmp_path: Path) -> None:
    with (
        pytest.raises(KillServerError, match="importing the factory"),
        KillServer("no_such_module_for_the_kill_server", "Io", numel=16, dtype=torch.float32),
    ):
        pass
    with KillServer(_MODULE, "TorchCheckpointIO", numel=16, dtype=torch.float32) as server:
        pid = _server_pid()
        assert _trial(server, tmp_path / "a.ckpt").killed
    with KillServer(_MODULE, "TorchCheckpointIO", numel=16, dtype=torch.float32):
        assert _server_pid() == pid


def test_a_busy_server_gives_a_second_user_a_private_one(tmp_path: Path) -> None:
    with KillServer(_MODULE, "TorchCheckpointIO", numel=16, dtype=torch.float32) as first:
        shared = _server_pid()
        with KillServer(_MODULE, "TorchCheckpointIO", numel=16, dtype=torch.float32) as second:
            private = second._server
            assert private is not None and private.process.pid != shared
            assert _trial(second, tmp_path / "b.ckpt").killed
        assert private.process.poll() is not None  # closed with its user
        assert _trial(first, tmp_path / "a.ckpt").killed
        assert _server_pid() == shared
