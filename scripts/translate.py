"""Translate with a trained checkpoint.

    python scripts/translate.py --ckpt runs/multi30k/.../epoch012-step2899.ckpt "Ein Hund rennt."
    python scripts/translate.py --ckpt CKPT --beam-size 1 < sentences.txt > translations.txt
    python scripts/translate.py --engine ctranslate2 --model OUT_DIR "Ein Hund rennt."   # scripts/export.py's

With `--engine ctranslate2` the model is a directory written by scripts/export.py, run by
CTranslate2 (`--compute-type int8` runs float32 weights in int8). Greedy outputs are ours; its beam
search stops a sentence earlier than ours when the length penalty is on, so some beam outputs differ
unless `--length-penalty 0` (deploy/ctranslate2.py).

With sentences as arguments, prints one translation per argument (an empty argument is an error).
With none, reads standard input line by line and prints one line per input line, in order, in
chunks of --batch-size lines so that output streams while input is still coming; an empty input
line gives an empty output line, which keeps the output aligned with the input.
A missing or unreadable checkpoint, an empty argument, or standard input that does not decode in the
locale's encoding (the line and byte offset are named) is one line on stderr and exit status 2; a
standard output that cannot be written (a full device) one line and status 1; a reader that stops
early (`| head -1`) a quiet exit, status 141, as `cat` has.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterable, Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # run from a checkout without `pip install -e .` too

from datamodules.corpus_readers import LineDecodeError, decode_lines  # noqa: E402
from deploy.engines import add_engine_arguments, check_engine_arguments, load_translator  # noqa: E402
from models.errors import InputError  # noqa: E402
from training.faults import exit_on_user_error, writing_to  # noqa: E402


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_engine_arguments(parser)
    parser.add_argument("--beam-size", type=int, default=4, help="beam width; 1 = greedy (default: 4)")
    parser.add_argument(
        "--length-penalty", type=float, default=None, help="GNMT length penalty alpha for beam search (default: the checkpoint's)"
    )
    parser.add_argument(
        "--max-len", type=int, default=None, help="most output tokens (default: max_len_a x source length + max_len_b)"
    )
    parser.add_argument("--batch-size", type=int, default=32, help="sentences decoded together (default: 32)")
    parser.add_argument("sentences", nargs="*", help="sentences to translate (default: standard input, one a line)")
    args = parser.parse_args(argv)
    check_engine_arguments(parser, args)
    if args.beam_size < 1:
        parser.error("--beam-size must be at least 1")
    if args.batch_size < 1:
        parser.error("--batch-size must be at least 1")
    if args.max_len is not None and args.max_len < 1:
        parser.error("--max-len must be at least 1")
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


def translate_chunk(model, lines: list[str], args: argparse.Namespace) -> list[str]:
    """Translations of `lines`, "" for blank ones (kept in place so output lines match input lines)."""
    kwargs = {} if args.length_penalty is None or args.beam_size == 1 else {"length_penalty": args.length_penalty}
    todo = [i for i, line in enumerate(lines) if line.strip()]
    out = [""] * len(lines)
    if todo:
        hyps = model.translate([lines[i].strip() for i in todo], beam_size=args.beam_size, max_len=args.max_len, **kwargs)
        for i, hyp in zip(todo, hyps):
            out[i] = hyp
    return out


@exit_on_user_error
def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    for i, sentence in enumerate(args.sentences, 1):
        if not sentence.strip():
            raise InputError(f"argument {i} is an empty sentence: there is nothing to translate")
    model = load_translator(args)
    if args.sentences:
        source: Iterable[str] = args.sentences
    else:
        source = stdin_lines()
    for chunk in chunks(source, args.batch_size):
        hyps = translate_chunk(model, chunk, args)
        with writing_to("standard output"):  # a full device: one line naming it; a closed pipe: a quiet exit
            for hyp in hyps:
                print(hyp)
            sys.stdout.flush()


if __name__ == "__main__":
    main()
