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

Data and order are deterministic (a sample depends only on the seed and its index, the model
on the seed, and the loader keeps its order), so on the same machine a correct resume
reproduces the straight run: the demo reports whether the two agree exactly and how far apart
they are.
"""

from __future__ import annotations

import itertools
import math
import os
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final, Literal, get_args

import torch
from torch.utils.data import DataLoader, Dataset

from trainspec.cluster_environment import ClusterEnvironment
from trainspec.errors import ConfigurationError
from trainspec.reference._messages import describe_value
from trainspec.reference.connector import resolve
from trainspec.reference.runner import Runner

if TYPE_CHECKING:
    from collections.abc import Iterator
    from types import TracebackType

    from rich.console import Console
    from rich.progress import Progress, TaskID
    from typing_extensions import Self

    from trainspec.checkpoint_io import CheckpointIO
    from trainspec.strategy import Strategy
    from trainspec.types import DeviceRequest

__all__ = [
    "MAX_BATCH_SIZE",
    "MAX_SEED",
    "MAX_STEPS",
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

MAX_STEPS: Final = 1_000_000
"""The most ``steps`` a demo takes (days of training on a CPU; the data is made lazily)."""
MAX_BATCH_SIZE: Final = 65_536
"""The most samples per rank and step (a batch of about 2 MiB)."""
MAX_SEED: Final = 2**64 - 1
"""The largest seed: torch's generators take ``0 .. 2**64 - 1``."""

_FEATURES: Final = 8
_HIDDEN: Final = 32
_LOG_LINES: Final = 5  # log mode prints about this many lines per phase
_POOL_BATCHES: Final = 16  # distinct batches per rank; longer runs cycle through them


@dataclass(frozen=True)
class DemoConfig:
    """What to train with. Names are looked up in the registry by ``resolve``.

    ``devices`` is a device request (``1``, ``2``, ``"0,1"``, ``"auto"``...); ``checkpoint_io``
    ``None`` keeps the strategy's default; ``checkpoint_dir`` ``None`` makes a new directory
    under the system's temporary directory, removed when the demo ends unless
    ``keep_checkpoint`` is true (a ``checkpoint_dir`` you give is never removed).

    Ranges: ``steps`` from 2 (the checkpoint is saved after ``steps // 2``) to
    :data:`MAX_STEPS`; ``batch_size`` from 1 to :data:`MAX_BATCH_SIZE`; ``seed`` from 0 to
    :data:`MAX_SEED`. The data is made batch by batch as training asks for it, so a long run
    allocates no more than a short one. Invalid values raise
    :class:`~trainspec.ConfigurationError` at construction, naming the field and its valid
    range; invalid names and combinations raise it from :func:`run_demo`.
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
    keep_checkpoint: bool = False

    def __post_init__(self) -> None:
        for name, low, high, why in (
            ("steps", 2, MAX_STEPS, " (a checkpoint is saved halfway)"),
            ("batch_size", 1, MAX_BATCH_SIZE, ""),
            ("seed", 0, MAX_SEED, ""),
        ):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
                raise ConfigurationError(
                    f"demo: {name} must be an int from {low} to {high}{why}; "
                    f"got {describe_value(value)}"
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
        if not isinstance(self.keep_checkpoint, bool):
            raise ConfigurationError(
                "demo: keep_checkpoint must be True or False; "
                f"got {describe_value(self.keep_checkpoint)}"
            )
        if self.progress not in PROGRESS_MODES:
            raise ConfigurationError(
                f"demo: progress must be one of {list(PROGRESS_MODES)}; got {self.progress!r}"
            )


@dataclass(frozen=True)
class DemoResult:
    """What one rank saw; :func:`run_demo` returns global rank 0's.

    Losses are the last step's loss averaged over the ranks (the same value the progress
    output shows for that step). ``max_parameter_difference`` is the largest absolute
    difference between a parameter after the straight run and after the resumed one (0.0 when
    they are bit-identical). ``checkpoint_kept`` is false when ``checkpoint_path`` was in the
    demo's own temporary directory and that directory has been removed.
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
    checkpoint_kept: bool = True

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
    temporary = runner.is_global_zero and config.checkpoint_dir is None
    directory = runner.broadcast_object(
        _checkpoint_directory(config) if runner.is_global_zero else ""
    )
    remove = temporary and not config.keep_checkpoint
    half = config.steps // 2
    path = _join(directory, f"demo-step-{half}.ckpt")
    data = _SyntheticData(
        config.seed, min(config.steps, _POOL_BATCHES) * config.batch_size * runner.world_size
    )
    strategy = runner.strategy
    reporter.header(strategy, config)
    try:
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
    finally:
        # Every rank has loaded the checkpoint once the resumed run's last loss was reduced.
        if remove:
            shutil.rmtree(directory, ignore_errors=True)
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
        checkpoint_kept=not remove,
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


_Sample = tuple[torch.Tensor, torch.Tensor]


class _SyntheticData(Dataset[_Sample]):
    """``length`` samples of a smooth regression problem, made when a batch asks for them.

    Sample ``i`` depends only on the seed and ``i`` (its own generator), so every rank, every
    run and every order of access sees the same data, and nothing is allocated up front: a run
    of a million steps holds one batch at a time. ``__getitems__`` makes a whole batch at once.
    """

    def __init__(self, seed: int, length: int) -> None:
        self._seed = seed
        self._length = length
        self._direction = torch.randn(_FEATURES, 1, generator=torch.Generator().manual_seed(seed))

    def __len__(self) -> int:
        return self._length

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        return self.__getitems__([index])[0]

    def __getitems__(self, indices: list[int]) -> list[tuple[torch.Tensor, torch.Tensor]]:
        noise = torch.empty(len(indices), _FEATURES + 1)
        for row, index in enumerate(indices):
            # A distinct stream per sample: the seed and the index, mixed into 64 bits.
            key = (self._seed + (index + 1) * 0x9E3779B97F4A7C15) % 2**64
            noise[row] = torch.randn(_FEATURES + 1, generator=torch.Generator().manual_seed(key))
        inputs = noise[:, :_FEATURES]
        targets = torch.sin(inputs @ self._direction) + 0.1 * noise[:, _FEATURES:]
        return list(zip(inputs, targets, strict=True))


def _batches(loader: DataLoader[_Sample], start: int, stop: int) -> Iterator[tuple[int, _Sample]]:
    """Steps ``start .. stop - 1`` with their batches: step ``s`` trains on the loader's batch
    ``s % len(loader)`` (the loader's order is fixed), so a resumed run sees what a straight
    one saw at the same step without making the batches it skips."""
    per_epoch = len(loader)
    step = start
    while step < stop:
        offset = step % per_epoch
        for batch in itertools.islice(loader, offset, min(per_epoch, offset + stop - step)):
            yield step, batch
            step += 1


def _model() -> torch.nn.Module:
    return torch.nn.Sequential(
        torch.nn.Linear(_FEATURES, _HIDDEN), torch.nn.Tanh(), torch.nn.Linear(_HIDDEN, 1)
    )


def _train(
    runner: Runner,
    config: DemoConfig,
    data: _SyntheticData,
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
    # Samples are independent draws, so a fixed order loses nothing and needs no index
    # permutation of the whole data set.
    loader = runner.setup_dataloader(DataLoader(data, batch_size=config.batch_size))
    phase = "resume" if resume_from is not None else "first half" if save_to else "straight"
    task = reporter.start(phase, start, stop)
    final = math.nan
    began = time.perf_counter()
    for step, batch in _batches(loader, start, stop):
        inputs, targets = runner.to_device(batch)
        with runner.autocast():
            loss = torch.nn.functional.mse_loss(model(inputs).float(), targets.float())
        runner.backward(loss, model)
        runner.step(optimizer)
        # The loss shown is the mean over the ranks, as in the summary. Whether a step is
        # shown depends only on the configuration, so every rank joins the same reductions.
        if _shown(config.progress, start, stop, step + 1):
            final = runner.all_reduce(loss.detach().float(), "mean").item()
            reporter.advance(task, step + 1, final)
    rate = (stop - start) / max(time.perf_counter() - began, 1e-9)
    if save_to is not None:
        runner.save(save_to, {"model": model, "optimizer": optimizer, "step": stop})
        reporter.saved(save_to)
    # Under the sharded checkpoint layout the values are sharded tensors (STRAT-14): compare
    # the complete values (full_tensor() is collective; every rank runs it, in key order).
    parameters = {
        key: _complete(value).detach().to("cpu", copy=True)
        for key, value in runner.strategy.module_state_dict(model).items()
    }
    return float(final), parameters, rate


def _complete(value: torch.Tensor) -> torch.Tensor:
    """The complete value of a sharded tensor (a ``DTensor``), else ``value``."""
    full_tensor = getattr(value, "full_tensor", None)
    if callable(full_tensor):
        whole = full_tensor()
        if isinstance(whole, torch.Tensor):
            return whole
    return value


def _shown(mode: ProgressMode, start: int, stop: int, step: int) -> bool:
    """Whether step ``step`` (1-based) of a phase ``start + 1 .. stop`` reports its loss: every
    step with a bar, about :data:`_LOG_LINES` per phase in log mode, and always the last."""
    if step == stop or mode == "bar":
        return True
    return mode == "log" and (step - start) % max((stop - start) // _LOG_LINES, 1) == 0


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

    def advance(self, key: int, step: int, loss: float) -> None:
        """Show step ``step``'s loss (the mean over the ranks)."""
        if self._mode == "none":
            return
        began, start, _ = self._phases[key]
        rate = (step - start) / max(time.perf_counter() - began, 1e-9)
        if self._progress is not None:
            self._progress.update(
                self._tasks[key], completed=step, loss=f"{loss:.6f}", rate=f"{rate:.1f}"
            )
        elif self._console is not None:
            self._console.print(
                f"  step {step}/{self._phases[key][2]}  loss {loss:.6f}  {rate:.1f} steps/s"
            )

    def saved(self, path: str) -> None:
        if self._console is not None:
            self._console.print(f"saved a checkpoint halfway: {path}")
