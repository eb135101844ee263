"""The errors the model layer raises for bad input, in the lowest layer so that every other one may raise
and catch them. The data files' errors are in datamodules/errors.py, the checkpoints' in training/errors.py;
`training.faults.USER_ERRORS` gathers them all.

Each is one short line that names what is wrong and where; the scripts print it after "error: " and exit
with status 2 (`training.faults.exit_on_user_error`). Raise them `from None`: the user needs the path or
the argument, not the traceback of the library that noticed.
"""

from __future__ import annotations


class HyperparameterError(ValueError):
    """A module's argument is out of range or inconsistent with another (`models.checks`): one
    short line naming the class, the argument and its value, raised in `__init__` before any work."""


class InputError(ValueError):
    """Input that a script or `translate` refuses (an empty sentence, say); the message says why."""
