"""The errors of the data layer: data files that are missing, malformed, or whose prepared copy cannot be
written. One short line each, naming the file (and the line, where there is one); raise them `from None`.
`DataNotFoundError` and `DataFormatError` are bad input: the scripts exit with status 2
(`training.faults.USER_ERRORS`); `DataCacheError` is an environment fault: status 1.
"""

from __future__ import annotations


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
