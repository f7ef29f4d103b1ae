"""The pytest plugin (--trainspec-target) and the suites, run in-process with pytester."""

from __future__ import annotations

import textwrap
from typing import Any

import pytest

pytest_plugins = ["pytester"]

IMPLEMENTATIONS = textwrap.dedent(
    """
    from trainspec.conformance import Target

    class GoodEnv:
        def detect(self): return True
        creates_processes_externally = False
        main_address = "127.0.0.1"
        main_port = 29500
        world_size = 1
        global_rank = 0
        local_rank = 0
        node_rank = 0
        def validate(self): pass
        def teardown(self): pass

    class NoValidate(GoodEnv):
        validate = None

    def make_env():
        return GoodEnv()

    DECLARED = Target(
        "cluster_environment", GoodEnv, capabilities={"extra"},
        expected_failures={"ENV-2": "known"},
    )
    """
)


@pytest.fixture
def three_checks(fake_checks: Any, failing: Any) -> Any:
    """ENV-1 passes, ENV-2 fails, ENV-3 needs the 'extra' capability."""
    fake_checks.add("ENV-1", name="check_env_one")
    fake_checks.add("ENV-2", name="check_env_two", body=failing("ENV-2"))
    fake_checks.add("ENV-3", name="check_env_three", requires=("extra",))
    return fake_checks


def test_suites_make_one_test_per_check_with_clause_ids(
    pytester: pytest.Pytester, three_checks: Any
) -> None:
    pytester.makepyfile(envs=IMPLEMENTATIONS)
    pytester.syspathinsert()
    pytester.makepyfile(
        test_envs="""
        import pytest
        from trainspec.conformance.suites import ClusterEnvironmentSuite
        from trainspec.conformance import Target
        from envs import GoodEnv, NoValidate, make_env

        class TestGood(ClusterEnvironmentSuite):
            factory = make_env
            capabilities = {"extra"}
            expected_failures = {"ENV-2": "known bug"}

        class TestStructureBroken(ClusterEnvironmentSuite):
            factory = NoValidate

        class TestFixture(ClusterEnvironmentSuite):
            select = ["ENV-1"]

            @pytest.fixture(scope="class")
            def trainspec_target(self):
                return Target("cluster_environment", GoodEnv)

        class TestForgotFactory(ClusterEnvironmentSuite):
            pass

        class TestTypo(ClusterEnvironmentSuite):
            factory = GoodEnv
            capabilities = {"extar"}
            select = ["ENV-1"]
        """
    )

    result = pytester.runpytest("-v", "-p", "no:cacheprovider")

    result.stdout.fnmatch_lines(
        [
            "*TestGood::test_conformance[[]structure[]] PASSED*",
            "*TestGood::test_conformance[[]ENV-1-check_env_one[]] PASSED*",
            "*TestGood::test_conformance[[]ENV-2-check_env_two[]] XFAIL*",
            "*TestGood::test_conformance[[]ENV-3-check_env_three[]] PASSED*",
            "*TestStructureBroken::test_conformance[[]structure[]] FAILED*",
            "*TestStructureBroken::test_conformance[[]ENV-1-check_env_one[]] SKIPPED*",
            "*TestFixture::test_conformance[[]ENV-1-check_env_one[]] PASSED*",
        ]
    )
    result.stdout.fnmatch_lines(["*TestForgotFactory must say what to verify*factory = *"])
    result.stdout.fnmatch_lines(["*structure:ClusterEnvironment.validate*not callable*"])
    result.stdout.fnmatch_lines(["*TestTypo is misconfigured: unknown capability 'extar'*"])
    # Good 3 passed + 1 xfail; Broken: structure failed, 3 blocked; Fixture: 2 passed;
    # ForgotFactory: 4 setup errors; Typo: 2 failed.
    result.assert_outcomes(passed=5, failed=3, skipped=3, xfailed=1, errors=4)


def test_plugin_option_generates_items_and_reports_the_header(
    pytester: pytest.Pytester, three_checks: Any
) -> None:
    pytester.makepyfile(envs=IMPLEMENTATIONS)
    pytester.syspathinsert()

    result = pytester.runpytest(
        "-v",
        "-p",
        "no:cacheprovider",
        "--trainspec-target",
        "cluster_environment=envs:GoodEnv",
        "--trainspec-target",
        "cluster_environment=envs:DECLARED",
    )

    result.stdout.fnmatch_lines(
        [
            "trainspec *, spec *; conformance targets: cluster_environment=envs:GoodEnv, "
            "cluster_environment=envs:DECLARED",
            "*collected 8 items*",
            "cluster_environment=envs:GoodEnv::structure PASSED*",
            "cluster_environment=envs:GoodEnv::ENV-1-check_env_one PASSED*",
            "cluster_environment=envs:GoodEnv::ENV-2-check_env_two FAILED*",
            "cluster_environment=envs:GoodEnv::ENV-3-check_env_three SKIPPED*",
            "cluster_environment=envs:DECLARED::ENV-2-check_env_two XFAIL*",
            "cluster_environment=envs:DECLARED::ENV-3-check_env_three PASSED*",
        ]
    )
    result.stdout.fnmatch_lines(["*envs:GoodEnv must do the thing (ENV-2); got it did not.*"])
    result.assert_outcomes(passed=5, failed=1, skipped=1, xfailed=1)

    selected = pytester.runpytest(
        "-p",
        "no:cacheprovider",
        "--trainspec-target",
        "cluster_environment=envs:GoodEnv",
        "-k",
        "ENV-1",
    )
    selected.assert_outcomes(passed=1)


def test_plugin_usage_errors(pytester: pytest.Pytester, three_checks: Any) -> None:
    bad_kind = pytester.runpytest("--trainspec-target", "gpu=envs:GoodEnv")
    bad_syntax = pytester.runpytest("--trainspec-target", "envs:GoodEnv")

    assert bad_kind.ret == pytest.ExitCode.USAGE_ERROR
    bad_kind.stderr.fnmatch_lines(["*unknown kind 'gpu'; valid kinds: accelerator*"])
    assert bad_syntax.ret == pytest.ExitCode.USAGE_ERROR
    bad_syntax.stderr.fnmatch_lines(["*--trainspec-target takes KIND=module:attribute*"])


def test_a_suite_fails_the_check_whose_instances_fail_to_tear_down(
    pytester: pytest.Pytester, fake_checks: Any
) -> None:
    fake_checks.add("ENV-1", name="check_env_makes_one", body=lambda t: t.make() and None)
    pytester.makepyfile(envs=IMPLEMENTATIONS)
    pytester.syspathinsert()
    pytester.makepyfile(
        test_envs="""
        from trainspec.conformance.suites import ClusterEnvironmentSuite
        from envs import GoodEnv

        class ExplodingEnv(GoodEnv):
            def teardown(self):
                raise RuntimeError("teardown exploded")

        class TestExploding(ClusterEnvironmentSuite):
            factory = ExplodingEnv
        """
    )

    result = pytester.runpytest("-v", "-p", "no:cacheprovider")

    result.stdout.fnmatch_lines(["*[[]ENV-6*teardown:check_env_makes_one*teardown exploded*"])
    result.assert_outcomes(failed=2)  # the structure layer's instances and the check's
