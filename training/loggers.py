"""Weights & Biases as the default logger, deciding online/offline *before* `wandb.init`, so a run never prompts and
never waits on the network (README, "Experiment tracking (Weights & Biases)", says when it logs online)."""

from __future__ import annotations

import json
import netrc
import os
import shlex
import struct
import sys
from pathlib import Path
from urllib.parse import urlparse

from lightning.pytorch.callbacks import Callback
from lightning.pytorch.loggers import Logger, WandbLogger
from lightning.pytorch.utilities import rank_zero_info

from common.commands import program
from common.network import answers

from .lightning_internals import continue_wandb_run_id, wandb_offline, wandb_run_started

DEFAULT_PROJECT = "transformer-lightning"


def _api_key() -> str | None:
    if os.environ.get("WANDB_API_KEY"):
        return os.environ["WANDB_API_KEY"]
    host = urlparse(os.environ.get("WANDB_BASE_URL", "https://api.wandb.ai")).hostname or "api.wandb.ai"
    try:
        auth = netrc.netrc(os.environ.get("NETRC")).authenticators(host)
    except (OSError, netrc.NetrcParseError):
        return None
    return auth[2] if auth and auth[2] else None


def offline_reason() -> str | None:
    """Why this run must log offline, or None when W&B is usable online."""
    mode = os.environ.get("WANDB_MODE", "").strip().lower()
    if mode in ("offline", "dryrun"):
        return f"WANDB_MODE={mode}"
    if os.environ.get("WANDB_OFFLINE", "").lower() in ("1", "true"):
        return "WANDB_OFFLINE is set"
    if not _api_key():
        return "no W&B API key (set WANDB_API_KEY or run `wandb login` once)"
    url = os.environ.get("WANDB_BASE_URL", "https://api.wandb.ai")
    if not answers(url):
        return f"{url} is unreachable"
    return None


class AutoWandbLogger(WandbLogger):
    """`WandbLogger` that never prompts or hangs: `offline=None` (the default) decides by itself
    (see `offline_reason`). `save_dir=None` means `trainer.default_root_dir`, and `group=None` the
    recipe's name (the --config file's stem), both filled in by the CLI: runs of one recipe (seeds,
    sweeps, resumptions) are grouped together in the W&B project."""

    def __init__(
        self,
        name: str | None = None,
        save_dir: str | None = None,
        version: str | None = None,
        offline: bool | None = None,
        project: str = DEFAULT_PROJECT,
        group: str | None = None,
        log_model: bool | str = False,
        **kwargs,
    ):
        os.environ.setdefault("WANDB_SILENT", "true")  # wandb's banner lines; our summary says what matters
        self.offline_reason = None
        if offline is None:
            self.offline_reason = offline_reason()
            offline = self.offline_reason is not None
        save_dir = save_dir or "."
        # No interactive login, and no wait on a server that is not there.
        kwargs.setdefault("settings", _quiet_settings())
        super().__init__(
            name=name,
            save_dir=save_dir,
            version=version,
            offline=offline,
            project=project,
            log_model=log_model,
            group=group,
            **kwargs,
        )
        if self._wandb_init.get("anonymous") is None:
            self._wandb_init.pop("anonymous", None)  # wandb warns about the key even when it is None
        if offline and self.offline_reason:
            rank_zero_info(f"W&B logs offline: {self.offline_reason}.")

    @property
    def experiment(self):
        # The folder is made when the run starts (wandb would log to a temporary folder instead of a missing
        # one), not when the logger is built: a run refused before it starts leaves none behind.
        if not wandb_run_started(self):
            Path(self.save_dir).mkdir(parents=True, exist_ok=True)
        return super().experiment


def _quiet_settings():
    try:
        import wandb
    except ImportError:  # an optional package: a cluster's image, say, has none
        from common.errors import InputError

        raise InputError("the W&B logger needs wandb: pip install wandb, or pass --trainer.logger CSVLogger") from None

    return wandb.Settings(silent=True, console="off", init_timeout=60)


def continue_wandb_run(loggers: list[Logger], checkpoint: dict) -> str | None:
    """Point the (not yet started) W&B loggers at the run a checkpoint was written by, so that a run
    resumed with `--ckpt_path` continues the same W&B run (online, or offline: `wandb sync` then merges
    the two offline folders into one run). Returns the run id, or None when there is none to continue."""
    run_id = ((checkpoint.get("callbacks") or {}).get(WandbRunId.__name__) or {}).get("wandb_run_id")
    if not run_id:
        return None
    for logger in loggers:
        if isinstance(logger, WandbLogger) and not wandb_run_started(logger):
            continue_wandb_run_id(logger, run_id)
    return run_id


class WandbRunId(Callback):
    """Stores the W&B run id in each checkpoint (see `continue_wandb_run`), with the run's step, and on resume keeps
    W&B's own step (`_step`) increasing across the two runs, offline too (docs/guide/training.md, "How the callbacks
    keep these promises")."""

    def __init__(self) -> None:
        self._logger: WandbLogger | None = None

    def setup(self, trainer, pl_module, stage: str) -> None:
        self._logger = next((lg for lg in trainer.loggers if isinstance(lg, WandbLogger)), None)

    def _run(self):
        """The started, enabled W&B run (rank zero), else None."""
        run = self._logger.experiment if self._logger is not None and wandb_run_started(self._logger) else None
        return None if run is None or getattr(run, "disabled", False) else run

    def state_dict(self) -> dict:
        run_id = self._logger.version if self._logger is not None else None  # the run exists once anything is logged
        if not run_id:
            return {}
        state = {"wandb_run_id": run_id}
        run = self._run()
        if run is not None:
            state["wandb_step"] = int(run.step)  # the W&B step of the next row
        return state

    def load_state_dict(self, state_dict: dict) -> None:
        run = self._run()
        if run is None or not state_dict.get("wandb_run_id") or run.id != state_dict["wandb_run_id"]:
            return
        after = [state_dict.get("wandb_step", 0)]
        for folder in offline_folders(run):
            if folder != Path(run.dir).parent:  # not this run's own
                after += [row["_step"] + 1 for row in offline_history(folder / f"run-{run.id}.wandb") if "_step" in row]
        step = max(after)
        if step > run.step:  # online, the server's own continuation is already past it
            run.log({}, step=step, commit=False)  # the next row gets W&B step `step`


def offline_folders(run) -> list[Path]:
    """Every offline folder of the W&B `run` (…/wandb/offline-run-<time>-<id>; a resumed run continues it in one of
    its own), oldest first, its own included."""
    here = Path(run.dir).parent
    return sorted({p.parent for p in here.parent.glob(f"*-{run.id}/run-{run.id}.wandb")} | {here}, key=lambda p: p.name)


def offline_history(path: str | Path):
    """The history rows ({key: value}, with `_step`) of a W&B run's local `.wandb` file, in order."""
    for record in offline_records(path):
        if record.WhichOneof("record_type") == "history":
            yield {item.key or "/".join(item.nested_key): json.loads(item.value_json) for item in record.history.item}


def offline_records(path: str | Path):
    """The protobuf `Record`s (run, config, history, files, …) of a W&B run's local `.wandb` file.

    The file is a LevelDB-style log: a 7-byte header, then 32 KiB blocks of chunks, each
    `crc32 (4) | length (2) | type (1) | data`, type 1 a whole record, 2/3/4 its first, middle and
    last pieces. A run killed while writing ends with a partial chunk, which ends the scan."""
    from google.protobuf.message import DecodeError
    from wandb.proto import wandb_internal_pb2

    block, header = 32768, 7
    data = Path(path).read_bytes()
    if data[:4] != b":W&B":
        return
    pos, pieces = header, b""
    while pos + header <= len(data):
        left = block - pos % block
        if left < header:  # a block's tail too short for a chunk header is zero padding
            pos += left
            continue
        _, length, kind = struct.unpack("<IHB", data[pos : pos + header])
        if kind == 0 or pos + header + length > len(data):
            return  # zeros past the last record, or a truncated chunk
        pieces += data[pos + header : pos + header + length]
        pos += header + length
        if kind in (1, 4):
            record = wandb_internal_pb2.Record()
            try:
                record.ParseFromString(pieces)
            except DecodeError:
                return
            pieces = b""
            yield record


def default_logger_dir(args: list[str]) -> list[str]:
    """`--trainer.logger CSVLogger` (or TensorBoardLogger, …) without `--trainer.logger.save_dir`:
    give it an empty save_dir, which `before_instantiate_classes` turns into trainer.default_root_dir
    (CSVLogger and TensorBoardLogger make save_dir a required argument)."""
    for i, arg in enumerate(args):
        if arg == "--trainer.logger" and i + 1 < len(args):
            value = args[i + 1]
        elif arg.startswith("--trainer.logger="):
            value = arg.split("=", 1)[1]
        else:
            continue
        a_class = value.lower() not in ("true", "false", "null", "none") and not value.lstrip().startswith(("{", "["))
        if a_class and not any(a.startswith("--trainer.logger.save_dir") for a in args):
            return args + ["--trainer.logger.save_dir", ""]
    return args


def run_dir(logger: Logger | None) -> str | None:
    """The W&B run's local folder (…/wandb/offline-run-…), when `logger` is a W&B logger with a run."""
    if isinstance(logger, WandbLogger) and wandb_run_started(logger):
        return str(Path(logger.experiment.dir).parent)
    return None


def sync_command(logger: Logger | None) -> str | None:
    """`wandb sync <run dirs>` for an offline W&B run, else None: every offline folder of the run, oldest first
    (a resumed run continues the W&B run of the one it resumes in a folder of its own; `wandb sync` merges
    them into the one run, and needs all of them). `wandb` is named by its path beside this interpreter
    (`.venv/bin/wandb`): it is on PATH only inside an activated venv."""
    if not (isinstance(logger, WandbLogger) and wandb_offline(logger) and run_dir(logger)):
        return None
    wandb = Path(sys.executable).parent / "wandb"
    folders = [str(p) for p in offline_folders(logger.experiment)]
    return shlex.join([program(str(wandb)) if wandb.is_file() else "wandb", "sync", *folders])


def log_text(trainer, values: dict[str, str]) -> None:
    """Strings that belong with a run's results (a SacreBLEU signature): the W&B run's summary, or the
    hyper-parameters of other loggers (CSVLogger's hparams.yaml, TensorBoard's hparams); rank zero only."""
    if not trainer.is_global_zero:
        return
    for logger in trainer.loggers:
        if isinstance(logger, WandbLogger):
            logger.experiment.summary.update(values)
        else:
            logger.log_hyperparams(values)
