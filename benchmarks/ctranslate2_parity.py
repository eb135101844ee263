"""Does the CTranslate2 engine translate as ours on a real model? Every test sentence at beam 4 with the model's
own flags (its length penalty and length limits), both engines, batch by batch: how many best outputs and n-best
lists are the same, the largest score difference, and, for each sentence that differs, whether the two searches
differ where CTranslate2's renormalisation over the tokens other than <pad> and <bos> can show
(deploy/ctranslate2_translator.py): the largest probability our model gives those two at a step of either output.

    .venv/bin/python benchmarks/ctranslate2_parity.py --ckpt CKPT --src ../shared/data/multi30k/test_2016_flickr.de.gz
    .venv/bin/python benchmarks/ctranslate2_parity.py --train-steps 400 --src ../shared/data/multi30k/test_2016_flickr.de.gz

With --train-steps and no --ckpt, a small model (d_model 128, 2+2 layers) is first trained for that many steps on
Multi30k de-en (../shared/data/multi30k), on the CPU: the check needs a model that translates, not a good one.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

from datamodules.corpus_readers import iter_lines  # noqa: E402
from deploy.ctranslate2 import export_ctranslate2  # noqa: E402
from deploy.ctranslate2_translator import CTranslate2Translator  # noqa: E402
from inference import Translator  # noqa: E402


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ckpt", help="a Seq2SeqTransformer checkpoint (default: train one, --train-steps)")
    parser.add_argument("--train-steps", type=int, default=400, help="steps of the model trained without --ckpt")
    parser.add_argument("--data-dir", default=str(ROOT.parent / "shared" / "data" / "multi30k"))
    parser.add_argument("--src", required=True, help="source sentences, one a line (gzip read as such)")
    parser.add_argument("--limit", type=int, default=0, help="the first N sentences only (0: all)")
    parser.add_argument("--beam-size", type=int, default=4)
    parser.add_argument("--nbest", type=int, default=4)
    parser.add_argument("--batch-size", type=int, default=64)
    return parser.parse_args(argv)


def train(steps: int, data_dir: str, out: Path) -> Path:
    """A small de-en model trained `steps` steps on Multi30k, its checkpoint written to `out`."""
    import lightning as L

    from datamodules import ParallelCorpusDataModule
    from models.config import Seq2SeqSettings
    from tasks import Seq2SeqTransformer

    L.seed_everything(0)
    dm = ParallelCorpusDataModule(
        data_dir, format="aligned", src_lang="de", tgt_lang="en", train_prefix="train", val_prefix="val",
        test_prefix="test_2016_flickr", src_tokenizer="bpe", tgt_tokenizer="bpe", src_vocab_size=4000,
        tgt_vocab_size=4000, shared_vocab=True, max_tokens=2048, download=False,
    )  # fmt: skip
    net = Seq2SeqSettings(d_model=128, nhead=4, num_encoder_layers=2, num_decoder_layers=2, dim_feedforward=256, max_len=128)
    model = Seq2SeqTransformer(
        tokenizers=dm.tokenizers, net=net, lr=2e-3, warmup_steps=100, bleu_every_n_epochs=0, length_penalty=1.0
    )
    trainer = L.Trainer(max_steps=steps, limit_val_batches=0, logger=False, enable_checkpointing=False, enable_progress_bar=False)
    trainer.fit(model, datamodule=dm)
    trainer.save_checkpoint(out)
    return out


def special_mass(translator: Translator, source: str, tokens: list[int]) -> float:
    """The largest probability our model gives <pad> and <bos> together at a step of `tokens` (teacher-forced)."""
    src = translator.encode_sources([source])
    tgt = torch.tensor([[translator.bos_id, *tokens[:-1]]], device=src.device)
    with torch.no_grad():
        memory, src_pad = translator.net.encode(src)
        probs = translator.net.decode(tgt, memory, src_pad)[0].float().softmax(-1)  # (T, V)
    return float(probs[:, [translator.pad_id, translator.bos_id]].sum(-1).max())


def main(argv=None) -> None:
    args = parse_args(argv)
    torch.set_num_threads(1)
    work = Path(tempfile.mkdtemp(prefix="ct2_parity_"))
    ckpt = Path(args.ckpt) if args.ckpt else train(args.train_steps, args.data_dir, work / "model.ckpt")
    ours = Translator.from_checkpoint(ckpt)
    theirs = CTranslate2Translator(export_ctranslate2(ours, work / "ct2"), threads=1, search="exact")
    sources = [line.strip() for line in iter_lines(Path(args.src)) if line.strip()]
    sources = sources[: args.limit] if args.limit else sources
    flags = dict(beam_size=args.beam_size, nbest=args.nbest)
    print(f"{len(sources)} sentences, beam {args.beam_size}, length penalty {ours.options.length_penalty}, nbest {args.nbest}")
    timings, same_best, same_lists, worst, differing = {}, 0, 0, 0.0, []
    for start in range(0, len(sources), args.batch_size):
        batch = sources[start : start + args.batch_size]
        began = time.perf_counter()
        a = ours.translate(batch, **flags)
        timings["ours"] = timings.get("ours", 0.0) + time.perf_counter() - began
        began = time.perf_counter()
        b = theirs.translate(batch, **flags)
        timings["ctranslate2"] = timings.get("ctranslate2", 0.0) + time.perf_counter() - began
        for source, x, y in zip(batch, a, b):
            same_best += x[0].text == y[0].text
            same_lists += [h.text for h in x] == [h.text for h in y]
            if [h.text for h in x] == [h.text for h in y]:
                worst = max(worst, *(abs(h.score - g.score) for h, g in zip(x, y)))
            else:
                mass = max(special_mass(ours, source, h.tokens) for h in (*x, *y))
                differing.append((source, x, y, mass))
    n = len(sources)
    print(f"best output the same: {same_best} of {n}; {args.nbest}-best list the same: {same_lists} of {n}")
    print(f"largest score difference where the lists agree: {worst:.2e}")
    print(f"time: ours {timings['ours']:.1f} s, CTranslate2 {timings['ctranslate2']:.1f} s (one thread)")
    for source, x, y, mass in differing:
        rank = next(i for i, (h, g) in enumerate(zip(x, y)) if h.text != g.text)
        print(f"differs at rank {rank}: {source!r}: <pad>+<bos> mass up to {mass:.1e} a step")
        print(f"    ours        {x[rank].score:.6f} {x[rank].text!r}")
        print(f"    CTranslate2 {y[rank].score:.6f} {y[rank].text!r}")


if __name__ == "__main__":
    main()
