"""Lightning -> trainspec: each bridge translates, adds nothing, and says where Lightning has
no counterpart; the kit takes the ready targets through all three ways in."""

from __future__ import annotations

import os
import pickle
from typing import TYPE_CHECKING

import pytest
import torch

pytest.importorskip("lightning")

from lightning.fabric.plugins import Precision as LightningPrecision
from lightning.fabric.plugins import TorchCheckpointIO
from lightning.fabric.plugins.environments.lightning import LightningEnvironment
from lightning.fabric.plugins.precision import HalfPrecision, MixedPrecision
from lightning.fabric.strategies.single_device import SingleDeviceStrategy
from lightning.pytorch.accelerators import CPUAccelerator

from tests.bridges._lightning_helpers import LIGHTNING_WARNINGS
from trainspec import (
    Accelerator,
    BackwardSyncControl,
    CheckpointCorruptedError,
    CheckpointIO,
    CheckpointNotFoundError,
    ClusterEnvironment,
    CollectiveError,
    ConfigurationError,
    Precision,
    Strategy,
    UnsafeCheckpointError,
    UnsupportedError,
)
from trainspec.bridges.lightning import (
    from_lightning_accelerator,
    from_lightning_checkpoint_io,
    from_lightning_cluster_environment,
    from_lightning_precision,
    from_lightning_strategy,
    targets,
)
from trainspec.bridges.lightning._mapping import ERROR_TABLE, translate_error
from trainspec.conformance import verify
from trainspec.conformance._helpers import importable_path
from trainspec.conformance.core import all_checks
from trainspec.conformance.suites import PrecisionSuite

if TYPE_CHECKING:
    from pathlib import Path

pytestmark = [pytest.mark.filterwarnings(w) for w in LIGHTNING_WARNINGS]


class _Unpicklable:
    """A class torch's weights-only loader refuses."""


# -- Accelerator ------------------------------------------------------------------------------


def test_accelerator_parses_with_lightnings_own_two_steps() -> None:
    bridged = from_lightning_accelerator(CPUAccelerator())
    assert isinstance(bridged, Accelerator)
    assert bridged.device_type == "cpu"
    assert bridged.is_available() is True
    assert bridged.device_count() == 1  # auto_device_count()
    assert bridged.parse_devices(2) == [torch.device("cpu")] * 2
    assert bridged.parse_devices("auto") == [torch.device("cpu")]


def test_accelerator_errors_cross_as_configuration_errors() -> None:
    bridged = from_lightning_accelerator(CPUAccelerator())
    with pytest.raises(ConfigurationError) as info:
        bridged.parse_devices(-1)  # Lightning's CPU accelerator refuses -1 with TypeError
    assert isinstance(info.value.__cause__, TypeError)
    with pytest.raises(ConfigurationError):
        bridged.setup_device(torch.device("meta"))


def test_accelerator_members_without_a_counterpart_say_so() -> None:
    bridged = from_lightning_accelerator(CPUAccelerator())
    with pytest.raises(UnsupportedError, match="synchronize"):
        bridged.synchronize(torch.device("cpu"))


def test_accelerator_name_that_is_no_device_type_needs_device_type() -> None:
    class Named(CPUAccelerator):
        @staticmethod
        def name() -> str:
            return "tpu"

    with pytest.raises(ConfigurationError, match="device_type="):
        from_lightning_accelerator(Named())
    assert from_lightning_accelerator(Named(), device_type="cpu").device_type == "cpu"


# -- Precision --------------------------------------------------------------------------------


def test_precision_flag_and_dtypes_come_from_the_plugins_flag() -> None:
    bridged = from_lightning_precision(HalfPrecision("bf16-true"))
    assert isinstance(bridged, Precision)
    assert (bridged.flag, bridged.param_dtype, bridged.compute_dtype) == (
        "bf16-true",
        torch.bfloat16,
        torch.bfloat16,
    )


def test_precision_with_a_flag_trainspec_lacks_is_refused() -> None:
    class Engine(LightningPrecision):
        precision = "transformer-engine"  # type: ignore[assignment]

    with pytest.raises(ConfigurationError, match="32-true"):
        from_lightning_precision(Engine())


def test_precision_setup_refuses_another_device_type_than_the_plugins_own() -> None:
    bridged = from_lightning_precision(MixedPrecision("bf16-mixed", "cpu"))
    bridged.setup(torch.device("cpu"))
    with pytest.raises(UnsupportedError):
        bridged.setup(torch.device("meta"))


def test_precision_optimizer_step_reports_a_skipped_step() -> None:
    bridged = from_lightning_precision(MixedPrecision("16-mixed", "cpu"))
    bridged.setup(torch.device("cpu"))
    weight = torch.nn.Parameter(torch.ones(2))
    optimizer = torch.optim.SGD([weight], lr=0.1)
    bridged.backward((weight * float("inf")).sum(), None)
    assert bridged.optimizer_step(optimizer) is False
    assert torch.equal(weight.detach(), torch.ones(2))
    optimizer.zero_grad()
    bridged.backward(weight.sum(), None)
    assert bridged.optimizer_step(optimizer) is True
    assert from_lightning_precision(LightningPrecision()).optimizer_step(optimizer) is True


# -- CheckpointIO -----------------------------------------------------------------------------


def test_checkpoint_io_errors_cross_as_trainspec_errors(tmp_path: Path) -> None:
    io = from_lightning_checkpoint_io(TorchCheckpointIO())
    assert isinstance(io, CheckpointIO)
    with pytest.raises(CheckpointNotFoundError):
        io.load_checkpoint(str(tmp_path / "missing.ckpt"))
    garbage = tmp_path / "garbage.ckpt"
    garbage.write_bytes(os.urandom(256))
    with pytest.raises(CheckpointCorruptedError):
        io.load_checkpoint(str(garbage))
    unsafe = str(tmp_path / "unsafe.ckpt")
    torch.save({"x": _Unpicklable()}, unsafe)
    with pytest.raises(UnsafeCheckpointError):
        io.load_checkpoint(unsafe)


def test_checkpoint_io_weights_only_is_fixed_at_construction(tmp_path: Path) -> None:
    unsafe = str(tmp_path / "unsafe.ckpt")
    torch.save({"x": _Unpicklable()}, unsafe)
    trusted = from_lightning_checkpoint_io(TorchCheckpointIO(), weights_only=False)
    assert isinstance(trusted.load_checkpoint(unsafe)["x"], _Unpicklable)
    with pytest.raises(ConfigurationError):
        from_lightning_checkpoint_io(TorchCheckpointIO(), weights_only="no")  # type: ignore[arg-type]


def test_every_error_table_row_translates_to_its_target() -> None:
    for rule in ERROR_TABLE:
        source = rule.source("boom") if rule.source is not KeyError else KeyError("boom")
        translated = translate_error(source, rule.stage, "ctx")
        assert isinstance(translated, rule.target), rule
    assert isinstance(translate_error(RuntimeError("x"), "collective", "ctx"), CollectiveError)
    unknown = ZeroDivisionError("bug")
    assert translate_error(unknown, "read", "ctx") is unknown  # a bug is not disguised
    refusal = pickle.UnpicklingError("Weights only load failed. Unsupported global: GLOBAL x.y")
    assert isinstance(translate_error(refusal, "read", "ctx"), UnsafeCheckpointError)


# -- ClusterEnvironment -----------------------------------------------------------------------


def test_cluster_environment_reads_lightnings_methods_as_properties(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("LOCAL_RANK", "1")
    monkeypatch.setenv("NODE_RANK", "2")
    monkeypatch.setenv("MASTER_PORT", "1234")
    environment = LightningEnvironment()
    environment.set_world_size(8)
    environment.set_global_rank(5)
    bridged = from_lightning_cluster_environment(environment)
    assert isinstance(bridged, ClusterEnvironment)
    assert (bridged.world_size, bridged.global_rank, bridged.local_rank, bridged.node_rank) == (
        8,
        5,
        1,
        2,
    )
    assert bridged.main_port == 1234
    assert bridged.creates_processes_externally is True
    assert bridged.detect() is True
    bridged.validate()
    monkeypatch.setenv("LOCAL_RANK", "abc")
    with pytest.raises(ConfigurationError):
        bridged.validate()


# -- Strategy ---------------------------------------------------------------------------------


def _single() -> SingleDeviceStrategy:
    return SingleDeviceStrategy(
        device=torch.device("cpu"),
        accelerator=CPUAccelerator(),
        precision=LightningPrecision(),
        checkpoint_io=TorchCheckpointIO(),
    )


def test_strategy_trains_and_checkpoints_through_lightnings_members(tmp_path: Path) -> None:
    bridged = from_lightning_strategy(_single())
    assert isinstance(bridged, Strategy)
    assert not isinstance(bridged, BackwardSyncControl)  # Lightning's single device has none
    bridged.setup_environment()
    module = bridged.setup_module(torch.nn.Linear(2, 1))
    optimizer = bridged.setup_optimizer(torch.optim.SGD(module.parameters(), lr=0.1))
    with bridged.forward_context():
        loss = module(bridged.batch_to_device(torch.ones(3, 2))).sum()
    bridged.backward(loss, module)
    assert bridged.optimizer_step(optimizer) is True
    path = str(tmp_path / "c.ckpt")
    bridged.save_checkpoint({"model": bridged.module_state_dict(module)}, path)
    assert torch.equal(bridged.load_checkpoint(path)["model"]["weight"], module.weight)
    assert [t.tolist() for t in bridged.all_gather(torch.ones(2))] == [[1.0, 1.0]]
    with pytest.raises(UnsupportedError):
        bridged.remove_checkpoint(path)
    with pytest.raises(UnsupportedError):
        bridged.all_reduce(torch.ones(1), timeout=__import__("datetime").timedelta(seconds=1))
    with pytest.raises(UnsupportedError):
        _ = bridged.cluster_environment
    bridged.teardown()


def test_strategy_without_an_accelerator_is_refused() -> None:
    with pytest.raises(ConfigurationError, match="accelerator"):
        from_lightning_strategy(SingleDeviceStrategy(device=torch.device("cpu")))


# -- the kit takes the ready targets ------------------------------------------------------------


def test_verify_takes_a_ready_target_and_judges_lightnings_behaviour() -> None:
    report = verify(targets.precision_bf16_true)
    assert report.ok, [r for r in report.targets[0].results if r.status == "failed"]
    report = verify(targets.accelerator_cpu, select=["ACC-9"])
    failed = {r.clause for r in report.targets[0].results if r.status == "failed"}
    assert failed == {"ACC-9"}  # no synchronize in Lightning: said, not invented


class TestLightningHalfPrecisionThroughThePytestSuite(PrecisionSuite):
    """The pytest suites take the same factories as they are."""

    factory = staticmethod(targets.precision_16_true.factory)


def test_every_compatibility_analysis_names_a_real_target_and_check() -> None:
    import importlib.util
    from pathlib import Path

    script = Path(__file__).resolve().parents[2] / "scripts" / "lightning_compat.py"
    spec = importlib.util.spec_from_file_location("lightning_compat", script)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    analysis: dict[tuple[str, str], str] = module.ANALYSIS
    attributes = {entry.attribute for entry in targets.TARGETS}
    names = {check.name for check in all_checks()}
    for attribute, check in analysis:
        assert attribute in attributes, attribute
        assert check in {"*", "teardown:*"} or check.removeprefix("teardown:") in names, check


def test_lightning_target_wraps_every_instance_a_lightning_factory_makes() -> None:
    target = targets.lightning_target(
        "precision", lambda: HalfPrecision("bf16-true"), name="my half precision"
    )
    first, second = target.make(), target.make()
    assert isinstance(first, Precision)
    assert first is not second  # fresh per check
    assert verify(target).ok
    with pytest.raises(ConfigurationError, match="accelerator"):
        targets.lightning_target("launcher", object)
    with pytest.raises(ConfigurationError):
        targets.lightning_target("precision", 3)  # type: ignore[arg-type]


held_io = targets.lightning_target("checkpoint_io", lambda: TorchCheckpointIO(), name="held io")
"""A module-level target, as a plugin author writes one, of a factory nothing can import."""


def test_lightning_target_of_a_lambda_is_importable_by_the_attribute_that_holds_it() -> None:
    assert importable_path(held_io.factory) == (__name__, "held_io.factory")
    made = held_io.factory()
    assert isinstance(made, CheckpointIO)
    assert made is not held_io.factory()  # a fresh plugin per call


def test_lightning_target_of_an_importable_factory_is_importable_from_anywhere() -> None:
    """What ``trainspec verify KIND module:Class --lightning`` builds (inside a function):
    importable through ``lightning_factories``, the very same object in this process."""
    made_inside = targets.lightning_target("checkpoint_io", TorchCheckpointIO)
    path = importable_path(made_inside.factory)
    assert path == (
        "trainspec.bridges.lightning.targets",
        "lightning_factories.checkpoint_io.lightning.fabric.plugins.io.torch_io.TorchCheckpointIO",
    )
    assert made_inside.factory is targets.torch_checkpoint_io.factory  # one per (kind, path)
    assert isinstance(made_inside.make(), CheckpointIO)
    with pytest.raises(AttributeError, match="launcher"):
        _ = targets.lightning_factories.launcher


def test_lightning_target_of_a_lambda_made_inside_a_function_is_not_importable() -> None:
    local = targets.lightning_target("checkpoint_io", lambda: TorchCheckpointIO())
    assert importable_path(local.factory) is None  # the kit skips what needs it, counted
    assert isinstance(local.make(), CheckpointIO)
    assert "lambda" in repr(local.factory)


def test_bridged_checkpoint_io_gets_the_kill_check() -> None:
    """CKPT-3's kill check rebuilds the IO in a fresh process from the factory's import
    path; through ``lightning_target`` it runs (passed or failed here, never skipped)."""
    report = verify(
        targets.torch_checkpoint_io,
        select=["check_checkpoint_io_killed_save_leaves_old_or_new_checkpoint"],
    )
    (result,) = [r for r in report.targets[0].results if "killed" in r.check]
    assert result.status in ("passed", "failed"), result.message


def test_ddp_target_keeps_its_world_after_lightning_environment_teardown(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """LightningEnvironment.teardown deletes WORLD_SIZE from os.environ; the next instance
    in the same ranks (E2E-2 makes two) must still span the whole world, or its setup_module
    waits for a rank that never joins."""
    for name, value in {"WORLD_SIZE": "2", "LOCAL_WORLD_SIZE": "2", "LOCAL_RANK": "0"}.items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("NODE_RANK", raising=False)
    monkeypatch.delenv("GROUP_WORLD_SIZE", raising=False)
    first = targets._ddp()
    assert isinstance(first, Strategy)
    assert first.world_size == 2
    first.teardown()
    assert "WORLD_SIZE" not in os.environ  # what Lightning's environment teardown did
    second = targets._ddp()
    assert isinstance(second, Strategy)
    assert (second.world_size, second.global_rank) == (2, 0)
