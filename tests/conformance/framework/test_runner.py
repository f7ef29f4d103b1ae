"""verify(): statuses, blocking, expected failures, configuration errors, cleanup, watchdog."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import pytest

from trainspec import ConfigurationError
from trainspec.conformance import CheckFailure, CheckSkipped, Target, TargetSession, verify
from trainspec.conformance.core import Target as CoreTarget

Body = Callable[[CoreTarget[object]], None]


def _by_check(report: Any) -> dict[str, Any]:
    return {r.check: r for r in report.results}


def test_statuses_messages_and_tracebacks(fake_checks: Any, good_env: type, failing: Any) -> None:
    def skip(target: CoreTarget[object]) -> None:
        raise CheckSkipped("not here")

    def boom(target: CoreTarget[object]) -> None:
        raise KeyError("surprise")

    def plain_assert(target: CoreTarget[object]) -> None:
        assert target.make() is None, "an instance came back"

    fake_checks.add("ENV-1", name="check_env_passes")
    fake_checks.add("ENV-2", name="check_env_fails", body=failing("ENV-2"))
    fake_checks.add("ENV-3", name="check_env_skips", body=skip)
    fake_checks.add("ENV-4", name="check_env_errors", body=boom)
    fake_checks.add("ENV-5", name="check_env_asserts", body=plain_assert)

    report = verify(Target("cluster_environment", good_env, name="good"))
    results = _by_check(report)

    assert results["structure:ClusterEnvironment"].status == "passed"
    assert results["check_env_passes"].status == "passed"
    failed = results["check_env_fails"]
    assert failed.status == "failed"
    assert failed.message.startswith("good must do the thing (ENV-2); got it did not.")
    assert "CheckFailure" in failed.traceback
    assert results["check_env_skips"].status == "skipped"
    assert results["check_env_skips"].message == "not here"
    assert results["check_env_errors"].status == "error"
    assert "KeyError" in results["check_env_errors"].message
    assert results["check_env_asserts"].status == "failed"
    assert "an instance came back" in results["check_env_asserts"].message
    assert not report.ok
    assert report.summary.as_dict() == {
        "passed": 2,
        "failed": 2,
        "skipped": 1,
        "xfailed": 0,
        "xpassed": 0,
        "blocked": 0,
        "error": 1,
    }
    assert report.results[0].layer == "structure"


def test_a_conforming_target_passes(fake_checks: Any, good_env: type) -> None:
    fake_checks.add("ENV-1", name="check_env_one")
    report = verify(("cluster_environment", good_env))

    assert report.ok
    assert report.targets[0].name.endswith("GoodEnvironment")
    assert report.targets[0].version is None  # a test module has no distribution


class MissingMembers:
    def detect(self) -> bool:
        return True

    def main_port(self) -> int:  # a method where the protocol has a property
        return 1


def test_structure_failure_blocks_behaviour_checks(fake_checks: Any) -> None:
    ran: list[str] = []
    fake_checks.add("ENV-1", name="check_env_one", body=lambda t: ran.append("one"))
    fake_checks.add("ENV-2", name="check_env_two", body=lambda t: ran.append("two"))

    report = verify(("cluster_environment", MissingMembers))
    results = _by_check(report)

    structural = [r for r in report.results if r.layer == "structure"]
    assert {r.check for r in structural} == {
        f"structure:ClusterEnvironment.{name}"
        for name in (
            "creates_processes_externally",
            "main_address",
            "main_port",
            "world_size",
            "global_rank",
            "local_rank",
            "node_rank",
            "validate",
            "teardown",
        )
    }
    assert all(r.status == "failed" for r in structural)
    assert results["structure:ClusterEnvironment.main_port"].clause == "ENV-3"
    assert results["check_env_one"].status == "blocked"
    assert results["check_env_one"].message.startswith("not run: structure failed (")
    assert ran == []
    assert report.summary.blocked == 2
    assert not report.ok


def test_factory_errors_and_shared_instances_fail_the_structure_layer(
    fake_checks: Any, good_env: type
) -> None:
    fake_checks.add("ENV-1", name="check_env_one")

    def broken() -> object:
        raise OSError("no scheduler")

    shared = good_env()
    broken_report = verify(("cluster_environment", broken))
    shared_report = verify(("cluster_environment", lambda: shared))

    broken_result = _by_check(broken_report)["structure:factory"]
    assert broken_result.status == "error"
    assert "OSError: no scheduler" in broken_result.message
    assert _by_check(broken_report)["check_env_one"].status == "blocked"
    shared_result = _by_check(shared_report)["structure:factory"]
    assert shared_result.status == "failed"
    assert "fresh instance" in shared_result.message


def test_expected_failures_by_clause_and_by_name(
    fake_checks: Any, good_env: type, failing: Any
) -> None:
    fake_checks.add("ENV-1", name="check_env_fails", body=failing("ENV-1"))
    fake_checks.add("ENV-1", name="check_env_same_clause_passes")
    fake_checks.add("ENV-2", name="check_env_passes_anyway")
    fake_checks.add("ENV-3", name="check_env_named_failure", body=failing("ENV-3"))

    report = verify(
        Target("cluster_environment", good_env),
        expected_failures={
            "ENV-1": "known bug #12",
            "ENV-2": "thought it was broken",
            "check_env_named_failure": "tracked",
        },
    )
    results = _by_check(report)

    assert results["check_env_fails"].status == "xfailed"
    assert "known bug #12" in results["check_env_fails"].message
    assert results["check_env_same_clause_passes"].status == "passed"  # the clause did fail
    xpassed = results["check_env_passes_anyway"]
    assert xpassed.status == "xpassed"
    assert "expected failure ENV-2" in xpassed.message
    assert "remove it" in xpassed.message
    assert results["check_env_named_failure"].status == "xfailed"
    assert not report.ok  # the xpass fails the run


def test_only_xfailed_failures_leave_the_run_ok(
    fake_checks: Any, good_env: type, failing: Any
) -> None:
    fake_checks.add("ENV-1", name="check_env_fails", body=failing("ENV-1"))
    fake_checks.add("ENV-2", name="check_env_passes")

    report = verify(("cluster_environment", good_env), expected_failures={"ENV-1": "known"})

    assert report.ok
    assert report.summary.xfailed == 1


@pytest.mark.parametrize(
    ("kwargs", "fragments"),
    [
        ({"expected_failures": {"ENV-99": "x"}}, ["'ENV-99'", "expected_failures", "ENV-1"]),
        ({"expected_failures": {"ENV-1": ""}}, ["needs a reason"]),
        ({"select": ["check_env_onw"]}, ["'check_env_onw'", "did you mean check_env_one"]),
        (
            {"capabilities": {"extar"}},
            ["unknown capability 'extar'", "valid capabilities: configurable, extra"],
        ),
        ({"capabilities": "extra"}, ["not the string"]),
        ({"layers": ["behavior"]}, ["unknown layer 'behavior'", "behaviour"]),
        ({"timeout_s": 0}, ["timeout_s must be positive"]),
    ],
)
def test_configuration_errors_name_the_valid_choices(
    fake_checks: Any, good_env: type, kwargs: dict[str, Any], fragments: list[str]
) -> None:
    fake_checks.add("ENV-1", name="check_env_one")

    with pytest.raises(ConfigurationError) as caught:
        verify(("cluster_environment", good_env), **kwargs)

    for fragment in fragments:
        assert fragment in str(caught.value)
    assert good_env.made == 0  # nothing ran


def test_unknown_kind_is_a_configuration_error() -> None:
    with pytest.raises(ConfigurationError, match="valid kinds: accelerator"):
        verify(("gpu", object))


def test_zero_checks_run_fails_the_report(fake_checks: Any, good_env: type) -> None:
    fake_checks.add("ENV-1", name="check_env_needs_extra", requires=("extra",))

    skipped = verify(("cluster_environment", good_env))
    declared = verify(("cluster_environment", good_env), capabilities={"extra"})
    nothing_selected = verify(("cluster_environment", good_env), layers=["distributed"])

    assert _by_check(skipped)["check_env_needs_extra"].status == "skipped"
    assert "capability not declared: extra" in _by_check(skipped)["check_env_needs_extra"].message
    assert not skipped.ok
    assert "no checks ran" in skipped.targets[0].problems[0]
    assert declared.ok
    assert not nothing_selected.ok


def test_missing_checks_module_is_a_problem_not_a_crash(fake_checks: Any, good_env: type) -> None:
    fake_checks.missing_module("cluster_environment")

    report = verify(("cluster_environment", good_env))

    assert not report.ok
    assert "no behaviour checks are installed" in report.targets[0].problems[0]
    assert report.results[0].status == "passed"  # the structure layer still ran


def test_select_by_clause_or_name(fake_checks: Any, good_env: type) -> None:
    fake_checks.add("ENV-1", name="check_env_one")
    fake_checks.add("ENV-2", name="check_env_two")
    fake_checks.add("ENV-3", name="check_env_three")

    report = verify(("cluster_environment", good_env), select=["ENV-1", "check_env_three"])

    assert [r.check for r in report.results if r.layer != "structure"] == [
        "check_env_one",
        "check_env_three",
    ]


def test_later_layer_is_blocked_by_its_clause_failing_earlier(
    fake_checks: Any, good_env: type, failing: Any
) -> None:
    ran: list[str] = []
    fake_checks.add("ENV-1", name="check_env_dist", layer="distributed", body=ran.append)
    fake_checks.add("ENV-2", name="check_env_other_dist", layer="distributed")
    fake_checks.add("ENV-1", name="check_env_unit", body=failing("ENV-1"))

    results = _by_check(verify(("cluster_environment", good_env)))

    assert results["check_env_unit"].status == "failed"
    assert results["check_env_dist"].status == "blocked"
    assert "check_env_unit (ENV-1, behaviour layer) failed" in results["check_env_dist"].message
    assert results["check_env_other_dist"].status == "passed"
    assert ran == []


def test_instances_are_torn_down_after_each_check_even_on_failure(
    fake_checks: Any, good_env: type
) -> None:
    def two_then_fail(target: CoreTarget[object]) -> None:
        target.make()
        target.make()
        raise CheckFailure("ENV-1", expected="x", actual="y")

    fake_checks.add("ENV-1", name="check_env_two_instances", body=two_then_fail)

    verify(("cluster_environment", good_env))

    # structure makes two instances, the check two more: all four are torn down.
    assert good_env.made == 4
    assert good_env.torn_down == 4


def test_a_teardown_error_is_filed_under_the_lifecycle_clause_naming_the_check(
    fake_checks: Any, good_env: type
) -> None:
    class TeardownRaises(good_env):  # type: ignore[misc, valid-type]
        def teardown(self) -> None:
            raise RuntimeError("teardown exploded")

    fake_checks.add("ENV-1", name="check_env_makes_one", body=lambda t: t.make() and None)
    session = TargetSession(Target("cluster_environment", TeardownRaises, name="env"))

    result = session.result(session.checks[0])
    report = session.report()

    assert not session.structure_failed  # teardown behaviour is not structure
    assert result.status == "passed"  # ENV-1 holds; the teardown breaks ENV-6
    results = _by_check(report)
    lifecycle = results["teardown:check_env_makes_one"]
    assert (lifecycle.clause, lifecycle.status) == ("ENV-6", "failed")
    assert "check_env_makes_one" in lifecycle.message
    assert "teardown exploded" in lifecycle.message
    assert results["teardown:structure"].clause == "ENV-6"
    assert not report.ok


def test_a_declared_lifecycle_failure_turns_teardown_failures_into_xfailed(
    fake_checks: Any, good_env: type
) -> None:
    class TeardownRaises(good_env):  # type: ignore[misc, valid-type]
        def teardown(self) -> None:
            raise RuntimeError("teardown exploded")

    fake_checks.add("ENV-1", name="check_env_makes_one", body=lambda t: t.make() and None)

    report = verify(
        Target("cluster_environment", TeardownRaises, expected_failures={"ENV-6": "known"})
    )

    statuses = {r.check: r.status for r in report.results}
    assert statuses["teardown:check_env_makes_one"] == "xfailed"
    assert report.ok


def test_a_hanging_check_fails_after_its_timeout(fake_checks: Any, good_env: type) -> None:
    release = threading.Event()
    fake_checks.add("ENV-1", name="check_env_hangs", body=lambda t: release.wait(30) and None)
    try:
        report = verify(("cluster_environment", good_env), timeout_s=0.2)
    finally:
        release.set()
    result = _by_check(report)["check_env_hangs"]

    assert result.status == "failed"
    assert "did not finish within 0.2 s" in result.message
    assert "release.wait" in result.traceback  # the hung thread's stack


def test_checks_run_in_the_calling_thread_without_a_timeout(
    fake_checks: Any, good_env: type
) -> None:
    threads: list[str] = []
    fake_checks.add(
        "ENV-1",
        name="check_env_thread",
        body=lambda t: threads.append(threading.current_thread().name),
    )

    verify(("cluster_environment", good_env), timeout_s=None)
    verify(("cluster_environment", good_env))

    assert threads[0] == threading.current_thread().name
    assert threads[1].startswith("trainspec-check:")


def test_target_merging_keeps_declared_values(fake_checks: Any, good_env: type) -> None:
    seen: list[frozenset[str]] = []
    fake_checks.add("ENV-1", name="check_env_caps", body=lambda t: seen.append(t.capabilities))
    target = Target("cluster_environment", good_env, expected_failures={"ENV-1": "mine"})

    report = verify(target, capabilities={"extra"}, expected_failures={"ENV-1": "override"})

    assert seen == [frozenset({"extra"})]
    assert report.targets[0].expected_failures == {"ENV-1": "override"}
    assert report.targets[0].capabilities == ("extra",)


def test_session_runs_each_check_once(fake_checks: Any, good_env: type) -> None:
    calls: list[int] = []
    fake_checks.add("ENV-1", name="check_env_counted", body=lambda t: calls.append(1))
    session = TargetSession(Target("cluster_environment", good_env))

    first = session.result(session.checks[0])
    report = session.report()

    assert calls == [1]
    assert report.results[1] == first


def test_hypothesis_notes_are_part_of_the_message(fake_checks: Any, good_env: type) -> None:
    def noted(target: CoreTarget[object]) -> None:
        error = CheckFailure("ENV-1", expected="x", actual="y")
        error.add_note("Falsifying example: noted(n=3)")
        raise error

    fake_checks.add("ENV-1", name="check_env_noted", body=noted)

    result = _by_check(verify(("cluster_environment", good_env)))["check_env_noted"]

    assert "Falsifying example: noted(n=3)" in result.message


def test_results_quote_the_clause_title_from_the_spec(fake_checks: Any, good_env: type) -> None:
    clauses = pytest.importorskip("trainspec.conformance.clauses")
    fake_checks.add("ENV-1", name="check_env_one")

    result = _by_check(verify(("cluster_environment", good_env)))["check_env_one"]

    assert result.clause_title == clauses.CLAUSES["ENV-1"].title
    assert result.clause_title


class SyncIO:
    def save_checkpoint(
        self, checkpoint: object, path: object, storage_options: object = None
    ) -> None:
        pass

    def load_checkpoint(self, path: object, map_location: object = None) -> None:
        pass

    def remove_checkpoint(self, path: object) -> None:
        pass

    def teardown(self) -> None:
        pass


def test_a_declared_capability_adds_its_protocol_to_the_structure_layer(fake_checks: Any) -> None:
    fake_checks.module("checkpoint_io")
    fake_checks.add("CKPT-1", "checkpoint_io", name="check_io_one")

    plain = verify(("checkpoint_io", SyncIO))
    declared_async = verify(("checkpoint_io", SyncIO), capabilities={"async"})

    assert [r.check for r in plain.results] == ["structure:CheckpointIO", "check_io_one"]
    assert plain.ok
    failed = _by_check(declared_async)["structure:AsyncCheckpointIO.wait"]
    assert failed.status == "failed"
    assert failed.clause == "ACKPT-5"
    assert _by_check(declared_async)["check_io_one"].status == "blocked"
