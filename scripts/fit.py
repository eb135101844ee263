"""Train a recipe, then test its best checkpoint and print a summary.

    python scripts/fit.py                                   # the toy translator (configs/toy_translation.yaml)
    python scripts/fit.py --config configs/mnist.yaml --data.data_dir ../shared/data/mnist
    python scripts/fit.py --print_config                    # the full resolved config
    python scripts/fit.py --config RECIPE --ckpt_path last   # resume the last checkpoint of that run

Any `--trainer.*`, `--model.*`, `--data.*` and `--checkpoint.*` option works as in LightningCLI.
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # run from a checkout without `pip install -e .` too

from tasks.cli import DEFAULT_CONFIG, TransformerCLI, run_fit  # noqa: E402


def main(args: list[str] | None = None) -> None:
    args = list(sys.argv[1:] if args is None else args)
    if not any(a == "-c" or a.startswith("--config") for a in args):
        args = ["--config", str(DEFAULT_CONFIG)] + args
    cli = TransformerCLI(args=args)
    run_fit(cli)


if __name__ == "__main__":
    main()
