"""The test world: two gloo ranks started once per session and reused by every test here.

``world.run(name, *args)`` runs ``scenarios.<name>(*args)`` on every rank at once and returns
the results indexed by rank; a rank's exception fails the test with that rank's traceback.
Each call gets a fresh ``MASTER_PORT``, so each scenario sets up (and tears down) its own
process group. A call that does not finish within its time limit stops the world; the next
call starts a new one.
"""

from __future__ import annotations

import os
import secrets
import subprocess
import sys
import threading
from multiprocessing.connection import Connection, Listener
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from trainspec.conformance.fakes import free_port

if TYPE_CHECKING:
    from collections.abc import Iterator

HERE = Path(__file__).parent
WORKER = HERE / "_worker.py"
SCENARIOS = HERE / "scenarios.py"
_STRIPPED = ("TORCHELASTIC_RUN_ID", "SLURM_NTASKS", "SLURM_PROCID", "GROUP_RANK", "NODE_RANK")


class World:
    """``size`` worker processes, each a rank, driven over authenticated local connections."""

    def __init__(self, size: int = 2, *, start_timeout: float = 120.0) -> None:
        self.size = size
        self._processes: list[subprocess.Popen[bytes]] = []
        self._connections: list[Connection] = []
        authkey = secrets.token_bytes(16)
        listener = Listener(("127.0.0.1", 0), authkey=authkey)
        port = listener.address[1]
        environment = {k: v for k, v in os.environ.items() if k not in _STRIPPED}
        environment.update(OMP_NUM_THREADS="1", MASTER_ADDR="127.0.0.1", WORLD_SIZE=str(size))
        for rank in range(size):
            rank_environment = dict(environment, RANK=str(rank), LOCAL_RANK=str(rank))
            self._processes.append(
                subprocess.Popen(
                    [
                        sys.executable,
                        "-W",
                        "error",
                        str(WORKER),
                        str(port),
                        authkey.hex(),
                        str(rank),
                    ],
                    env=rank_environment,
                )
            )
        accepted: dict[int, Connection] = {}

        def accept() -> None:
            for _ in range(size):
                connection = listener.accept()
                _, rank, _pid = connection.recv()
                accepted[rank] = connection

        thread = threading.Thread(target=accept, daemon=True)
        thread.start()
        thread.join(start_timeout)
        listener.close()
        if len(accepted) != size:
            self.close()
            raise RuntimeError(f"only {len(accepted)} of {size} ranks connected")
        self._connections = [accepted[rank] for rank in range(size)]

    @property
    def alive(self) -> bool:
        return bool(self._connections) and all(p.poll() is None for p in self._processes)

    def run(
        self,
        name: str,
        *args: object,
        timeout: float = 120.0,
        scenarios: Path = SCENARIOS,
        **kwargs: object,
    ) -> list[object]:
        """``name(*args, **kwargs)`` of the ``scenarios`` module (default ``scenarios.py``)
        on every rank; the results by rank."""
        variables = {"MASTER_PORT": str(free_port())}
        for connection in self._connections:
            connection.send(("call", str(scenarios), name, args, kwargs, variables))
        replies: list[tuple[str, object]] = []
        for rank, connection in enumerate(self._connections):
            if not connection.poll(timeout):
                self.close()
                raise AssertionError(
                    f"scenario {name} did not finish on rank {rank} in {timeout} s"
                )
            replies.append(connection.recv())
        failures = [
            f"--- rank {rank} ---\n{payload}"
            for rank, (status, payload) in enumerate(replies)
            if status != "ok"
        ]
        if failures:
            raise AssertionError(f"scenario {name} failed:\n" + "\n".join(failures))
        return [payload for _, payload in replies]

    def close(self) -> None:
        for connection in self._connections:
            try:
                connection.send(("stop",))
                connection.close()
            except OSError:
                pass
        self._connections = []
        for process in self._processes:
            try:
                process.wait(10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        self._processes = []


class WorldHandle:
    """Restarts the world if a previous test left it stopped."""

    def __init__(self) -> None:
        self._world: World | None = None

    def __call__(self) -> World:
        if self._world is None or not self._world.alive:
            if self._world is not None:
                self._world.close()
            self._world = World(2)
        return self._world

    def close(self) -> None:
        if self._world is not None:
            self._world.close()


@pytest.fixture(scope="session")
def world_handle() -> Iterator[WorldHandle]:
    handle = WorldHandle()
    try:
        yield handle
    finally:
        handle.close()


@pytest.fixture
def world(world_handle: WorldHandle) -> World:
    """The two-rank world, started on first use and shared by every test of the session."""
    return world_handle()
