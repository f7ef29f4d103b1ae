"""``SLURMEnvironment``: ranks started by ``srun`` under the SLURM scheduler.

=====================================  ===============================================
variable                               meaning
=====================================  ===============================================
``SLURM_NTASKS``                       number of ranks
``SLURM_PROCID``                       global rank
``SLURM_LOCALID``                      rank on this node
``SLURM_NODEID``                       index of this node
``SLURM_NODELIST`` (or                 the job's hosts, compressed (``node[001-004,007]``);
``SLURM_JOB_NODELIST``)                the first host is the rendezvous
``SLURM_JOB_ID``                       the job id; the port is derived from it
``MASTER_ADDR``, ``MASTER_PORT``       optional overrides of the rendezvous
``SLURM_JOB_NAME``                     ``bash`` or ``interactive`` means an interactive
                                       allocation, which :meth:`detect` does not claim
=====================================  ===============================================
"""

from __future__ import annotations

import os
import re
from typing import Final

from trainspec.cluster_environment import ClusterEnvironment
from trainspec.errors import ConfigurationError
from trainspec.reference._messages import describe_value, is_ascii_digits
from trainspec.reference.cluster_environments._variables import (
    check_index,
    read_address,
    read_int,
    read_port,
)

__all__ = ["PORT_BASE", "SLURMEnvironment", "first_host"]

_NAME: Final = "SLURMEnvironment"

PORT_BASE: Final = 15000
"""Without ``MASTER_PORT`` the port is ``PORT_BASE + int(SLURM_JOB_ID[-4:])``, in
``[15000, 24999]``: the same on every rank of a job, likely different between jobs."""

_INTERACTIVE_JOB_NAMES: Final = frozenset({"bash", "interactive"})
_RANGE = re.compile(r"([0-9]+)(?:-([0-9]+))?")  # ASCII digits: \d takes every script's


class SLURMEnvironment(ClusterEnvironment):
    """The ranks ``srun`` started (ENV-1 ... ENV-6).

    :attr:`creates_processes_externally` is ``True``: one task per rank, started by
    ``srun``, so a strategy needs no launcher. Properties read the variables when called; a
    missing or malformed one raises :class:`~trainspec.ConfigurationError` naming it.

    Not guaranteed: the derived port may be in use on the first host; set ``MASTER_PORT``
    to choose one. Nothing process-wide is changed, so :meth:`teardown` has nothing to undo.
    """

    def __repr__(self) -> str:
        return f"{_NAME}()"

    def detect(self) -> bool:
        """``True`` when ``SLURM_NTASKS`` and ``SLURM_PROCID`` are set and the job is not an
        interactive allocation (``SLURM_JOB_NAME`` ``bash`` or ``interactive``), where the
        user runs the script without ``srun`` (ENV-1)."""
        return (
            "SLURM_NTASKS" in os.environ
            and "SLURM_PROCID" in os.environ
            and os.environ.get("SLURM_JOB_NAME") not in _INTERACTIVE_JOB_NAMES
        )

    @property
    def creates_processes_externally(self) -> bool:
        """``True``: ``srun`` started the ranks (ENV-2)."""
        return True

    @property
    def main_address(self) -> str:
        """``MASTER_ADDR``, else the first host of ``SLURM_NODELIST`` (ENV-3)."""
        address = read_address("MASTER_ADDR", _NAME)
        if address is not None:
            return address
        for name in ("SLURM_NODELIST", "SLURM_JOB_NODELIST"):
            nodelist = os.environ.get(name)
            if nodelist is not None:
                return first_host(nodelist, source=f"environment variable {name}")
        raise ConfigurationError(
            f"{_NAME}: environment variable SLURM_NODELIST (or SLURM_JOB_NODELIST) must be "
            "set to the job's host list, e.g. 'node[001-004]', or MASTER_ADDR to the "
            "rendezvous host; neither is set."
        )

    @property
    def main_port(self) -> int:
        """``MASTER_PORT``, else :data:`PORT_BASE` plus the last four digits of
        ``SLURM_JOB_ID`` (ENV-3)."""
        port = read_port("MASTER_PORT", _NAME)
        if port is not None:
            return port
        job_id = os.environ.get("SLURM_JOB_ID")
        # ASCII digits only: str.isdigit() is also true for '²', which int() refuses.
        if job_id is None or not is_ascii_digits(job_id.strip()):
            raise ConfigurationError(
                f"{_NAME}: environment variable SLURM_JOB_ID must be a decimal job id (the "
                f"port is derived from it), or MASTER_PORT set to an integer in [1, 65535]; "
                f"got SLURM_JOB_ID={describe_value(job_id)}."
            )
        return PORT_BASE + int(job_id.strip()[-4:])

    @property
    def world_size(self) -> int:
        """``SLURM_NTASKS`` (ENV-4)."""
        return read_int("SLURM_NTASKS", minimum=1, owner=_NAME)

    @property
    def global_rank(self) -> int:
        """``SLURM_PROCID``, in ``[0, SLURM_NTASKS)`` (ENV-4)."""
        rank = read_int("SLURM_PROCID", owner=_NAME)
        return check_index(rank, "SLURM_PROCID", self.world_size, "SLURM_NTASKS", owner=_NAME)

    @property
    def local_rank(self) -> int:
        """``SLURM_LOCALID``, in ``[0, SLURM_PROCID]`` (ENV-4)."""
        rank = self.global_rank
        local = read_int("SLURM_LOCALID", owner=_NAME)
        return check_index(
            local, "SLURM_LOCALID", rank, "SLURM_PROCID", owner=_NAME, inclusive=True
        )

    @property
    def node_rank(self) -> int:
        """``SLURM_NODEID`` (ENV-4)."""
        return read_int("SLURM_NODEID", owner=_NAME)

    def validate(self) -> None:
        """Read every variable; the first missing or inconsistent one raises
        :class:`~trainspec.ConfigurationError` naming it (ENV-5)."""
        _ = (self.main_address, self.main_port, self.local_rank, self.node_rank)

    def teardown(self) -> None:
        """Nothing to undo (ENV-6)."""


def first_host(nodelist: str, *, source: str = "nodelist") -> str:
    """The first host of a SLURM host list: ``"node[001-004,007],gpu7"`` -> ``"node001"``.

    Bracket groups may appear several times in one name (``"rack[1-2]-n[01-04]"`` ->
    ``"rack1-n01"``); zero padding is kept. A malformed list (empty, unbalanced brackets, a
    range that is not ``digits`` or ``digits-digits`` with start <= end) raises
    :class:`~trainspec.ConfigurationError` naming ``source``.
    """
    text = nodelist.strip()
    first = _first_entry(text, source)
    host: list[str] = []
    position = 0
    while position < len(first):
        opening = first.find("[", position)
        if opening < 0:
            host.append(first[position:])
            break
        closing = first.find("]", opening)
        if closing < 0:
            raise _malformed(nodelist, source, "a '[' without its ']'")
        host.append(first[position:opening])
        host.append(_first_number(first[opening + 1 : closing], nodelist, source))
        position = closing + 1
    result = "".join(host)
    if not result or "]" in result or any(ch.isspace() for ch in result):
        raise _malformed(nodelist, source, "no host name")
    return result


def _first_entry(text: str, source: str) -> str:
    depth = 0
    for index, char in enumerate(text):
        if char == "[":
            depth += 1
            if depth > 1:
                raise _malformed(text, source, "nested '['")
        elif char == "]":
            depth -= 1
            if depth < 0:
                raise _malformed(text, source, "a ']' without its '['")
        elif char == "," and depth == 0:
            return text[:index]
    if depth != 0:
        raise _malformed(text, source, "a '[' without its ']'")
    return text


def _first_number(ranges: str, nodelist: str, source: str) -> str:
    first_range = ranges.split(",", 1)[0].strip()
    match = _RANGE.fullmatch(first_range)
    if match is None:
        raise _malformed(nodelist, source, f"range {describe_value(first_range)} is not N or N-M")
    start, end = match.group(1), match.group(2)
    if end is not None and _numeric_key(end) < _numeric_key(start):
        raise _malformed(
            nodelist, source, f"range {describe_value(first_range)} ends before it starts"
        )
    return start


def _numeric_key(digits: str) -> tuple[int, str]:
    """Orders ASCII digit strings by value without ``int()`` (which refuses over 4300
    digits): fewer significant digits is smaller, then the digits compare as text."""
    significant = digits.lstrip("0")
    return (len(significant), significant)


def _malformed(nodelist: str, source: str, why: str) -> ConfigurationError:
    return ConfigurationError(
        f"{_NAME}: {source} must be a SLURM host list such as 'node1,node2' or "
        f"'node[001-004,007]'; got {describe_value(nodelist)} ({why})."
    )
