"""The engines a trained translator runs on, as the scripts pick them: this project's PyTorch module
(`--engine torch --ckpt CKPT`) or CTranslate2 (`--engine ctranslate2 --model DIR`, from scripts/export.py)."""

from __future__ import annotations

import math

from models.errors import InputError
from training.loading import load_checkpoint, load_training_weights


def add_engine_arguments(parser) -> None:
    """The flags that pick what translates, shared by scripts/translate.py and scripts/evaluate.py."""
    parser.add_argument(
        "--ckpt",
        nargs="+",
        help="a Seq2SeqTransformer checkpoint, for --engine torch; several (each ending in .ckpt): an ensemble, "
        "which averages the models' probabilities at every step (fairseq's rule)",
    )
    parser.add_argument("--engine", default="torch", choices=["torch", "ctranslate2"], help="default: torch")
    parser.add_argument("--model", help="a directory written by scripts/export.py, for --engine ctranslate2")
    parser.add_argument(
        "--compute-type", default="default", help="CTranslate2's compute type (default: the exported weights' own)"
    )
    parser.add_argument("--device", default="cpu", help="torch or CTranslate2 device (default: cpu)")


def check_engine_arguments(parser, args) -> None:
    if args.ckpt and hasattr(args, "sentences"):
        # `--ckpt a.ckpt b.ckpt` takes several paths, and argparse hands it the sentences after them too:
        # the values after the first that do not end in .ckpt are sentences.
        n = 1
        while n < len(args.ckpt) and args.ckpt[n].endswith(".ckpt"):
            n += 1
        args.ckpt, args.sentences = args.ckpt[:n], args.ckpt[n:] + args.sentences
    if args.engine == "torch" and not args.ckpt:
        parser.error("--ckpt is required (or --engine ctranslate2 --model DIR)")
    if args.engine == "ctranslate2" and args.ckpt and len(args.ckpt) > 1:
        raise InputError("CTranslate2 runs one model: an ensemble of checkpoints needs --engine torch")
    if args.engine == "ctranslate2" and not args.model:
        parser.error("--engine ctranslate2 needs --model DIR (a directory written by scripts/export.py)")


def add_decoding_arguments(parser) -> None:
    """The decoding tools' flags (models.decoding) that change the outputs, shared by scripts/translate.py
    and scripts/evaluate.py; fairseq's names."""
    group = parser.add_argument_group("decoding tools")
    group.add_argument("--sampling", action="store_true", help="sample outputs instead of searching (back-translation)")
    group.add_argument("--sampling-topk", type=int, default=None, help="sample among the K likeliest tokens (default: all)")
    group.add_argument(
        "--sampling-topp", type=float, default=None, help="sample in the nucleus of mass P, 0 < P <= 1 (default: 1)"
    )
    group.add_argument("--temperature", type=float, default=None, help="divides the logits before sampling (default: 1)")
    group.add_argument("--seed", type=int, default=None, help="seed of the sampling (default: unseeded)")
    group.add_argument("--no-repeat-ngram-size", type=int, default=0, help="no n-gram of this size twice in an output")
    group.add_argument("--min-len", type=int, default=0, help="output tokens before <eos>, at least (default: 0)")
    group.add_argument("--ban-unk", action="store_true", help="never generate <unk>")


def check_decoding_arguments(args) -> None:
    """One `InputError` line (exit status 2) for decoding flags out of range or without their mode."""
    if not args.sampling and any(v is not None for v in (args.sampling_topk, args.sampling_topp, args.temperature, args.seed)):
        raise InputError("--sampling-topk, --sampling-topp, --temperature and --seed apply to --sampling only")
    if args.sampling_topp is not None and not 0 < args.sampling_topp <= 1:
        raise InputError(f"--sampling-topp must be in (0, 1], got {args.sampling_topp}")
    if args.temperature is not None and not 0 < args.temperature < math.inf:
        raise InputError(f"--temperature must be > 0 and finite, got {args.temperature}")
    if args.length_penalty is not None and not 0 <= args.length_penalty < math.inf:
        raise InputError(f"--length-penalty must be >= 0 and finite, got {args.length_penalty}")
    for name in ("sampling_topk", "no_repeat_ngram_size", "min_len"):
        if (getattr(args, name) or 0) < 0:
            raise InputError(f"--{name.replace('_', '-')} must be >= 0, got {getattr(args, name)}")


def decoding_options(args) -> dict:
    """`Seq2SeqTransformer.translate`'s decoding tools that the flags ask for (none: plain search)."""
    options = {}
    if args.sampling:
        options.update(sampling=True, temperature=args.temperature or 1.0, top_k=args.sampling_topk or 0, seed=args.seed)
        options["top_p"] = 1.0 if args.sampling_topp is None else args.sampling_topp
    if args.no_repeat_ngram_size:
        options["no_repeat_ngram_size"] = args.no_repeat_ngram_size
    if args.min_len:
        options["min_len"] = args.min_len
    if args.ban_unk:
        options["ban_unk"] = True
    return options


def load_translator(args):
    """What `add_engine_arguments` picked: a `Seq2SeqTransformer` in eval mode (with its training weights
    when `args.weights == "training"`) or a `deploy.ctranslate2.CTranslate2Translator`; both translate
    with `translate` and `translate_many`. With several checkpoints, the first one (`load_ensemble`
    gives the others)."""
    if args.engine == "ctranslate2":
        from .ctranslate2 import CTranslate2Translator  # imported only when asked for: CTranslate2 is optional

        return CTranslate2Translator(args.model, device=args.device, compute_type=args.compute_type)
    return _load_model(args, args.ckpt[0])


def load_ensemble(args, first) -> list:
    """The models of the checkpoints after the first (an ensemble with `first`, `load_translator`'s),
    their vocabularies checked against the first's: [] for one checkpoint or CTranslate2."""
    if args.engine == "ctranslate2" or len(args.ckpt) == 1:
        return []
    from tasks.seq2seq import check_same_vocabularies

    others = [_load_model(args, path) for path in args.ckpt[1:]]
    check_same_vocabularies([first, *others])
    return others


def _load_model(args, path: str):
    from tasks import Seq2SeqTransformer

    model = load_checkpoint(Seq2SeqTransformer, path, map_location=args.device)
    if getattr(args, "weights", "averaged") == "training":
        load_training_weights(model, path)
    return model.eval()
