"""Installing the package is all it takes: the names resolve through entry points."""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, distribution

import pytest
from trainspec.reference import Registry, resolve
from trainspec.reference.registry import ENTRY_POINT_GROUPS

from trainspec_example import CompressedCheckpointIO, VirtualCPUAccelerator


@pytest.fixture(scope="module", autouse=True)
def installed() -> None:
    try:
        distribution("trainspec-example")
    except PackageNotFoundError:
        pytest.fail(
            "trainspec-example is not installed; these tests check its entry points: "
            "pip install -e examples/trainspec_example",
            pytrace=False,
        )


def test_entry_points_are_declared_in_the_trainspec_groups() -> None:
    entry_points = distribution("trainspec-example").entry_points
    declared = {(ep.group, ep.name): ep.value for ep in entry_points}
    assert declared[ENTRY_POINT_GROUPS["accelerator"], "vcpu"] == (
        "trainspec_example.vcpu:VirtualCPUAccelerator"
    )
    assert declared[ENTRY_POINT_GROUPS["checkpoint_io"], "gzip"] == (
        "trainspec_example.compressed_io:CompressedCheckpointIO"
    )


def test_resolve_finds_the_accelerator_by_name() -> None:
    strategy = resolve(accelerator="vcpu", devices=1, registry=Registry())
    assert isinstance(strategy.accelerator, VirtualCPUAccelerator)


def test_resolve_finds_the_checkpoint_io_by_name() -> None:
    strategy = resolve(accelerator="cpu", checkpoint_io="gzip", registry=Registry())
    assert isinstance(strategy.checkpoint_io, CompressedCheckpointIO)


def test_registry_lists_the_plugins_with_their_distribution() -> None:
    registry = Registry()
    info = {i.name: i for i in registry.list_components("accelerator")}["vcpu"]
    assert info.distribution == "trainspec-example"
    assert info.available is True
    io = {i.name: i for i in registry.list_components("checkpoint_io")}["gzip"]
    assert io.object_path == "trainspec_example.compressed_io:CompressedCheckpointIO"
