"""Every error the project raises for bad input or a faulty environment, in the lowest layer, so that every
other one may raise and catch them. `common.exits.USER_ERRORS` names the bad-input ones.

Each is one short line that names what is wrong and where; the scripts print it after "error: " and exit
with status 2 for bad input, 1 for an environment fault (`common.exits.exit_on_user_error`). Raise them
`from None`: the user needs the path or the argument, not the traceback of the library that noticed.
"""

from __future__ import annotations

# ---------------------------------------------------------------------------------------------- the model's


class HyperparameterError(ValueError):
    """A module's argument is out of range or inconsistent with another (`models.checks`): one
    short line naming the class, the argument and its value, raised in `__init__` before any work."""


class InputError(ValueError):
    """Input that a script or `translate` refuses (an empty sentence, say); the message says why."""


# ---------------------------------------------------------------------------------------------- the data's


class DataNotFoundError(FileNotFoundError):
    """The data files are not where the data module looks, and could not be downloaded.

    The message names the folder that was searched and the files expected there."""


class DataFormatError(ValueError):
    """A data file is there but unreadable: not the encoding, format or size it should have, or
    holding no examples. The message is one line that names the file and says where it goes wrong."""


class CorpusFormatError(DataFormatError):
    """A corpus file is malformed; the message names the file and the line number (or the line counts)."""


class DataCacheError(OSError):
    """The prepared (tokenized, memory-mapped) copy of a corpus cannot be written: the cache folder is
    read-only, under a regular file, or its disk is full. The message names the folder and the way out.
    An environment fault, not bad input: the scripts exit with status 1."""


# ---------------------------------------------------------------------------------------------- checkpoints and runs


class CheckpointError(Exception):
    """A checkpoint is missing, unreadable, damaged, or not of the task that was asked for."""


class TrainingDivergedError(RuntimeError):
    """The training loss became NaN or infinite; the message names the step and epoch (scripts/fit.py: status 1)."""


# ---------------------------------------------------------------------------------------------- outputs


class OutputError(OSError):
    """An output could not be written (disk full, file-size limit, read-only or missing folder, ...):
    `str()` is one line naming the output's path; `errno` is the underlying error's."""

    def __init__(self, message: str, errno_: int | None = None):
        super().__init__(message)
        self.message, self.errno = message, errno_

    def __str__(self) -> str:
        return self.message
