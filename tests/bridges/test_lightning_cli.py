"""``trainspec verify KIND TARGET --lightning``: a Lightning plugin factory verified through the
bridge from the command line, with the same verdicts as the ``lightning_target`` API."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

import pytest

from trainspec.conformance.cli import main

if TYPE_CHECKING:
    from pathlib import Path

pytest.importorskip("lightning")

_TORCH_IO = "lightning.fabric.plugins.io.torch_io:TorchCheckpointIO"


def test_a_lightning_checkpoint_io_is_verified_through_the_bridge(tmp_path: Path) -> None:
    report = tmp_path / "report.json"
    code = main(["verify", "checkpoint_io", _TORCH_IO, "--lightning", "--json", str(report)])
    data = json.loads(report.read_text())
    (target,) = data["targets"]
    assert "Lightning, bridged" in target["name"]
    statuses = {r["check"]: r["status"] for r in target["results"]}
    # Lightning's TorchCheckpointIO round-trips tensors through the bridge ...
    assert statuses["check_checkpoint_io_round_trips_every_dtype"] == "passed"
    # ... and refuses storage_options={} (CKPT-5), a divergence the compatibility page explains.
    assert statuses["check_checkpoint_io_rejects_unknown_storage_options"] == "failed"
    assert code == 1


def test_without_lightning_flag_the_lightning_class_fails_the_structure_layer(
    tmp_path: Path,
) -> None:
    report = tmp_path / "report.json"
    code = main(["verify", "checkpoint_io", _TORCH_IO, "--json", str(report)])
    (target,) = json.loads(report.read_text())["targets"]
    structure = [r for r in target["results"] if r["layer"] == "structure"]
    assert structure and all(r["status"] == "failed" for r in structure)
    assert code == 1


def test_lightning_flag_needs_a_target(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["verify", "checkpoint_io", "--lightning"]) == 2
    assert "--lightning" in capsys.readouterr().err


def test_lightning_flag_refuses_a_kind_without_a_bridge(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code = main(["verify", "launcher", _TORCH_IO, "--lightning"])
    assert code == 2
    err = capsys.readouterr().err
    assert "no Lightning bridge" in err and "launcher" in err
