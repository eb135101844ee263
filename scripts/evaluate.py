"""Score a checkpoint on any line-aligned pair of files: corpus SacreBLEU and chrF, with their signatures.

    .venv/bin/python scripts/evaluate.py --ckpt CKPT --src data/multi30k/test_2016_flickr.de.gz \
        --ref data/multi30k/test_2016_flickr.en.gz [--beam-size 4] [--batch-size 64] [--hyp-out FILE]
    .venv/bin/python scripts/evaluate.py --engine ctranslate2 --model OUT_DIR [--compute-type int8] --src ... --ref ...

docs/guide/decoding.md ("Scoring a checkpoint") says how the metrics are wired, and what --pair, --language-text,
--weights and several --ckpt do.
"""

from __future__ import annotations

import argparse
import time

if __name__ == "__main__":  # run as a file, not imported as scripts.NAME (the tests)
    import _checkout  # noqa: F401  (first: the repository's packages importable, and this Python the project's)

from common.checkpoints import add_weights_argument, read_checkpoint, weights_label  # noqa: E402
from common.commands import add_tokenize_argument, script_parser  # noqa: E402
from common.errors import InputError  # noqa: E402
from common.exits import exit_on_user_error, print_lines  # noqa: E402
from common.files import atomic_output, require_file  # noqa: E402
from common.progress import translation_progress  # noqa: E402
from datamodules.corpus_readers import read_aligned  # noqa: E402
from datamodules.languages import parse_direction, tagged  # noqa: E402
from inference.flags import add_engine_arguments, decoding_options, load_engines, parse_decoding_args, search_label  # noqa: E402


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = script_parser(__doc__)
    add_engine_arguments(parser)
    parser.add_argument("--src", required=True, help="source sentences, one a line (plain or .gz)")
    parser.add_argument("--ref", required=True, help="reference translations, line-aligned with --src")
    parser.add_argument(
        "--pair",
        default=None,
        metavar="SRC-TGT",
        help="a multilingual model's direction (de-en): the target's tag (>>en<<) goes in front of every source line",
    )
    parser.add_argument("--source-tag", action="store_true", help="with --pair: the source's tag too, for a model trained so")
    parser.add_argument(
        "--language-text",
        action="append",
        default=[],
        metavar="LANG=FILE",
        help="with --pair or --tgt-lang, once per language (the target's among them): sentences in that language, "
        "from which each output's language is identified; prints the share of outputs in the target language",
    )
    parser.add_argument("--batch-size", type=int, default=64, help="sentences decoded together (default: 64)")
    parser.add_argument("--hyp-out", default=None, help="also write the translations to this file")
    add_tokenize_argument(parser)
    add_weights_argument(parser, "score")
    args = parse_decoding_args(parser, argv)
    decoding_options(args)  # bad values and combinations refused before anything loads
    if args.source_tag and not args.pair:
        parser.error("--source-tag needs --pair")
    args.direction = parse_direction(args.pair, "--pair") if args.pair else None  # HyperparameterError: one line
    args.target = args.direction[1] if args.direction else args.tgt_lang
    if args.language_text and not args.target:
        parser.error("--language-text needs the target language: --pair SRC-TGT or --tgt-lang")
    args.language_text = language_texts(parser, args.language_text, args.target)
    return args


def language_texts(parser: argparse.ArgumentParser, given: list[str], target: str | None) -> dict[str, str]:
    """--language-text LANG=FILE, each given once, the target language among them: {lang: file}."""
    texts: dict[str, str] = {}
    for item in given:
        lang, sep, file = item.partition("=")
        if not sep or not lang or not file:
            parser.error(f"--language-text {item!r}: give LANG=FILE (fr=data/multi30k/val.fr.gz)")
        if lang in texts:
            parser.error(f"--language-text: {lang} given twice")
        texts[lang] = file
    if texts and (len(texts) < 2 or target not in texts):
        parser.error(f"--language-text: give at least two languages, the target ({target}) among them")
    return texts


@exit_on_user_error
def main(argv: list[str] | None = None) -> dict[str, float]:
    args = parse_args(argv)
    pairs = read_aligned(
        require_file(args.src, "--src"), require_file(args.ref, "--ref")
    )  # CorpusFormatError (exit 2) when the line counts differ
    if not pairs:
        raise InputError(f"{args.src} is empty: nothing to evaluate")
    blank = [i + 1 for i, (s, _) in enumerate(pairs) if not s]
    if blank:
        raise InputError(f"{args.src}, line {blank[0]}: empty source sentence ({len(blank)} in all)")
    identifier = language_identifier(args.language_text)  # before decoding: an empty file costs no translation

    from tasks.metrics import corpus_scores

    # --hyp-out's place is tried (a temporary file beside it) before translating, and the file appears
    # only once complete: an unwritable place or a full disk costs no decoding and leaves no half file.
    with atomic_output(args.hyp_out) as hyp_tmp:
        model, ensemble = load_engines(args)
        if args.direction and not model.languages:  # its >>en<< would be read as text, and the score silently wrong
            raise InputError(
                f"--pair {args.pair}: this model translates into one language (its vocabulary has no >>xx<< tokens); "
                "give no --pair"
            )
        options = decoding_options(args, model.options)  # one object, over the model's defaults, passed whole
        extra = {"ensemble": ensemble} if ensemble else {}
        start = time.time()
        sources = [tagged(s, args.direction, args.source_tag) if args.direction else s for s, _ in pairs]
        with translation_progress(sources, args.batch_size) as on_batch:
            hyps = model.translate_many(sources, batch_size=args.batch_size, on_batch=on_batch, options=options, **extra)
        seconds = time.time() - start
        if hyp_tmp is not None:
            hyp_tmp.write_text("".join(h + "\n" for h in hyps), encoding="utf-8")
    refs = [r for _, r in pairs]
    scores = corpus_scores(hyps, refs, tokenize=args.tokenize)
    lowercased = corpus_scores(hyps, refs, tokenize=args.tokenize, lowercase=True)
    decoding = "greedy" if args.beam_size == 1 else f"beam {args.beam_size}"
    decoding = "sampling" if args.sampling else decoding
    decoding += f", ensemble of {len(ensemble) + 1}" if ensemble else ""
    if args.engine == "ctranslate2":
        engine = f"ctranslate2 ({args.compute_type}, {search_label(args)})"
    else:
        # Already verified when loaded: its CRC-32s are not read again (the tensors stay memory-mapped, unread).
        engine = f"torch, {weights_label(read_checkpoint(args.ckpt[0], verify=False), args.weights)}"  # an ensemble: the first
    print_lines(
        f"sentences: {len(pairs)}  decoding: {decoding}  engine: {engine}  time: {seconds:.1f}s",
        f"SacreBLEU: {scores['bleu']:.2f}  ({scores['bleu_signature']})",
        f"chrF: {scores['chrf']:.2f}  ({scores['chrf_signature']})",
        f"lowercased BLEU (not comparable with the cased score): {lowercased['bleu']:.2f}  ({lowercased['bleu_signature']})",
        *([on_target_line(identifier, hyps, args.target)] if identifier is not None else []),
    )
    return scores


def language_identifier(texts: dict[str, str]):
    """A `LanguageIdentifier` of --language-text's files, or None without them."""
    if not texts:
        return None
    from datamodules.corpus_readers import iter_lines
    from tasks.metrics import LanguageIdentifier

    files = {lang: require_file(file, f"--language-text {lang}:") for lang, file in texts.items()}
    examples = {lang: [line for line in iter_lines(file) if line.strip()] for lang, file in files.items()}
    empty = [lang for lang, lines in examples.items() if not lines]
    if empty:
        raise InputError(f"--language-text {empty[0]}: {texts[empty[0]]} holds no sentence")
    return LanguageIdentifier(examples)


def on_target_line(identifier, hyps: list[str], target: str) -> str:
    from tasks.metrics import on_target_percent

    found = identifier.languages_of(hyps)
    others = sorted(((lang, n) for lang, n in found.items() if lang != target), key=lambda item: -item[1])
    off = ", ".join(f"{lang or 'empty'} {100 * n / len(hyps):.1f}%" for lang, n in others) or "none"
    among = ", ".join(sorted(identifier.log_probs))
    return f"on target: {on_target_percent(found, target):.1f}% of outputs in {target} (among {among}; off target: {off})"


if __name__ == "__main__":
    main()
