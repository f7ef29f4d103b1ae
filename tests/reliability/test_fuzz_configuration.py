"""No bad configuration input crashes, hangs or hides the valid choices (hypothesis fuzzing).

Every target of ``_fuzz_inputs.py`` — ``resolve``, ``parse_devices`` on every reference
accelerator, the accelerator constructors, ``precision_for_flag``, precision
``load_state_dict``, the cluster environments under arbitrary environment variables,
``trainspec``'s ``main(argv)``, and ``trainspec demo`` runs that reach training — runs a
bounded, derandomized number of hostile examples here; ``scripts/fuzz_configuration.py
--examples 10000`` runs the long version. The rule each
outcome must follow is in ``_fuzz_inputs``' docstring and :func:`check_call`.

Findings whose owner has not fixed them yet are data (``KNOWN_BUGS``): the fuzz tests count
them instead of failing, and each reproducer runs below as a strict xfail, so a fix shows up
as an XPASS that asks for the entry to be deleted.
"""

from __future__ import annotations

import importlib.util
import os
import signal
import sys
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from hypothesis import HealthCheck, Phase, given, settings

from trainspec import ConfigurationError, LifecycleError

if TYPE_CHECKING:
    from types import ModuleType


def _load_helpers() -> ModuleType:
    name = "trainspec_tests_fuzz_inputs"  # _fuzz_inputs.MODULE_NAME: CLI targets use it
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(
            name, Path(__file__).with_name("_fuzz_inputs.py")
        )
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


H = _load_helpers()


# -- the fuzz tests ------------------------------------------------------------------------------


@pytest.mark.parametrize("target", H.TARGETS, ids=lambda t: t.name)
def test_hostile_configuration_raises_only_trainspec_errors_naming_valid_choices(
    target: object,
) -> None:
    known: list[str] = []

    @settings(
        max_examples=target.ci_examples,  # type: ignore[attr-defined]
        derandomize=True,
        deadline=None,  # the watchdog bounds each call: no deadline flakiness
        database=None,
        phases=[Phase.explicit, Phase.generate, Phase.shrink],
        suppress_health_check=list(HealthCheck),
    )
    @given(call=target.calls())  # type: ignore[attr-defined]
    def run(call: object) -> None:
        finding = H.check_call(call, timeout_s=H.CI_TIMEOUT_S)
        if finding is None:
            return
        bug = H.known_bug(finding)
        if bug is not None:
            known.append(bug.id)
            return
        raise AssertionError(finding.report())

    with target.context():  # type: ignore[attr-defined]
        run()


# -- the known bugs, one strict xfail per reproducer ---------------------------------------------

_REPRODUCERS = [
    pytest.param(
        bug,
        index,
        id=f"{bug.id}-{index}",
        marks=pytest.mark.xfail(
            strict=True, raises=AssertionError, reason=f"known bug {bug.id}: {bug.summary}"
        ),
    )
    for bug in H.KNOWN_BUGS
    for index in range(len(bug.reproducers))
]


@pytest.mark.parametrize(("bug", "index"), _REPRODUCERS)
def test_known_bug_reproducer_follows_the_rule(bug: object, index: int) -> None:
    call = bug.reproducers[index]()  # type: ignore[attr-defined]
    finding = H.check_call(call, timeout_s=H.CI_TIMEOUT_S)
    if finding is not None and not bug.matches(finding):  # type: ignore[attr-defined]
        pytest.fail(f"the reproducer fails differently than {bug.id} says: {finding.report()}")  # type: ignore[attr-defined]
    assert finding is None, finding.report()


# -- the rule itself can fail ---------------------------------------------------------------------


def _call(invoke: object, echoed: tuple[object, ...] = ()) -> object:
    """A call whose only valid choice is 'cpu'."""
    return H.Call("meta", "meta()", invoke, H.CONFIG_ONLY, ("'cpu'",), echoed)


def _raise(error: BaseException) -> object:
    def invoke() -> object:
        raise error

    return invoke


@pytest.mark.parametrize(
    ("error", "kind"),
    [
        (KeyError("accelerator"), "raw exception"),
        (TypeError("unhashable type: 'list'"), "raw exception"),
        (LifecycleError("call setup first; valid: 'cpu'"), "wrong trainspec error"),
        (ConfigurationError(""), "empty message"),
        (ConfigurationError("no such accelerator"), "no valid choice named"),
    ],
)
def test_check_call_flags_each_kind_of_violation(error: BaseException, kind: str) -> None:
    finding = H.check_call(_call(_raise(error)), timeout_s=5)
    assert finding is not None and finding.kind == kind, finding


def test_check_call_does_not_count_the_echoed_input_as_a_valid_choice() -> None:
    echo_only = _call(_raise(ConfigurationError("unknown name 'cpu '")), echoed=("cpu ",))
    names_one = _call(
        _raise(ConfigurationError("unknown name 'cpu '; known: 'cpu'")), echoed=("cpu ",)
    )
    finding = H.check_call(echo_only, timeout_s=5)
    assert finding is not None and finding.kind == "no valid choice named"
    assert H.check_call(names_one, timeout_s=5) is None


def test_check_call_accepts_success_and_allowed_errors_naming_a_choice() -> None:
    assert H.check_call(_call(lambda: 1), timeout_s=5) is None
    named = ConfigurationError("devices='x' is not valid; valid: 'cpu'")
    assert H.check_call(_call(_raise(named)), timeout_s=5) is None


def test_check_call_flags_a_result_that_breaks_the_protocol() -> None:
    finding = H.check_call(_call(_raise(H.BadResult("world_size returned 0"))), timeout_s=5)
    assert finding is not None and finding.kind == "bad result"


@pytest.mark.parametrize(
    "block",
    [lambda: time.sleep(30), lambda: threading.Event().wait()],
    ids=["sleep", "lock-wait"],
)
def test_check_call_turns_a_hang_into_a_finding(block: object) -> None:
    start = time.monotonic()
    finding = H.check_call(_call(block), timeout_s=0.2)
    assert finding is not None and finding.kind == "hang"
    assert time.monotonic() - start < 10


def test_watchdog_restores_the_previous_alarm_and_handler() -> None:
    fired: list[int] = []

    def handler(signum: int, frame: object) -> None:
        fired.append(signum)

    previous = signal.signal(signal.SIGALRM, handler)
    previous_timer = signal.setitimer(signal.ITIMER_REAL, 100)  # pytest-timeout's, if any
    try:
        with H.watchdog(5):
            pass
        remaining, _ = signal.getitimer(signal.ITIMER_REAL)
        assert 90 < remaining <= 100
        assert signal.getsignal(signal.SIGALRM) is handler
        assert fired == []
    finally:
        signal.setitimer(signal.ITIMER_REAL, *previous_timer)
        signal.signal(signal.SIGALRM, previous)


@pytest.mark.parametrize(
    ("code", "stdout", "stderr", "ok"),
    [
        (0, "table", "", True),
        (1, "table", "", True),
        (2, "", "trainspec verify: error: unknown kind 'x'; valid kinds: precision\n", True),
        (2, "", "usage: trainspec [-h] COMMAND ...\n\npositional arguments:\n", True),
        (2, "", "trainspec: error: one\nand another line\n", False),
        (2, "", "", False),
        (3, "", "", False),
        (None, "", "", False),
    ],
)
def test_the_exit_rule_accepts_only_statuses_0_1_2_and_one_line_usage_errors(
    code: object, stdout: str, stderr: str, ok: bool
) -> None:
    if ok:
        H._check_exit(code, stdout, stderr)
    else:
        with pytest.raises(H.BadResult):
            H._check_exit(code, stdout, stderr)


def test_environment_variables_restores_os_environ_exactly() -> None:
    before = dict(os.environ)
    with H.environment_variables({"RANK": "\u00b2", "WORLD_SIZE": None, "SLURM_JOB_ID": "1"}):
        assert os.environ["RANK"] == "\u00b2"
        assert "WORLD_SIZE" not in os.environ
    assert dict(os.environ) == before


def test_cli_sandbox_restores_the_working_directory_and_builtin_targets() -> None:
    from trainspec.conformance import builtin_targets as module

    cwd, original = os.getcwd(), module.builtin_targets
    with H.cli_sandbox() as directory:
        assert os.getcwd() == os.path.realpath(directory)
        assert module.builtin_targets is not original
    assert os.getcwd() == cwd
    assert module.builtin_targets is original


def test_near_misses_are_never_the_valid_name() -> None:
    names = ("cpu", "16-mixed", "ddp")
    pool = H.near_misses(names).elements
    assert pool and not set(pool) & set(names)


def test_vocabularies_name_the_registered_components() -> None:
    assert "'cpu'" in H.ACCELERATOR_VOCABULARY
    assert "'ddp'" in H.STRATEGY_VOCABULARY
    assert "bf16-mixed" in H.PRECISION_VOCABULARY
    assert "'torch'" in H.CHECKPOINT_IO_VOCABULARY
    assert "'slurm'" in H.ENVIRONMENT_VOCABULARY
