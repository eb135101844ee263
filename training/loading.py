"""Loading checkpoints, and turning user errors into one clear line for the scripts."""

from __future__ import annotations

import functools
import inspect
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import lightning as L
import torch

from datamodules.errors import DataFormatError, DataNotFoundError, HyperparameterError

M = TypeVar("M", bound=L.LightningModule)


class CheckpointError(Exception):
    """A checkpoint is missing, unreadable, or not of the task that was asked for."""


class InputError(ValueError):
    """Input that a script or `translate` refuses (an empty sentence, say); the message says why."""


def read_checkpoint(path: str | Path) -> dict:
    """A checkpoint file's contents (tensors memory-mapped, plain data only), or one clear
    `CheckpointError` when it is missing, truncated, corrupt or not a Lightning checkpoint."""
    path = Path(path)
    if not path.is_file():
        raise CheckpointError(f"checkpoint not found: {path} (no such checkpoint file)")
    try:
        # mmap: only what is looked at is read, so checking a big checkpoint costs little.
        state = torch.load(path, map_location="cpu", weights_only=True, mmap=True)
    except Exception as err:  # torch.load fails in many ways on a bad file; each means unreadable
        raise CheckpointError(f"{path} is not a readable checkpoint (truncated or corrupt?): {_first_line(err)}") from None
    if not isinstance(state, dict) or "state_dict" not in state:
        raise CheckpointError(f"{path} is not a Lightning checkpoint (no state_dict)")
    return state


def load_checkpoint(cls: type[M], path: str | Path, map_location: str | torch.device = "cpu") -> M:
    """`cls.load_from_checkpoint(path)`, with one clear `CheckpointError` for a missing, truncated
    or corrupt file, or a checkpoint of another task."""
    state = read_checkpoint(path)
    hparams = state.get("hyper_parameters", {})
    # LightningCLI records the class; for other checkpoints, hyperparameters the class does not take
    # give a checkpoint of another task away.
    found = hparams.get("_class_path", "").rsplit(".", 1)[-1]
    accepted = set(inspect.signature(cls.__init__).parameters) | {"_class_path", "_instantiator"}
    if (found and found != cls.__name__) or (not found and not set(hparams) <= accepted):
        other = f"a {found} checkpoint" if found else "a checkpoint of another model"
        raise CheckpointError(f"{path} holds {other}, not a {cls.__name__} one")
    try:
        return cls.load_from_checkpoint(path, map_location=map_location)
    except (RuntimeError, KeyError, TypeError, ValueError) as err:
        raise CheckpointError(f"{path} does not fit {cls.__name__}: {_first_line(err)}") from None


def weights_of(state: dict, path: str | Path, which: str = "averaged") -> dict:
    """The state dict of a checkpoint's `which` weights: "averaged" is its `state_dict` (the EMA when the
    run used one, else its only weights), "training" the training weights an EMA run also stores."""
    if which == "averaged":
        return state["state_dict"]
    if "current_model_state" not in state:
        raise CheckpointError(f"{path} holds one set of weights (the run used no weight averaging)")
    return state["current_model_state"]


def load_training_weights(model: L.LightningModule, path: str | Path) -> None:
    """Put the training weights of a checkpoint written with weight averaging (`--ema_decay`) into
    `model`, in place of the averaged weights that `load_checkpoint` gives."""
    model.load_state_dict(weights_of(read_checkpoint(path), path, "training"))


WEIGHTS = ("averaged", "training")


def add_weights_argument(parser, verb: str) -> None:
    """`--weights averaged|training`: which of the two sets an EMA checkpoint holds a script `verb`s."""
    parser.add_argument(
        "--weights",
        default="averaged",
        choices=WEIGHTS,
        help=f"of a checkpoint that holds both (--ema_decay runs): which to {verb} (default: averaged)",
    )


def add_engine_arguments(parser) -> None:
    """The flags that pick what translates, shared by scripts/translate.py and scripts/evaluate.py."""
    parser.add_argument("--ckpt", help="a Seq2SeqTransformer checkpoint (.ckpt), for --engine torch")
    parser.add_argument("--engine", default="torch", choices=["torch", "ctranslate2"], help="default: torch")
    parser.add_argument("--model", help="a directory written by scripts/export.py, for --engine ctranslate2")
    parser.add_argument(
        "--compute-type", default="default", help="CTranslate2's compute type (default: the exported weights' own)"
    )
    parser.add_argument("--device", default="cpu", help="torch or CTranslate2 device (default: cpu)")


def check_engine_arguments(parser, args) -> None:
    if args.engine == "torch" and not args.ckpt:
        parser.error("--ckpt is required (or --engine ctranslate2 --model DIR)")
    if args.engine == "ctranslate2" and not args.model:
        parser.error("--engine ctranslate2 needs --model DIR (a directory written by scripts/export.py)")


def load_translator(args):
    """What `add_engine_arguments` picked: a `Seq2SeqTransformer` in eval mode (with its training weights
    when `args.weights == "training"`) or a `deploy.ctranslate2.CTranslate2Translator`; both translate
    with `translate` and `translate_many`."""
    if args.engine == "ctranslate2":
        from deploy.ctranslate2 import CTranslate2Translator

        return CTranslate2Translator(args.model, device=args.device, compute_type=args.compute_type)
    from tasks import Seq2SeqTransformer

    model = load_checkpoint(Seq2SeqTransformer, args.ckpt, map_location=args.device)
    if getattr(args, "weights", "averaged") == "training":
        load_training_weights(model, args.ckpt)
    return model.eval()


def _first_line(err: BaseException) -> str:
    text = str(err).strip()
    return text.splitlines()[0] if text else type(err).__name__


# DataFormatError covers CorpusFormatError; HyperparameterError is an argument out of range, raised in __init__.
USER_ERRORS = (CheckpointError, InputError, DataNotFoundError, DataFormatError, HyperparameterError)


def exit_on_user_error(main: Callable[..., None]) -> Callable[..., None]:
    """Decorate a script's `main`: a user error prints one line on stderr and exits with status 2;
    anything else is a bug and keeps its traceback."""

    @functools.wraps(main)
    def wrapper(*args, **kwargs):
        try:
            return main(*args, **kwargs)
        except USER_ERRORS as err:
            print(f"error: {err}", file=sys.stderr)
            raise SystemExit(2) from None
        except KeyboardInterrupt:
            print("interrupted", file=sys.stderr)
            raise SystemExit(130) from None

    return wrapper
