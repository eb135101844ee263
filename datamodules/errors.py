"""Errors the data modules raise for bad input, so scripts can catch them and print one line."""

from __future__ import annotations


class DataNotFoundError(FileNotFoundError):
    """The data files are not where the data module looks, and could not be downloaded.

    The message names the folder that was searched and the files expected there. Raise it
    `from None`: the caller needs the missing paths, not a urllib traceback.
    """


class CorpusFormatError(ValueError):
    """A corpus file is malformed; the message names the file and the line number (or the line counts)."""
