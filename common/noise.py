"""Lightning's and torch's messages that no user of this project can act on, silenced where they start.

- Lightning's `💡 Tip: ... litlogger` line, printed at every Trainer: an advertisement (no setting turns it off).
- Lightning's "Trainer already configured with model summary callbacks: [...]. Skipping setting a default
  `ModelSummary` callback.", printed because the CLI passes its own summary (callbacks.ModelSummaryWithoutZeroFlops).
- Lightning's "The dirpath has changed from ... won't be reloaded", from each `last.ckpt` callback
  (training/checkpointing.last_checkpoints) of a resumed run: a resumed run writes to a new folder by design
  (training/resume.keep_earlier_checkpoints), and those callbacks have nothing to carry over but their one file.
- Lightning's "Time limit reached. Elapsed time is ... Signaling Trainer to stop.": the run's own line
  (training/stopping.report_time_limit) says it, with where it stopped and the command that resumes it.
- Lightning's "Precision bf16-mixed is not supported by the model summary ... Using 32 bits instead": under a
  mixed precision the weights are float32, and 32 bits is the true size.
- Lightning's "It is recommended to use `self.log('val/bleu', ..., sync_dist=True)` ..." under DDP, for val/ and
  test/ bleu and chrf: every process holds the same corpus score, of the hypotheses gathered from all of them
  (tasks/seq2seq.Seq2SeqTransformer._score), so there is nothing to accumulate.
- torch's "No CUDA runtime is found, using CUDA_HOME=..." when a compile on the CPU loads its C++ extension tools
  on a machine with a CUDA toolkit and no GPU (common/environment.quiet_cpu_compile).
- torch's `isinstance(treespec, LeafSpec)` FutureWarning, raised by Lightning's own `utilities/_pytree.py`
  (torch 2.14 deprecated the class that Lightning 2.6 still builds); nothing in this project calls it.

And while scripts/generate.py's prediction runs (`quiet_prediction`), Lightning's notes about devices, workers and
a `predict_step` that returns nothing: they say nothing about the corpus being decoded.

Each is matched narrowly, so anything else from the same places still shows. The standard library only: fit.py
and generate.py import this before torch loads. `Total
FLOPs: 0` in the model summary is callbacks.ModelSummaryWithoutZeroFlops's.
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
