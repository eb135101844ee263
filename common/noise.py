"""Lightning's and torch's messages that no user of this project can act on, silenced where they start, each matched
narrowly so that anything else from the same places still shows (docs/guide/faults-and-exits.md, "Messages silenced",
lists them and why). The standard library only: fit.py and generate.py import this before torch loads."""

from __future__ import annotations

import contextlib
import logging
import warnings

from common.environment import quiet_cpu_compile

_NOISE = ("litlogger", "Skipping setting a default `ModelSummary` callback", "Time limit reached. Elapsed time is")


class _DropLitLoggerTip(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        message = str(record.msg)
        return not any(noise in message for noise in _NOISE)


_TIP_FILTER = _DropLitLoggerTip()


def silence() -> None:
    """Install the filters (idempotent)."""
    for name in ("lightning.pytorch.utilities.rank_zero", "lightning.fabric.utilities.rank_zero"):
        logger = logging.getLogger(name)
        if _TIP_FILTER not in logger.filters:
            logger.addFilter(_TIP_FILTER)
    warnings.filterwarnings("ignore", message=r"`isinstance\(treespec, LeafSpec\)` is deprecated", category=FutureWarning)
    quiet_cpu_compile()
    warnings.filterwarnings("ignore", message=r"The dirpath has changed from .* won't be reloaded")
    warnings.filterwarnings("ignore", message=r"It is recommended to use `self.log\('(val|test)/(bleu|chrf)', \.\.\., sync_dist")
    warnings.filterwarnings("ignore", message=r"Precision \S+-mixed is not supported by the model summary")


@contextlib.contextmanager
def quiet_prediction():
    """`silence()`, and Lightning's notes about devices and workers off standard error, while a prediction runs and
    only then (a caller in the same process, a test say, keeps its logging)."""
    logger = logging.getLogger("lightning.pytorch")
    level = logger.level
    logger.setLevel(logging.WARNING)
    try:
        with warnings.catch_warnings():
            silence()
            for message in (".*does not have many workers.*", ".*GPU available but not used.*", ".*predict returned None.*"):
                warnings.filterwarnings("ignore", message=message)
            yield
    finally:
        logger.setLevel(level)
