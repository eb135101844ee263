"""Corpus decoding speed of one translation checkpoint through three engines: ours (`inference.Translator`),
`transformers`' `generate` on our Hugging Face export of it, and our CTranslate2 export (float32 and int8).

    .venv/bin/python benchmarks/corpus_decoding.py --ckpt CKPT --src ../shared/data/multi30k/test_2016_flickr.de.gz \
        --ref ../shared/data/multi30k/test_2016_flickr.en.gz
    .venv/bin/python benchmarks/corpus_decoding.py --train-steps 600 --src ../shared/data/multi30k/test_2016_flickr.de.gz \
        --ref ../shared/data/multi30k/test_2016_flickr.en.gz --threads 1 --engines torch,hf
    .venv/bin/python benchmarks/corpus_decoding.py --tiny            # seconds; what CI runs

Every engine decodes the same sentences in the same batches: sorted by length and cut into --batch-size chunks
(datamodules/batching.py `map_in_length_batches`, what `translate_many` does), at --beam-size and greedy, with
the checkpoint's length penalty and length limit. `generate` is given what makes it stop where ours stops
(docs/guide/export-deploy.md, "Sharing a model"): `max_new_tokens=min(int(a * S + b), max_len - 1)`, S a sentence's source
in tokens, `<eos>` included, for the sentences of a batch that share that limit; its length penalty divides by
n ** alpha where ours divides by GNMT's ((5 + n) / 6) ** alpha, so at alpha != 0 some beam outputs differ (the
"same as ours" column counts them). The CTranslate2 rows are `deploy.ctranslate2_translator.CTranslate2Translator`
with each of its beam searches: "exact" gives our outputs (it runs to the length limit and rescores what it
finished, that module says why), "fast" lets CTranslate2 end a sentence after beam × --ct2-patience finished
hypotheses. Each row also gives the largest difference, by our model's score of the outputs (teacher-forced, our
length penalty), between its output and ours of a sentence, and its speed over ours. `--batch-limit` adds ours with
one length limit a batch (its longest source's, the rule before per-sentence limits): what per-sentence limits cost.

For each thread count (--threads: "1,all"; all = the CPUs this process may run on, `os.sched_getaffinity`, so 1
under `taskset -c 1`) torch's intra-op threads and CTranslate2's `intra_threads` are set to it. Each engine first
decodes one batch untimed (warm-up), then the whole corpus --repeats times, the engines' order rotating each
pass; the median is reported, and ours / generate is the median of the pass-by-pass ratios. Output
tokens are counted alike for every engine: our target tokenizer's tokens of the output text, plus `<eos>`.
With --ref, each engine's BLEU (sacrebleu, as scripts/evaluate.py computes it).

Without --ckpt, a small model is trained first (benchmarks/ctranslate2_parity.py's, --train-steps steps on
Multi30k de-en); --tiny uses a random model on a word vocabulary instead, on a few lines. `transformers` and
`ctranslate2` are optional: an engine that needs a missing one is one line and exit status 2.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import statistics
import tempfile
import time
from pathlib import Path

import torch
from _common import ROOT, environment, print_table, ratio_summary, write_json

from common.errors import InputError
from common.exits import exit_on_user_error
from datamodules.batching import map_in_length_batches
from datamodules.corpus_readers import iter_lines
from inference import Translator
from inference.options import CT2_PATIENCE

ENGINES = ("torch", "hf", "ct2")
NEEDS = {"hf": "transformers", "ct2": "ctranslate2"}  # the optional package each engine runs on
CT2_COMPUTE = ("float32", "int8")
TINY = dict(lines=12, batch_size=4, repeats=1, threads="1")


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ckpt", help="a Seq2SeqTransformer checkpoint (default: train one, --train-steps)")
    parser.add_argument("--train-steps", type=int, default=600, help="steps of the model trained without --ckpt")
    parser.add_argument("--data-dir", default=str(ROOT.parent / "shared" / "data" / "multi30k"))
    parser.add_argument("--src", help="source sentences, one a line (gzip read as such)")
    parser.add_argument("--ref", help="reference translations, line i of --src's line i: BLEU of each engine")
    parser.add_argument("--lines", type=int, default=0, help="the first N lines only (0: all)")
    parser.add_argument("--beam-size", type=int, default=4)
    parser.add_argument("--batch-size", type=int, default=64, help="sentences per batch, for every engine")
    parser.add_argument("--threads", default="1,all", help='comma-separated thread counts; "all": every CPU allowed')
    parser.add_argument("--engines", default=",".join(ENGINES), help=f"comma-separated, of {', '.join(ENGINES)}")
    parser.add_argument("--export-dir", help="keep the exports here (DIR/hf, DIR/ct2); an export already there is reused")
    parser.add_argument("--repeats", type=int, default=1, help="timed passes over the corpus per row (median)")
    parser.add_argument("--ct2-patience", type=float, default=CT2_PATIENCE, help="the fast CTranslate2 search's patience")
    parser.add_argument(
        "--batch-limit", action="store_true", help="also ours with one length limit a batch (its longest source's)"
    )
    parser.add_argument("--json", default=None)
    parser.add_argument("--tiny", action="store_true", help="a random tiny model on a few lines (CI smoke test)")
    args = parser.parse_args(argv)
    vars(args).update(TINY if args.tiny else {})
    if args.src is None and not args.tiny:
        parser.error("--src is required (or --tiny)")
    args.engines = [e.strip() for e in args.engines.split(",") if e.strip()]
    if unknown := [e for e in args.engines if e not in ENGINES] or (not args.engines and ["(none)"]):
        parser.error(f"--engines: unknown engine {unknown[0]!r}; choose among {', '.join(ENGINES)}")
    try:
        args.threads = thread_counts(args.threads)
    except ValueError:
        parser.error(f'--threads {args.threads!r}: give thread counts such as "1,all"')
    return args


def thread_counts(text: str) -> list[int]:
    """ "1,all" → [1, CPUs allowed], without repeats (under `taskset -c 1`: [1])."""
    allowed = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    counts = [allowed if t.strip() == "all" else int(t) for t in text.split(",") if t.strip()]
    if not counts or min(counts) < 1:
        raise ValueError(text)
    return list(dict.fromkeys(counts))


def check_packages(engines: list[str]) -> None:
    for engine in engines:
        if engine in NEEDS and importlib.util.find_spec(NEEDS[engine]) is None:
            raise InputError(
                f"--engines {engine} needs {NEEDS[engine]}, which is not installed: pip install {NEEDS[engine]} "
                f"(or leave {engine} out of --engines)"
            )


def read_lines(path: str | None, n: int) -> list[str] | None:
    if path is None:
        return None
    lines = [line.strip() for line in iter_lines(Path(path))]
    return lines[:n] if n else lines


def tiny_model(work: Path, sources: list[str]) -> Path:
    """A random tiny model with one word vocabulary for both sides (the Hugging Face export needs one), its
    checkpoint written as Lightning's weights-only one."""
    import lightning as L

    from datamodules.vocab import Vocab
    from models.config import Seq2SeqSettings
    from tasks import Seq2SeqTransformer

    torch.manual_seed(0)
    words = Vocab.build(sources, level="word").to_dict()
    net = Seq2SeqSettings(d_model=32, nhead=4, num_encoder_layers=1, num_decoder_layers=1, dim_feedforward=64, max_len=32)
    model = Seq2SeqTransformer(tokenizers={"src": words, "tgt": words}, net=net)
    path = work / "tiny.ckpt"
    saved = {"state_dict": model.state_dict(), "hyper_parameters": dict(model.hparams)}
    torch.save({**saved, "pytorch-lightning_version": L.__version__}, path)
    return path


def model_and_sources(args, work: Path) -> tuple[Path, list[str], list[str] | None]:
    """The checkpoint, the non-empty source lines and their references (None without --ref)."""
    if args.tiny and args.src is None:
        sources = [" ".join(f"w{(7 * i + j) % 23}" for j in range(2 + i % 5)) for i in range(args.lines)]
        refs = None
    else:
        sources, refs = read_lines(args.src, args.lines), read_lines(args.ref, args.lines)
    if refs is not None and len(refs) != len(sources):
        raise InputError(f"--ref has {len(refs)} lines for --src's {len(sources)}: give one reference per source line")
    kept = [i for i, s in enumerate(sources) if s]
    if not kept:
        raise InputError(f"{args.src}: no sentence to translate")
    sources, refs = [sources[i] for i in kept], refs and [refs[i] for i in kept]
    if args.ckpt:
        return Path(args.ckpt), sources, refs
    if args.tiny:
        return tiny_model(work, sources), sources, refs
    from ctranslate2_parity import train

    print(f"training a small model for {args.train_steps} steps on {args.data_dir} ...", flush=True)
    return train(args.train_steps, args.data_dir, work / "model.ckpt"), sources, refs


def exports(args, ckpt: Path, work: Path) -> dict[str, Path]:
    """The Hugging Face and CTranslate2 exports the engines need, made once (or reused from --export-dir)."""
    from common.checkpoints import load_checkpoint
    from tasks import Seq2SeqTransformer

    base, made, model = Path(args.export_dir) if args.export_dir else work, {}, None
    for engine in ("hf", "ct2"):
        folder = base / engine
        if engine in args.engines and not (folder / ("config.json" if engine == "hf" else "model.bin")).is_file():
            model = model or load_checkpoint(Seq2SeqTransformer, ckpt).eval()
            if engine == "hf":
                from deploy.huggingface import export_huggingface

                export_huggingface(model, folder)
            else:
                from deploy.ctranslate2 import export_ctranslate2

                export_ctranslate2(model, folder)
            print(f"exported {folder}", flush=True)
        made[engine] = folder
    return made


class HFGenerate:
    """`generate` on the Hugging Face export, stopping where ours stops (the module's docstring)."""

    def __init__(self, folder: Path, options):
        from transformers import AutoModelForSeq2SeqLM, AutoTokenizer
        from transformers.utils import logging

        logging.set_verbosity_error()  # "max_new_tokens and max_length both set": max_new_tokens is the rule here
        logging.disable_progress_bar()
        self.tokenizer = AutoTokenizer.from_pretrained(folder)
        self.model = AutoModelForSeq2SeqLM.from_pretrained(folder).eval()
        self.options, self.cap = options, self.model.generation_config.max_length - 1

    def translate(self, batch: list[str], beam_size: int) -> list[str]:
        """`generate` takes one limit a call: the batch's sentences of one limit together, each under its own."""
        lengths = self.tokenizer(batch, padding=True, return_tensors="pt")["attention_mask"].sum(1).tolist()
        limits = self.options.output_limits(lengths, self.cap)
        out = [""] * len(batch)
        for limit in sorted(set(limits)):
            group = [i for i, n in enumerate(limits) if n == limit]
            inputs = self.tokenizer([batch[i] for i in group], return_tensors="pt", padding=True)
            with torch.no_grad():
                ids = self.model.generate(
                    **inputs, num_beams=beam_size, length_penalty=self.options.length_penalty, max_new_tokens=limit,
                    do_sample=False,
                )  # fmt: skip
            for i, text in zip(group, self.tokenizer.batch_decode(ids, skip_special_tokens=True)):
                out[i] = text
        return out


def decoders(args, ckpt: Path, folders: dict[str, Path], threads: int) -> dict[str, callable]:
    """name → decode(sentences, beam) for every engine asked for, each running on `threads` threads."""
    torch.set_num_threads(threads)
    ours = Translator.from_checkpoint(ckpt)
    size = args.batch_size
    found = {}
    if "torch" in args.engines:
        found["ours"] = lambda s, beam: ours.translate_many(s, batch_size=size, beam_size=beam)
        if args.batch_limit:  # the rule before per-sentence limits: a·S + b of the batch's longest source for all
            a, b = ours.options.max_len_a, ours.options.max_len_b
            limit = lambda batch: int(a * ours.encode_sources(batch).size(1) + b)  # noqa: E731
            longest = lambda batch, beam: ours.translate(batch, beam_size=beam, max_len=limit(batch))  # noqa: E731
            found["ours, batch's limit"] = lambda s, beam: map_in_length_batches(lambda x: longest(x, beam), s, size)
    if "hf" in args.engines:
        hf = HFGenerate(folders["hf"], ours.options)
        found["HF generate"] = lambda s, beam: map_in_length_batches(lambda b: hf.translate(b, beam), s, size)
    if "ct2" in args.engines:
        from deploy.ctranslate2_translator import CTranslate2Translator

        for compute in CT2_COMPUTE:
            for search in ("exact", "fast"):
                chosen = dict(compute_type=compute, threads=threads, search=search, patience=args.ct2_patience)
                ct2 = CTranslate2Translator(folders["ct2"], **chosen)
                name = f"CTranslate2 {compute}" + (f", fast (patience {args.ct2_patience:g})" if search == "fast" else ", exact")
                found[name] = lambda s, beam, ct2=ct2: ct2.translate_many(s, batch_size=size, beam_size=beam)
    return found


def interleaved(engines: dict, sources: list[str], beam: int, repeats: int, warmup: list[str]) -> tuple[dict, dict]:
    """Each engine's outputs and wall times of `repeats` passes over `sources`, after one untimed batch each; the
    engines' order rotates each pass, so that drift on a shared machine falls on all of them alike."""
    for decode in engines.values():
        decode(warmup, beam)
    names, outputs = list(engines), {}
    times = {name: [] for name in names}
    for rep in range(repeats):
        for name in names[rep % len(names) :] + names[: rep % len(names)]:
            began = time.perf_counter()
            outputs[name] = engines[name](sources, beam)
            times[name].append(time.perf_counter() - began)
    return outputs, times


def run(args, ckpt: Path, folders: dict[str, Path], sources: list[str], refs) -> tuple[list[dict], list[dict]]:
    """The table's rows, and ours / generate at --beam-size per thread count (paired, pass by pass)."""
    from tasks.metrics import corpus_scores

    reference = Translator.from_checkpoint(ckpt)
    tokenizer, alpha = reference.tgt_tokenizer, reference.options.length_penalty
    searches = [(f"beam {args.beam_size}", args.beam_size), ("greedy", 1)] if args.beam_size > 1 else [("greedy", 1)]
    results, ratios = [], []
    for threads in args.threads:
        engines = decoders(args, ckpt, folders, threads)
        for search, beam in searches:
            outputs, times = interleaved(engines, sources, beam, args.repeats, sources[: args.batch_size])
            # Our model's score of each engine's output (teacher-forced, our length penalty), untimed: how far from
            # ours an output that differs is, by the measure our search maximises.
            penalty = alpha if beam > 1 else 0.0
            scored = {name: [h.score for h in reference.score(sources, [t or "." for t in texts], length_penalty=penalty)]
                      for name, texts in outputs.items()} if "ours" in outputs else {}  # fmt: skip
            for name, texts in outputs.items():
                seconds, tokens = statistics.median(times[name]), sum(len(tokenizer.encode(t)) + 1 for t in texts)  # <eos> too
                results.append({
                    "engine": name, "search": search, "threads": threads, "wall_s": seconds, "times_s": times[name],
                    "sentences_per_s": len(sources) / seconds, "tokens_per_s": tokens / seconds, "output_tokens": tokens,
                    "bleu": corpus_scores(texts, refs)["bleu"] if refs else None,
                    "same_as_ours": sum(a == b for a, b in zip(texts, outputs["ours"])) if "ours" in outputs else None,
                    "largest_score_difference": max(abs(x - y) for x, y in zip(scored[name], scored["ours"])) if scored else None,
                    "ours_over_this_s": statistics.median(times["ours"]) / seconds if "ours" in times else None,
                })  # fmt: skip
                print(f"  {name}, {search}, {threads} thread(s): {seconds:.1f} s", flush=True)
            if beam == args.beam_size > 1 and {"ours", "HF generate"} <= outputs.keys():
                ratios.append({"threads": threads, **ratio_summary(times["HF generate"], times["ours"])})
    return results, ratios


def table(results: list[dict], n: int) -> str:
    rows = [
        [r["engine"], r["search"], r["threads"], r["sentences_per_s"], r["tokens_per_s"], r["wall_s"],
         "-" if r["bleu"] is None else f"{r['bleu']:.2f}", "-" if r["same_as_ours"] is None else f"{r['same_as_ours']} / {n}",
         "-" if r.get("largest_score_difference") is None else f"{r['largest_score_difference']:.4f}",
         "-" if r.get("ours_over_this_s") is None else f"{r['ours_over_this_s']:.2f}x"]
        for r in results
    ]  # fmt: skip
    headers = ["engine", "search", "threads", "sentences/s", "output tokens/s", "wall s", "BLEU", "same as ours",
               "largest score diff", "speed vs ours"]  # fmt: skip
    return print_table(headers, rows, title=f"Corpus decoding, {n} sentences")


@exit_on_user_error
def main(argv=None) -> dict:
    args = parse_args(argv)
    check_packages(args.engines)
    with tempfile.TemporaryDirectory(prefix="corpus_decoding_") as tmp:
        work = Path(tmp)
        ckpt, sources, refs = model_and_sources(args, work)
        folders = exports(args, ckpt, work)
        print(f"{len(sources)} sentences, batches of {args.batch_size}, threads {args.threads}, engines {args.engines}")
        results, ratios = run(args, ckpt, folders, sources, refs)
    table(results, len(sources))
    for r in ratios:
        spread = f" (passes: {r['min']:.2f}-{r['max']:.2f})" if r["n"] > 1 else ""
        ratio = f"{r['median']:.2f}x{spread}; target >= 1.5x"
        print(f"ours / generate at beam {args.beam_size}, {r['threads']} thread(s), sentences/s: {ratio}")
    config = {k: v for k, v in vars(args).items() if k != "json"}
    payload = {"benchmark": "corpus_decoding", "config": config, "sentences": len(sources), "results": results,
               "ours_over_generate": ratios, "environment": environment("cpu")}  # fmt: skip
    write_json(args.json, payload)
    return payload


if __name__ == "__main__":
    main()
