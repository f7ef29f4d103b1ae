"""Conformance reports: results as data, JSON, JUnit XML and a terminal table.

A :class:`Report` holds one :class:`TargetReport` per verified target, each with one
:class:`CheckResult` per check (structure results first). Everything is a frozen dataclass, so
a report can be passed around, compared and serialised without surprises.

Statuses:

==========  ==================================================================  ==========
status      meaning                                                             fails run
==========  ==================================================================  ==========
passed      the check ran and found no violation                                no
failed      the check found a violation (or did not finish in time)             yes
skipped     not applicable: a capability is not declared, or the check said so  no
xfailed     failed as declared in ``expected_failures``                         no
xpassed     declared as an expected failure but passed: remove the declaration  yes
blocked     not run because an earlier layer failed (structure, same clause)    no [#]_
error       the check raised something other than a verdict                     yes
==========  ==================================================================  ==========

.. [#] the failure that blocked it fails the run.

A target whose run checked nothing (every behaviour check skipped, or none selected) is not
``ok``: a run that verifies nothing cannot pass.

JSON output follows ``report.schema.json`` (JSON Schema draft 2020-12, shipped with the
package; :func:`json_schema` loads it).
"""

from __future__ import annotations

import datetime as _dt
import errno
import importlib.metadata
import json
import os
import platform
import stat
import sys
import xml.etree.ElementTree as ET
from collections import Counter
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Final, Literal, cast

import trainspec
from trainspec.conformance.core import LAYERS

if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping

    from rich.console import Console

__all__ = [
    "FAILING_STATUSES",
    "FORMAT_VERSION",
    "STATUSES",
    "CheckResult",
    "Environment",
    "Report",
    "Status",
    "Summary",
    "TargetReport",
    "json_schema",
    "repro_snippet",
]

Status = Literal["passed", "failed", "skipped", "xfailed", "xpassed", "blocked", "error"]
STATUSES: Final[tuple[Status, ...]] = (
    "passed",
    "failed",
    "skipped",
    "xfailed",
    "xpassed",
    "blocked",
    "error",
)
FAILING_STATUSES: Final[frozenset[Status]] = frozenset({"failed", "xpassed", "error"})
"""Statuses that make a target's run fail."""
_EXECUTED: Final[frozenset[Status]] = frozenset({"passed", "failed", "xfailed", "xpassed", "error"})
FORMAT_VERSION: Final = 1
"""The version of the JSON report format (``format_version``); bumped on incompatible change."""


def _status(value: object) -> Status:
    if value not in STATUSES:
        raise ValueError(f"unknown check status {value!r}; valid statuses: {', '.join(STATUSES)}")
    return value


@dataclass(frozen=True)
class CheckResult:
    """The outcome of one check (or one structural member) on one target."""

    check: str
    """The check's name (``check_checkpoint_io_save_is_atomic``; ``structure:<Protocol>...``
    for the structure layer)."""
    clause: str
    """The spec clause the check enforces (``CKPT-3``)."""
    layer: str
    status: Status
    message: str = ""
    """For anything but ``passed``: what happened, first line first."""
    traceback: str = ""
    duration_s: float = 0.0
    clause_title: str = ""
    """The clause's title from the spec (``trainspec.conformance.clauses``), if known."""

    @property
    def summary_line(self) -> str:
        """The first line of :attr:`message`."""
        return self.message.strip().splitlines()[0] if self.message.strip() else ""

    def to_dict(self) -> dict[str, object]:
        """A JSON-ready dict (``CheckResult`` in the schema)."""
        return {
            "check": self.check,
            "clause": self.clause,
            "layer": self.layer,
            "status": self.status,
            "message": self.message,
            "traceback": self.traceback,
            "duration_s": round(self.duration_s, 6),
            "clause_title": self.clause_title,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, object]) -> CheckResult:
        """The inverse of :meth:`to_dict`."""
        return cls(
            check=str(data["check"]),
            clause=str(data["clause"]),
            layer=str(data["layer"]),
            status=_status(data["status"]),
            message=str(data.get("message", "")),
            traceback=str(data.get("traceback", "")),
            duration_s=float(cast("float", data.get("duration_s", 0.0))),
            clause_title=str(data.get("clause_title", "")),
        )


@dataclass(frozen=True)
class Summary:
    """Counts of results by status."""

    passed: int = 0
    failed: int = 0
    skipped: int = 0
    xfailed: int = 0
    xpassed: int = 0
    blocked: int = 0
    error: int = 0

    @classmethod
    def of(cls, results: Iterable[CheckResult]) -> Summary:
        """Count ``results``."""
        counts = Counter(r.status for r in results)
        return cls(**{status: counts.get(status, 0) for status in STATUSES})

    @property
    def total(self) -> int:
        """Every result counted."""
        return sum(self.as_dict().values())

    def as_dict(self) -> dict[str, int]:
        """Status -> count, in :data:`STATUSES` order."""
        return {status: getattr(self, status) for status in STATUSES}

    def __str__(self) -> str:
        parts = [f"{count} {status}" for status, count in self.as_dict().items() if count]
        return ", ".join(parts) if parts else "no checks"


@dataclass(frozen=True)
class TargetReport:
    """Every result for one target, with what was declared for it."""

    kind: str
    name: str
    results: tuple[CheckResult, ...] = ()
    version: str | None = None
    capabilities: tuple[str, ...] = ()
    expected_failures: Mapping[str, str] = field(default_factory=dict)
    problems: tuple[str, ...] = ()
    """Run-level failures not tied to one check (nothing ran, a checks module is broken)."""
    skipped: str | None = None
    """Set when the target was not run at all (for example its module cannot be imported
    on this machine); the reason."""
    duration_s: float = 0.0

    @property
    def summary(self) -> Summary:
        """Counts by status."""
        return Summary.of(self.results)

    @property
    def executed(self) -> int:
        """How many checks outside the structure layer produced a verdict."""
        return sum(1 for r in self.results if r.layer != "structure" and r.status in _EXECUTED)

    @property
    def ok(self) -> bool:
        """No failing result, no run-level problem; a skipped target is ``ok``."""
        if self.skipped is not None:
            return True
        return not self.problems and not any(r.status in FAILING_STATUSES for r in self.results)

    @property
    def verdict(self) -> str:
        """``PASSED``, ``FAILED`` or ``SKIPPED``."""
        if self.skipped is not None:
            return "SKIPPED"
        return "PASSED" if self.ok else "FAILED"

    def to_dict(self) -> dict[str, object]:
        """A JSON-ready dict (``TargetReport`` in the schema)."""
        return {
            "kind": self.kind,
            "name": self.name,
            "version": self.version,
            "capabilities": list(self.capabilities),
            "expected_failures": dict(self.expected_failures),
            "ok": self.ok,
            "skipped": self.skipped,
            "problems": list(self.problems),
            "duration_s": round(self.duration_s, 6),
            "summary": self.summary.as_dict(),
            "results": [r.to_dict() for r in self.results],
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, object]) -> TargetReport:
        """The inverse of :meth:`to_dict` (derived fields are recomputed)."""
        version = data.get("version")
        skipped = data.get("skipped")
        return cls(
            kind=str(data["kind"]),
            name=str(data["name"]),
            results=tuple(
                CheckResult.from_dict(r)
                for r in cast("list[Mapping[str, object]]", data.get("results", []))
            ),
            version=None if version is None else str(version),
            capabilities=tuple(cast("list[str]", data.get("capabilities", []))),
            expected_failures=dict(cast("dict[str, str]", data.get("expected_failures", {}))),
            problems=tuple(cast("list[str]", data.get("problems", []))),
            skipped=None if skipped is None else str(skipped),
            duration_s=float(cast("float", data.get("duration_s", 0.0))),
        )


def _torch_version() -> str | None:
    torch = sys.modules.get("torch")
    version = getattr(torch, "__version__", None)
    if version is not None:
        return str(version)
    try:  # without importing torch, which takes seconds
        return importlib.metadata.version("torch")
    except importlib.metadata.PackageNotFoundError:
        return None


@dataclass(frozen=True)
class Environment:
    """Where a report was made."""

    trainspec_version: str
    spec_version: str
    python: str
    torch: str | None
    platform: str

    @classmethod
    def current(cls) -> Environment:
        """This process's environment (torch's version without importing torch)."""
        return cls(
            trainspec_version=trainspec.__version__,
            spec_version=trainspec.SPEC_VERSION,
            python=platform.python_version(),
            torch=_torch_version(),
            platform=platform.platform(terse=True),
        )


@dataclass(frozen=True)
class Report:
    """The result of verifying one or more targets."""

    targets: tuple[TargetReport, ...]
    environment: Environment = field(default_factory=Environment.current)
    created: str = field(
        default_factory=lambda: _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")
    )
    """ISO 8601 time the report was made (UTC)."""

    @property
    def results(self) -> tuple[CheckResult, ...]:
        """Every result of every target, in order."""
        return tuple(r for t in self.targets for r in t.results)

    @property
    def summary(self) -> Summary:
        """Counts by status over every target."""
        return Summary.of(self.results)

    @property
    def ok(self) -> bool:
        """Every target is ``ok`` and at least one target actually ran."""
        ran = [t for t in self.targets if t.skipped is None]
        return bool(ran) and all(t.ok for t in self.targets)

    @property
    def duration_s(self) -> float:
        """Total time over the targets."""
        return sum(t.duration_s for t in self.targets)

    @classmethod
    def combine(cls, reports: Iterable[Report]) -> Report:
        """One report holding the targets of ``reports`` (environment of the first)."""
        reports = list(reports)
        targets = tuple(t for r in reports for t in r.targets)
        if not reports:
            return cls(targets=())
        return cls(targets=targets, environment=reports[0].environment)

    # -- JSON ---------------------------------------------------------------------------------

    def to_dict(self) -> dict[str, object]:
        """A JSON-ready dict that validates against :func:`json_schema`."""
        env = self.environment
        return {
            "format": "trainspec-conformance-report",
            "format_version": FORMAT_VERSION,
            "trainspec_version": env.trainspec_version,
            "spec_version": env.spec_version,
            "environment": {"python": env.python, "torch": env.torch, "platform": env.platform},
            "created": self.created,
            "duration_s": round(self.duration_s, 6),
            "ok": self.ok,
            "summary": self.summary.as_dict(),
            "targets": [t.to_dict() for t in self.targets],
        }

    def to_json(self, *, indent: int | None = 2) -> str:
        """The report as JSON text."""
        return json.dumps(self.to_dict(), indent=indent, ensure_ascii=False)

    @classmethod
    def from_dict(cls, data: Mapping[str, object]) -> Report:
        """The inverse of :meth:`to_dict`."""
        env = cast("Mapping[str, object]", data.get("environment", {}))
        torch = env.get("torch")
        return cls(
            targets=tuple(
                TargetReport.from_dict(t)
                for t in cast("list[Mapping[str, object]]", data.get("targets", []))
            ),
            environment=Environment(
                trainspec_version=str(data["trainspec_version"]),
                spec_version=str(data["spec_version"]),
                python=str(env.get("python", "")),
                torch=None if torch is None else str(torch),
                platform=str(env.get("platform", "")),
            ),
            created=str(data.get("created", "")),
        )

    def write_json(self, path: str | Path) -> None:
        """Write :meth:`to_json` to ``path`` (parents created).

        Raises ``OSError`` when something other than a regular file is at ``path`` (a FIFO,
        a device, a directory), without blocking on a FIFO that has no reader.
        """
        _write_regular_file(path, self.to_json() + "\n")

    # -- JUnit XML ------------------------------------------------------------------------------

    def to_junit_xml(self) -> str:
        """JUnit XML: one ``<testsuite>`` per target, one ``<testcase>`` per result.

        ``failed``/``xpassed`` are ``<failure>``, ``error`` is ``<error>``, ``skipped``,
        ``blocked`` and ``xfailed`` are ``<skipped>`` (xfailed with ``type="xfail"``). A
        run-level problem is a failing ``<testcase name="run">``.
        """
        root = ET.Element("testsuites", name="trainspec conformance")
        totals: Counter[str] = Counter()
        for target in self.targets:
            suite = self._junit_suite(target)
            root.append(suite)
            for key in ("tests", "failures", "errors", "skipped"):
                totals[key] += int(suite.get(key, "0"))
        for key in ("tests", "failures", "errors", "skipped"):
            root.set(key, str(totals[key]))
        root.set("time", f"{self.duration_s:.3f}")
        ET.indent(root)
        return ET.tostring(root, encoding="unicode", xml_declaration=True) + "\n"

    def _junit_suite(self, target: TargetReport) -> ET.Element:
        env = self.environment
        suite = ET.Element(
            "testsuite",
            name=f"{target.kind}: {target.name}",
            timestamp=self.created,
            time=f"{target.duration_s:.3f}",
        )
        props = ET.SubElement(suite, "properties")
        for name, value in (
            ("trainspec_version", env.trainspec_version),
            ("spec_version", env.spec_version),
            ("python", env.python),
            ("torch", env.torch or ""),
            ("kind", target.kind),
            ("target", target.name),
            ("target_version", target.version or ""),
            ("capabilities", ",".join(target.capabilities)),
        ):
            ET.SubElement(props, "property", name=name, value=value)
        classname = f"trainspec.conformance.{target.kind}.{target.name}"
        tests = failures = errors = skipped = 0
        if target.skipped is not None:
            case = ET.SubElement(suite, "testcase", classname=classname, name="run", time="0")
            ET.SubElement(case, "skipped", message=target.skipped)
            tests, skipped = 1, 1
        for problem in target.problems:
            case = ET.SubElement(suite, "testcase", classname=classname, name="run", time="0")
            failure = ET.SubElement(case, "failure", message=problem.splitlines()[0])
            failure.text = problem
            tests += 1
            failures += 1
        for result in target.results:
            tests += 1
            case = ET.SubElement(
                suite,
                "testcase",
                classname=classname,
                name=f"{result.clause} {result.check}",
                time=f"{result.duration_s:.3f}",
            )
            detail = result.message + ("\n\n" + result.traceback if result.traceback else "")
            if result.status in ("failed", "xpassed"):
                failures += 1
                element = ET.SubElement(
                    case, "failure", message=result.summary_line, type=result.status
                )
                element.text = detail
            elif result.status == "error":
                errors += 1
                element = ET.SubElement(case, "error", message=result.summary_line, type="error")
                element.text = detail
            elif result.status in ("skipped", "blocked", "xfailed"):
                skipped += 1
                type_ = {"skipped": "skip", "blocked": "blocked", "xfailed": "xfail"}
                ET.SubElement(
                    case, "skipped", message=result.summary_line, type=type_[result.status]
                )
        for key, count in (
            ("tests", tests),
            ("failures", failures),
            ("errors", errors),
            ("skipped", skipped),
        ):
            suite.set(key, str(count))
        return suite

    def write_junit(self, path: str | Path) -> None:
        """Write :meth:`to_junit_xml` to ``path`` (parents created); ``OSError`` as for
        :meth:`write_json`."""
        _write_regular_file(path, self.to_junit_xml())

    # -- terminal -------------------------------------------------------------------------------

    def summary_line(self) -> str:
        """One line: counts, duration and the verdict."""
        verdict = "PASSED" if self.ok else "FAILED"
        targets = len(self.targets)
        noun = "target" if targets == 1 else "targets"
        return f"{targets} {noun}: {self.summary} in {self.duration_s:.2f}s: {verdict}"

    def render(
        self,
        console: Console | None = None,
        *,
        quiet: bool = False,
        show_repro: bool = False,
    ) -> None:
        """Print a table per target (clause, check, status, first message line) and a summary.

        With ``quiet`` only results that need attention (failed, xpassed, error) are listed;
        with ``show_repro`` each of those is followed by its "To reproduce" snippet.
        ``console`` defaults to a rich Console on standard output. Every text that comes from
        a plugin (names, messages, snippets) is printed literally, never read as rich markup.
        When the table would not fit the console's width without breaking a check name, each
        result is listed on its own lines instead (the check name on a line of its own).
        """
        from rich.console import Console
        from rich.text import Text

        console = console if console is not None else Console()
        for target in self.targets:
            title = f"{target.kind}: {target.name}"
            if target.version:
                title += f" {target.version}"
            rows = [r for r in target.results if not quiet or r.status in FAILING_STATUSES]
            if rows:
                _print_results(console, title, rows)
            elif not quiet:
                console.print(Text(title, style="bold"))
            for problem in target.problems:
                console.print(Text(f"  problem: {problem}", style="red"))
            if show_repro:
                _print_repros(console, target)
            line = (
                f"{target.kind}: {target.name}: skipped: {target.skipped}"
                if target.skipped is not None
                else f"{target.kind}: {target.name}: {target.summary}: {target.verdict}"
            )
            console.print(Text(line, style=_VERDICT_STYLES[target.verdict]))
        console.print(Text(self.summary_line(), style="bold " + ("green" if self.ok else "red")))

    def render_matrix(self, console: Console | None = None, *, show_repro: bool = False) -> None:
        """Print one row per target and one column per layer (counts by status), the skip
        reasons, every result that fails the run (with its snippet when ``show_repro``), and
        the summary line. Plugin text is printed literally."""
        from rich.console import Console
        from rich.table import Table
        from rich.text import Text

        console = console if console is not None else Console()
        table = Table(title="trainspec verify", title_justify="left", expand=False)
        table.add_column("Implementation", no_wrap=True)
        for layer in LAYERS:
            table.add_column(_LAYER_HEADERS[layer], no_wrap=True)
        table.add_column("Verdict", no_wrap=True, min_width=7)
        for target in self.targets:
            cells: list[Text] = []
            for layer in LAYERS:
                counts = Counter(r.status for r in target.results if r.layer == layer)
                if not counts:
                    cells.append(Text("-", style="dim"))
                    continue
                cell = Text()
                for status in _MATRIX_ORDER:
                    if counts.get(status):
                        if cell:
                            cell.append(" ")
                        cell.append(f"{counts[status]} {_SHORT[status]}", style=_STYLES[status])
                cells.append(cell)
            table.add_row(
                Text(f"{target.kind}: {target.name}"),
                *cells,
                Text(target.verdict, style=_VERDICT_STYLES[target.verdict]),
            )
        console.print(table)
        for target in self.targets:
            why = (
                target.skipped
                if target.skipped is not None
                else _skip_summary([r.message for r in target.results if r.status == "skipped"])
            )
            if why:
                console.print(Text(f"  {target.kind}: {target.name}: skipped: {why}", "dim"))
        for target in self.targets:
            for result in target.results:
                if result.status not in FAILING_STATUSES:
                    continue
                console.print(
                    Text(
                        f"{target.kind}: {target.name}: {result.clause} {result.check}: "
                        f"{result.status}: {result.summary_line}",
                        style="red",
                    )
                )
            if show_repro:
                _print_repros(console, target)
        for target in self.targets:
            for problem in target.problems:
                console.print(Text(f"{target.kind}: {target.name}: problem: {problem}", "red"))
        console.print(Text(self.summary_line(), style="bold " + ("green" if self.ok else "red")))


_REPRO_MARKER: Final = "\n\nTo reproduce:\n"
_TABLE_MIN_MESSAGE: Final = 24
"""The narrowest message column worth a table; below it, results are listed line by line."""
_TABLE_CHROME: Final = 13
"""Columns a four-column rich table spends on borders (5) and cell padding (8)."""


def repro_snippet(message: str) -> str:
    """The "To reproduce" snippet in a failure ``message`` (dedented), or ``""``.

    Failure messages (:class:`~trainspec.conformance.core.CheckFailure`) end with
    ``"\\n\\nTo reproduce:\\n"`` and the snippet's lines indented by four spaces; whatever
    follows the snippet (a cleanup note, hypothesis' notes) is not part of it.
    """
    _, marker, rest = message.partition(_REPRO_MARKER)
    if not marker:
        return ""
    lines: list[str] = []
    for line in rest.splitlines():
        if line and not line.startswith("    "):
            break
        lines.append(line[4:])
    while lines and not lines[-1].strip():
        lines.pop()
    return "\n".join(lines)


def _print_results(console: Console, title: str, rows: list[CheckResult]) -> None:
    from rich.table import Table
    from rich.text import Text

    widest = {
        "clause": max(len("Clause"), *(len(r.clause) for r in rows)),
        "check": max(len("Check"), *(len(r.check) for r in rows)),
        "status": max(len("Status"), *(len(r.status) for r in rows)),
    }
    if sum(widest.values()) + _TABLE_CHROME + _TABLE_MIN_MESSAGE <= console.width:
        table = Table(title=Text(title), title_justify="left", expand=False)
        table.add_column("Clause", no_wrap=True)
        table.add_column("Check", no_wrap=True, min_width=widest["check"])
        table.add_column("Status", no_wrap=True)
        table.add_column("Message", overflow="fold")
        for result in rows:
            table.add_row(
                Text(result.clause),
                Text(result.check),
                Text(result.status, style=_STYLES[result.status]),
                Text(result.summary_line),
            )
        console.print(table)
        return
    # Too narrow for a table that keeps check names whole: one block per result.
    console.print(Text(title, style="bold"))
    for result in rows:
        head = Text()
        head.append(result.status, style=_STYLES[result.status])
        head.append(f"  {result.clause}")
        console.print(head)
        console.print(Text(f"  {result.check}"), soft_wrap=True)  # never broken by rich
        if result.summary_line:
            console.print(Text(f"    {result.summary_line}", overflow="fold"))


def _print_repros(console: Console, target: TargetReport) -> None:
    from rich.text import Text

    for result in target.results:
        if result.status not in FAILING_STATUSES:
            continue
        code = repro_snippet(result.message)
        if not code:
            continue
        console.print(
            Text(f"To reproduce {result.clause} {result.check} ({target.name}):", style="bold")
        )
        # soft_wrap: long code lines are left to the terminal, never broken by rich, so that
        # the snippet can be copied as it is.
        console.print(Text(code), soft_wrap=True)
        console.print()


def _write_regular_file(path: str | Path, text: str) -> None:
    """Write ``text`` (UTF-8) to the regular file ``path``, creating it and its parents.

    Opened non-blocking and checked with ``fstat`` before anything is truncated: a FIFO
    without a reader fails at once (``ENXIO``) instead of hanging, and a FIFO with a reader, a
    device or a directory raises ``OSError`` naming the path and what is there.
    """
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    flags = os.O_WRONLY | os.O_CREAT | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)
    fd = os.open(target, flags, 0o666)
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            kind = "a FIFO" if stat.S_ISFIFO(mode) else "a device or special file"
            raise OSError(errno.EINVAL, f"{kind}, not a regular file", str(target))
        os.ftruncate(fd, 0)
        data = text.encode("utf-8")
        view = memoryview(data)
        while view:
            written = os.write(fd, view)
            view = view[written:]
    finally:
        os.close(fd)


def _skip_summary(reasons: list[str]) -> str:
    """A short line for the matrix: undeclared capabilities by name, then other reasons."""
    prefix = "capability not declared: "
    undeclared: list[str] = []
    other = 0
    for reason in reasons:
        if reason.startswith(prefix):
            for name in reason[len(prefix) :].split(","):
                if name.strip() and name.strip() not in undeclared:
                    undeclared.append(name.strip())
        else:
            other += 1
    parts = [f"not declared: {', '.join(undeclared)}"] if undeclared else []
    if other:
        parts.append(f"{other} not applicable")
    return "; ".join(parts)


_LAYER_HEADERS: Final[dict[str, str]] = {
    "structure": "structure",
    "behaviour": "behaviour",
    "distributed": "distributed",
    "end_to_end": "end-to-end",
}
_SHORT: Final[dict[str, str]] = {
    "passed": "ok",
    "failed": "FAILED",
    "error": "ERROR",
    "xpassed": "XPASS",
    "blocked": "blocked",
    "xfailed": "xfail",
    "skipped": "skip",
}
_MATRIX_ORDER: Final[tuple[Status, ...]] = (
    "failed",
    "error",
    "xpassed",
    "blocked",
    "passed",
    "xfailed",
    "skipped",
)
_STYLES: Final[dict[str, str]] = {
    "passed": "green",
    "failed": "bold red",
    "skipped": "yellow",
    "xfailed": "yellow",
    "xpassed": "bold red",
    "blocked": "magenta",
    "error": "bold red",
}
_VERDICT_STYLES: Final[dict[str, str]] = {"PASSED": "green", "FAILED": "red", "SKIPPED": "yellow"}


def json_schema() -> dict[str, object]:
    """The JSON Schema (draft 2020-12) of :meth:`Report.to_dict`, shipped as package data."""
    text = (
        resources.files("trainspec.conformance")
        .joinpath("report.schema.json")
        .read_text(encoding="utf-8")
    )
    return cast("dict[str, object]", json.loads(text))
