"""Translate with a trained checkpoint.

    .venv/bin/python scripts/translate.py --ckpt runs/multi30k/.../epoch012-step2899.ckpt "Ein Hund rennt."
    .venv/bin/python scripts/translate.py --ckpt CKPT --beam-size 1 < sentences.txt > translations.txt
    .venv/bin/python scripts/translate.py --engine ctranslate2 --model OUT_DIR "Ein Hund rennt."   # scripts/export.py's
    .venv/bin/python scripts/translate.py --ckpt CKPT --device cuda --static-cache compile < sentences.txt   # captured decoding

docs/guide/decoding.md: arguments and standard input, the flags, n-best lists, scores, alignments, prefixes,
constraints, ensembles and `--engine ctranslate2`; docs/guide/faults-and-exits.md: the errors and exit statuses.
"""

from __future__ import annotations

import argparse
import sys
import warnings
from collections.abc import Iterable, Iterator

if __name__ == "__main__":  # run as a file, not imported as scripts.NAME (the tests)
    import _checkout  # noqa: F401  (first: the repository's packages importable, and this Python the project's)

from common.commands import script_parser  # noqa: E402
from common.errors import InputError  # noqa: E402
from common.exits import exit_on_user_error, print_lines  # noqa: E402
from common.files import require_file  # noqa: E402
from datamodules.corpus_readers import LineDecodeError, decode_lines, iter_lines  # noqa: E402
from inference.flags import add_engine_arguments, decoding_options, load_engines, parse_decoding_args  # noqa: E402

OPTIONS = ("nbest", "alignment_layer", "static_cache")  # this script's decoding options beyond evaluate.py's


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = script_parser(__doc__)
    add_engine_arguments(parser)
    parser.add_argument("--batch-size", type=int, default=32, help="sentences decoded together (default: 32)")
    parser.add_argument("--print-scores", action="store_true", help="add the raw log-prob sum and each token's log-prob")
    parser.add_argument("--print-alignment", action="store_true", help="add each target token's source token, as i-j pairs")
    parser.add_argument("--score-reference", metavar="REF", help="score REF's lines as translations of the inputs")
    parser.add_argument("--prefix-file", metavar="FILE", help="outputs start with FILE's lines, one per input")
    parser.add_argument("sentences", nargs="*", help="sentences to translate (default: standard input, one a line)")
    args = parse_decoding_args(parser, argv, *OPTIONS)
    if args.print_alignment and args.alignment_layer is None:
        args.alignment_layer = -1  # the last layer's
    if not args.print_alignment:
        args.alignment_layer = None  # alignments are computed only to be printed
    decoding_options(args, None, *OPTIONS)  # bad values and combinations refused before anything loads
    if args.engine == "ctranslate2" and args.print_alignment:
        raise InputError("CTranslate2 has no alignments (--print-alignment): use --engine torch")
    if args.score_reference and (args.nbest or args.sampling or args.prefix_file):
        raise InputError("--score-reference scores given translations: it takes no --nbest, --sampling or --prefix-file")
    if args.static_cache and (tabbed(args) or args.prefix_file or len(args.ckpt or []) > 1):
        # The search's own tools and --nbest are refused by DecodingOptions; these are the script's.
        parser.error("--static-cache decodes the plain greedy or beam search of one model: not with --print-scores, "
                     "--print-alignment, --score-reference, --prefix-file or an ensemble")  # fmt: skip
    return args


def chunks(lines: Iterable[str], size: int) -> Iterator[list[str]]:
    chunk: list[str] = []
    for line in lines:
        chunk.append(line)
        if len(chunk) == size:
            yield chunk
            chunk = []
    if chunk:
        yield chunk


def stdin_lines(stream=None) -> Iterator[str]:
    """Standard input's lines, decoded in its encoding and error handler (the locale's; PYTHONIOENCODING
    sets them), without their line ends; lines end at "\n" only ("\r\n" too; a lone "\r" stays in its line). Bytes
    that do not decode are an `InputError` naming the line and the byte offset in the input. The C
    locale's "surrogateescape" counts as strict: no model can use bytes smuggled in as surrogates."""
    stream = stream or sys.stdin
    if not hasattr(stream, "buffer"):  # a text stream without bytes beneath (a StringIO): already decoded
        yield from (line.removesuffix("\n").removesuffix("\r") for line in stream)
        return
    encoding, errors = stream.encoding or "utf-8", stream.errors or "strict"
    errors = "strict" if errors == "surrogateescape" else errors
    try:
        yield from decode_lines(stream.buffer, encoding, errors)
    except LineDecodeError as bad:
        raise InputError(
            f"standard input, line {bad.lineno} (byte {bad.offset}): cannot decode {bad.bad!r} "
            f"as {bad.err.encoding} ({bad.err.reason}); is the text in another encoding?"
        ) from None


def tabbed(args: argparse.Namespace) -> bool:
    """Whether the output is `INDEX<TAB>SCORE<TAB>TRANSLATION` lines rather than plain translations."""
    return bool(args.nbest or args.print_scores or args.print_alignment or args.score_reference)


def format_hypothesis(index: int, hyp, args: argparse.Namespace) -> str:
    """INDEX, SCORE, TRANSLATION, then the raw sum and each token's log-prob (--print-scores), then
    the alignment (--print-alignment), tab-separated."""
    cols = [str(index), f"{hyp.score:.6f}", hyp.text]
    if args.print_scores:
        cols += [f"{hyp.log_prob:.6f}", " ".join(f"{x:.6f}" for x in hyp.token_log_probs)]
    if args.print_alignment:
        cols.append(" ".join(f"{i}-{j}" for i, j in hyp.alignment or []))
    return "\t".join(cols)


def translate_chunk(
    model, lines: list[str], args: argparse.Namespace, opts, start: int = 0, ensemble=(), refs=None, prefixes=None
) -> list[str]:
    """The output lines of `lines`, the inputs `start`, `start + 1`, ...: one translation per line, or
    with `tabbed(args)` N lines per input (N = --nbest, else 1), decoded with `opts` (the run's one
    `DecodingOptions`, passed whole to the engine). A blank input gives a blank line, or N lines
    `INDEX<TAB><TAB>`, so that every output stays with its input."""
    n = opts.nbest
    todo = [i for i, line in enumerate(lines) if line.strip()]
    out = [[f"{start + i}\t\t"] * n if tabbed(args) else [""] for i in range(len(lines))]
    if not todo:
        return [line for lines_of_one in out for line in lines_of_one]
    sources = [lines[i].strip() for i in todo]
    extra = {"ensemble": ensemble} if ensemble else {}
    if refs is not None:
        hyps = [[h] for h in model.score(sources, [refs[i] for i in todo], options=opts, **extra)]
    else:
        if prefixes is not None:
            extra["prefixes"] = [prefixes[i] for i in todo]
        hyps = model.translate(sources, nbest=n if tabbed(args) else None, options=opts, **extra)
    for i, row in zip(todo, hyps):
        out[i] = [format_hypothesis(start + i, h, args) for h in row] if tabbed(args) else [row]
    return [line for lines_of_one in out for line in lines_of_one]


def read_line_file(path: str, flag: str, count: int) -> list[str]:
    """The lines of a --score-reference or --prefix-file file, which must be `count`, one per input."""
    lines = list(iter_lines(require_file(path, flag)))
    if len(lines) != count:
        raise InputError(f"{flag} {path} has {len(lines)} lines for {count} inputs: give one line per input")
    return lines


def one_line_warning(message, category, filename, lineno, file=None, line=None) -> None:
    """A warning for the user (an over-long input truncated to the model's max_len) is one line on stderr,
    `warning: ...`, rather than Python's two that quote a line of source."""
    print(f"warning: {message}", file=sys.stderr, flush=True)


@exit_on_user_error
def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    warnings.showwarning = one_line_warning
    for i, sentence in enumerate(args.sentences, 1):
        if not sentence.strip():
            raise InputError(f"argument {i} is an empty sentence: there is nothing to translate")
    model, ensemble = load_engines(args)
    source: Iterable[str] = args.sentences or stdin_lines()
    refs = prefixes = None
    if args.score_reference or args.prefix_file:  # line counts are checked before anything is written
        source = list(source)
        if args.score_reference:
            refs = read_line_file(args.score_reference, "--score-reference", len(source))
        if args.prefix_file:
            prefixes = read_line_file(args.prefix_file, "--prefix-file", len(source))
    opts = decoding_options(
        args, model.options, *OPTIONS
    )  # built once, over the model's defaults, and passed whole to every call
    start = 0
    for chunk in chunks(source, args.batch_size):
        end = start + len(chunk)
        lines = translate_chunk(
            model,
            chunk,
            args,
            opts,
            start,
            ensemble,
            refs[start:end] if refs is not None else None,
            prefixes[start:end] if prefixes is not None else None,
        )
        start = end
        print_lines(*lines)  # flushed: the output streams while input is still coming


if __name__ == "__main__":
    main()
