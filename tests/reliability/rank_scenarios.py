"""Hung and dying ranks under the reference launchers: what the ranks run, and one driver.

Each *case* is one real two-rank gloo run of ``Runner(DDPStrategy(...)).launch(...)`` in
which one rank (the *culprit*) misbehaves just before a collective, while the other rank
(the *survivor*) calls that collective:

- ``hang``: the culprit sleeps forever instead of calling it, and ignores SIGTERM, so the
  launcher has to escalate to SIGKILL;
- ``exit``: the culprit calls ``os._exit(3)``;
- ``segv``: the culprit sends itself SIGSEGV;
- ``raise``: the culprit raises an exception.

The culprit misbehaves only once the survivor has recorded that it is calling the
collective, so the fault always meets a rank waiting inside it. Before misbehaving, the
culprit starts a *helper* process (a plain Python that sleeps) in its process group, the way
a rank starts tools or workers of its own; the launcher must not leave it behind either.

Every process of a case carries a unique *marker*: in its environment (the ranks, the
helper) and, for the helper and the re-run script, on its command line. After the launch,
:func:`marked_processes` searches the whole machine for it.

Each rank records what it did and saw in ``WORKDIR/rank-<r>.json``. The survivor records
SIGTERM instead of dying from it: the launcher stops it as soon as it blames the culprit, and
without this the survivor could be stopped before it records the error its collective raised
(a real race, not a launcher fault). The culprit of ``hang`` ignores SIGTERM, so the
stop path from SIGTERM to SIGKILL is exercised too.

Used by ``tests/reliability/test_ranks_*.py`` and ``scripts/soak_rank_failures.py``. The
module must be importable by the spawned ranks, so its folder goes on ``sys.path`` (see
:func:`importable`), and it imports torch only inside the functions the ranks run.
"""

from __future__ import annotations

import json
import multiprocessing.resource_tracker
import os
import signal
import subprocess
import sys
import textwrap
import time
import uuid
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Final, Literal

import psutil  # type: ignore[import-untyped,unused-ignore]

from trainspec import LaunchError, TrainspecError

if TYPE_CHECKING:
    from collections.abc import Iterator
    from types import FrameType

    from trainspec.reference.runner import Runner

__all__ = [
    "COLLECTIVE_TIMEOUT_S",
    "FAULTS",
    "GRACE_PERIOD_S",
    "MARKER_VARIABLE",
    "SLACK_S",
    "Case",
    "KitOutcome",
    "Outcome",
    "importable",
    "kill_marked",
    "marked_processes",
    "problems",
    "rank_body",
    "run_kit_signal_case",
    "run_script_case",
    "run_spawn_case",
    "time_bound",
]

HERE: Final = Path(__file__).resolve().parent

Fault = Literal["hang", "exit", "segv", "raise"]
Operation = Literal["all_reduce", "barrier"]
Launch = Literal["spawn", "subprocess"]
Leftover = dict[str, int | str]
"""A process found alive after a launch: ``{"pid": ..., "cmdline": ...}``."""

FAULTS: Final[tuple[Fault, ...]] = ("hang", "exit", "segv", "raise")
OPERATIONS: Final[tuple[Operation, ...]] = ("all_reduce", "barrier")

COLLECTIVE_TIMEOUT_S: Final = 5.0
"""The DDPStrategy(timeout=...) of every case: the default timeout of every collective."""

GRACE_PERIOD_S: Final = 5.0
"""The launchers' default grace period (DDPStrategy does not change it): how long a failed
rank's peer may take to report, and how long a stopped rank gets between SIGTERM and
SIGKILL."""

SLACK_S: Final = 30.0
"""Added to the bound on how long a launch may take after the fault: the two shared CPU
cores here run other engineers' work, and a rank's teardown, its report through the pipe,
the launcher's polling and SIGKILL delivery are all scheduled behind it. It is deliberately
generous: the property tested is "returns instead of hanging", not a latency."""

EXIT_CODE: Final = 3
MARKER_VARIABLE: Final = "TRAINSPEC_RANK_FAILURE_MARKER"
HELPER_SECONDS: Final = 300
SETTLE_S: Final = 5.0
"""How long :func:`marked_processes` waits for a process that was just SIGKILLed to
disappear (the kernel does it in milliseconds; this covers a loaded machine)."""


def time_bound() -> float:
    """Seconds a launch may take from the fault to its return: the collective timeout (the
    survivor notices a hang), one grace period (the launcher waits for a primary failure
    before it blames a secondary one), one more (SIGTERM to SIGKILL of a rank that ignores
    SIGTERM), plus :data:`SLACK_S`."""
    return COLLECTIVE_TIMEOUT_S + 2 * GRACE_PERIOD_S + SLACK_S


@dataclass(frozen=True)
class Case:
    """One scenario: ``culprit`` misbehaves (``fault``) where it should call ``operation``."""

    fault: Fault
    culprit: int = 1
    operation: Operation = "all_reduce"
    launch: Launch = "spawn"
    helper: bool = True
    """Whether the culprit starts a helper process before misbehaving."""

    @property
    def survivor(self) -> int:
        return 1 - self.culprit

    @property
    def name(self) -> str:
        return f"{self.launch}:{self.fault}@rank{self.culprit}:{self.operation}"

    def expected_in_message(self) -> str:
        """What the LaunchError message must carry for this fault."""
        return {
            "hang": f"rank {self.culprit}",
            "exit": f"exited with code {EXIT_CODE}",
            "segv": "SIGSEGV",
            "raise": "Traceback (most recent call last)",
        }[self.fault]

    def expected_survivor_errors(self) -> tuple[str, ...]:
        """Names of the errors the survivor's collective may raise."""
        if self.fault == "hang":
            return ("CollectiveTimeoutError",)
        return ("PeerFailureError", "CollectiveTimeoutError")


@dataclass
class Outcome:
    """What one launch did: its error, timings, the ranks' reports and any leftovers."""

    case: Case
    error_type: str | None = None
    error_rank: int | None = None
    message: str = ""
    result: object = None
    launch_s: float = 0.0
    returned_at: float = 0.0
    reports: dict[int, dict[str, object]] = field(default_factory=dict)
    leftover_children: list[Leftover] = field(default_factory=list)
    """Processes this launch started directly (the ranks) still alive after it returned."""
    leftover_marked: list[Leftover] = field(default_factory=list)
    """Processes anywhere carrying the case's marker (ranks, helper) alive afterwards."""
    marker: str = ""

    @property
    def helper_pid(self) -> int | None:
        value = self.reports.get(self.case.culprit, {}).get("helper_pid")
        return value if isinstance(value, int) else None

    @property
    def leftover_helper(self) -> list[Leftover]:
        """The culprit's helper, if it outlived the launch."""
        return [item for item in self.leftover_marked if item["pid"] == self.helper_pid]

    @property
    def leftover_ranks(self) -> list[Leftover]:
        """Marked processes other than the culprit's helper (rank processes)."""
        return [item for item in self.leftover_marked if item["pid"] != self.helper_pid]

    @property
    def fault_at(self) -> float | None:
        value = self.reports.get(self.case.culprit, {}).get("fault_at")
        return float(value) if isinstance(value, (int, float)) else None

    @property
    def after_fault_s(self) -> float | None:
        """Seconds from the culprit's fault to the launch's return."""
        at = self.fault_at
        return None if at is None else self.returned_at - at

    @property
    def survivor_error(self) -> object:
        return self.reports.get(self.case.survivor, {}).get("error")

    def to_json(self) -> dict[str, object]:
        data = asdict(self)
        data["case"] = asdict(self.case)
        data["reports"] = {str(rank): report for rank, report in self.reports.items()}
        return data

    @classmethod
    def from_json(cls, data: dict[str, object]) -> Outcome:
        raw = dict(data)
        case_data = raw.pop("case")
        reports = raw.pop("reports")
        assert isinstance(case_data, dict) and isinstance(reports, dict)
        outcome = cls(case=Case(**case_data), **raw)  # type: ignore[arg-type]
        outcome.reports = {int(rank): report for rank, report in reports.items()}
        return outcome


def problems(outcome: Outcome) -> dict[str, str]:
    """Every guarantee ``outcome`` broke, by short name; empty when the case was handled."""
    case = outcome.case
    found: dict[str, str] = {}
    if outcome.error_type != "LaunchError":
        found["launch_error"] = f"launch ended with {outcome.error_type or 'a result'}"
    if outcome.error_rank != case.culprit:
        found["blame"] = f"blamed rank {outcome.error_rank}, culprit is rank {case.culprit}"
    expected = case.expected_in_message()
    if expected not in outcome.message:
        found["message"] = f"message lacks {expected!r}"
    survivor = outcome.survivor_error
    if survivor not in case.expected_survivor_errors():
        found["survivor"] = f"survivor saw {survivor!r}, expected {case.expected_survivor_errors()}"
    after = outcome.after_fault_s
    if after is None or after > time_bound():
        found["time"] = f"returned {after} s after the fault (bound {time_bound():g} s)"
    if outcome.leftover_children or outcome.leftover_ranks:
        left = outcome.leftover_children + outcome.leftover_ranks
        found["ranks_left"] = f"rank processes left: {left}"
    if outcome.leftover_helper:
        found["helper_left"] = f"the culprit's helper was left: {outcome.leftover_helper}"
    return found


# -- inside the ranks ---------------------------------------------------------------------------


class _Report:
    """This rank's record in ``WORKDIR/rank-<r>.json``, rewritten whole on every update."""

    def __init__(self, workdir: Path, rank: int) -> None:
        self._path = workdir / f"rank-{rank}.json"
        self._data: dict[str, object] = {"rank": rank, "pid": os.getpid(), "sigterm": False}
        self._write()

    def update(self, **values: object) -> None:
        self._data.update(values)
        self._write()

    def note_sigterm(self, signum: int, frame: FrameType | None) -> None:
        self.update(sigterm=True, sigterm_at=time.time())

    def _write(self) -> None:
        staging = self._path.with_suffix(".partial")
        staging.write_text(json.dumps(self._data), encoding="utf-8")
        os.replace(staging, self._path)


def _start_helper(marker: str) -> int:
    """A plain Python that sleeps, started by this rank (in its process group)."""
    helper = subprocess.Popen(
        [sys.executable, "-c", f"import time; time.sleep({HELPER_SECONDS})", marker],
        stdin=subprocess.DEVNULL,
    )
    return helper.pid


def _wait_until_entered(path: Path, limit: float = 60.0) -> None:
    """Wait until the survivor's report says it is calling the collective (so its SIGTERM
    recorder is installed and the fault meets it inside the collective)."""
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        try:
            if "entered" in json.loads(path.read_text(encoding="utf-8")):
                return
        except (OSError, ValueError):
            pass
        time.sleep(0.01)


def _collective(runner: Runner, operation: Operation) -> None:
    import torch

    if operation == "barrier":
        runner.barrier()
    else:
        runner.all_reduce(torch.ones(4), "sum")


def rank_body(runner: Runner, case: Case, workdir: str) -> str:
    """What every rank runs (after the Runner set the strategy up): the culprit misbehaves,
    the survivor calls ``case.operation`` and records the error it raises."""
    rank = runner.global_rank
    report = _Report(Path(workdir), rank)
    if rank == case.culprit:
        report.update(role="culprit")
        _wait_until_entered(Path(workdir) / f"rank-{case.survivor}.json")
        if case.helper:
            report.update(helper_pid=_start_helper(os.environ[MARKER_VARIABLE]))
        if case.fault == "hang":
            signal.signal(signal.SIGTERM, signal.SIG_IGN)
            report.update(fault_at=time.time())
            while True:
                time.sleep(3600)
        report.update(fault_at=time.time())
        if case.fault == "exit":
            os._exit(EXIT_CODE)
        if case.fault == "segv":
            os.kill(os.getpid(), signal.SIGSEGV)
            time.sleep(60)  # not reached: the signal is delivered at once
        raise RuntimeError(f"injected failure on rank {rank} before {case.operation}")
    report.update(role="survivor")
    signal.signal(signal.SIGTERM, report.note_sigterm)
    report.update(entered=case.operation, entered_at=time.time())
    try:
        _collective(runner, case.operation)
    except TrainspecError as error:
        report.update(error=type(error).__name__, error_text=str(error), error_at=time.time())
        raise
    report.update(error=None)
    return "completed"


def make_runner(start_method: Literal["spawn", "subprocess"]) -> Runner:
    """``Runner(DDPStrategy(...))`` on two CPU ranks with the cases' collective timeout."""
    import torch

    from trainspec.reference.runner import Runner
    from trainspec.reference.strategies.ddp import DDPStrategy

    cpu = torch.device("cpu")
    strategy = DDPStrategy(
        parallel_devices=[cpu, cpu],
        start_method=start_method,
        timeout=timedelta(seconds=COLLECTIVE_TIMEOUT_S),
    )
    return Runner(strategy)


# -- processes ----------------------------------------------------------------------------------


def _describe(process: psutil.Process) -> Leftover:
    try:
        return {"pid": process.pid, "cmdline": " ".join(process.cmdline())[:200]}
    except psutil.Error:
        return {"pid": process.pid, "cmdline": "?"}


def _key(process: psutil.Process) -> tuple[int, float]:
    try:
        return (process.pid, process.create_time())
    except psutil.Error:
        return (process.pid, 0.0)


def _alive(process: psutil.Process) -> bool:
    try:
        return bool(process.status() != psutil.STATUS_ZOMBIE)
    except psutil.Error:
        return False


def _children() -> dict[tuple[int, float], psutil.Process]:
    return {_key(child): child for child in psutil.Process().children(recursive=True)}


def _carries(process: psutil.Process, marker: str, uid: int) -> bool:
    try:
        if marker in " ".join(process.cmdline()):
            return True
        if process.uids().real != uid:
            return False
        return bool(process.environ().get(MARKER_VARIABLE) == marker)
    except psutil.Error:
        return False


def marked_processes(marker: str, *, settle: float = SETTLE_S) -> list[Leftover]:
    """Live processes anywhere on this machine whose command line or environment carries
    ``marker``, after giving them up to ``settle`` seconds to disappear (zombies are dead
    and do not count; reaping an orphan is init's job)."""
    me, uid = os.getpid(), os.getuid()
    deadline = time.monotonic() + settle
    while True:
        found = [
            process
            for process in psutil.process_iter()
            if process.pid != me and _carries(process, marker, uid) and _alive(process)
        ]
        if not found or time.monotonic() >= deadline:
            return [_describe(process) for process in found]
        time.sleep(0.1)


def kill_marked(marker: str) -> None:
    """SIGKILL whatever still carries ``marker`` (cleanup after a failed check)."""
    me, uid = os.getpid(), os.getuid()
    for process in psutil.process_iter():
        if process.pid != me and _carries(process, marker, uid):
            try:
                process.kill()
            except psutil.Error:
                pass


@contextmanager
def importable() -> Iterator[None]:
    """This module's folder on ``sys.path`` (spawned ranks inherit it), restored after."""
    saved = list(sys.path)
    sys.path.insert(0, str(HERE))
    try:
        yield
    finally:
        sys.path[:] = saved


@contextmanager
def _marked_environment(marker: str) -> Iterator[None]:
    saved = os.environ.get(MARKER_VARIABLE)
    os.environ[MARKER_VARIABLE] = marker
    try:
        yield
    finally:
        if saved is None:
            os.environ.pop(MARKER_VARIABLE, None)
        else:
            os.environ[MARKER_VARIABLE] = saved


def _read_reports(workdir: Path) -> dict[int, dict[str, object]]:
    reports: dict[int, dict[str, object]] = {}
    for rank in (0, 1):
        path = workdir / f"rank-{rank}.json"
        if path.exists():
            reports[rank] = json.loads(path.read_text(encoding="utf-8"))
    return reports


# -- drivers ------------------------------------------------------------------------------------


def run_spawn_case(case: Case, workdir: Path) -> Outcome:
    """Launch ``case`` from this process with ``DDPStrategy(start_method="spawn")``.

    Must be called with this module imported under its own name (``rank_scenarios``, see
    :func:`importable`), so that the spawned ranks can unpickle :func:`rank_body`.
    """
    assert case.launch == "spawn"
    marker = f"trainspec-marker-{uuid.uuid4().hex}"
    # multiprocessing's resource tracker is a helper of this process that lives as long as
    # it does; start it before the marker is set so that it carries none.
    multiprocessing.resource_tracker.ensure_running()
    workdir.mkdir(parents=True, exist_ok=True)
    outcome = Outcome(case=case, marker=marker)
    before = _children()
    runner = make_runner("spawn")
    started = time.monotonic()
    with _marked_environment(marker):
        try:
            outcome.result = runner.launch(rank_body, case, str(workdir))
        except LaunchError as error:
            outcome.error_type, outcome.error_rank = "LaunchError", error.rank
            outcome.message = str(error)
        except Exception as error:
            outcome.error_type, outcome.message = type(error).__name__, str(error)
    outcome.returned_at = time.time()
    outcome.launch_s = time.monotonic() - started
    outcome.leftover_children = [
        _describe(child)
        for key, child in _children().items()
        if key not in before and _alive(child)
    ]
    outcome.leftover_marked = marked_processes(marker)
    outcome.reports = _read_reports(workdir)
    return outcome


SCRIPT: Final = '''\
"""Rank 0 launches rank 1 by re-running this script (DDPStrategy(start_method="subprocess"))."""
import sys

sys.path.insert(0, {folder!r})
import rank_scenarios

if __name__ == "__main__":
    rank_scenarios.script_main(sys.argv[1:])
'''


def script_main(argv: list[str]) -> None:
    """The body of the script :func:`run_script_case` writes: ``FAULT CULPRIT OPERATION
    HELPER WORKDIR MARKER``. Rank 0 (the launching process) prints ``RESULT <outcome json>``."""
    from trainspec.reference.launchers.subprocess_script import CHILD_RANK_VARIABLE

    fault, culprit, operation, helper, workdir, marker = argv
    case = Case(
        fault,  # type: ignore[arg-type]
        int(culprit),
        operation,  # type: ignore[arg-type]
        "subprocess",
        helper == "helper",
    )
    os.environ[MARKER_VARIABLE] = marker
    outcome = Outcome(case=case, marker=marker)
    runner = make_runner("subprocess")
    if CHILD_RANK_VARIABLE in os.environ:
        # A started rank: what the function raises must escape (the launcher reads its
        # traceback and the exit code); only the launching process reports.
        runner.launch(rank_body, case, workdir)
        return
    started = time.monotonic()
    try:
        outcome.result = runner.launch(rank_body, case, workdir)
    except LaunchError as error:
        outcome.error_type, outcome.error_rank = "LaunchError", error.rank
        outcome.message = str(error)
    except Exception as error:
        outcome.error_type, outcome.message = type(error).__name__, str(error)
    outcome.returned_at = time.time()
    outcome.launch_s = time.monotonic() - started
    outcome.leftover_children = [
        _describe(child) for child in _children().values() if _alive(child)
    ]
    print("RESULT " + json.dumps(outcome.to_json()), flush=True)


def run_script_case(case: Case, workdir: Path, *, timeout: float = 240.0) -> Outcome:
    """Write the script into ``workdir``, run it once (its rank 0 starts rank 1 by re-running
    it) and return what its launch did, with a machine-wide search for leftovers."""
    assert case.launch == "subprocess"
    workdir.mkdir(parents=True, exist_ok=True)
    script = workdir / "launch_ddp_failure.py"
    script.write_text(textwrap.dedent(SCRIPT.format(folder=str(HERE))), encoding="utf-8")
    marker = f"trainspec-marker-{uuid.uuid4().hex}"
    environment = {
        name: value
        for name, value in os.environ.items()
        if name not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")
    }
    environment["OMP_NUM_THREADS"] = "1"
    helper = "helper" if case.helper else "no-helper"
    arguments = [case.fault, str(case.culprit), case.operation, helper, str(workdir), marker]
    # Output goes to files, not pipes: a process left behind that inherited a pipe would
    # keep it open and make this wait for it rather than for the script.
    stdout_path, stderr_path = workdir / "stdout.txt", workdir / "stderr.txt"
    try:
        with stdout_path.open("wb") as stdout, stderr_path.open("wb") as stderr:
            completed = subprocess.run(
                [sys.executable, str(script), *arguments],
                stdin=subprocess.DEVNULL,
                stdout=stdout,
                stderr=stderr,
                timeout=timeout,
                env=environment,
                check=False,
            )
    except subprocess.TimeoutExpired as error:
        left = marked_processes(marker, settle=0.0)
        kill_marked(marker)
        raise AssertionError(
            f"{case.name}: the script did not return within {timeout} s (it hung); "
            f"processes left: {left}"
        ) from error
    leftovers = marked_processes(marker)
    output = stdout_path.read_text(encoding="utf-8", errors="replace")
    lines = [line for line in output.splitlines() if line.startswith("RESULT ")]
    if len(lines) != 1:
        kill_marked(marker)
        errors = stderr_path.read_text(encoding="utf-8", errors="replace")
        raise AssertionError(
            f"the script exited with {completed.returncode} and no RESULT line:\n"
            f"{output[-3000:]}\n{errors[-3000:]}"
        )
    outcome = Outcome.from_json(json.loads(lines[0].removeprefix("RESULT ")))
    outcome.leftover_marked = leftovers
    outcome.reports = _read_reports(workdir)
    return outcome


# -- minimal reproducers (no torch, no collective: the launcher alone) ------------------------


def hung_peer_of_a_timed_out_rank() -> None:
    """Rank 1 hangs; rank 0 raises the error its collective would raise after its timeout.
    The launcher should blame rank 1, the rank that never arrived."""
    from trainspec import CollectiveTimeoutError

    if int(os.environ["RANK"]) == 1:
        time.sleep(600)
    time.sleep(0.5)
    raise CollectiveTimeoutError("all_reduce did not complete within its timeout of 1 s")


GIL_MARKER_DIR: Final = "TRAINSPEC_TEST_GIL_MARKER_DIR"
"""Where :func:`check_hangs_holding_the_gil` announces the rank that is about to hang."""


def check_hangs_holding_the_gil(target: object) -> None:
    """A check for the kit's ``World``: rank 1 announces itself in ``$GIL_MARKER_DIR/hung``,
    then matches a regular expression that backtracks for ages inside C code that never
    releases the GIL, so no other Python thread of the rank runs again; rank 0 returns."""
    import re

    if os.environ.get("RANK") != "1":
        return
    (Path(os.environ[GIL_MARKER_DIR]) / "hung").write_text(str(os.getpid()))
    re.match(r"(a+)+$", "a" * 48 + "!")


_KIT_SCRIPT: Final = """
import sys
sys.path.insert(0, sys.argv[1])
from trainspec.conformance.distributed import TargetSpec, World

world = World(2, env={"OMP_NUM_THREADS": "1"})
world.start()
print(" ".join(map(str, world.pids)), flush=True)
spec = TargetSpec("collective", "trainspec.reference.collectives.torch_dist:TorchCollective")
world.run("rank_scenarios:check_hangs_holding_the_gil", spec, timeout_s=600)
print("the world gave up on the hung rank", flush=True)
"""

KIT_READY_S: Final = 240.0
"""How long the kit's ranks may take to start and reach the hang (a loaded machine); a bound
on waiting, not an assertion about speed."""


@dataclass
class KitOutcome:
    """What :func:`run_kit_signal_case` saw."""

    pids: list[int]
    """The two ranks."""
    marked_before: list[Leftover]
    """Every marked process while rank 1 hung (ranks, resource tracker)."""
    returncode: int | None
    """The driving script's exit status after the signal."""
    leftover: list[Leftover]
    """Marked processes still alive after the script ended (and a settle period)."""


def run_kit_signal_case(signum: int, workdir: Path, *, settle: float = 15.0) -> KitOutcome:
    """Drive the kit's ``World(2)`` from a script in its own session, with rank 1 hung in C
    code holding the GIL (:func:`check_hangs_holding_the_gil`); send ``signum`` to the script
    once the hang is announced; report what is left. Everything it started carries a marker
    and is killed before returning."""
    marker = f"kit-{uuid.uuid4().hex}"
    env = {**os.environ, MARKER_VARIABLE: marker, GIL_MARKER_DIR: str(workdir)}
    with open(workdir / "script.stderr", "wb") as stderr:  # a SIGINT's traceback lands here
        script = subprocess.Popen(
            [sys.executable, "-c", _KIT_SCRIPT, str(HERE)],
            env=env,
            stdout=subprocess.PIPE,
            stderr=stderr,
            text=True,
            start_new_session=True,
        )
    try:
        assert script.stdout is not None
        pids = [int(p) for p in script.stdout.readline().split()]
        hung = workdir / "hung"
        deadline = time.monotonic() + KIT_READY_S
        while not hung.exists():
            if script.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"rank 1 never reached the hang (script: {script.poll()})")
            time.sleep(0.1)
        before = marked_processes(marker, settle=0)
        script.send_signal(signum)
        returncode: int | None
        try:
            returncode = script.wait(timeout=60)
        except subprocess.TimeoutExpired:
            returncode = None
        return KitOutcome(pids, before, returncode, marked_processes(marker, settle=settle))
    finally:
        kill_marked(marker)
        if script.poll() is None:
            script.kill()
            script.wait()
        if script.stdout is not None:
            script.stdout.close()


def dying_rank_with_a_child(workdir: str) -> None:
    """Rank 1 starts a helper process, records its pid, and exits with code 3; rank 0 waits.
    The launcher should stop the helper along with everything else."""
    if int(os.environ["RANK"]) == 1:
        helper = subprocess.Popen(
            [sys.executable, "-c", "import time; time.sleep(120)"], stdin=subprocess.DEVNULL
        )
        (Path(workdir) / "helper.pid").write_text(str(helper.pid), encoding="utf-8")
        os._exit(EXIT_CODE)
    time.sleep(600)
