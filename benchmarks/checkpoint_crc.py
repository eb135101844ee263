"""What verifying a checkpoint's CRC-32s costs on load (`training.checkpoints.verify_checkpoint`), beside
torch.load itself, on a checkpoint of about the size of Transformer-base's (168 MB of float32).

    .venv/bin/python benchmarks/checkpoint_crc.py [--mib 160] [--path /tmp/crc_check.ckpt]
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

import _common  # noqa: F401  (puts the repository's root on the path)
import torch

from common import checkpoints


def median_seconds(fn, repeats: int = 5) -> float:
    times = []
    for _ in range(repeats):
        checkpoints._VERIFIED.clear()  # verify_checkpoint remembers the files it checked
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--mib", type=int, default=160, help="MiB of float32 weights")
    p.add_argument("--path", default="/tmp/crc_check.ckpt")
    args = p.parse_args()
    torch.manual_seed(0)
    torch.save({"state_dict": {f"w{i}": torch.randn(1024, 256) for i in range(args.mib)}}, args.path)
    with open(args.path, "rb") as f:
        f.read()  # warm the page cache: what a checkpoint just written or loaded twice has
    print(f"checkpoint: {os.path.getsize(args.path) / 1e6:.0f} MB, warm page cache, median of 5")
    print("| what | seconds |\n|---|---|")
    print(
        f"| verify_checkpoint (every record's CRC-32) | {median_seconds(lambda: checkpoints.verify_checkpoint(args.path)):.3f} |"
    )
    print(f"| torch.load, whole file | {median_seconds(lambda: torch.load(args.path, weights_only=True)):.3f} |")
    print(f"| torch.load, mmap | {median_seconds(lambda: torch.load(args.path, weights_only=True, mmap=True)):.3f} |")
    os.remove(args.path)


if __name__ == "__main__":
    main()
