"""The processes of scripts/generate.py: Lightning's prediction loop, on one process or under DDP, over the shards of a
plan (plan.py), each rank writing a shard whole once its batches are decoded; a stop ends each rank once its shard is
written (docs/guide/corpus-generation.md, "Processes" and "Stopping and resuming")."""

from __future__ import annotations

import signal
import sys
import time
import warnings
from pathlib import Path

import lightning as L
import numpy as np
from torch import nn
from torch.utils.data import DataLoader, Dataset, Sampler

from common import signals
from common.progress import eta, progress_line
from common.runs import launcher_pid

from .plan import Plan, complete_shards, write_shard


def batch_seed(seed: int, batch: int) -> int:
    """The sampling seed of planned batch `batch`: a function of the run's seed and the batch alone."""
    return int(np.random.SeedSequence([seed, batch]).generate_state(1)[0] >> 1)


def decode(engine, sentences: list[str], options, ensemble=()) -> list[list[str]]:
    """Each sentence's `options.nbest` outputs, best first: the same call as `translate` makes."""
    return _translate(engine, sentences, options, ensemble)


def check_decodes(engine, sentence: str, options, ensemble=()) -> None:
    """One sentence decoded as every batch is, its outputs dropped: what the engine refuses (an option, a language)
    is one line before the output folder is touched."""
    _translate(engine, [sentence], options, ensemble)


def _translate(engine, sentences: list[str], options, ensemble) -> list[list[str]]:
    extra = {"ensemble": list(ensemble)} if ensemble else {}
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="sentence .* truncated")  # counted once, before the run
        if options.nbest == 1:
            return [[text] for text in engine.translate(sentences, options=options, **extra)]
        return [[h.text for h in row] for row in engine.translate(sentences, nbest=options.nbest, options=options, **extra)]


IDLE = -1  # the one item of a rank with no shard left: Lightning refuses a process an empty loader


class PlannedBatches(Dataset):
    """Planned batch b: (b, its line numbers, their sentences); IDLE: nothing."""

    def __init__(self, plan: Plan, sources: list[str]):
        self.plan, self.sources = plan, sources

    def __len__(self) -> int:
        return len(self.plan.batches)

    def __getitem__(self, b: int):
        lines = self.plan.batches[b] if b != IDLE else []
        return b, lines, [self.sources[i] for i in lines]


class ShardSampler(Sampler[int]):
    """This rank's batch numbers: the batches of its shards, shard after shard; none after a stop; IDLE alone when
    it has no shard (more processes than shards left)."""

    def __init__(self, plan: Plan, max_time: float | None, started: float):
        self.plan, self.max_time, self.started = plan, max_time, started
        self.shards: list[int] = []
        self.timed_out = False

    def assign(self, remaining: list[int], rank: int, world: int) -> None:
        self.shards = remaining[rank::world]

    def __iter__(self):
        if not self.shards:
            yield IDLE
        for k in self.shards:
            if self.max_time is not None and time.monotonic() - self.started >= self.max_time:
                self.timed_out = True
            if self.stopping():
                return
            yield from self.plan.shards[k]

    def __len__(self) -> int:
        return sum(len(self.plan.shards[k]) for k in self.shards) or 1

    def stopping(self) -> bool:
        """Whether the run stops at the next shard: a signal was noted (`common.signals.defer`) or the time is up."""
        return signals.received() is not None or self.timed_out

    def stop_reason(self) -> tuple[str | None, int | None]:
        """Why the run stopped early (a signal after the time limit wins) and the signal, if any."""
        signum = signals.received()
        if signum is not None:
            return signal.Signals(signum).name, signum
        return ("the time limit (--max-time)" if self.timed_out else None), None


class Generation(L.LightningModule):
    """Decodes planned batches with an engine (this project's `Translator` or CTranslate2's) and writes each shard
    once its batches are done. The torch engine's networks are submodules, so Lightning puts them on the rank's
    device (no DDP wrapper: prediction trains nothing)."""

    def __init__(self, engine, options, plan: Plan, folder: Path, sampler: ShardSampler, ensemble=(), every_s: float = 30.0):
        super().__init__()
        nets = [m.net for m in (engine, *ensemble) if isinstance(getattr(m, "net", None), nn.Module)]
        self.nets = nn.ModuleList(nets)
        self.engine, self.ensemble, self.options, self.plan, self.folder = engine, list(ensemble), options, plan, folder
        self.sampler, self.every_s = sampler, every_s
        self.open: dict[int, list[str]] = {}
        self.skipping = False  # the shard under way is left to the resume: a stop came before its first batch
        self.total = sum(1 for n in plan.lengths if n)
        # Lines and source tokens of each shard, once: progress lines sum them rather than a WMT-sized plan's lines.
        self.shard_sizes = [(len(ls), sum(plan.lengths[i] for i in ls)) for ls in map(plan.lines_of, range(len(plan.shards)))]

    def setup(self, stage: str) -> None:
        done = complete_shards(self.folder, len(self.plan.shards)) if self.trainer.is_global_zero else None
        done = set(self.trainer.strategy.broadcast(done, src=0))
        self.sampler.assign([k for k in range(len(self.plan.shards)) if k not in done], self.global_rank, self.trainer.world_size)
        self.at_start, self.started, self.printed = self._done(), time.monotonic(), time.monotonic()

    def on_predict_start(self) -> None:
        launcher = self.trainer.strategy.launcher
        # Again: Lightning put its SIGTERM handler in front of ours.
        signals.defer(getattr(launcher, "procs", ()), again=True, forward=True, launcher=launcher_pid(self.trainer))

    def predict_step(self, batch, batch_idx: int) -> None:
        b, lines, sentences = batch
        if b == IDLE:
            return
        shard = self.plan.shard_of(b)
        if b == self.plan.shards[shard][0]:
            # Decided once a shard, at its first batch: a stop that comes later, even before a batch the sampler has
            # already chosen, lets the shard finish; one that came before skips all of it, not its first batch alone.
            self.skipping = self.sampler.stopping()
        if self.skipping:
            return
        options = self.options
        if options.sampling:
            options = options.replace(seed=batch_seed(options.seed, b))
        self.open.update(zip(lines, decode(self.engine, sentences, options, self.ensemble)))
        if b == self.plan.shards[shard][-1]:
            write_shard(self.folder, shard, self.open)
            self.open = {}
            self._progress(force=True)
        else:
            self._progress()

    def on_predict_end(self) -> None:
        self.trainer.strategy.barrier("generation")  # every rank's shards written before rank 0 reads them

    def _done(self) -> tuple[int, int]:
        """Lines and source tokens decoded so far: in the shards written (by any rank) and in this rank's open one."""
        done = [self.shard_sizes[k] for k in complete_shards(self.folder, len(self.plan.shards))]
        return sum(n for n, _ in done) + len(self.open), sum(t for _, t in done) + sum(self.plan.lengths[i] for i in self.open)

    def _progress(self, force: bool = False) -> None:
        now = time.monotonic()
        if not self.trainer.is_global_zero or not (force or now - self.printed >= self.every_s):
            return
        self.printed = now
        (lines, tokens), (lines0, tokens0), elapsed = self._done(), self.at_start, now - self.started
        rates = {"sentences": lines - lines0, "tok": tokens - tokens0}
        left = eta(lines - lines0, self.total - lines0, elapsed)
        print(progress_line(f"generating: {lines:,}/{self.total:,} sentences", elapsed, rates, left), file=sys.stderr, flush=True)


def _as_is(batch):
    return batch


def loader(plan: Plan, sources: list[str], sampler: ShardSampler) -> DataLoader:
    return DataLoader(PlannedBatches(plan, sources), batch_size=None, sampler=sampler, collate_fn=_as_is)
