"""Train a recipe, then test its best checkpoint and print a summary.

    python scripts/fit.py                                   # the toy translator (configs/toy_translation.yaml)
    python scripts/fit.py --config configs/mnist.yaml      # MNIST in data/mnist, downloaded when online
    python scripts/fit.py --config configs/mnist.yaml --data.data_dir ../shared/data/mnist   # an offline copy
    python scripts/fit.py --print_config                    # the full resolved config
    python scripts/fit.py --config RECIPE --ckpt_path last   # resume the last checkpoint of that run

Any `--trainer.*`, `--model.*`, `--data.*` and `--checkpoint.*` option works as in LightningCLI.
"""

from __future__ import annotations

import sys
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # run from a checkout without `pip install -e .` too

from training.callbacks import TrainingDivergedError  # noqa: E402
from training.cli import DEFAULT_CONFIG, TransformerCLI, run_fit  # noqa: E402
from training.loading import USER_ERRORS, exit_on_user_error  # noqa: E402


@exit_on_user_error
def main(args: list[str] | None = None) -> None:
    """Bad input (a missing data folder, a malformed or empty data file, an argument out of range, a
    missing or corrupt --ckpt_path, a checkpoint of the other task) ends with one line on stderr and exit
    status 2; a loss that becomes NaN with one line and status 1; a config error with jsonargparse's
    usage message and status 2."""
    args = list(sys.argv[1:] if args is None else args)
    warnings.filterwarnings("ignore", message="LightningCLI's args parameter")  # we pass sys.argv on purpose
    if not any(a == "-c" or a.startswith("--config") for a in args):
        args = ["--config", str(DEFAULT_CONFIG)] + args
    try:
        try:
            cli = TransformerCLI(args=args)
        except ValueError as err:
            # jsonargparse wraps an error raised while instantiating the classes (an argument out of range,
            # a data module reading its files for the tokenizers) in a ValueError that dumps the whole
            # config, vocabularies included; the error itself is its cause. A user error becomes one line;
            # anything else keeps its own traceback, without the dump.
            causes = [err]
            while causes[-1].__cause__ is not None:
                causes.append(causes[-1].__cause__)
            user = next((c for c in causes if isinstance(c, USER_ERRORS)), None)
            if user is not None:
                raise user from None
            if len(causes) == 1:
                raise
            raise causes[-1] from None
        run_fit(cli)
    except TrainingDivergedError as err:
        print(f"error: {err}", file=sys.stderr)
        raise SystemExit(1) from None


if __name__ == "__main__":
    main()
