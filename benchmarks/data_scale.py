"""How the corpus pipeline scales: preparation, a second run's start, memory and loader speed at N pairs.

Builds a synthetic WMT-like German–English corpus of N pairs (Multi30k pairs joined two by two: ~25 words
a side, line-aligned plain text, as WMT14's extracted files), then measures, each stage in a fresh process:

  prepare   ParallelCorpusDataModule.prepare_data(): tokenizer training (shared BPE) + encoding + cache
  start     a second run: imports, setup (memory-mapping the cache), the first training batch
  loader    target tokens/s of the training loader (sampling + collation, one process, no workers)
  ddp       (smallest N only) scripts/fit.py with 2 DDP processes on a fresh cache: how many build it

and prints one table (peak RSS from getrusage; RssAnon is the process's own memory, RssFile the mapped
cache pages, shared with every other process of the node through the page cache).

    .venv/bin/python benchmarks/data_scale.py --pairs 100000 1000000 4500000 --workdir /tmp/data_scale
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import random
import resource
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
MULTI30K = ROOT.parent / "shared" / "data" / "multi30k"

DATA = {
    "format": "aligned",
    "src_lang": "de",
    "tgt_lang": "en",
    "src_tokenizer": "bpe",
    "tgt_tokenizer": "bpe",
    "shared_vocab": True,
    "download": False,
}


def make_corpus(folder: Path, n: int, seed: int = 0) -> None:
    """train/val/test .de/.en of `n` training pairs, each two Multi30k pairs joined (~25 words a side)."""
    if (folder / "train.en").exists():
        return
    folder.mkdir(parents=True, exist_ok=True)
    de, en = (gzip.decompress((MULTI30K / f"train.{lang}.gz").read_bytes()).decode().splitlines() for lang in ("de", "en"))
    rng = random.Random(seed)
    for split, size in (("train", n), ("val", 3000), ("test", 3000)):
        with open(folder / f"{split}.de", "w") as fde, open(folder / f"{split}.en", "w") as fen:
            for _ in range(size):
                i, j = rng.randrange(len(de)), rng.randrange(len(de))
                fde.write(f"{de[i]} {de[j]}\n")
                fen.write(f"{en[i]} {en[j]}\n")


def memory() -> dict:
    """This process's peak RSS and current anonymous / file-backed RSS, in MiB."""
    status = dict(line.split(":", 1) for line in Path("/proc/self/status").read_text().splitlines())
    kib = lambda key: int(status[key].split()[0]) / 1024  # noqa: E731
    return {
        "peak_rss": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "rss_anon": kib("RssAnon"),
        "rss_file": kib("RssFile"),
    }


def module(args, folder: Path):
    from datamodules import ParallelCorpusDataModule

    return ParallelCorpusDataModule(
        str(folder),
        **DATA,
        src_vocab_size=args.vocab,
        tgt_vocab_size=args.vocab,
        max_tokens=args.max_tokens,
        max_len=args.max_len,
        val_prefix="val",
        test_prefix="test",
        cache_dir=str(folder / "cache"),
        tokenizer_sample=args.tokenizer_sample,
    )


def child_prepare(args, folder: Path) -> dict:
    dm = module(args, folder)
    t0 = time.monotonic()
    dm.corpus.tokenizers()
    t1 = time.monotonic()
    dm.prepare_data()
    t2 = time.monotonic()
    return {"tokenizer_s": t1 - t0, "encode_s": t2 - t1, **memory()}


def child_start(args, folder: Path, started: float) -> dict:
    import datamodules.corpus  # noqa: F401 (torch, lightning, tokenizers: what any training process has loaded)

    imports_s = time.monotonic() - started
    base = memory()
    dm = module(args, folder)
    dm.setup("fit")
    loader = dm.train_dataloader()
    batch = next(iter(loader))
    first_batch_s = time.monotonic() - started
    after_setup = memory()
    sampler = loader.batch_sampler
    t = time.monotonic()
    sampler.set_epoch(1)
    sampler.batches()
    epoch_draw_s = time.monotonic() - t
    tokens, n, t = 0, 0, time.monotonic()
    for batch in loader:
        tokens += int((batch.tgt[:, 1:] != 0).sum())
        n += 1
        if time.monotonic() - t > args.loader_seconds:
            break
    elapsed = time.monotonic() - t
    end = memory()
    return {
        "imports_s": imports_s,
        "first_batch_s": first_batch_s,
        "epoch_draw_s": epoch_draw_s,
        "batches": len(sampler),
        "tokens_per_s": tokens / elapsed,
        "batches_timed": n,
        "base_anon": base["rss_anon"],
        "setup_anon": after_setup["rss_anon"],
        "end_anon": end["rss_anon"],
        "end_file": end["rss_file"],
        "peak_rss": end["peak_rss"],
    }


def run_child(stage: str, args, folder: Path) -> tuple[dict, float]:
    cmd = [sys.executable, __file__, "--child", stage, "--folder", str(folder), *args.passthrough]
    t = time.monotonic()
    out = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, "PL_GLOBAL_SEED": "0"})
    wall = time.monotonic() - t
    if out.returncode:
        sys.exit(f"{stage} at {folder} failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1]), wall


def ddp_builds(args, folder: Path) -> tuple[int, int]:
    """scripts/fit.py, 2 DDP processes (gloo), a fresh cache: (cache folders of each kind, processes that encoded)."""
    cache = folder / "cache-ddp"
    cmd = [
        sys.executable, str(ROOT / "scripts" / "fit.py"), "--config", str(ROOT / "configs" / "multi30k.yaml"),
        "--data.data_dir", str(folder), "--data.val_prefix", "val", "--data.test_prefix", "test",
        "--data.cache_dir", str(cache), "--data.src_vocab_size", str(args.vocab), "--data.tgt_vocab_size", str(args.vocab),
        "--model.init_args.net.d_model", "32", "--model.init_args.net.nhead", "2", "--model.init_args.net.dim_feedforward", "64",
        "--model.init_args.net.num_encoder_layers", "1", "--model.init_args.net.num_decoder_layers", "1",
        "--trainer.max_steps", "2", "--trainer.limit_val_batches", "0", "--trainer.accelerator", "cpu",
        "--trainer.devices", "2", "--trainer.strategy", "ddp", "--trainer.logger", "false", "--test", "false",
        "--trainer.default_root_dir", str(folder / "ddp-run"), "--ema_decay", "null",
    ]  # fmt: skip
    out = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, "OMP_NUM_THREADS": "1"})
    if out.returncode:
        sys.exit(f"DDP run failed:\n{out.stderr[-3000:]}")
    return sum(len(list(cache.glob(f"{kind}-*"))) for kind in ("tokenizers", "ids")) // 2, out.stderr.count("Corpus encoded")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--pairs", type=int, nargs="+", default=[100_000, 1_000_000, 4_500_000])
    p.add_argument("--workdir", type=Path, default=Path("/tmp/data_scale"))
    p.add_argument("--vocab", type=int, default=32_000)
    p.add_argument("--max-tokens", type=int, default=4096)
    p.add_argument("--max-len", type=int, default=256)
    p.add_argument("--tokenizer-sample", type=int, default=1_000_000)
    p.add_argument("--loader-seconds", type=float, default=20.0)
    p.add_argument("--no-ddp", action="store_true", help="skip the 2-process preparation check")
    p.add_argument("--no-prepare", action="store_true", help="measure a second run only, on caches prepared before")
    p.add_argument("--child", choices=["prepare", "start"], help=argparse.SUPPRESS)
    p.add_argument("--folder", type=Path, help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child:
        started = time.monotonic()
        result = child_prepare(args, args.folder) if args.child == "prepare" else child_start(args, args.folder, started)
        print(json.dumps(result))
        return
    args.passthrough = [
        "--vocab", str(args.vocab), "--max-tokens", str(args.max_tokens), "--max-len", str(args.max_len),
        "--tokenizer-sample", str(args.tokenizer_sample), "--loader-seconds", str(args.loader_seconds),
    ]  # fmt: skip
    threads = os.environ.get("OMP_NUM_THREADS")
    print(f"# {os.cpu_count()} cores, affinity {sorted(os.sched_getaffinity(0))}, OMP_NUM_THREADS={threads}")
    print(f"# shared BPE {args.vocab}, max_tokens {args.max_tokens}, max_len {args.max_len}, sample {args.tokenizer_sample:,}")
    header = (
        "| pairs | corpus MiB | prepare s (tokenizer + encode) | prepare peak RSS MiB | cache MiB "
        "| 2nd run: first batch s (imports) | epoch draw s | loader target tok/s "
        "| RssAnon MiB: imports → setup → after loader | RssFile MiB | train peak RSS MiB |"
    )
    print(header)
    print("|" + "---|" * (header.count("|") - 1))
    for n in args.pairs:
        folder = args.workdir / f"{n}"
        make_corpus(folder, n)
        corpus = sum((folder / f"train.{x}").stat().st_size for x in ("de", "en")) / 2**20
        if args.no_prepare:
            prep, prep_wall = {"tokenizer_s": float("nan"), "encode_s": float("nan"), "peak_rss": float("nan")}, float("nan")
        else:
            prep, prep_wall = run_child("prepare", args, folder)
        cache = sum(f.stat().st_size for f in (folder / "cache").rglob("*") if f.is_file()) / 2**20
        start, _ = run_child("start", args, folder)
        print(
            f"| {n:,} | {corpus:,.0f} | {prep_wall:.0f} ({prep['tokenizer_s']:.0f} + {prep['encode_s']:.0f}) "
            f"| {prep['peak_rss']:,.0f} | {cache:,.0f} | {start['first_batch_s']:.1f} ({start['imports_s']:.1f}) "
            f"| {start['epoch_draw_s']:.2f} | {start['tokens_per_s'] / 1e6:.2f}M "
            f"| {start['base_anon']:,.0f} → {start['setup_anon']:,.0f} → {start['end_anon']:,.0f} | {start['end_file']:,.0f} "
            f"| {start['peak_rss']:,.0f} |",
            flush=True,
        )
    if not args.no_ddp:
        folder = args.workdir / f"{args.pairs[0]}"
        folders, builds = ddp_builds(args, folder)
        print(
            f"\n2 DDP processes, a fresh cache ({args.pairs[0]:,} pairs): "
            f"{builds} encoded the corpus; {folders} folder of each kind"
        )


if __name__ == "__main__":
    main()
