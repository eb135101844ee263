"""Reading checkpoint files, for every layer (resuming a run, averaging, translating, exporting): one clear
`CheckpointError` for a missing, unreadable, damaged or foreign file.

`read_checkpoint` checks the CRC-32 of every record of a checkpoint's zip archive, so a damaged file is
named, with the damaged record, instead of translating garbage.
"""

from __future__ import annotations

import contextlib
import zipfile
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

from .errors import CheckpointError
from .exits import fault_reason

if TYPE_CHECKING:
    import lightning as L
    import torch

M = TypeVar("M", bound="L.LightningModule")


def verify_checkpoint(path: str | Path) -> None:
    """Check the CRC-32 of every record of a checkpoint's zip archive (torch's format since 1.6, its
    records stored uncompressed); a damaged one is a `CheckpointError` naming the file and the record.
    Reading the whole file once costs about what copying it does (docs: ~0.1 s per 100 MB, warm cache);
    a file is checked once per process unless it changes."""
    path = Path(path)
    st = path.stat()
    key = (str(path.resolve()), st.st_ino, st.st_size, st.st_mtime_ns)
    if key in _VERIFIED:
        return
    try:
        with zipfile.ZipFile(path) as archive:
            for info in archive.infolist():
                record = info.filename.split("/", 1)[-1]  # "archive/data/12" -> "data/12"
                try:
                    with archive.open(info) as member:
                        while member.read(1 << 22):
                            pass
                except (zipfile.BadZipFile, EOFError, ValueError, NotImplementedError, RuntimeError) as err:
                    crc = isinstance(err, zipfile.BadZipFile) and "CRC" in str(err)
                    what = "fails its CRC-32 check" if crc else f"is unreadable ({_first_line(err)})"
                    raise CheckpointError(f"{path} is damaged: record {record} {what}; restore it from a copy") from None
    except zipfile.BadZipFile as err:
        raise CheckpointError(f"{path} is damaged (truncated or corrupt?): {_first_line(err)}; restore it from a copy") from None
    _VERIFIED.add(key)


_VERIFIED: set[tuple] = set()


def read_checkpoint(path: str | Path, verify: bool = True) -> dict:
    """A checkpoint file's contents (tensors memory-mapped, plain data only), or one clear
    `CheckpointError` when it is missing, unreadable, truncated, corrupt, damaged (a record failing its
    CRC-32 check, `verify_checkpoint`; `verify=False` skips that) or not a Lightning checkpoint."""
    path = Path(path)
    if path.is_dir():  # a run's folder, say: name a checkpoint in it (the last one when it has one)
        found = sorted([*path.glob("*.ckpt"), *path.glob("*/*.ckpt")], key=lambda p: (p.name == "last.ckpt", str(p)))
        hint = f"pass a checkpoint file, e.g. {found[-1]}" if found else "it holds no .ckpt file"
        raise CheckpointError(f"{path} is a folder, not a checkpoint file: {hint}")
    if not path.is_file():
        raise CheckpointError(f"checkpoint not found: {path} (no such checkpoint file)")
    import torch  # here: a script's --weights flag (add_weights_argument) is made before torch loads

    try:
        is_zip = zipfile.is_zipfile(path)
        # mmap: only what is looked at is read, so checking a big checkpoint costs little. torch's old
        # (pre-1.6) format is no zip archive and cannot be memory-mapped.
        state = torch.load(path, map_location="cpu", weights_only=True, mmap=is_zip)
    except OSError as err:
        raise CheckpointError(f"cannot read {path}: {fault_reason(err)}") from None
    except Exception as err:  # torch.load fails in many ways on a bad file; each means unreadable
        detail = _first_line(err) if is_zip else _not_zip(path)
        raise CheckpointError(f"{path} is not a readable checkpoint (truncated or corrupt?): {detail}") from None
    if not isinstance(state, dict) or "state_dict" not in state:
        raise CheckpointError(f"{path} is not a Lightning checkpoint (no state_dict)")
    if verify and is_zip:
        verify_checkpoint(path)
    return state


def _not_zip(path: Path) -> str:
    """Why a file torch cannot load is no zip archive: cut short, or something else entirely."""
    with contextlib.suppress(OSError), open(path, "rb") as f:
        if f.read(4) == b"PK\x03\x04":
            return "a zip archive cut short (its central directory, at the end, is missing)"
    return "not a zip archive, as torch.save writes"


def load_checkpoint(cls: type[M], path: str | Path, map_location: str | torch.device = "cpu", weights: str = "averaged") -> M:
    """`cls.load_from_checkpoint(path)`, with one clear `CheckpointError` for a missing, truncated or corrupt
    file or weights that do not fit. The task modules' own `load_from_checkpoint` refuses a checkpoint of the
    other task, or settings this version does not know, in one line (inference/networks.py). `weights`: which
    of the two sets an EMA checkpoint holds (`weights_of`); "training" puts the training weights in."""
    state = read_checkpoint(path)
    try:
        model = cls.load_from_checkpoint(path, map_location=map_location)
    except (RuntimeError, KeyError, TypeError, ValueError) as err:
        raise CheckpointError(f"{path} does not fit {cls.__name__}: {_first_line(err)}") from None
    if weights != "averaged":  # load_from_checkpoint's are the averaged ones
        model.load_state_dict(weights_of(state, path, weights))
    return model


def weights_of(state: dict, path: str | Path, which: str = "averaged") -> dict:
    """The state dict of a checkpoint's `which` weights: "averaged" is its `state_dict` (the EMA when the
    run used one, else its only weights), "training" the training weights an EMA run also stores."""
    if which == "averaged":
        return state["state_dict"]
    if "current_model_state" not in state:
        raise CheckpointError(f"{path} holds one set of weights (the run used no weight averaging)")
    return state["current_model_state"]


def weights_label(state: dict, which: str = "averaged") -> str:
    """The weights `weights_of(state, path, which)` gives, in words for an output line: "EMA weights" (the
    moving average a `--ema_decay` run keeps), "training weights (not the EMA)", "the mean of N
    checkpoints' weights" (scripts/average_checkpoints.py) or "its only weights (no EMA)". A checkpoint
    without an EMA holds one set: calling it "averaged" would be untrue."""
    if "current_model_state" in state:
        return "EMA weights" if which == "averaged" else "training weights (not the EMA)"
    if state.get("averaged_from"):
        return f"the mean of {len(state['averaged_from'])} checkpoints' weights"
    return "its only weights (no EMA)"


WEIGHTS = ("averaged", "training")


def add_weights_argument(parser, verb: str) -> None:
    """`--weights averaged|training`: which of the two sets an EMA checkpoint holds a script `verb`s."""
    parser.add_argument(
        "--weights",
        default="averaged",
        choices=WEIGHTS,
        help=f"of a checkpoint that holds both (--ema_decay runs): which to {verb} (default: averaged)",
    )


def add_output_arguments(parser) -> None:
    """`--out CKPT` and `--force`: the checkpoint a script writes, and whether it may replace one there."""
    parser.add_argument("--out", required=True, help="the checkpoint to write (.ckpt)")
    parser.add_argument("--force", action="store_true", help="replace --out if it exists")


def output_checkpoint(args) -> Path:
    """`--out` as a path, refused in one `CheckpointError` when a file is there and `--force` was not given."""
    out = Path(args.out)
    if out.exists() and not args.force:
        raise CheckpointError(f"{out} exists; pass --force to replace it")
    return out


def _first_line(err: BaseException) -> str:
    """The first line of an error's message, without torch's advice about `_use_new_zipfile_serialization`
    (it follows many unrelated load failures and only misleads)."""
    text = str(err).strip()
    line = text.splitlines()[0] if text else type(err).__name__
    if "_use_new_zipfile_serialization" in line:  # torch's "mmap can only be used with files saved with ..."
        return "not a zip archive, as torch.save writes"
    return line
