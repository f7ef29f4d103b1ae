"""What one check on N ranks produced: a :class:`RankResult` per rank and their verdict.

Each rank's outcome is one of:

===========  =====================================================================
``passed``   the check returned normally on this rank
``failed``   it raised :class:`~trainspec.conformance.CheckFailure` or AssertionError
``skipped``  it raised :class:`~trainspec.conformance.CheckSkipped`
``error``    it raised anything else
``timeout``  it had not finished when the harness gave up (``stack`` holds its threads)
``crashed``  its process died (``signal`` or ``exitcode``, ``stderr`` holds its last words)
===========  =====================================================================

They combine into one :class:`DistributedResult` whose ``status`` uses the report's
vocabulary, blaming the root cause first: a crashed rank makes it ``error``; otherwise a rank
that did not finish makes it ``failed`` (a hang is a failure); otherwise a failed rank makes
it ``failed``, an erroring rank ``error``; ranks that disagree (one passes, another skips)
make it ``failed``, since every rank **must** reach the same verdict; ``passed`` and
``skipped`` need every rank to agree.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Final, Literal

from trainspec.conformance.report import CheckResult, Status

if TYPE_CHECKING:
    from collections.abc import Sequence

__all__ = ["DistributedResult", "RankResult", "RankStatus", "combine"]

RankStatus = Literal["passed", "failed", "skipped", "error", "timeout", "crashed"]

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
    """Clean-up the harness had to do after the check on this rank."""

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
        if self.stack:
            lines.append("  its threads when the harness gave up:")
            lines.append("  " + _tail(self.stack).strip().replace("\n", "\n  "))
        if self.stderr.strip():
            lines.append("  its stderr during the check:")
            lines.append("  " + _tail(self.stderr).strip().replace("\n", "\n  "))
        for note in self.notes:
            lines.append(f"  note: {note}")
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
        summary = (
            f"{check} did not finish within {timeout_s:g} s on ranks {listed('timeout')}; "
            f"finished ranks: "
            + (", ".join(f"{r.rank} ({r.status})" for r in finished) or "none")
            + ". A hang is a failure; the hung ranks' stacks are below and the world was "
            "restarted."
        )
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
        first = by_status["error"][0]
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
    if status not in ("passed", "skipped"):
        details = "\n".join(
            r.describe(omit_message=r.message if r.message.strip() in summary else "")
            for r in ranks
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
    )
