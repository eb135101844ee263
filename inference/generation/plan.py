"""Decoding a whole corpus (scripts/generate.py): how the input (input.py) is cut into batches and shards, made from the
input and the settings alone, how the shards are written and put together, and the record of what made the output
(docs/guide/corpus-generation.md says what the output folder holds)."""

from __future__ import annotations

import bisect
import functools
import hashlib
import json
import os
import shutil
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from common.errors import DataFormatError, InputError
from common.files import atomic_write_text, remove_stale_temporaries
from datamodules.cache import digest

RECORD, SHARDS, PLAN = "generation.json", "shards", "plan.json"


@dataclass(frozen=True)
class Plan:
    """The batches (line numbers, shortest first) and the shards (ranges of batch numbers) of one input."""

    batches: list[list[int]]
    shards: list[range]
    lengths: list[int]  # each line's source tokens (0: an empty line, not decoded)

    @functools.cached_property
    def _starts(self) -> list[int]:
        return [r.start for r in self.shards]

    def shard_of(self, batch: int) -> int:
        return bisect.bisect_right(self._starts, batch) - 1

    def lines_of(self, shard: int) -> list[int]:
        return [i for b in self.shards[shard] for i in self.batches[b]]

    def digest(self) -> str:
        return digest([self.batches, [[r.start, r.stop] for r in self.shards]])


def lines_digest(*columns: list[str] | None) -> str:
    """The sha256 of the input's columns (sources, references), fed line by line: a WMT-sized corpus is never
    built into one string to be hashed."""
    h = hashlib.sha256()
    for column in columns:
        for line in column or ():
            h.update(line.encode("utf-8") + b"\n")
        h.update(b"\0")
    return h.hexdigest()


def make_plan(lengths: list[int], max_tokens: int, batch_size: int | None, shard_size: int) -> Plan:
    """The batches and shards of lines of `lengths` tokens (0: skipped): sorted by length, packed into batches of at
    most `max_tokens` padded tokens (and `batch_size` lines), consecutive batches grouped into shards of about
    `shard_size` lines."""
    from datamodules.samplers import pack_sorted  # torch's sampler classes: here, not before generate.py's arguments

    order = sorted((i for i, n in enumerate(lengths) if n), key=lambda i: (lengths[i], i))
    sorted_lengths = np.asarray([lengths[i] for i in order], dtype=np.int64)
    packed = np.split(np.asarray(order, dtype=np.int64), pack_sorted(sorted_lengths, max_tokens)) if order else []
    batches = []
    for batch in packed:
        step = batch_size or len(batch)
        batches += [batch[i : i + step].tolist() for i in range(0, len(batch), step)]
    shards, start, lines = [], 0, 0
    for b, batch in enumerate(batches):
        lines += len(batch)
        if lines >= shard_size or b == len(batches) - 1:
            shards.append(range(start, b + 1))
            start, lines = b + 1, 0
    return Plan(batches, shards, list(lengths))


def measure(tokenizer, sentences: list[str], max_len: int) -> tuple[list[int], int]:
    """Each sentence's source tokens with `<eos>`, within `max_len` (0 for an empty line), and how many were longer
    (the engines truncate them to the model's max_len)."""
    lengths, over = [], 0
    for s in sentences:
        n = len(tokenizer.encode(s)) + 1 if s else 0
        over += n > max_len
        lengths.append(min(n, max_len))
    return lengths, over


# ------------------------------------------------------------------------------------------ the shards


def shard_path(folder: Path, shard: int) -> Path:
    return folder / SHARDS / f"{shard:05d}.jsonl"


def complete_shards(folder: Path, count: int) -> list[int]:
    """The shards written (each is whole: written under a temporary name and renamed)."""
    return [k for k in range(count) if shard_path(folder, k).is_file()]


def write_shard(folder: Path, shard: int, outputs: dict[int, list[str]]) -> None:
    text = "".join(json.dumps([i, outputs[i]], ensure_ascii=False) + "\n" for i in sorted(outputs))
    atomic_write_text(shard_path(folder, shard), text)


def read_shard(folder: Path, plan: Plan, shard: int, nbest: int) -> dict[int, list[str]]:
    """A written shard's outputs, refused unless they are its planned lines' `nbest` outputs each: an output put
    together from a shard that lacks lines would give those lines empty outputs, silently."""
    path, lines = shard_path(folder, shard), sorted(plan.lines_of(shard))
    try:
        with open(path, encoding="utf-8") as f:
            outputs = {i: row for i, row in map(json.loads, f)}
        whole = sorted(outputs) == lines and all(len(row) == nbest for row in outputs.values())
    except (ValueError, TypeError):  # not JSON, or not [line, [output, ...]] rows
        whole = False
    if not whole:
        outputs_of = "outputs" if nbest == 1 else f"{nbest}-best outputs"
        raise DataFormatError(
            f"{path} does not hold the {outputs_of} of its {len(lines)} planned lines (edited or cut short): remove "
            "it and resume again to decode them"
        )
    return outputs


# ------------------------------------------------------------------------------------------ the output folder


def file_sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 24), b""):
            h.update(block)
    return h.hexdigest()


def model_record(paths: list[str]) -> list[dict]:
    """Each model file's (or export folder's) path, size and sha256 (a folder's: of its files' names and bytes)."""
    out = []
    for path in map(Path, paths):
        files = sorted(p for p in path.rglob("*") if p.is_file()) if path.is_dir() else [path]
        h = hashlib.sha256()
        for p in files:
            h.update(f"{p.relative_to(path) if path.is_dir() else p.name}\0{file_sha256(p)}\0".encode())
        sha = file_sha256(path) if path.is_file() else h.hexdigest()
        out.append({"path": str(path.resolve()), "size": sum(p.stat().st_size for p in files), "sha256": sha})
    return out


def outputs_of(folder: Path, prefix: str, src_lang: str, tgt_lang: str, refs: bool) -> list[Path]:
    names = [f"{prefix}.{src_lang}", f"{prefix}.{tgt_lang}"] + [f"{prefix}.ref.{tgt_lang}"] * refs
    return [folder / name for name in names]


def prepare_folder(folder: Path, plan_record: dict, outputs: list[Path], resume: bool, force: bool) -> list[int]:
    """Make `folder` ready for a run of `plan_record` and return the shards already done: refuse an existing output
    without --resume or --force (touching nothing), refuse a resume of another plan, model or options; with --force
    remove this script's files there (nothing else); keep the plan beside the shards."""
    plan_file, ours = folder / SHARDS / PLAN, [folder / RECORD, folder / SHARDS, *outputs]
    found = [p for p in ours if p.exists()]
    if found and not (resume or force):
        raise InputError(
            f"{folder} holds an output already ({found[0].name}): add --resume to go on with it or --force to replace it"
        )
    if resume and plan_file.is_file():
        before = json.loads(plan_file.read_text(encoding="utf-8"))
        changed = [k for k in sorted(set(before) | set(plan_record)) if before.get(k) != plan_record.get(k)]
        if changed:
            raise InputError(
                f"--resume: {folder} was started with another {', '.join(changed)} ({plan_file}): resume with the same "
                "model, input and options, or start again with --force"
            )
    if force and not resume:
        for path in found:
            shutil.rmtree(path) if path.is_dir() and not path.is_symlink() else path.unlink()
    (folder / SHARDS).mkdir(parents=True, exist_ok=True)
    remove_stale_temporaries(folder / SHARDS)
    if not plan_file.is_file():
        atomic_write_text(plan_file, json.dumps(plan_record, indent=1, sort_keys=True) + "\n")
    return complete_shards(folder, plan_record["shards"])


def assemble(
    folder: Path,
    plan: Plan,
    sources: list[str],
    refs: list[str] | None,
    names: list[Path],
    nbest: int,
    tag: str,
    keep_closest: bool = False,
) -> dict:
    """The final files from the shards, in input order (`names`: source, outputs, references); the counts. With
    `keep_closest`, each line's one output closest to its reference (`closest`) rather than all `nbest`."""
    outputs: dict[int, list[str]] = {}
    for k in range(len(plan.shards)):
        outputs.update(read_shard(folder, plan, k, nbest))
    src, hyp, ref, empty_outputs = [], [], [], 0
    for i, line in enumerate(sources):
        row = outputs.get(i, [""] * nbest)
        if keep_closest and refs is not None:
            row = [closest(row, refs[i])]
        empty_outputs += sum(1 for h in row if line and not h)
        src += [line] * len(row)
        hyp += [f"{tag} {h}" if tag and line else h for h in row]
        ref += [refs[i]] * len(row) if refs is not None else []
    for path, lines in zip(names, (src, hyp, ref)):
        atomic_write_text(path, "".join(f"{line}\n" for line in lines))
    return {"outputs": len(hyp), "empty_outputs": empty_outputs}


def closest(outputs: list[str], reference: str) -> str:
    """Of `outputs` (best first), the one with the highest sentence BLEU against `reference` (sacrebleu's, smoothed
    'exp', effective order), the likelier of equals: Kim & Rush (2016)'s sequence-level interpolation, which trains
    a student on the teacher's n-best output nearest the reference."""
    from sacrebleu import sentence_bleu  # the scorer, imported only for the runs that keep the closest

    scores = [sentence_bleu(h, [reference]).score for h in outputs]
    return outputs[scores.index(max(scores))]


def write_record(folder: Path, record: dict, started: float) -> None:
    """generation.json, written last: the output is complete once it is there. The shards go then."""
    record = {**record, "seconds": round(time.time() - started, 1)}
    atomic_write_text(folder / RECORD, json.dumps(record, indent=1, ensure_ascii=False) + "\n")
    shutil.rmtree(folder / SHARDS, ignore_errors=True)


def launching_process() -> bool:
    """Whether this is the process that a user started, rank 0 (Lightning's own children, or a cluster's processes,
    carry their ranks in the environment): the one that prepares the folder and puts the output together."""
    ranks = (os.environ.get(name, "0") for name in ("RANK", "NODE_RANK", "LOCAL_RANK", "SLURM_PROCID"))
    return all(rank == "0" for rank in ranks)
