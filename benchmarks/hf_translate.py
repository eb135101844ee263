"""Translate standard input with a folder of scripts/export.py --to hf, through `transformers` alone.

    .venv/bin/python scripts/export.py --ckpt CKPT --to hf exported/multi30k-hf
    zcat test_2016_flickr.de.gz | python benchmarks/hf_translate.py exported/multi30k-hf > hf.en
    zcat test_2016_flickr.de.gz | python scripts/translate.py --ckpt CKPT --beam-size 1 > ours.en
    cmp hf.en ours.en && sacrebleu <(zcat test_2016_flickr.en.gz) -i hf.en ours.en -b

Nothing of this project is imported: what a colleague without it runs (`AutoTokenizer`, `AutoModelForSeq2SeqLM`,
`generate`). Lines go in chunks of --batch-size, one batch each, as scripts/translate.py reads them, and each
sentence may write a·S + b tokens (S: its source in tokens, `<eos>` included; --max-len-a/-b, our recipes'
1.5 and 10), within the folder's `max_length`: the length rule of our searches, so that an output cut by the limit
is cut alike. Greedy by default; `--beam-size` with `--length-penalty 0` is ours too (deploy/huggingface.py).
Prints the translations, one line per input line, and the sentences per second on stderr.
"""

from __future__ import annotations

import argparse
import sys
import time


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("model", help="an exported folder (or a hub name)")
    parser.add_argument("--beam-size", type=int, default=1)
    parser.add_argument("--length-penalty", type=float, default=0.0, help="generate's (n ** alpha), default 0")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--max-len-a", type=float, default=1.5)
    parser.add_argument("--max-len-b", type=int, default=10)
    return parser.parse_args(argv)


def main(argv: list[str] | None = None, lines: list[str] | None = None) -> list[str]:
    args = parse_args(argv)
    import torch
    from transformers import AutoModelForSeq2SeqLM, AutoTokenizer
    from transformers.utils import logging

    logging.set_verbosity_error()  # "max_new_tokens and max_length both set": max_new_tokens is the rule here
    logging.disable_progress_bar()
    tokenizer = AutoTokenizer.from_pretrained(args.model)
    model = AutoModelForSeq2SeqLM.from_pretrained(args.model).eval()
    limit = model.generation_config.max_length - 1  # new tokens after the decoder's start
    lines = [line.rstrip("\n") for line in sys.stdin] if lines is None else lines
    outputs, start = [], time.perf_counter()
    for first in range(0, len(lines), args.batch_size):
        chunk = lines[first : first + args.batch_size]
        texts = [line for line in chunk if line.strip()]
        # Each sentence's own limit; generate takes one a call, so the chunk's sentences of one limit go together.
        limits = [min(int(args.max_len_a * len(ids) + args.max_len_b), limit) for ids in tokenizer(texts)["input_ids"]]
        done = {}
        for new in sorted(set(limits)):
            group = [text for text, n in zip(texts, limits) if n == new]
            with torch.no_grad():
                ids = model.generate(
                    **tokenizer(group, return_tensors="pt", padding=True), num_beams=args.beam_size,
                    length_penalty=args.length_penalty, max_new_tokens=new, do_sample=False,
                )  # fmt: skip
            done.update(zip(group, tokenizer.batch_decode(ids, skip_special_tokens=True)))
        outputs += [done[line] if line.strip() else "" for line in chunk]
    for line in outputs:
        print(line)
    seconds = time.perf_counter() - start
    print(f"{len(lines)} sentences in {seconds:.1f} s ({len(lines) / max(seconds, 1e-9):.1f} sentences/s)", file=sys.stderr)
    return outputs


if __name__ == "__main__":
    main()
