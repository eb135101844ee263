"""A shipped recipe's training step in fp32 and in bf16 autocast, on this machine as it is and with its vector
units capped at AVX2 (a CPU without native bf16, the most common kind): what `training/precision.py` chooses between.

Each arm runs `scripts/fit.py` for `--steps` steps (no logger, no test) and reads the median step of its
summary.json (the first step left out). `--emulate-avx2` caps ATen's kernels (`ATEN_CPU_CAPABILITY=avx2`) and
oneDNN's (`ONEDNN_MAX_CPU_ISA=AVX2`), so bf16 autocast runs without AVX-512 BF16 or AMX, as on such a CPU.

    OMP_NUM_THREADS=1 taskset -c 1 .venv/bin/python benchmarks/recipe_precision.py --recipe mnist_subset --steps 40
    OMP_NUM_THREADS=1 taskset -c 1 .venv/bin/python benchmarks/recipe_precision.py --recipe cmn_eng --steps 10 --emulate-avx2
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DATA = {"mnist_subset": ROOT.parent / "shared" / "data" / "mnist", "cmn_eng": ROOT.parent / "shared" / "data" / "cmn-eng"}
AVX2 = {"ATEN_CPU_CAPABILITY": "avx2", "ONEDNN_MAX_CPU_ISA": "AVX2"}


def step_ms(recipe: str, precision: str, steps: int, seed: int, env: dict[str, str]) -> float:
    with tempfile.TemporaryDirectory() as root:
        cmd = [
            sys.executable, str(ROOT / "scripts" / "fit.py"), "--config", str(ROOT / "configs" / f"{recipe}.yaml"),
            "--data.data_dir", str(DATA[recipe]), "--trainer.precision", precision, "--trainer.max_steps", str(steps),
            "--trainer.max_time", "null", "--trainer.logger", "false", "--trainer.enable_progress_bar", "false",
            "--test", "false", "--seed_everything", str(seed), "--trainer.default_root_dir", root,
        ]  # fmt: skip
        done = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, **env}, cwd=ROOT)
        if done.returncode != 0:
            sys.exit(f"error: {' '.join(cmd)} failed:\n{done.stderr[-2000:]}")
        (summary,) = Path(root).rglob("summary.json")
        return json.loads(summary.read_text())["step_ms"]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--recipe", choices=sorted(DATA), default="mnist_subset")
    p.add_argument("--steps", type=int, default=40)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--emulate-avx2", action="store_true", help="also run both precisions with AVX2 as the widest ISA")
    args = p.parse_args()
    machines = [("native", {})] + ([("AVX2 only", AVX2)] if args.emulate_avx2 else [])
    print(f"{args.recipe}, {args.steps} steps, OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS', 'unset')}")
    print(f"{'vector units':<12} {'fp32 ms':>9} {'bf16-mixed ms':>14} {'bf16 / fp32':>12}")
    for name, env in machines:
        fp32 = step_ms(args.recipe, "32-true", args.steps, args.seed, env)
        bf16 = step_ms(args.recipe, "bf16-mixed", args.steps, args.seed, env)
        print(f"{name:<12} {fp32:>9.1f} {bf16:>14.1f} {bf16 / fp32:>11.2f}x", flush=True)


if __name__ == "__main__":
    main()
