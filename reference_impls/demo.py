"""``run_demo``: train a small model through :class:`~trainspec.reference.Runner`, save a
checkpoint halfway, and prove that resuming from it continues exactly.

What ``trainspec demo`` runs, usable from Python::

    from trainspec.reference.demo import DemoConfig, run_demo

    result = run_demo(DemoConfig(accelerator="cpu", strategy="ddp", devices=2, steps=20))
    print(result.straight_loss, result.resumed_loss, result.checkpoint_path)

Everything goes through :func:`~trainspec.reference.connector.resolve` and the Runner, so any
registered accelerator, strategy, precision or checkpoint IO (built in or from a plugin)
works by name. One call of :meth:`Runner.launch` runs, on every rank::

    1) straight   -- the launched strategy trains a fresh model for ``steps`` steps
    2) first half -- a second strategy (resolved again, in a new Runner) trains a fresh model
                     (same seed) for ``steps // 2`` steps and saves a checkpoint
    3) resume     -- a third strategy, in a new Runner, loads a fresh model from that
                     checkpoint and trains the remaining steps

and compares the final loss and every parameter of 3) with those of 1). Each run starts from
fresh components, so state such as a loss scaler's scale starts equal. Launching once keeps
the demo correct for launchers that re-run the script for the other ranks (those support one
``launch`` per run). The strategies of 2) and 3) join the ranks 1) started: when the first
strategy has a launcher, they are given :class:`LaunchedRanks` (the same ranks, marked as
already started) so that they need no launcher of their own, and their collectives join the
process group that is already running. The checkpoint IO *instance* is shared by the three
strategies (an in-memory IO keeps its checkpoints per instance); everything else is built
anew.

Data and order are deterministic (a seeded generator for the data, the model and the
shuffle), so on the same machine a correct resume reproduces the straight run: the demo
reports whether the two agree exactly and how far apart they are.
"""

from __future__ import annotations

import itertools
import math
import os
import sys
import tempfile
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final, Literal, get_args

import torch
from torch.utils.data import DataLoader, TensorDataset

from trainspec.cluster_environment import ClusterEnvironment
from trainspec.errors import ConfigurationError
from trainspec.reference.connector import resolve
from trainspec.reference.runner import Runner

if TYPE_CHECKING:
    from types import TracebackType

    from rich.console import Console
    from rich.progress import Progress, TaskID
    from typing_extensions import Self

    from trainspec.checkpoint_io import CheckpointIO
    from trainspec.strategy import Strategy
    from trainspec.types import DeviceRequest

__all__ = [
    "PROGRESS_MODES",
    "DemoConfig",
    "DemoResult",
    "LaunchedRanks",
    "ProgressMode",
    "run_demo",
]

ProgressMode = Literal["bar", "log", "none"]
"""How rank 0 reports progress: a rich progress bar, plain log lines, or nothing."""

PROGRESS_MODES: Final[tuple[ProgressMode, ...]] = get_args(ProgressMode)

_FEATURES: Final = 8
_HIDDEN: Final = 32
_LOG_LINES: Final = 5  # log mode prints about this many lines per phase


@dataclass(frozen=True)
class DemoConfig:
    """What to train with. Names are looked up in the registry by ``resolve``.

    ``devices`` is a device request (``1``, ``2``, ``"0,1"``, ``"auto"``...); ``checkpoint_io``
    ``None`` keeps the strategy's default; ``checkpoint_dir`` ``None`` makes a new directory
    under the system's temporary directory (kept afterwards, so the checkpoint can be
    inspected). ``steps`` **must** be at least 2 (the checkpoint is saved after
    ``steps // 2``). Invalid values raise :class:`~trainspec.ConfigurationError` at
    construction; invalid names and combinations raise it from :func:`run_demo`.
    """

    accelerator: str = "auto"
    strategy: str = "auto"
    devices: DeviceRequest = 1
    precision: str = "32-true"
    checkpoint_io: str | None = None
    checkpoint_dir: str | None = None
    steps: int = 20
    batch_size: int = 16
    learning_rate: float = 0.05
    seed: int = 0
    progress: ProgressMode = "bar"

    def __post_init__(self) -> None:
        for name in ("steps", "batch_size"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ConfigurationError(f"demo: {name} must be a positive int; got {value!r}")
        if self.steps < 2:
            raise ConfigurationError(
                f"demo: steps must be at least 2 (a checkpoint is saved halfway); got {self.steps}"
            )
        rate = self.learning_rate
        if (
            isinstance(rate, bool)
            or not isinstance(rate, (int, float))
            or not (math.isfinite(rate) and rate > 0)
        ):
            raise ConfigurationError(
                f"demo: learning_rate must be a positive finite number; got {rate!r}"
            )
        if isinstance(self.seed, bool) or not isinstance(self.seed, int):
            raise ConfigurationError(f"demo: seed must be an int; got {self.seed!r}")
        if self.progress not in PROGRESS_MODES:
            raise ConfigurationError(
                f"demo: progress must be one of {list(PROGRESS_MODES)}; got {self.progress!r}"
            )


@dataclass(frozen=True)
class DemoResult:
    """What one rank saw; :func:`run_demo` returns global rank 0's.

    Losses are the last step's loss averaged over the ranks. ``max_parameter_difference`` is
    the largest absolute difference between a parameter after the straight run and after the
    resumed one (0.0 when they are bit-identical).
    """

    straight_loss: float
    resumed_loss: float
    max_parameter_difference: float
    checkpoint_path: str
    steps: int
    resumed_from_step: int
    global_rank: int
    world_size: int
    strategy: str
    accelerator: str
    device: str
    precision: str
    checkpoint_io: str
    steps_per_second: float

    @property
    def identical(self) -> bool:
        """Whether the resumed run reproduced the straight run bit for bit."""
        return self.straight_loss == self.resumed_loss and self.max_parameter_difference == 0.0

    @property
    def resumed_matches(self) -> bool:
        """Whether the resumed run reproduced the straight run, to float tolerance (relative
        1e-5, for devices whose kernels are not bitwise deterministic)."""
        scale = max(abs(self.straight_loss), 1e-12)
        return (
            math.isfinite(self.straight_loss)
            and abs(self.straight_loss - self.resumed_loss) <= 1e-5 * scale
            and self.max_parameter_difference <= 1e-5
        )


class LaunchedRanks(ClusterEnvironment):
    """The ranks an already running launch started, as seen from inside one of them.

    Wraps the cluster environment of the strategy whose launcher started this rank and
    reports :attr:`creates_processes_externally` as ``True``, so that a second strategy
    built inside the rank joins these ranks instead of starting new ones. Everything else
    is read from the wrapped environment; :meth:`teardown` does nothing (the wrapped
    environment belongs to the launching strategy, which tears it down).
    """

    def __init__(self, environment: ClusterEnvironment) -> None:
        self._environment = environment

    def __repr__(self) -> str:
        return f"LaunchedRanks({self._environment!r})"

    def detect(self) -> bool:
        """``True``: this process is one of the launched ranks."""
        return True

    @property
    def creates_processes_externally(self) -> bool:
        """``True``: the ranks exist already."""
        return True

    @property
    def main_address(self) -> str:
        """The wrapped environment's rendezvous address."""
        return self._environment.main_address

    @property
    def main_port(self) -> int:
        """The wrapped environment's rendezvous port."""
        return self._environment.main_port

    @property
    def world_size(self) -> int:
        """The wrapped environment's world size."""
        return self._environment.world_size

    @property
    def global_rank(self) -> int:
        """The wrapped environment's global rank."""
        return self._environment.global_rank

    @property
    def local_rank(self) -> int:
        """The wrapped environment's local rank."""
        return self._environment.local_rank

    @property
    def node_rank(self) -> int:
        """The wrapped environment's node rank."""
        return self._environment.node_rank

    def validate(self) -> None:
        """The wrapped environment's validation."""
        self._environment.validate()

    def teardown(self) -> None:
        """Nothing: the launching strategy tears the wrapped environment down."""


def run_demo(config: DemoConfig | None = None) -> DemoResult:
    """Run the demo described by ``config`` (default :class:`DemoConfig`) on every rank and
    return this process's result: global rank 0's in the launching process.

    Raises :class:`~trainspec.ConfigurationError` (or
    :class:`~trainspec.DeviceUnavailableError`) for names or combinations ``resolve``
    refuses, and what the strategy raises while training (a
    :class:`~trainspec.LaunchError` when another rank fails). With a launcher that re-runs
    the script, the other ranks run the calling script again: call this once per run.
    """
    config = config if config is not None else DemoConfig()
    runner = Runner(_resolve(config, checkpoint_io=config.checkpoint_io, environment=None))
    return runner.launch(_demo_on_rank, config)


def _resolve(
    config: DemoConfig,
    *,
    checkpoint_io: str | CheckpointIO | None,
    environment: ClusterEnvironment | None,
) -> Strategy:
    return resolve(
        accelerator=config.accelerator,
        strategy=config.strategy,
        devices=config.devices,
        precision=config.precision,
        checkpoint_io=checkpoint_io,
        cluster_environment=environment,
    )


def _demo_on_rank(runner: Runner, config: DemoConfig) -> DemoResult:
    """Steps 1) to 3) of the module docstring, on one rank."""
    reporter = _Reporter(config.progress if runner.is_global_zero else "none")
    # Rank 0 picks the directory (a new temporary one unless configured); every rank uses it.
    directory = runner.broadcast_object(
        _checkpoint_directory(config) if runner.is_global_zero else ""
    )
    half = config.steps // 2
    path = _join(directory, f"demo-step-{half}.ckpt")
    data = _dataset(config, runner.world_size)
    strategy = runner.strategy
    reporter.header(strategy, config)
    with reporter:
        straight_loss, straight_state, rate = _train(
            runner, config, data, 0, config.steps, reporter
        )
        # Fresh strategies for the other two runs: each starts with fresh component state
        # (a loss scaler's scale, for one), as the straight run did.
        with Runner(_fresh_strategy(strategy, config)) as saving:
            _train(saving, config, data, 0, half, reporter, save_to=path)
        with Runner(_fresh_strategy(strategy, config)) as resuming:
            resumed_loss, resumed_state, _ = _train(
                resuming, config, data, half, config.steps, reporter, resume_from=path
            )
    difference = max(
        (
            (straight_state[key].double() - resumed_state[key].double()).abs().max().item()
            for key in straight_state
            if straight_state[key].is_floating_point() and straight_state[key].numel()
        ),
        default=0.0,
    )
    return DemoResult(
        straight_loss=straight_loss,
        resumed_loss=resumed_loss,
        max_parameter_difference=float(difference),
        checkpoint_path=path,
        steps=config.steps,
        resumed_from_step=half,
        global_rank=runner.global_rank,
        world_size=runner.world_size,
        strategy=type(strategy).__name__,
        accelerator=type(strategy.accelerator).__name__,
        device=str(runner.device),
        precision=type(strategy.precision).__name__,
        checkpoint_io=type(strategy.checkpoint_io).__name__,
        steps_per_second=rate,
    )


def _fresh_strategy(previous: Strategy, config: DemoConfig) -> Strategy:
    """The strategy ``config`` resolves to, built again inside a running rank."""
    environment = None if previous.launcher is None else LaunchedRanks(previous.cluster_environment)
    return _resolve(config, checkpoint_io=previous.checkpoint_io, environment=environment)


def _checkpoint_directory(config: DemoConfig) -> str:
    if config.checkpoint_dir is not None:
        return config.checkpoint_dir
    return tempfile.mkdtemp(prefix="trainspec-demo-")


def _join(directory: str, name: str) -> str:
    if "://" in directory:
        return f"{directory.rstrip('/')}/{name}"
    return os.path.join(directory, name)


def _dataset(config: DemoConfig, world_size: int) -> TensorDataset:
    """``steps`` batches per rank of a smooth regression problem, the same on every rank."""
    generator = torch.Generator().manual_seed(config.seed)
    count = config.steps * config.batch_size * world_size
    inputs = torch.randn(count, _FEATURES, generator=generator)
    direction = torch.randn(_FEATURES, 1, generator=generator)
    targets = torch.sin(inputs @ direction) + 0.1 * torch.randn(count, 1, generator=generator)
    return TensorDataset(inputs, targets)


def _model() -> torch.nn.Module:
    return torch.nn.Sequential(
        torch.nn.Linear(_FEATURES, _HIDDEN), torch.nn.Tanh(), torch.nn.Linear(_HIDDEN, 1)
    )


def _train(
    runner: Runner,
    config: DemoConfig,
    data: TensorDataset,
    start: int,
    stop: int,
    reporter: _Reporter,
    *,
    save_to: str | None = None,
    resume_from: str | None = None,
) -> tuple[float, dict[str, torch.Tensor], float]:
    """Train a fresh model from step ``start`` to ``stop``; the last step's mean loss over
    the ranks, the model's parameters (copied to the CPU) and the steps per second."""
    torch.manual_seed(config.seed)
    with runner.init_module():
        model = _model()
    model, optimizer = runner.setup(
        model, torch.optim.SGD(model.parameters(), lr=config.learning_rate, momentum=0.9)
    )
    if resume_from is not None:
        state: dict[str, object] = {"model": model, "optimizer": optimizer, "step": -1}
        runner.load(resume_from, state)
        if state["step"] != start:
            raise ConfigurationError(
                f"demo: the checkpoint {resume_from!r} was saved after step {state['step']!r}; "
                f"expected {start}"
            )
    loader = runner.setup_dataloader(
        DataLoader(
            data,
            batch_size=config.batch_size,
            shuffle=True,
            generator=torch.Generator().manual_seed(config.seed),
        )
    )
    phase = "resume" if resume_from is not None else "first half" if save_to else "straight"
    task = reporter.start(phase, start, stop)
    loss = torch.zeros(())
    began = time.perf_counter()
    # The loader's order is fixed by its seeded generator: skip the steps already trained.
    for step, batch in enumerate(itertools.islice(loader, start, stop), start=start):
        inputs, targets = runner.to_device(batch)
        with runner.autocast():
            loss = torch.nn.functional.mse_loss(model(inputs).float(), targets.float())
        runner.backward(loss, model)
        runner.step(optimizer)
        reporter.advance(task, step + 1, loss)
    rate = (stop - start) / max(time.perf_counter() - began, 1e-9)
    final = runner.all_reduce(loss.detach().float(), "mean").item()
    reporter.finish(task, final)
    if save_to is not None:
        runner.save(save_to, {"model": model, "optimizer": optimizer, "step": stop})
        reporter.saved(save_to)
    parameters = {
        key: value.detach().to("cpu", copy=True)
        for key, value in runner.strategy.module_state_dict(model).items()
    }
    return float(final), parameters, rate


class _Reporter:
    """Rank 0's progress output: a rich progress bar, log lines, or nothing."""

    def __init__(self, mode: ProgressMode) -> None:
        self._mode = mode
        self._console: Console | None = None
        self._progress: Progress | None = None
        self._tasks: dict[int, TaskID] = {}
        self._phases: list[tuple[float, int, int]] = []  # (start time, first step, stop)
        if mode != "none":
            from rich.console import Console

            # 120 columns when not a terminal, so that logs and captured output stay readable.
            interactive = sys.stdout.isatty() or "COLUMNS" in os.environ
            self._console = Console(highlight=False, width=None if interactive else 120)

    def header(self, strategy: Strategy, config: DemoConfig) -> None:
        if self._console is None:
            return
        io_name = config.checkpoint_io or f"{type(strategy.checkpoint_io).__name__} (default)"
        self._console.print(
            f"[bold]trainspec demo[/bold]: {type(strategy).__name__} on "
            f"{strategy.world_size} rank(s), accelerator "
            f"{type(strategy.accelerator).__name__}, precision {config.precision}, "
            f"checkpoint IO {io_name}, {config.steps} steps"
        )

    def __enter__(self) -> Self:
        if self._mode == "bar":
            from rich.progress import (
                BarColumn,
                MofNCompleteColumn,
                Progress,
                TextColumn,
                TimeElapsedColumn,
            )

            self._progress = Progress(
                TextColumn("{task.description:<10}"),
                BarColumn(),
                MofNCompleteColumn(),
                TextColumn("loss {task.fields[loss]}"),
                TextColumn("{task.fields[rate]} steps/s"),
                TimeElapsedColumn(),
                console=self._console,
            )
            self._progress.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        if self._progress is not None:
            self._progress.stop()
            self._progress = None

    def start(self, phase: str, start: int, stop: int) -> int:
        """Begin a phase of steps ``start + 1 .. stop``; its key for the other methods."""
        key = len(self._phases)
        self._phases.append((time.perf_counter(), start, stop))
        if self._progress is not None:
            self._tasks[key] = self._progress.add_task(
                phase, total=stop, completed=start, loss="-", rate="-"
            )
        elif self._mode == "log" and self._console is not None:
            self._console.print(f"{phase}: steps {start + 1}..{stop}")
        return key

    def advance(self, key: int, step: int, loss: torch.Tensor) -> None:
        if self._mode == "none":
            return
        began, start, stop = self._phases[key]
        rate = (step - start) / max(time.perf_counter() - began, 1e-9)
        if self._progress is not None:
            self._progress.update(
                self._tasks[key], completed=step, loss=f"{loss.item():.6f}", rate=f"{rate:.1f}"
            )
            return
        every = max((stop - start) // _LOG_LINES, 1)
        if self._console is not None and ((step - start) % every == 0 or step == stop):
            self._console.print(f"  step {step}/{stop}  loss {loss.item():.6f}  {rate:.1f} steps/s")

    def finish(self, key: int, loss: float) -> None:
        if self._progress is not None:
            self._progress.update(self._tasks[key], loss=f"{loss:.6f}")

    def saved(self, path: str) -> None:
        if self._console is not None:
            self._console.print(f"saved a checkpoint halfway: {path}")
