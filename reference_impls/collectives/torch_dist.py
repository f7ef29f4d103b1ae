"""``TorchCollective``: the collectives of ``torch.distributed`` (c10d), with timeouts.

c10d does the communication; this class adds what the :class:`trainspec.Collective` contract
asks on top of it:

- **timeouts on every operation** (COLL-2). Before each operation the process group's
  timeout is set to the operation's (``ProcessGroup.set_timeout``), so the backend itself
  gives up in time (gloo raises from its transport), and tensor operations are issued with
  ``async_op=True`` and waited for with ``work.wait(timeout)``. The object collectives,
  which c10d runs synchronously, are bounded by the group timeout alone. An operation past
  its timeout raises :class:`~trainspec.CollectiveTimeoutError` and the group is destroyed:
  later operations raise :class:`~trainspec.LifecycleError` until ``setup`` runs again;
- **one translation boundary** for backend errors (:data:`ERROR_TABLE`): a peer that died
  or closed its connection becomes :class:`~trainspec.PeerFailureError`, a timeout
  :class:`~trainspec.CollectiveTimeoutError`, anything else
  :class:`~trainspec.CollectiveError`; after any of them the group is destroyed, since its
  state is unknown;
- **the same results on every backend**: ``"mean"`` is a sum divided by the world size
  (true division: integer tensors give a floating tensor), inputs are never modified and
  results are new tensors (COLL-1, COLL-6);
- **operations a backend lacks**, built from ones every backend has:
  ``reduce_scatter`` on gloo is an ``all_reduce`` of the concatenated inputs of which each
  rank keeps its share (gloo's own reduce-scatter is missing from older torch releases;
  this costs ``world_size`` times the traffic of a native one), and ``all_to_all`` is
  ``all_to_all_single`` over the flattened inputs with split sizes (gloo lacks the list
  form in older releases).

Object collectives pickle on the sending rank and unpickle on the receiving ones: use them
between the trusted ranks of one job only.
"""

from __future__ import annotations

import os
import pickle
import time
from datetime import timedelta
from typing import TYPE_CHECKING, Final, TypeVar, cast

import torch
import torch.distributed as dist

# Public in torch.distributed, but imported there without an explicit re-export.
from torch.distributed import (  # type: ignore[attr-defined]
    PrefixStore,  # pyright: ignore[reportPrivateImportUsage]
    Store,  # pyright: ignore[reportPrivateImportUsage]
    TCPStore,  # pyright: ignore[reportPrivateImportUsage]
)

from trainspec.collective import Collective
from trainspec.errors import (
    CollectiveError,
    CollectiveTimeoutError,
    ConfigurationError,
    PeerFailureError,
    TrainspecError,
    UnsupportedError,
)
from trainspec.reference.collectives._validation import (
    check_initialized,
    check_rank,
    check_reduce_op,
    check_tensor,
    check_tensor_list,
    check_timeout,
    object_to_bytes,
)

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    from trainspec.cluster_environment import ClusterEnvironment
    from trainspec.types import ReduceOp

__all__ = ["ERROR_TABLE", "TorchCollective", "default_backend", "translate_error"]

_T = TypeVar("_T")

_NAME: Final = "TorchCollective"

_TORCH_OPS: Final = {
    "sum": dist.ReduceOp.SUM,
    "mean": dist.ReduceOp.SUM,  # then divided by the world size
    "min": dist.ReduceOp.MIN,
    "max": dist.ReduceOp.MAX,
    "product": dist.ReduceOp.PRODUCT,
}

ERROR_TABLE: Final[tuple[tuple[str, type[CollectiveError]], ...]] = (
    # A peer that died, exited or closed its connection (gloo, NCCL, the TCP store).
    ("connection closed", PeerFailureError),
    ("connection reset", PeerFailureError),
    ("connection refused", PeerFailureError),
    ("broken pipe", PeerFailureError),
    ("remote process exited", PeerFailureError),
    ("communicator was aborted", PeerFailureError),
    ("socket closed", PeerFailureError),
    # The operation (or the rendezvous) did not finish in time.
    ("timed out", CollectiveTimeoutError),
    ("timeout", CollectiveTimeoutError),
)
"""Backend error text (lower-cased substring) -> the trainspec error it becomes; the first
match wins, no match is a plain :class:`~trainspec.CollectiveError`. Python's own
``TimeoutError`` and ``ConnectionError`` map by type before the table is read."""


def translate_error(error: BaseException, operation: str, timeout: timedelta) -> CollectiveError:
    """The trainspec error for a backend ``error`` raised by ``operation`` (the one boundary
    where torch's errors are translated); the message names the operation and the timeout."""
    kind: type[CollectiveError] = CollectiveError
    if isinstance(error, TimeoutError):
        kind = CollectiveTimeoutError
    elif isinstance(error, ConnectionError):
        kind = PeerFailureError
    else:
        text = str(error).lower()
        for pattern, mapped in ERROR_TABLE:
            if pattern in text:
                kind = mapped
                break
    seconds = timeout.total_seconds()
    first_line = (str(error).strip().splitlines() or [type(error).__name__])[0]
    if kind is CollectiveTimeoutError:
        what = f"did not complete within its timeout of {seconds:g} s (a rank never joined)"
    elif kind is PeerFailureError:
        what = "failed because another rank died or left the group"
    else:
        what = "failed in the backend"
    return kind(
        f"{_NAME}.{operation} {what}: {first_line}. The process group has been destroyed; "
        "call setup() again to continue."
    )


_GENERATION_KEY: Final = "trainspec/generation"

# Rank 0's rendezvous servers, by port, kept for the life of the process: a group that was
# torn down may live on (a module wrapped in DistributedDataParallel holds it, and with it
# the server), so a new server on the same port could not listen. Every group gets a fresh
# generation, and its keys live under that generation's prefix.
_SERVERS: dict[int, Store] = {}

# The generation this process last joined at each address (ranks other than 0). Such a rank
# can reach the server before rank 0 has opened the next generation; it then waits.
_JOINED_GENERATIONS: dict[tuple[str, int], str] = {}


def _rendezvous(host: str, port: int, rank: int, timeout: timedelta) -> Store:
    """The store of a new group at ``host:port``, under a fresh generation's prefix.

    Rank 0 serves it (creating the server once per port and process) and announces a new
    generation; the other ranks connect and wait until the generation differs from the one
    they joined last time at this address.
    """
    if rank == 0:
        server = _SERVERS.get(port)
        if server is None:
            server = TCPStore(host, port, None, True, timeout, wait_for_workers=False)
            _SERVERS[port] = server
        server.set_timeout(timeout)
        generation = os.urandom(16).hex()
        server.set(_GENERATION_KEY, generation)
        return PrefixStore(f"trainspec/{generation}/", server)
    deadline = time.monotonic() + timeout.total_seconds()
    while True:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise CollectiveTimeoutError(
                f"{_NAME}.setup did not complete within its timeout of "
                f"{timeout.total_seconds():g} s: rank 0 did not open a new group at "
                f"{host}:{port}."
            )
        client = TCPStore(host, port, None, False, timedelta(seconds=remaining))
        generation = client.get(_GENERATION_KEY).decode()
        if _JOINED_GENERATIONS.get((host, port)) != generation:
            _JOINED_GENERATIONS[(host, port)] = generation
            return PrefixStore(f"trainspec/{generation}/", client)
        del client
        time.sleep(0.05)


def default_backend(device: torch.device) -> str:
    """The c10d backend for ``device``'s type: ``"gloo"`` for CPU, ``"nccl"`` for CUDA, and
    torch's default for other registered types. An unknown type raises
    :class:`~trainspec.UnsupportedError` naming the known ones."""
    known = dict(dist.Backend.default_device_backend_map)
    backend = known.get(device.type)
    if backend is None:
        raise UnsupportedError(
            f"{_NAME}: no c10d backend is registered for device type {device.type!r}; "
            f"known device types: {sorted(known)}. Pass backend= explicitly."
        )
    return backend


class TorchCollective(Collective):
    """Collectives over the default ``torch.distributed`` process group (COLL-1 ... COLL-16).

    Lifecycle as :class:`trainspec.Collective`. :meth:`setup` initialises the default process
    group from the environment (a TCP store that rank 0 serves at ``main_address:main_port``,
    its global rank and world size) with the backend given at construction or
    :func:`default_backend` of the device. Rank 0 keeps that port open for the life of the
    process, and each setup is a new generation under its own key prefix, so that ``setup``
    may run again on the same address even while an old group object (for example inside a
    ``DistributedDataParallel`` module) is still alive. When a default process group already
    exists (the script initialised it), ``setup``
    adopts it if its rank and world size match the environment, and :meth:`teardown` then
    leaves it to its owner. :attr:`rank` and :attr:`world_size` raise
    :class:`~trainspec.LifecycleError` before ``setup``.

    Every operation takes ``timeout`` (``None``: the default given at construction; it also
    bounds the rendezvous in ``setup``). Timeouts and peer failures tear the group down
    (COLL-2, COLL-3). Results carry no autograd history.

    Not thread-safe: one thread of each rank calls the operations, in the same order on
    every rank.
    """

    def __init__(
        self, *, backend: str | None = None, timeout: timedelta = timedelta(minutes=30)
    ) -> None:
        """``backend``: a c10d backend name (``"gloo"``, ``"nccl"``, ...) or ``None`` to
        choose from the device at ``setup``; ``timeout``: a positive ``timedelta``. Bad
        values raise :class:`~trainspec.ConfigurationError`."""
        if backend is not None and (not isinstance(backend, str) or not backend):
            raise ConfigurationError(
                f"{_NAME}(): backend must be None or a c10d backend name such as 'gloo' or "
                f"'nccl'; got {backend!r}."
            )
        checked = check_timeout(timeout, f"{_NAME}()")
        if checked is None:
            raise ConfigurationError(
                f"{_NAME}(): timeout must be a positive datetime.timedelta; got None."
            )
        self._backend = backend
        self._timeout = checked
        self._group: dist.ProcessGroup | None = None
        self._owns_group = False
        self._applied_timeout = checked
        self._rank = 0
        self._world_size = 1
        self._device = torch.device("cpu")
        self._backend_name = ""

    def __repr__(self) -> str:
        return f"{_NAME}(backend={self._backend!r}, timeout={self._timeout!r})"

    @property
    def timeout(self) -> timedelta:
        """The default timeout of every operation and of the rendezvous."""
        return self._timeout

    @property
    def backend(self) -> str | None:
        """The c10d backend in use once set up, else the one given at construction."""
        return self._backend_name if self._group is not None else self._backend

    @property
    def rank(self) -> int:
        """This process's rank in the group (COLL-4); needs :meth:`setup`."""
        check_initialized(self._group is not None, _NAME, "rank")
        return self._rank

    @property
    def world_size(self) -> int:
        """The number of ranks in the group (COLL-4); needs :meth:`setup`."""
        check_initialized(self._group is not None, _NAME, "world_size")
        return self._world_size

    @property
    def is_initialized(self) -> bool:
        """Whether :meth:`setup` ran and neither :meth:`teardown` nor a failed operation has
        ended the group since (COLL-5)."""
        return self._group is not None

    # -- lifecycle ---------------------------------------------------------------------------

    def setup(self, environment: ClusterEnvironment, device: torch.device) -> None:
        """Join (or adopt) the default process group that ``environment`` describes (COLL-5).

        Raises :class:`~trainspec.ConfigurationError` for a bad device or environment, or an
        existing default group of another shape; :class:`~trainspec.CollectiveTimeoutError`
        when the other ranks do not arrive within the timeout; another
        :class:`~trainspec.CollectiveError` when the backend fails. Calling it again while
        set up does nothing.
        """
        if self._group is not None:
            return
        if not isinstance(device, torch.device):
            raise ConfigurationError(
                f"{_NAME}.setup(): device must be a torch.device; got {device!r}."
            )
        if not dist.is_available():
            raise UnsupportedError(
                f"{_NAME}.setup(): this torch build has no torch.distributed support."
            )
        environment.validate()
        rank, world_size = environment.global_rank, environment.world_size
        if dist.is_initialized():
            self._adopt(rank, world_size)
        else:
            backend = self._backend if self._backend is not None else default_backend(device)
            try:
                store = _rendezvous(
                    environment.main_address, environment.main_port, rank, self._timeout
                )
                dist.init_process_group(
                    backend,
                    store=store,
                    rank=rank,
                    world_size=world_size,
                    timeout=self._timeout,
                )
            except ValueError as error:
                raise ConfigurationError(
                    f"{_NAME}.setup(): torch.distributed refused backend {backend!r} for "
                    f"device {device} ({error})."
                ) from error
            except (RuntimeError, OSError) as error:
                if "address already in use" in str(error).lower():
                    raise ConfigurationError(
                        f"{_NAME}.setup(): rank 0 cannot listen on port "
                        f"{environment.main_port}: another process uses it; choose a free "
                        "main port (MASTER_PORT)."
                    ) from error
                raise translate_error(error, "setup", self._timeout) from error
            self._owns_group = True
        group = dist.group.WORLD
        if group is None:  # pragma: no cover - init_process_group guarantees it
            raise CollectiveError(f"{_NAME}.setup(): no default process group after init.")
        self._group = group
        self._rank, self._world_size = rank, world_size
        self._backend_name = str(dist.get_backend(group))
        # Object payloads and scatter's shape message travel on this device: the CPU for
        # gloo (also when the ranks compute on another device), else the given device.
        self._device = torch.device("cpu") if self._backend_name == "gloo" else device
        self._applied_timeout = self._timeout
        self._apply_timeout(self._timeout)

    def _adopt(self, rank: int, world_size: int) -> None:
        actual = (dist.get_rank(), dist.get_world_size())
        if actual != (rank, world_size):
            raise ConfigurationError(
                f"{_NAME}.setup(): a default process group already exists with rank "
                f"{actual[0]} of {actual[1]}, but the environment describes rank {rank} of "
                f"{world_size}; destroy it first or use a matching environment."
            )
        self._owns_group = False

    def teardown(self) -> None:
        """Leave the group: destroy the default process group if :meth:`setup` created it.
        Idempotent; ``setup`` may run again (COLL-5)."""
        group, owned = self._group, self._owns_group
        self._group = None
        self._owns_group = False
        if group is not None and owned and dist.is_initialized():
            _let_workers_settle()
            dist.destroy_process_group()

    def _abandon(self) -> None:
        # After a timeout or a backend error the group's state is unknown: destroy it even
        # when it was adopted. gloo gives up by itself within the operation's timeout (set on
        # the group before the call), so this does not block.
        self._group = None
        self._owns_group = False
        if dist.is_initialized():
            _let_workers_settle()
            try:
                dist.destroy_process_group()
            except Exception:  # the operation's error is the one to report
                pass

    # -- operations ----------------------------------------------------------------------------

    def all_reduce(
        self,
        tensor: torch.Tensor,
        reduce_op: ReduceOp = "mean",
        *,
        timeout: timedelta | None = None,
    ) -> torch.Tensor:
        """The element-wise reduction over ranks, a new tensor on every rank (COLL-6, COLL-7).
        ``"mean"`` is the sum divided by the world size; integer and bool tensors give a
        floating tensor of the default dtype."""
        op = check_reduce_op(reduce_op, "all_reduce")
        source = check_tensor(tensor, "all_reduce")
        result = _fresh(source)
        if op == "mean" and result.dtype == torch.bool:
            result = result.to(torch.int64)

        def run(limit: timedelta) -> None:
            self._wait(dist.all_reduce(result, op=_TORCH_OPS[op], async_op=True), limit)

        self._run("all_reduce", timeout, run)
        return torch.true_divide(result, self._world_size) if op == "mean" else result

    def all_gather(
        self, tensor: torch.Tensor, *, timeout: timedelta | None = None
    ) -> list[torch.Tensor]:
        """Every rank's tensor, indexed by rank (COLL-8)."""
        source = check_tensor(tensor, "all_gather").detach().contiguous()
        results = [torch.empty_like(source) for _ in range(self._checked_world("all_gather"))]

        def run(limit: timedelta) -> None:
            self._wait(dist.all_gather(results, source, async_op=True), limit)

        self._run("all_gather", timeout, run)
        return results

    def broadcast(
        self, tensor: torch.Tensor, src: int = 0, *, timeout: timedelta | None = None
    ) -> torch.Tensor:
        """Rank ``src``'s tensor, a new tensor on every rank (COLL-9)."""
        source = check_rank(src, self._checked_world("broadcast"), "broadcast")
        result = _fresh(check_tensor(tensor, "broadcast"))

        def run(limit: timedelta) -> None:
            self._wait(dist.broadcast(result, source, async_op=True), limit)

        self._run("broadcast", timeout, run)
        return result

    def broadcast_object(self, obj: _T, src: int = 0, *, timeout: timedelta | None = None) -> _T:
        """Rank ``src``'s object, unpickled on every rank, ``src`` included (COLL-10).

        Pickled on ``src`` before anything is sent: an unpicklable object raises
        :class:`~trainspec.ConfigurationError` there (the other ranks then time out).
        """
        source = check_rank(src, self._checked_world("broadcast_object"), "broadcast_object")
        box: list[object] = [None]
        if self._rank == source:
            box[0] = object_to_bytes(obj, "broadcast_object")

        def run(limit: timedelta) -> None:
            dist.broadcast_object_list(box, src=source, device=self._device)

        self._run("broadcast_object", timeout, run)
        return cast("_T", _loads(box[0], source, "broadcast_object"))

    def all_gather_object(self, obj: _T, *, timeout: timedelta | None = None) -> list[_T]:
        """Every rank's object, unpickled, indexed by rank (COLL-11)."""
        world = self._checked_world("all_gather_object")
        payload = object_to_bytes(obj, "all_gather_object")
        box: list[object] = [None] * world

        def run(limit: timedelta) -> None:
            dist.all_gather_object(box, payload)

        self._run("all_gather_object", timeout, run)
        return [
            cast("_T", _loads(item, rank, "all_gather_object")) for rank, item in enumerate(box)
        ]

    def gather(
        self, tensor: torch.Tensor, dst: int = 0, *, timeout: timedelta | None = None
    ) -> list[torch.Tensor] | None:
        """Every rank's tensor on rank ``dst``, indexed by rank; ``None`` elsewhere (COLL-12)."""
        world = self._checked_world("gather")
        target = check_rank(dst, world, "gather", role="dst")
        source = check_tensor(tensor, "gather").detach().contiguous()
        results = [torch.empty_like(source) for _ in range(world)] if self._rank == target else None

        def run(limit: timedelta) -> None:
            self._wait(dist.gather(source, results, dst=target, async_op=True), limit)

        self._run("gather", timeout, run)
        return results

    def scatter(
        self,
        tensors: list[torch.Tensor] | None,
        src: int = 0,
        *,
        timeout: timedelta | None = None,
    ) -> torch.Tensor:
        """Rank *i* receives rank ``src``'s ``tensors[i]`` (COLL-13).

        On ``src``, ``tensors`` **must** be ``world_size`` tensors of one shape and dtype,
        checked before anything is sent (:class:`~trainspec.ConfigurationError`); other
        ranks' ``tensors`` are ignored. Two steps, each bounded by ``timeout``: ``src``
        broadcasts the shape and dtype, then scatters.
        """
        world = self._checked_world("scatter")
        source = check_rank(src, world, "scatter")
        items: list[torch.Tensor] | None = None
        box: list[object] = [None]
        if self._rank == source:
            items = [
                item.detach().contiguous()
                for item in _uniform(check_tensor_list(tensors, world, "scatter"), "scatter")
            ]
            box[0] = (tuple(items[0].shape), items[0].dtype)

        def run(limit: timedelta) -> torch.Tensor:
            dist.broadcast_object_list(box, src=source, device=self._device)
            shape, dtype = cast("tuple[tuple[int, ...], torch.dtype]", box[0])
            result = torch.empty(shape, dtype=dtype, device=self._device)
            self._wait(dist.scatter(result, items, src=source, async_op=True), limit)
            return result

        return self._run("scatter", timeout, run)

    def reduce_scatter(
        self,
        tensors: list[torch.Tensor],
        reduce_op: ReduceOp = "mean",
        *,
        timeout: timedelta | None = None,
    ) -> torch.Tensor:
        """Rank *i* receives the reduction over ranks of their ``tensors[i]`` (COLL-14).

        ``tensors`` **must** be ``world_size`` tensors of one dtype (shapes may differ by
        index, equal across ranks). On gloo: an all-reduce of the concatenation (see the
        module docstring); elsewhere c10d's reduce-scatter when the shapes are equal.
        """
        op = check_reduce_op(reduce_op, "reduce_scatter")
        world = self._checked_world("reduce_scatter")
        items = _same_dtype(check_tensor_list(tensors, world, "reduce_scatter"), "reduce_scatter")
        mine = items[self._rank]
        if self._backend_name != "gloo" and all(item.shape == mine.shape for item in items):
            result = torch.empty_like(mine, memory_format=torch.contiguous_format)
            inputs = [item.detach().contiguous() for item in items]
            if op == "mean" and result.dtype == torch.bool:
                result = result.to(torch.int64)
                inputs = [item.to(torch.int64) for item in inputs]

            def run_native(limit: timedelta) -> None:
                self._wait(
                    dist.reduce_scatter(result, inputs, op=_TORCH_OPS[op], async_op=True), limit
                )

            self._run("reduce_scatter", timeout, run_native)
        else:
            flat = torch.cat([item.detach().reshape(-1) for item in items])
            if op == "mean" and flat.dtype == torch.bool:
                flat = flat.to(torch.int64)

            def run(limit: timedelta) -> None:
                self._wait(dist.all_reduce(flat, op=_TORCH_OPS[op], async_op=True), limit)

            self._run("reduce_scatter", timeout, run)
            start = sum(item.numel() for item in items[: self._rank])
            result = flat[start : start + mine.numel()].reshape(mine.shape).clone()
        return torch.true_divide(result, world) if op == "mean" else result

    def all_to_all(
        self, tensors: list[torch.Tensor], *, timeout: timedelta | None = None
    ) -> list[torch.Tensor]:
        """Rank *i* receives, at index *j*, rank *j*'s ``tensors[i]`` (COLL-15).

        ``tensors`` **must** be ``world_size`` tensors of one dtype; ``tensors[i]`` has the
        same shape on every rank. Runs as ``all_to_all_single`` with split sizes.
        """
        world = self._checked_world("all_to_all")
        items = _same_dtype(check_tensor_list(tensors, world, "all_to_all"), "all_to_all")
        mine = items[self._rank]
        flat = torch.cat([item.detach().reshape(-1) for item in items])
        received = torch.empty(world * mine.numel(), dtype=mine.dtype, device=mine.device)

        def run(limit: timedelta) -> None:
            work = dist.all_to_all_single(
                received,
                flat,
                output_split_sizes=[mine.numel()] * world,
                input_split_sizes=[item.numel() for item in items],
                async_op=True,
            )
            self._wait(work, limit)

        self._run("all_to_all", timeout, run)
        return [chunk.view(mine.shape) for chunk in torch.split(received, [mine.numel()] * world)]

    def barrier(self, *, timeout: timedelta | None = None) -> None:
        """Return once every rank entered the barrier (COLL-16)."""

        def run(limit: timedelta) -> None:
            self._wait(dist.barrier(async_op=True), limit)

        self._run("barrier", timeout, run)

    # -- plumbing -------------------------------------------------------------------------------

    def _checked_world(self, operation: str) -> int:
        check_initialized(self._group is not None, _NAME, operation)
        return self._world_size

    def _apply_timeout(self, limit: timedelta) -> None:
        group = self._group
        if group is not None and hasattr(group, "set_timeout"):
            group.set_timeout(limit)
        self._applied_timeout = limit

    def _run(
        self, operation: str, timeout: timedelta | None, body: Callable[[timedelta], _T]
    ) -> _T:
        check_initialized(self._group is not None, _NAME, operation)
        checked = check_timeout(timeout, operation)
        limit = self._timeout if checked is None else checked
        try:
            if limit != self._applied_timeout:
                self._apply_timeout(limit)
            return body(limit)
        except TrainspecError:
            raise
        except (ValueError, TypeError) as error:  # c10d refused the arguments: nothing was sent
            raise ConfigurationError(
                f"{_NAME}.{operation}: torch.distributed refused the arguments ({error}); "
                "every rank must pass tensors of the same dtype and shape."
            ) from error
        except (RuntimeError, OSError) as error:  # c10d's DistError family is RuntimeError
            translated = translate_error(error, operation, limit)
            self._abandon()
            raise translated from error

    @staticmethod
    def _wait(work: dist.Work | None, limit: timedelta) -> None:
        if work is not None:
            work.wait(timeout=limit)


def _fresh(tensor: torch.Tensor) -> torch.Tensor:
    """A contiguous copy without autograd history: what an in-place c10d operation works on."""
    return tensor.detach().clone(memory_format=torch.contiguous_format)


def _same_dtype(tensors: Sequence[torch.Tensor], operation: str) -> list[torch.Tensor]:
    dtypes = {tensor.dtype for tensor in tensors}
    if len(dtypes) > 1:
        raise ConfigurationError(
            f"{operation}: every tensor in the list must have one dtype; got "
            f"{sorted(str(dtype) for dtype in dtypes)}."
        )
    return list(tensors)


def _uniform(tensors: Sequence[torch.Tensor], operation: str) -> list[torch.Tensor]:
    items = _same_dtype(tensors, operation)
    shapes = {tuple(tensor.shape) for tensor in items}
    if len(shapes) > 1:
        raise ConfigurationError(
            f"{operation}: every tensor in the list must have one shape; got {sorted(shapes)}."
        )
    return items


def _loads(payload: object, rank: int, operation: str) -> object:
    if not isinstance(payload, bytes):
        raise CollectiveError(
            f"{_NAME}.{operation}: rank {rank} sent {type(payload).__name__}, not a pickled "
            "payload; every rank must call the same object collective."
        )
    try:
        value: object = pickle.loads(payload)
    except Exception as error:
        raise CollectiveError(
            f"{_NAME}.{operation}: rank {rank}'s object could not be unpickled here "
            f"({type(error).__name__}: {error}); its class must be importable on every rank."
        ) from error
    return value


_SETTLE_SECONDS: Final = 0.1


def _let_workers_settle() -> None:
    """Release the GIL briefly before a process group can be destroyed.

    gloo's worker threads destroy finished work objects themselves, and that destructor takes
    the GIL. If the group's destructor runs (it joins those threads while holding the GIL: it
    is reached from Python object deallocation, e.g. when a DDP module is collected) while a
    worker waits for the GIL, the process deadlocks. Sleeping lets every worker finish first;
    after teardown no new work is queued, so the workers stay idle until the group goes.
    """
    time.sleep(_SETTLE_SECONDS)
