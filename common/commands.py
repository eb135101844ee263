"""The commands a run prints for its user to paste: the one that resumes it (`resume_command`: after a signal, a
time limit, or a corpus generation stopped part-way), and how to name this interpreter in it (`program`); and the
stored help of the commands whose parser takes seconds to build (`answer_stored_help`)."""

from __future__ import annotations

import os
import shlex
import sys
from pathlib import Path

# The environment settings that change what a resumed run does or how fast it goes, kept in the resume command.
RESUME_ENVIRONMENT = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "CUDA_VISIBLE_DEVICES", "CUBLAS_WORKSPACE_CONFIG", "WANDB_MODE")


def chosen_environment() -> dict[str, str]:
    """The settings of `RESUME_ENVIRONMENT` set now. Taken as a run starts, they are the user's: once the run is
    under way, Lightning's W&B logger has set `WANDB_MODE=dryrun` in this process for an offline run, which a
    resumed run must not inherit (it would stay offline after the user logs in)."""
    return {name: os.environ[name] for name in RESUME_ENVIRONMENT if os.environ.get(name)}


def resume_command(
    args: list[str],
    script: str = "scripts/fit.py",
    settings: dict[str, str] | None = None,
    environment: dict[str, str] | None = None,
    switch: str | None = None,
    dropped: tuple[str, ...] = (),
    unset: tuple[str, ...] = (),
) -> str:
    """The command that resumes a run started with `args`: the interpreter that runs this process (the
    README's `.venv/bin/python` rather than whatever `python` means in the user's shell), the environment
    settings `environment` (`chosen_environment()` as the run started; now when None), the same arguments but
    for `settings` ({flag: value}, in place of any value given), then `--ckpt_path last`. A script resumed by a
    flag of its own (`switch`: scripts/generate.py's `--resume`) gets that flag instead, and loses the flags
    without a value in `dropped` (its `--force`); the flags in `unset` go with their values (its `--max-time`, so
    that the resume runs to the end). Words after a `--` are another program's (scripts/ablate.py's for fit.py):
    kept as they are, after the rest."""
    settings = {**(settings or {}), **({} if switch else {"--ckpt_path": "last"})}
    args, tail = (args[: args.index("--")], args[args.index("--") :]) if "--" in args else (args, [])
    kept, skip = [], False
    for arg in args:
        if skip:
            skip = False
        elif arg == switch or arg in dropped:
            continue
        elif arg in settings or arg in unset:
            skip = True
        elif arg.split("=", 1)[0] not in (*settings, *unset):
            kept.append(arg)
    environment = chosen_environment() if environment is None else environment
    env = [f"{name}={shlex.quote(value)}" for name, value in environment.items()]
    given = [word for flag, value in settings.items() for word in (flag, value)] + [switch] * bool(switch)
    return " ".join([*env, shlex.join([program(sys.executable or "python"), script, *kept, *given, *tail])])


def program(path: str) -> str:
    """How to name the program at `path` in a command a user pastes: relative to the working folder when it lies
    below it (`.venv/bin/python`, `./python`), else the absolute path; never a bare name that PATH would resolve
    to another program (or to none: the venv's `wandb` is on PATH only inside the venv)."""
    relative = os.path.relpath(path)
    if relative.startswith(".."):
        return path
    return relative if os.sep in relative else os.path.join(".", relative)


def help_key() -> str:
    """The versions a stored help was written under (Python, jsonargparse, Lightning, torch): what, beside our code,
    decides what the parser prints. A stored help is printed only under the same key."""
    from importlib.metadata import version

    versions = [f"{name} {version(name)}" for name in ("jsonargparse", "lightning", "torch")]
    return "; ".join([f"python {sys.version_info.major}.{sys.version_info.minor}", *versions])


def stored_help(path: Path, key: str) -> str | None:
    """The help stored in `path` (its first line `# key: KEY`, then the text), if it was written under `key`."""
    try:
        first, _, text = path.read_text(encoding="utf-8").partition("\n")
    except OSError:
        return None
    return text if first == f"# key: {key}" else None


def answer_stored_help(path: Path) -> None:
    """With `-h` or `--help` alone on the command line: print the help stored in `path` and exit 0, if it was written
    under these versions (`help_key`; else the parser answers, seconds later). scripts/fit.py's and prepare.py's
    parsers are jsonargparse's, built from Lightning's classes after seconds of imports; their text, 80 columns
    wide, is written by scripts/regenerate.py, and tests/test_imports.py fails while it differs from the parser's
    under the same versions. With anything else on the command line (`--config RECIPE --help`: that recipe's values
    as the defaults) the parser answers itself."""
    if sys.argv[1:] not in (["-h"], ["--help"]):
        return
    if (text := stored_help(path, help_key())) is None:
        return
    try:
        sys.stdout.write(text)
        sys.stdout.flush()
    except BrokenPipeError:  # `fit.py --help | head`: the reader is gone, as `cat` ends
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        raise SystemExit(141) from None
    raise SystemExit(0)
