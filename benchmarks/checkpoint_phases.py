"""Where a TorchCheckpointIO save spends its time: each phase of the atomic write timed
separately on a 256 MiB state dict, next to raw ``torch.save`` + ``fsync`` into an existing
file. The replaced file is held open across the rename and freed on a thread, as
``_storage.atomic_write`` does; the time that thread ran on after the save is shown apart.
A diagnostic for docs/benchmarks.md, not part of ``run_all``.

    python -m benchmarks.checkpoint_phases [--repetitions 4] [--mib 256]
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time

import torch

from trainspec.reference.checkpoint_io import _storage


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repetitions", type=int, default=4)
    parser.add_argument("--mib", type=int, default=256)
    args = parser.parse_args(argv)
    n = 16
    numel = args.mib * 1024 * 1024 // 4 // n
    state = {"model": {f"w{i}": torch.randn(numel) for i in range(n)}}
    with tempfile.TemporaryDirectory() as directory:
        target = os.path.join(directory, "t.pt")
        torch.save(state, target)
        for _ in range(args.repetitions):
            t0 = time.perf_counter()
            _storage.clean_stale_temps(directory, "t.pt")
            t1 = time.perf_counter()
            temp = os.path.join(directory, ".t.pt.tmp")
            with open(temp, "xb") as raw:
                torch.save(state, raw)
                t2 = time.perf_counter()
                raw.flush()
                os.fsync(raw.fileno())
            t3 = time.perf_counter()
            held = _storage._hold_replaced(target)  # as atomic_write does
            os.replace(temp, target)
            if held is not None:
                _storage._release(held)
            t4 = time.perf_counter()
            fd = os.open(directory, os.O_RDONLY)
            os.fsync(fd)
            os.close(fd)
            t5 = time.perf_counter()
            _storage.wait_for_releases()
            t6 = time.perf_counter()
            with open(target + ".raw", "wb") as f:
                r0 = time.perf_counter()
                torch.save(state, f)
                r1 = time.perf_counter()
                f.flush()
                os.fsync(f.fileno())
                r2 = time.perf_counter()
            print(
                f"atomic: stale-scan {t1 - t0:.3f}s encode {t2 - t1:.3f}s fsync {t3 - t2:.3f}s "
                f"replace {t4 - t3:.3f}s dir-fsync {t5 - t4:.3f}s (then freeing the old file "
                f"on its thread {t6 - t5:.3f}s) | raw: encode {r1 - r0:.3f}s "
                f"fsync {r2 - r1:.3f}s"
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
