"""Progress for long work: a bar on a terminal, one line a stage (or every N steps) in a file, the same line in every
command (`progress_line`): data preparation, training (training/progress.py), evaluation and corpus generation
(inference/generation/run.py). All decide by `is_terminal()`: a bar in a file is either nothing until the end or
thousands of carriage returns in a scheduler's log."""

from __future__ import annotations

import contextlib
import sys
import time
from datetime import timedelta


def is_terminal(stream=None) -> bool:
    """Whether `stream` (standard error by default) is a terminal."""
    stream = sys.stderr if stream is None else stream
    try:
        return stream.isatty()
    except (AttributeError, ValueError):  # replaced or closed
        return False


def clock(seconds: float) -> str:
    """Seconds as H:MM:SS."""
    return str(timedelta(seconds=int(max(seconds, 0))))


def eta(done: float, total: float | None, elapsed: float, limit: float | None = None) -> str | None:
    """The time left at the rate so far, no more than `limit` seconds (what a time limit leaves) when given; None
    when it cannot be told (nothing done, or no known end, and no limit)."""
    left = None
    if total is not None and 0 < done <= total and 0 < total < float("inf"):
        left = elapsed / done * (total - done)
    if limit is not None:
        left = limit if left is None else min(left, limit)
    return None if left is None else clock(left)


def progress_line(head: str, elapsed: float, rates: dict[str, float] | None = None, left: str | None = None) -> str:
    """`HEAD | 12.3 sentences/s | elapsed 0:00:52 | eta 0:00:31`: `rates` ({unit: count so far}) per second of
    `elapsed`, shown with a decimal below 100; `left` from `eta`, left out when None."""
    parts = [head]
    if elapsed > 0:
        parts += [f"{n / elapsed:,.{1 if n / elapsed < 100 else 0}f} {unit}/s" for unit, n in (rates or {}).items()]
    parts.append(f"elapsed {clock(elapsed)}")
    return " | ".join(parts + ([f"eta {left}"] if left is not None else []))


class StageBar:
    """A bar over one stage of work counted in `unit`s (pairs/s and the time left when `total` is known) on a
    terminal. In a file, nothing (the stage's own closing line says what it did), or with `every` one line
    each time another `every` units are done, in training/progress.py's style:

        translating: 640/1,000 sentences | 12.3 sentences/s | elapsed 0:00:52 | eta 0:00:31

    `update(n, share)` may say which share of the whole work the n units were (a sentence's cost grows with its
    length, and translate_many goes shortest first): the time left is then told from the shares, not the count.
    Use as a context manager."""

    def __init__(
        self,
        description: str,
        total: int | None = None,
        unit: str = "pairs",
        enabled: bool | None = None,
        every: int | None = None,
    ):
        self.description, self.total, self.unit, self.every = description, total, unit, every
        self.enabled = is_terminal() if enabled is None else enabled
        self._bar = None
        self.start = time.monotonic()
        self.done, self.shared = 0, 0.0

    def __enter__(self) -> StageBar:
        if self.enabled:
            from tqdm.auto import tqdm

            self._bar = tqdm(total=self.total, desc=self.description, unit=f" {self.unit}", unit_scale=True, file=sys.stderr)
        return self

    def update(self, n: int, share: float | None = None) -> None:
        before, self.done = self.done, self.done + n
        self.shared = self.shared + share if share is not None else None
        if self._bar is not None:
            self._bar.update(n)
        elif self.every and self.done // self.every > before // self.every:
            print(self.line(), file=sys.stderr, flush=True)

    def line(self) -> str:
        elapsed = time.monotonic() - self.start
        of = f"/{self.total:,}" if self.total is not None else ""
        left = eta(self.shared, 1.0, elapsed) if self.shared is not None else eta(self.done, self.total, elapsed)
        return progress_line(f"{self.description}: {self.done:,}{of} {self.unit}", elapsed, {self.unit: self.done}, left)

    def __exit__(self, *exc) -> None:
        if self._bar is not None:
            self._bar.close()


@contextlib.contextmanager
def translation_progress(sources: list[str], batch_size: int, description: str = "translating"):
    """The `on_batch` callback of `translate_many` (scripts/evaluate.py's, and the test at the end of scripts/fit.py):
    a bar on a terminal; in a file (nohup, SLURM) a line about every tenth of the work (at least a batch, at most 50
    batches apart), its time left told from the characters translated (translate_many goes shortest first)."""
    every = max(batch_size, min(len(sources) // 10, 50 * batch_size))
    characters = sum(len(s) for s in sources) or 1
    with StageBar(description, len(sources), unit="sentences", every=every) as bar:
        yield lambda batch: bar.update(len(batch), sum(len(s) for s in batch) / characters)
