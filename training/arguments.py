"""The checks of scripts/fit.py's arguments that jsonargparse's types cannot make: values in range, a setting given
where it has no effect, an abbreviated option, and the spelling of the network's settings from before they moved
under `net`. Each is one usage line (`parser.error`) and exit 2."""

from __future__ import annotations

import dataclasses
import inspect
import re
import shlex
import sys
from pathlib import Path

import yaml
from lightning.pytorch.cli import LightningArgumentParser

from common.commands import program

from .variants import misfit


class RecipeParser(LightningArgumentParser):
    """The parser of scripts/fit.py and scripts/prepare.py. It refuses an abbreviated option instead of completing
    it: a typo (`--trainer.max_epoch 5`, `--seed 1`) must not guess which option it meant; jsonargparse makes the
    parsers of a class's own arguments (`--model.init_args.net.*`) of their parent's class, so those refuse them
    too. A recipe that is not valid YAML is named with its line and column (jsonargparse reads the text and names
    it "<unicode string>"). A usage error is the error line and a tip to run --help, not 150 lines of usage."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **{**kwargs, "allow_abbrev": False})

    def print_usage(self, file=None) -> None:
        pass

    def error(self, message, ex=None):
        # The parser that exits (the top one) says an unknown option of a class in one line; the parsers inside
        # raise, their messages composed into the top one's.
        command = shlex.join([program(sys.executable), sys.argv[0]])  # as the run was started: pasted, it works
        if self.exit_on_error and (line := unknown_class_option(str(message), command)):
            message = line
        return super().error(message, ex)

    def parse_path(self, path, *args, **kwargs):
        if problem := yaml_problem(path):
            self.error(problem)
        return super().parse_path(path, *args, **kwargs)


def unknown_class_option(message: str, command: str) -> str | None:
    """One line for jsonargparse's ten about an option the class given does not take (`--model.init_args.net.d_mode`:
    a typo, or an abbreviation, which is not completed); None for other errors."""
    unknown = r"(?:Option '([\w.]+)' is not accepted|unrecognized arguments: --([\w.]+))"
    found = re.search(r"Parser key \"(\w+)\":.*?class_path '([\w.]+)':\s+" + unknown, message, flags=re.S)
    if not found:
        return None
    key, class_path, option = found[1], found[2], found[3] or found[4]
    return f"--{key}.init_args.{option}: {class_path} has no such option (`{command} --{key}.help {class_path}` lists them)"


def yaml_problem(path) -> str | None:
    """Where and why the file at `path` is not valid YAML; None when it is, or cannot be read (said elsewhere)."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return None
    try:
        yaml.safe_load(text)
    except yaml.MarkedYAMLError as err:
        mark = err.problem_mark or err.context_mark
        where = f", line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        return f"{path}{where}: not valid YAML: {err.problem or err.context}"
    except yaml.YAMLError as err:
        return f"{path}: not valid YAML: {err}"
    return None


def check_run_options(parser, config) -> None:
    """The options TransformerCLI adds besides LightningCLI's own (`--ema_decay`, `--log_every_n_seconds`,
    `--fit_schedule_to_time`, `--early_stopping.*`, a variant file's `fits`: training/variants.py)."""
    decay = config.get("ema_decay")
    if decay is not None and not 0.0 < decay < 1.0:
        parser.error(f"--ema_decay must lie strictly between 0 and 1 (or be null), got {decay}")
    if config.get("log_every_n_seconds", 0) < 0:
        parser.error(f"--log_every_n_seconds must be 0 (off) or more, got {config.log_every_n_seconds}")
    fits = config.get("fits")
    if fits and (why := misfit(fits, config.model.get("class_path", ""))):
        parser.error(f"a variant (--config) that does not fit this recipe: {why}")
    if config.get("fit_schedule_to_time") and not config.trainer.get("max_time"):
        parser.error("--fit_schedule_to_time true fits the schedule to --trainer.max_time: give one (DD:HH:MM:SS)")
    patience, delta = config.early_stopping.patience, config.early_stopping.min_delta
    if patience is not None and patience < 1:
        parser.error(f"--early_stopping.patience must be at least 1 (or null: never stop early), got {patience}")
    if patience is not None and delta < 0:
        parser.error(f"--early_stopping.min_delta must be 0 or more, got {delta}")
    if patience is not None and not config.checkpoint.get("monitor"):
        parser.error("--early_stopping.patience judges by --checkpoint.monitor: give one (val/loss, val/bleu, ...)")


def check_pad_to_multiple(parser, config) -> None:
    """The model's `pad_to_multiple` is the data module's (linked at instantiation, which would replace a value
    given to the model without a word): one usage line for a model's that differs, naming the data's flag."""
    model = config.model.get("init_args") or {}
    data = config.data.get("init_args") or {}
    given = model.get("pad_to_multiple")
    if "pad_to_multiple" in data and given not in (None, 1, data["pad_to_multiple"]):
        parser.error(
            f"--model.init_args.pad_to_multiple {given}: the batches are padded where they are collated; pass "
            f"--data.init_args.pad_to_multiple {given} (scripts/fit.py gives the model the data module's)"
        )


def moved_setting(message: str) -> str | None:
    """For a network setting in the spelling from before the task modules took their network's settings as `net`
    (`--model.init_args.d_model 256`, or `d_model:` right under a recipe's `model.init_args`), which jsonargparse
    refuses as an option the module does not accept: one line naming the new spelling. None for other errors."""
    found = re.search(r"class_path '([\w.]+)':\s+(?:Option '(\w+)' is not accepted|unrecognized arguments: --(\w+)\b)", message)
    if not found:
        return None
    module, _, name = found[1].rpartition(".")
    task = getattr(sys.modules.get(module), name, None)
    net = inspect.signature(task).parameters.get("net") if isinstance(task, type) else None
    setting = found[2] or found[3]
    settings = dataclasses.fields(net.default) if net is not None and dataclasses.is_dataclass(net.default) else ()
    if setting not in {f.name for f in settings}:
        return None
    return (
        f"--model.init_args.{setting}: the network's settings are under net now: pass --model.init_args.net.{setting} "
        f"(in a YAML file, {setting}: under model: init_args: net:)"
    )
