"""What checking a prepared split costs when a run maps it (`IndexedIds.check`: offsets frame the ids, every id
inside the vocabulary), on a synthetic WMT-sized split: 4.5M pairs of 10–44 tokens a side, uint16 ids.

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/cache_check.py [--pairs 4500000]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from datamodules.indexed import IndexedIds  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pairs", type=int, default=4_500_000)
    parser.add_argument("--vocab", type=int, default=32_000)
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        for side in ("src", "tgt"):
            offsets = np.zeros(args.pairs + 1, np.int64)
            np.cumsum(rng.integers(10, 45, args.pairs), out=offsets[1:])
            (folder / f"train.{side}.idx").write_bytes(offsets.tobytes())
            (folder / f"train.{side}.bin").write_bytes(rng.integers(0, args.vocab, int(offsets[-1]), dtype=np.uint16).tobytes())
        print(f"{args.pairs:,} pairs, {int(offsets[-1]):,} tokens a side")
        for run in ("first (page cache warm from writing)", "second"):
            start = time.perf_counter()
            for side in ("src", "tgt"):
                IndexedIds(folder / f"train.{side}", np.uint16).check(args.vocab, "")
            print(f"{run}: both sides checked in {time.perf_counter() - start:.2f} s")


if __name__ == "__main__":
    main()
