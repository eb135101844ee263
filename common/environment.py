"""The machine and interpreter a script runs on, as they concern a user: `require_environment()`, called by every
script before it imports anything installed, makes another Python (the system's, a venv without the install) one line
naming the command that works rather than a ModuleNotFoundError traceback; `quiet_cpu_compile()` drops a note of
torch's that no user can act on.

The standard library only: it runs where nothing else is installed."""

from __future__ import annotations

import importlib.util
import logging
import os
import shlex
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
VENV_PYTHON = ROOT / ".venv" / "bin" / "python"
INSTALL = 'python3 -m venv .venv && .venv/bin/pip install -e ".[dev]"'  # the README's, from the repository's root
# What every script imports first, installed by pyproject.toml's dependencies: what another Python lacks.
NEEDED = ("torch", "lightning")


def _installed(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False


def _as_typed(path: Path) -> str:
    """`path` relative to the working folder when it is inside it (`.venv/bin/python` from the root), else whole."""
    try:
        return str(path.relative_to(Path.cwd()))
    except ValueError:
        return str(path)


def require_environment() -> None:
    """Exit with one line and status 2 when this interpreter lacks the packages the scripts import."""
    missing = [name for name in NEEDED if not _installed(name)]
    if not missing:
        return
    command = shlex.join([_as_typed(VENV_PYTHON), *sys.argv])
    # A venv's python is a link to the base interpreter: the venv it runs is told by sys.prefix.
    if VENV_PYTHON.exists() and os.path.realpath(sys.prefix) != os.path.realpath(VENV_PYTHON.parents[1]):
        how = f"the project's environment, installed once from the repository's root by: {INSTALL}"
    else:  # no venv yet, or this is the venv and its install is incomplete
        how = f"once the project's environment is installed, from the repository's root: {INSTALL}"
    print(f"error: this Python ({sys.executable}) has no {' or '.join(missing)}: run {command} ({how})", file=sys.stderr)
    raise SystemExit(2)


def _not_the_cuda_home_note(record: logging.LogRecord) -> bool:
    return not record.getMessage().startswith("No CUDA runtime is found")


def quiet_cpu_compile() -> None:
    """Drop torch's note (torch/utils/cpp_extension.py, logged as inductor imports it) that the machine has a
    CUDA toolkit and no GPU: a compile on the CPU needs none, and nothing else from that logger is dropped."""
    logging.getLogger("torch.utils.cpp_extension").addFilter(_not_the_cuda_home_note)  # once: the same filter
