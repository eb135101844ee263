"""Errors for bad input, so scripts can catch them and print one line (see `training.loading.USER_ERRORS`)."""

from __future__ import annotations


class DataNotFoundError(FileNotFoundError):
    """The data files are not where the data module looks, and could not be downloaded.

    The message names the folder that was searched and the files expected there. Raise it
    `from None`: the caller needs the missing paths, not a urllib traceback.
    """


class DataFormatError(ValueError):
    """A data file is there but unreadable: not the encoding, format or size it should have, or
    holding no examples. The message is one line that names the file and says where it goes wrong."""


class CorpusFormatError(DataFormatError):
    """A corpus file is malformed; the message names the file and the line number (or the line counts)."""


class HyperparameterError(ValueError):
    """A module's argument is out of range or inconsistent with another (`datamodules.checks`): one
    short line naming the class, the argument and its value, raised in `__init__` before any work."""


class DataCacheError(OSError):
    """The prepared (tokenized, memory-mapped) copy of a corpus cannot be written: the cache folder is
    read-only, missing its parent, or its disk is full. The message names the folder and the way out."""
