"""Translation quality on sentences longer than any seen in training: the length-extrapolation check.

Train two models the same way with the training pairs capped at N tokens (`--data.init_args.max_len N`
drops longer pairs), one per position scheme, then score each on the test pairs whose source is longer
than N tokens (counted with the first checkpoint's source tokenizer, end-of-sentence included, the rule
the data module drops by) and on the whole test set:

    .venv/bin/python benchmarks/length_extrapolation.py --ckpt sinusoid=runs/a/best.ckpt alibi=runs/b/best.ckpt \
        --src ../shared/data/multi30k/test_2016_flickr.de.gz --ref ../shared/data/multi30k/test_2016_flickr.en.gz \
        --longer-than 24 32 [--beam-size 4] [--json out.json]

ALiBi's claim (Press et al. 2022, "Train Short, Test Long") is that its bias keeps quality on the longer
sentences where sinusoidal positions degrade. Prints one markdown row per checkpoint.
"""

from __future__ import annotations

import argparse
import json
import time

from _common import ROOT  # noqa: F401  (puts the project on the path)

from common.checkpoints import load_checkpoint
from datamodules.corpus_readers import read_aligned
from tasks import Seq2SeqTransformer
from tasks.metrics import corpus_scores


def labelled(spec: str) -> tuple[str, str]:
    label, sep, path = spec.partition("=")
    return (label, path) if sep else (spec, spec)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ckpt", nargs="+", required=True, help="LABEL=PATH (or PATH) of each checkpoint")
    parser.add_argument("--src", required=True)
    parser.add_argument("--ref", required=True)
    parser.add_argument("--longer-than", type=int, nargs="+", default=[32], help="source tokens (with </s>) of each long subset")
    parser.add_argument("--beam-size", type=int, default=4)
    parser.add_argument("--json", default=None, help="also write the rows here")
    args = parser.parse_args()

    pairs = read_aligned(args.src, args.ref)
    models = {label: load_checkpoint(Seq2SeqTransformer, path) for label, path in map(labelled, args.ckpt)}
    first = next(iter(models.values()))
    lengths = [len(first.src_tokenizer.encode(s)) + 1 for s, _ in pairs]
    subsets = {n: [i for i, length in enumerate(lengths) if length > n] for n in args.longer_than}
    for n, subset in subsets.items():
        print(f"{len(subset)} of {len(pairs)} test pairs have a source longer than {n} tokens")
    heads = " | ".join(f"BLEU, > {n} ({len(subset)}) | chrF, > {n}" for n, subset in subsets.items())
    print(f"| model | {heads} | BLEU, all ({len(pairs)}) | decode s |")
    print("|---|" + "---|---|" * len(subsets) + "---|---|")
    refs = [r for _, r in pairs]
    rows = []
    for label, model in models.items():
        start = time.time()
        hyps = model.translate_many([s for s, _ in pairs], beam_size=args.beam_size, batch_size=64)
        seconds = time.time() - start
        row = {"model": label, "bleu_all": corpus_scores(hyps, refs)["bleu"], "decode_s": seconds}
        for n, subset in subsets.items():
            part = corpus_scores([hyps[i] for i in subset], [refs[i] for i in subset])
            row[f"> {n}"] = {"pairs": len(subset), "bleu": part["bleu"], "chrf": part["chrf"]}
        rows.append(row)
        cells = " | ".join(f"{row[f'> {n}']['bleu']:.2f} | {row[f'> {n}']['chrf']:.1f}" for n in subsets)
        print(f"| {label} | {cells} | {row['bleu_all']:.2f} | {seconds:.0f} |", flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
