"""Train a recipe, then test its best checkpoint and print a summary.

    .venv/bin/python scripts/fit.py                                  # the toy translator (configs/toy_translation.yaml)
    .venv/bin/python scripts/fit.py --config configs/mnist.yaml      # MNIST in data/mnist, downloaded when online
    .venv/bin/python scripts/fit.py --config configs/mnist.yaml --data.data_dir ../shared/data/mnist   # an offline copy
    .venv/bin/python scripts/fit.py --print_config                   # the full resolved config
    .venv/bin/python scripts/fit.py --config RECIPE --ckpt_path last  # resume the last checkpoint of that run

Any `--trainer.*`, `--model.*`, `--data.*` and `--checkpoint.*` option works as in LightningCLI.
"""

from __future__ import annotations

import functools
import sys
import warnings

if __name__ == "__main__":  # run as a file, not imported as scripts.NAME (the tests)
    import _checkout  # noqa: F401  (first: the repository's packages importable, and this Python the project's)

from common.commands import answer_stored_help  # noqa: E402

if __name__ == "__main__":
    answer_stored_help("fit")  # the parser's `--help`, stored: at once, not after Lightning's imports

from common import signals  # noqa: E402  (the standard library only: installed before torch loads)

if __name__ == "__main__":
    signals.install()  # from here on SIGTERM and SIGINT raise signals.Stopped: one line and 143 or 130 (exit_on_stop)

with signals.exit_on_stop():
    from common.commands import chosen_environment, invocation, resume_command
    from common.errors import TrainingDivergedError
    from common.exits import EXIT_NOTHING_TO_DO, USER_ERRORS, exit_on_user_error
    from common.noise import silence

    silence()  # before Lightning loads: some of its lines come at import
    from training.checkpointing import checkpoint_step
    from training.cli import DEFAULT_CONFIG, TransformerCLI, run_fit
    from training.resume import NothingToTrain, last_checkpoint


@exit_on_user_error
def main(args: list[str] | None = None) -> None:
    """Bad input (a missing data folder, a malformed or empty data file, an argument out of range, a
    GPU asked for on a machine without one, a missing or corrupt --ckpt_path, a checkpoint of the other
    task) ends with one line on stderr and exit status 2; a loss that becomes NaN with one line and
    status 1; a full disk or an unwritable folder with one line naming the path and status 1
    (`exit_on_user_error`); SIGTERM or SIGINT with a checkpoint at the end of the step and one line
    saying how to resume, status 143 or 130 (common/signals.py); `--trainer.max_time` with one line saying
    where it stopped and how to resume, status 0; a resumed run with nothing left to train (its checkpoint
    reached max_steps, max_epochs or max_time) with one line and status 3; a config error with
    jsonargparse's usage message and status 2."""
    script, args = invocation(args, "fit")
    given = list(args)
    warnings.filterwarnings("ignore", message="LightningCLI's args parameter")  # we pass sys.argv on purpose
    if not any(a == "-c" or a.startswith("--config") for a in args):
        args = ["--config", str(DEFAULT_CONFIG)] + args
    _import_every_class_for_help(args)
    # The environment as the user set it: the time limit's resume line is made once the W&B logger has changed it.
    resume = functools.partial(resume_command, given, script, environment=chosen_environment())
    cli = None
    with signals.exit_on_stop(resume(), last_checkpoint):
        try:
            cli = _make_cli(args)
            run_fit(cli, resume)
        except NothingToTrain as err:
            print(f"nothing to train: {err}", file=sys.stderr)
            raise SystemExit(EXIT_NOTHING_TO_DO) from None
        except TrainingDivergedError as err:
            print(f"error: {err}; {_last_kept(cli)}", file=sys.stderr)
            raise SystemExit(1) from None


def _import_every_class_for_help(args: list[str]) -> None:
    """A help (`--help`, `--model.help`, `--data.help CLASS`) lists, as known subclasses, the task and data modules
    imported: all of them, then. A run imports those its recipe names and no other (`tasks` and `datamodules` import
    their classes when first used), so that a translation run loads nothing of MNIST's (torchvision)."""
    if any(a in ("-h", "--help") or a.partition("=")[0].endswith(".help") for a in args):
        import datamodules
        import tasks

        for package in (tasks, datamodules):
            for name in package.__all__:
                getattr(package, name)


def _make_cli(args: list[str]) -> TransformerCLI:
    try:
        return TransformerCLI(args=args)
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


def _last_kept(cli) -> str:
    """After a NaN loss: which checkpoint is now the last one (`KeepLastUntilFinite` went back to the one
    before the weights whose loss was not finite)."""
    path = last_checkpoint(cli.trainer) if cli is not None else None
    if not path:
        return "no checkpoint of this run was kept"
    return f"the last checkpoint is {path} (step {checkpoint_step(path)}, its loss was finite)"


if __name__ == "__main__":
    main()
