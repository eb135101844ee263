"""The checkpoints' error, in the lowest layer that reads or writes them (training/loading.py,
training/averaging.py, training/cli.py; tasks and scripts raise it too). Bad input: the scripts print its
one line after "error: " and exit with status 2 (`training.faults.USER_ERRORS`)."""

from __future__ import annotations


class CheckpointError(Exception):
    """A checkpoint is missing, unreadable, damaged, or not of the task that was asked for."""
