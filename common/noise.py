"""Lightning's and torch's messages that no user of this project can act on, silenced where they start. Each is
matched narrowly, so anything else from the same places still shows:

- Lightning's `💡 Tip: ... litlogger` line, printed at every Trainer: an advertisement (no setting turns it off).
- Lightning's "Trainer already configured with model summary callbacks ... Skipping setting a default
  `ModelSummary` callback.": the CLI passes its own (callbacks.ModelSummaryWithoutZeroFlops, which also drops the
  summary's `Total FLOPs: 0`).
- Lightning's "The dirpath has changed from ... won't be reloaded", from each `last.ckpt` callback of a resumed run
  (training/checkpointing.last_checkpoints): it writes to a new folder by design
  (training/resume.keep_earlier_checkpoints), and has nothing to carry over but its one file.
- Lightning's "Time limit reached. Elapsed time is ...": training/stopping.report_time_limit says it, with where it
  stopped and the command that resumes.
- Lightning's "Precision bf16-mixed is not supported by the model summary ... Using 32 bits instead": under a mixed
  precision the weights are float32, and 32 bits is the true size.
- Lightning's "It is recommended to use `self.log('val/bleu', ..., sync_dist=True)`" under DDP, for val/ and test/
  bleu and chrf: every process holds the same corpus score (tasks/seq2seq.Seq2SeqTransformer._score).
- torch's "No CUDA runtime is found, using CUDA_HOME=..." (common/environment.quiet_cpu_compile).
- torch's `isinstance(treespec, LeafSpec)` FutureWarning, from Lightning's own `utilities/_pytree.py` (torch 2.14
  deprecated the class that Lightning 2.6 still builds).

And while scripts/generate.py's prediction runs (`quiet_prediction`), Lightning's notes about devices, workers and a
`predict_step` that returns nothing. The standard library only: fit.py and generate.py import this before torch loads.
"""

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
