"""One rank of the test world: connects back to the test process and runs the scenarios it
is sent, until told to stop. Started by ``tests/distributed/conftest.py``; not a test."""

from __future__ import annotations

import importlib.util
import os
import sys
import traceback
from multiprocessing.connection import Client
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from types import ModuleType


def _load(path: str, cache: dict[str, ModuleType]) -> ModuleType:
    module = cache.get(path)
    if module is None:
        spec = importlib.util.spec_from_file_location(f"_distributed_scenarios_{len(cache)}", path)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = module
        spec.loader.exec_module(module)
        cache[path] = module
    return module


def main() -> None:
    port, authkey, rank = int(sys.argv[1]), bytes.fromhex(sys.argv[2]), int(sys.argv[3])
    connection = Client(("127.0.0.1", port), authkey=authkey)
    connection.send(("hello", rank, os.getpid()))
    import torch  # after connecting: the test process is waiting for the hello, not for torch

    torch.set_num_threads(1)
    modules: dict[str, ModuleType] = {}
    while True:
        message = connection.recv()
        if message[0] == "stop":
            break
        _, path, name, args, kwargs, variables = message
        os.environ.update(variables)
        try:
            result = getattr(_load(path, modules), name)(*args, **kwargs)
            reply = ("ok", result)
        except BaseException:
            reply = ("error", traceback.format_exc())
        connection.send(reply)
    connection.close()


if __name__ == "__main__":
    main()
