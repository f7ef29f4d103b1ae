"""What one check on N ranks produced: a :class:`RankResult` per rank and their verdict.

Each rank's outcome is one of:

===========  =====================================================================
``passed``   the check returned normally on this rank
``failed``   it raised :class:`~trainspec.conformance.CheckFailure` or AssertionError
``skipped``  it raised :class:`~trainspec.conformance.CheckSkipped`
``error``    it raised anything else
``timeout``  it had not finished when the harness gave up (``stack`` holds its threads)
``crashed``  its process died (``signal`` or ``exitcode``, ``stderr`` holds its last words)
``blocked``  it called a member of the target that hung in an earlier check
===========  =====================================================================

They combine into one :class:`DistributedResult` whose ``status`` uses the report's
vocabulary, blaming the root cause first: a crashed rank makes it ``error``; otherwise a rank
that did not finish makes it ``failed`` (a hang is a failure); otherwise a blocked rank makes
it ``blocked`` (the others' errors are echoes of that); otherwise a failed rank makes it
``failed``, an erroring rank ``error``; ranks that disagree (one passes, another skips) make
it ``failed``, since every rank **must** reach the same verdict; ``passed`` and ``skipped``
need every rank to agree. Where several ranks raised, the headline is a *primary* rank's
error: one that is not the echo of another rank's failure (a collective that timed out or
lost its peer, :attr:`RankResult.secondary`), as the reference launchers blame.

Tearing down what the check made is not the check's verdict: a ``teardown()`` that raised
(:attr:`RankResult.teardown`) and what the implementation left behind although every
``teardown()`` ran (:attr:`RankResult.left_behind`, a default process group still
initialized) are :attr:`DistributedResult.teardown_problems`, a verdict on the kind's
lifecycle clause (``teardown:<check>`` in the report).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Final, Literal

from trainspec.conformance.report import (
    CheckResult,
    Environment,
    Report,
    Status,
    TargetReport,
)

if TYPE_CHECKING:
    from collections.abc import Sequence

__all__ = ["DistributedResult", "RankResult", "RankStatus", "combine", "launch_failure_report"]

RankStatus = Literal["passed", "failed", "skipped", "error", "timeout", "crashed", "blocked"]

_TAIL: Final = 4000


def _tail(text: str, limit: int = _TAIL) -> str:
    return text if len(text) <= limit else "...\n" + text[-limit:]


@dataclass(frozen=True)
class RankResult:
    """One rank's outcome of one check."""

    rank: int
    status: RankStatus
    message: str = ""
    """Why, for anything but ``passed``: the failure, skip reason or error, first line first."""
    traceback: str = ""
    duration_s: float = 0.0
    pid: int | None = None
    stack: str = ""
    """``timeout`` only: every thread's Python stack when the harness gave up (faulthandler)."""
    exitcode: int | None = None
    """``crashed`` only: the process's exit code (negative: killed by a signal)."""
    signal: str | None = None
    """``crashed`` only: the name of the signal that killed it (``"SIGSEGV"``), if any."""
    stderr: str = ""
    """``crashed`` and ``timeout``: what the process wrote to file descriptor 2 during the
    check (native crashes included)."""
    notes: tuple[str, ...] = ()
    """Clean-up the harness did after the check on this rank that no clause forbids
    (environment variables restored)."""
    teardown: tuple[str, ...] = ()
    """``"<Class>.teardown() raised <Error>: <message>"`` for each instance the check made
    whose teardown raised (whatever the check's own status)."""
    left_behind: tuple[str, ...] = ()
    """What the implementation left behind after the check although its ``teardown()`` ran
    (a default process group still initialized); the harness cleaned it afterwards."""
    secondary: bool = False
    """``error`` only: the error is likely the echo of another rank's failure (a
    :class:`~trainspec.CollectiveError` or a ``torch.distributed`` error)."""
    hung_in: tuple[str, ...] = ()
    """``timeout`` only: the target's members found on the hung rank's stack, outermost
    first."""

    @property
    def finished(self) -> bool:
        """Whether the check returned a verdict on this rank (not hung, not crashed)."""
        return self.status not in ("timeout", "crashed")

    def describe(self, *, omit_message: str = "") -> str:
        """A few lines about this rank for a report; a message equal to ``omit_message`` (one
        already shown) is written as "(as above)"."""
        head = f"rank {self.rank}: {self.status}"
        if self.status == "crashed":
            how = f"signal {self.signal}" if self.signal else f"exit code {self.exitcode}"
            head += f" (the process died: {how})"
        lines = [head]
        if self.message.strip() and self.message.strip() == omit_message.strip():
            lines[0] += " (as above)"
        elif self.message.strip():
            lines.append("  " + self.message.strip().replace("\n", "\n  "))
        if self.hung_in:
            lines.append(f"  it hung inside {', '.join(f'{m}()' for m in self.hung_in)}")
        if self.stack:
            lines.append("  its threads when the harness gave up:")
            lines.append("  " + _tail(self.stack).strip().replace("\n", "\n  "))
        if self.stderr.strip():
            lines.append("  its stderr during the check:")
            lines.append("  " + _tail(self.stderr).strip().replace("\n", "\n  "))
        for note in self.notes:
            lines.append(f"  note: {note}")
        for thing in (*self.teardown, *self.left_behind):
            lines.append(f"  teardown: {thing}")
        return "\n".join(lines)

    def to_dict(self) -> dict[str, object]:
        """A JSON-ready dict."""
        return {
            "rank": self.rank,
            "status": self.status,
            "message": self.message,
            "traceback": self.traceback,
            "duration_s": round(self.duration_s, 6),
            "pid": self.pid,
            "stack": self.stack,
            "exitcode": self.exitcode,
            "signal": self.signal,
            "stderr": self.stderr,
            "notes": list(self.notes),
            "teardown": list(self.teardown),
            "left_behind": list(self.left_behind),
            "secondary": self.secondary,
            "hung_in": list(self.hung_in),
        }


@dataclass(frozen=True)
class DistributedResult:
    """The verdict of one check on every rank of a world."""

    check: str
    clause: str
    layer: str
    status: Status
    """``passed``, ``failed``, ``skipped`` or ``error`` (see the module docstring)."""
    message: str
    ranks: tuple[RankResult, ...]
    duration_s: float
    restarted: bool = False
    """Whether the world had to be killed after this check (a hang or a crash); the next
    check runs in a fresh world."""
    lifecycle_clause: str = ""
    """The clause of the kind's ``teardown()`` (``COLL-5``, ``STRAT-4``), which
    :attr:`teardown_problems` break."""

    @property
    def finished_ranks(self) -> tuple[int, ...]:
        """Ranks on which the check returned a verdict."""
        return tuple(r.rank for r in self.ranks if r.finished)

    @property
    def timed_out_ranks(self) -> tuple[int, ...]:
        """Ranks still running the check when the harness gave up."""
        return tuple(r.rank for r in self.ranks if r.status == "timeout")

    @property
    def crashed_ranks(self) -> tuple[int, ...]:
        """Ranks whose process died during the check."""
        return tuple(r.rank for r in self.ranks if r.status == "crashed")

    @property
    def hung_in(self) -> tuple[str, ...]:
        """The target's members the hung ranks were inside, outermost first (empty when
        nothing hung or no member was on their stacks)."""
        found: list[str] = []
        for r in self.ranks:
            found.extend(m for m in r.hung_in if m not in found)
        return tuple(found)

    @property
    def teardown_problems(self) -> tuple[str, ...]:
        """What went wrong when the harness tore down the instances the check made, one
        line per problem naming its ranks: a ``teardown()`` that raised, or something the
        implementation left behind although every ``teardown()`` ran. Each breaks the
        kind's lifecycle clause (:attr:`lifecycle_clause`), not the check's own."""
        return self.teardown_problems_once(set())

    def teardown_problems_once(self, reported: set[str]) -> tuple[str, ...]:
        """:attr:`teardown_problems`, less what the implementation left behind that
        ``reported`` already holds (``reported`` is updated): an implementation that never
        releases its process group is reported after the first check that shows it, not
        after every check of the run. A ``teardown()`` that raised is reported every time."""
        by_text: dict[str, list[int]] = {}
        for r in self.ranks:
            for text in r.teardown:
                by_text.setdefault(text, []).append(r.rank)
        left: dict[str, list[int]] = {}
        for r in self.ranks:
            for text in r.left_behind:
                if text not in reported:
                    left.setdefault(text, []).append(r.rank)
        reported.update(left)
        return tuple(
            f"on rank{'s' if len(ranks) > 1 else ''} {', '.join(map(str, ranks))}: {text}"
            for text, ranks in (*by_text.items(), *left.items())
        )

    @property
    def traceback(self) -> str:
        """Every rank's traceback, stack and stderr, labelled by rank."""
        parts: list[str] = []
        for r in self.ranks:
            for label, text in (("traceback", r.traceback), ("stack", r.stack)):
                if text.strip():
                    parts.append(f"--- rank {r.rank} {label} ---\n{text.rstrip()}")
            if r.status in ("crashed", "timeout") and r.stderr.strip():
                parts.append(f"--- rank {r.rank} stderr ---\n{_tail(r.stderr).rstrip()}")
        return "\n".join(parts)

    def to_check_result(self) -> CheckResult:
        """The report row for this check (the kit's :class:`CheckResult`)."""
        return CheckResult(
            self.check,
            self.clause,
            self.layer,
            self.status,
            self.message,
            self.traceback,
            self.duration_s,
        )


def combine(
    check: str,
    clause: str,
    layer: str,
    ranks: Sequence[RankResult],
    *,
    duration_s: float,
    timeout_s: float,
    restarted: bool,
    lifecycle_clause: str = "",
) -> DistributedResult:
    """One verdict from every rank's outcome (rules in the module docstring)."""
    by_status: dict[str, list[RankResult]] = {}
    for r in ranks:
        by_status.setdefault(r.status, []).append(r)

    def listed(status: str) -> str:
        return ", ".join(str(r.rank) for r in by_status.get(status, []))

    finished = [r for r in ranks if r.finished]
    if "crashed" in by_status:
        crashed = by_status["crashed"]
        first = crashed[0]
        how = f"signal {first.signal}" if first.signal else f"exit code {first.exitcode}"
        status: Status = "error"
        summary = (
            f"{check}: rank {first.rank} died during the check ({how})"
            + (f"; crashed ranks: {listed('crashed')}" if len(crashed) > 1 else "")
            + f"; finished ranks: {', '.join(str(r.rank) for r in finished) or 'none'}"
            + (
                f"; ranks that did not finish: {listed('timeout')}"
                if "timeout" in by_status
                else ""
            )
            + ". The world was restarted."
        )
    elif "timeout" in by_status:
        status = "failed"
        members: list[str] = []
        for r in by_status["timeout"]:
            members.extend(m for m in r.hung_in if m not in members)
        inside = f" (hung inside {', '.join(f'{m}()' for m in members)})" if members else ""
        summary = (
            f"{check} did not finish within {timeout_s:g} s on ranks {listed('timeout')}"
            f"{inside}; finished ranks: "
            + (", ".join(f"{r.rank} ({r.status})" for r in finished) or "none")
            + ". A hang is a failure; the hung ranks' stacks are below and the world was "
            "restarted."
        )
    elif "blocked" in by_status:
        status = "blocked"
        summary = by_status["blocked"][0].message.strip() or f"{check} was blocked"
    elif "failed" in by_status:
        status = "failed"
        first = by_status["failed"][0]
        summary = first.message.strip() or f"{check} failed on rank {first.rank}"
        if len(by_status) > 1 or len(by_status["failed"]) < len(ranks):
            summary += (
                f"\n(failed on ranks {listed('failed')}; "
                + ", ".join(f"{s} on {listed(s)}" for s in by_status if s != "failed")
                + ")"
            )
    elif "error" in by_status:
        status = "error"
        primary = [r for r in by_status["error"] if not r.secondary]
        first = (primary or by_status["error"])[0]
        summary = first.message.strip() or f"{check} raised on rank {first.rank}"
        if len(by_status) > 1:
            summary += f"\n(error on ranks {listed('error')})"
    elif len(by_status) > 1:
        status = "failed"
        summary = (
            f"the ranks disagree on {check}: "
            + "; ".join(f"{s} on ranks {listed(s)}" for s in by_status)
            + ". Every rank must reach the same verdict (a check that does not apply must "
            "be skipped on every rank)."
        )
    elif "skipped" in by_status:
        status = "skipped"
        reasons = sorted({r.message.strip() for r in ranks})
        summary = "; ".join(reasons)
    else:
        status = "passed"
        summary = ""
    message = summary
    if status not in ("passed", "skipped", "blocked"):
        details = "\n".join(
            r.describe(omit_message=r.message if r.message.strip() in summary else "")
            for r in sorted(ranks, key=lambda r: (r.secondary, r.rank))
            if r.status != "passed"
        )
        message = f"{summary}\n\n{details}" if details else summary
    return DistributedResult(
        check=check,
        clause=clause,
        layer=layer,
        status=status,
        message=message,
        ranks=tuple(ranks),
        duration_s=duration_s,
        restarted=restarted,
        lifecycle_clause=lifecycle_clause,
    )


def launch_failure_report(
    kind: str, name: str, world_size: int, backend: str, error: BaseException
) -> Report:
    """The report of a target whose world could not run it: the ranks did not start, or
    rank 0 died or hung while loading the factory (a :class:`~trainspec.LaunchError`). The
    target fails with the cause, naming the rank, instead of a traceback without a report."""
    rank = getattr(error, "rank", None)
    who = f"rank {rank}" if isinstance(rank, int) else "a rank"
    problem = (
        f"{name} could not be verified on {world_size} ranks: {who} failed before any check "
        f"ran ({type(error).__name__}):\n{str(error).strip()}"
    )
    return Report(
        targets=(
            TargetReport(
                kind=kind,
                name=f"{name} on {world_size} ranks ({backend})",
                problems=(problem,),
            ),
        ),
        environment=Environment.current(),
    )
