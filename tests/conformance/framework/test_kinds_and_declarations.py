"""The table of kinds drives the kit, and implementations declare their conformance
capabilities and options on themselves (issue 15, "one table of kinds", "declarations where
the code lives")."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, ClassVar

import pytest

from tests.conformance.framework.test_runner import SyncIO
from tests.conformance.framework.test_sandbox_and_skips import DescribedEnvironment
from trainspec import ConfigurationError
from trainspec.conformance import Target, TargetSession, verify
from trainspec.conformance.builtin_targets import BUILTIN_TARGETS
from trainspec.conformance.capabilities import vocabulary
from trainspec.conformance.core import KINDS, checks_for
from trainspec.conformance.kinds import KIND_TABLE, parse_option, parse_options
from trainspec.conformance.runner import declarations_of, load_target, make_target
from trainspec.conformance.structure import KIND_PROTOCOLS

if TYPE_CHECKING:
    from trainspec.conformance.core import Target as CoreTarget


# -- the table ----------------------------------------------------------------------------------


def test_the_table_lists_every_kind_in_order_and_the_structure_layer_uses_its_protocols() -> None:
    assert tuple(KIND_TABLE) == KINDS
    assert {kind: spec.protocol for kind, spec in KIND_TABLE.items()} == KIND_PROTOCOLS


@pytest.mark.parametrize("kind", KINDS)
def test_every_check_of_a_kind_fits_its_table_entry(kind: str) -> None:
    spec = KIND_TABLE[kind]  # type: ignore[index]
    for check in checks_for(spec.name):
        assert check.clause.rpartition("-")[0] in spec.clause_prefixes, check.name
        assert check.requires <= spec.vocabulary.keys(), check.name
    assert spec.vocabulary.keys() <= vocabulary(spec.name).keys()


def test_the_reference_registry_uses_the_tables_entry_point_groups() -> None:
    from trainspec.reference.registry import ENTRY_POINT_GROUPS

    from_table = {
        kind: spec.entry_point_group
        for kind, spec in KIND_TABLE.items()
        if spec.entry_point_group is not None
    }
    assert dict(ENTRY_POINT_GROUPS) == from_table


# -- options ------------------------------------------------------------------------------------


def test_an_unknown_option_is_a_configuration_error_naming_the_valid_ones(
    fake_checks: Any, good_env: type
) -> None:
    fake_checks.add("ENV-1", name="check_env_one")

    with pytest.raises(ConfigurationError) as caught:
        verify(Target("cluster_environment", good_env, options={"env_factroy": print}))

    message = str(caught.value)
    assert "unknown option 'env_factroy'" in message
    assert "did you mean env_factory" in message
    assert "valid options: env_factory" in message


def test_option_strings_are_parsed_once_to_the_options_type(fake_checks: Any) -> None:
    seen: list[dict[str, object]] = []

    def record(target: CoreTarget[object]) -> None:
        seen.append(dict(target.options))

    fake_checks.module("checkpoint_io")
    fake_checks.add("CKPT-1", "checkpoint_io", name="check_io_one", body=record)
    options = {
        "max_examples": "5",
        "trusted_factory": "tests.conformance.framework.test_runner:SyncIO",
        "map_location_devices": "cpu, meta",
    }

    report = verify(Target("checkpoint_io", SyncIO, options=options))

    assert report.ok
    assert seen == [
        {"max_examples": 5, "trusted_factory": SyncIO, "map_location_devices": ("cpu", "meta")}
    ]


@pytest.mark.parametrize(
    ("name", "value", "fragment"),
    [
        ("max_examples", "five", "int >= 1"),
        ("max_examples", 0, "int >= 1"),
        ("max_examples", True, "int >= 1"),
        ("trusted_factory", "no_such_module_xyz:thing", "cannot import module"),
        ("trusted_factory", 3, "callable"),
    ],
)
def test_a_bad_option_value_is_a_configuration_error(
    name: str, value: object, fragment: str
) -> None:
    with pytest.raises(ConfigurationError, match=fragment):
        parse_option("checkpoint_io", name, value)


def test_every_builtin_targets_options_are_in_its_kinds_vocabulary() -> None:
    for row in BUILTIN_TARGETS:
        if row.world_size is None:
            target = row.load()
            parse_options(row.kind, target.options)


# -- declarations on the implementation ---------------------------------------------------------


class DeclaringEnvironment(DescribedEnvironment):
    """A plugin that declares its capabilities and options where it lives."""

    conformance_capabilities: ClassVar[frozenset[str]] = frozenset({"configurable"})
    conformance_options: ClassVar[dict[str, object]] = {
        "env_factory": "tests.conformance.framework.test_sandbox_and_skips:low_ports_factory"
    }


def test_a_class_declares_its_capabilities_and_options_on_itself() -> None:
    target = make_target("cluster_environment", DeclaringEnvironment)

    assert target.capabilities == frozenset({"configurable"})
    assert callable(target.options["env_factory"])
    report = verify(target)
    assert report.ok, report.results
    statuses = {r.check: r.status for r in report.results}
    assert statuses["check_environment_validate_rejects_inconsistent_descriptions"] == "passed"


def test_the_command_line_target_of_a_declaring_class_passes_as_it_is() -> None:
    target = load_target(
        "checkpoint_io", "trainspec.reference.checkpoint_io.torch_io:TorchCheckpointIO"
    )

    assert {"local_paths", "python_objects", "pickle"} <= target.capabilities
    report = verify(target, select=["CKPT-1", "CKPT-8"], capabilities=())
    assert report.ok, [r for r in report.results if r.status != "passed"]


@pytest.mark.parametrize(
    ("attribute", "value"),
    [
        ("conformance_capabilities", "configurable"),
        ("conformance_capabilities", [1]),
        ("conformance_options", ["env_factory"]),
    ],
)
def test_a_malformed_declaration_is_a_configuration_error(attribute: str, value: object) -> None:
    declaring = type("Declaring", (DescribedEnvironment,), {attribute: value})

    with pytest.raises(ConfigurationError, match=attribute):
        declarations_of(declaring)


class AsyncIO(SyncIO):
    """Implements AsyncCheckpointIO without declaring anything."""

    def wait(self) -> None:
        pass


def test_implementing_a_structural_capability_is_enough_to_get_it_checked(
    fake_checks: Any,
) -> None:
    fake_checks.module("checkpoint_io")
    fake_checks.add("ACKPT-5", "checkpoint_io", name="check_io_async", requires=("async",))

    report = verify(("checkpoint_io", AsyncIO))
    plain = verify(("checkpoint_io", SyncIO))

    statuses = {r.check: r.status for r in report.results}
    assert statuses["structure:AsyncCheckpointIO"] == "passed"
    assert statuses["check_io_async"] == "passed"
    assert report.targets[0].capabilities == ("async",)
    assert {r.check: r.status for r in plain.results}["check_io_async"] == "skipped"


def test_a_check_run_alone_infers_a_structural_capability_from_an_instance(
    fake_checks: Any,
) -> None:
    fake_checks.module("checkpoint_io")
    check = fake_checks.add("ACKPT-5", "checkpoint_io", name="check_io_async", requires=("async",))

    check.run(Target("checkpoint_io", AsyncIO))  # no CheckSkipped: inferred


def test_a_declared_structural_capability_the_object_lacks_fails_the_structure_layer(
    fake_checks: Any,
) -> None:
    fake_checks.module("checkpoint_io")
    fake_checks.add("CKPT-1", "checkpoint_io", name="check_io_one")

    session = TargetSession(Target("checkpoint_io", SyncIO, capabilities=frozenset({"async"})))

    assert session.structure_failed
