"""The one module that turns decoding into command-line flags for every script that decodes: the engine's
(`add_engine_arguments`), each `DecodingOptions` field's (`add_decoding_arguments`, read back by `decoding_options`)
and what loads the engines (`load_engines`). Only the standard library at import: `--help` and argument errors
load no torch."""

from __future__ import annotations

import importlib
import re
from typing import Any

from common.commands import require_at_least_one
from common.errors import InputError
from inference.options import CHECKPOINT_DEFAULTS, CT2_PATIENCE, CT2_SEARCHES, DecodingOptions

CTRANSLATE2_ENGINE = "deploy.ctranslate2_translator"  # `--engine ctranslate2`

# The decoding options every script that translates takes as flags (inference.options), the search's first.
SEARCH = ("beam_size", "length_penalty", "max_len")
TOOLS = ("sampling", "top_k", "top_p", "temperature", "seed", "no_repeat_ngram_size", "min_len", "ban_unk")
LANGUAGE = ("tgt_lang",)  # a multilingual model's target language (datamodules/languages.py)


def add_engine_arguments(parser) -> None:
    """The flags that pick what translates, shared by every script that decodes."""
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
    parser.add_argument(
        "--ct2-search",
        default=CT2_SEARCHES[0],
        choices=CT2_SEARCHES,
        help="CTranslate2's beam search: fast (ends a sentence after beam x --ct2-patience finished hypotheses, "
        "ranked by our score) or exact (our outputs; runs every beam to the length limit) (default: fast)",
    )
    parser.add_argument(
        "--ct2-patience", type=float, default=CT2_PATIENCE, help=f"--ct2-search fast's patience, >= 1 (default: {CT2_PATIENCE:g})"
    )


def parse_decoding_args(parser, argv: list[str] | None, *extra: str, shown: dict[str, str] | None = None):
    """`argv` parsed by `parser` (the engine's flags, `add_engine_arguments`, and the script's own, `--batch-size`
    among them) with the search's and the decoding tools' flags added last (`add_search_arguments`: `extra` and
    `shown` are its), the engine's flags and the batch size checked."""
    add_search_arguments(parser, *extra, shown=shown)
    args = parser.parse_args(argv)
    check_engine_arguments(parser, args)
    require_at_least_one(parser, args, "batch_size")
    return args


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
    if args.engine == "torch" and str(args.device).startswith("cuda"):
        import torch

        if not torch.cuda.is_available():
            raise InputError(f"--device {args.device}: this machine has no CUDA device (torch finds none); use --device cpu")
    if args.engine == "ctranslate2" and args.ckpt and len(args.ckpt) > 1:
        raise InputError("CTranslate2 runs one model: an ensemble of checkpoints needs --engine torch")
    if args.engine == "torch" and (args.ct2_search != CT2_SEARCHES[0] or args.ct2_patience != CT2_PATIENCE):
        parser.error("--ct2-search and --ct2-patience choose CTranslate2's search: they go with --engine ctranslate2")
    if args.ct2_patience < 1:
        parser.error(f"--ct2-patience {args.ct2_patience:g}: CTranslate2's patience is at least 1")
    if args.engine == "ctranslate2" and not args.model:
        parser.error("--engine ctranslate2 needs --model DIR (a directory written by scripts/export.py)")
    if getattr(args, "static_cache", None) and args.engine != "torch":
        parser.error("--static-cache decodes this project's model: it needs --engine torch")
    if getattr(args, "static_cache", None) == "cuda-graph" and not str(args.device).startswith("cuda"):
        parser.error("--static-cache cuda-graph needs --device cuda")


def add_search_arguments(parser, *extra: str, beam_size: int = 4, shown: dict[str, str] | None = None) -> None:
    """The search's flags (`SEARCH` and `extra` options), then the decoding tools' (`TOOLS`): fairseq's names;
    then the target language's (`LANGUAGE`). `shown`: defaults the script decides, named in its help."""
    add_decoding_arguments(parser, SEARCH + extra, "search", shown, beam_size=beam_size)
    add_decoding_arguments(parser, TOOLS, "decoding tools", shown)
    add_decoding_arguments(parser, LANGUAGE, "multilingual models")


def decoding_options(args, defaults: DecodingOptions | None = None, *extra: str) -> DecodingOptions:
    """`defaults` (a translator's) with the search and tools' flags given; a bad value or combination is one
    `InputError` line naming the flags. Called once at parsing (with plain defaults, to refuse bad flags before
    anything loads) and once with the loaded translator's."""
    names = SEARCH + TOOLS + LANGUAGE + extra
    given = {name: getattr(args, name) for name in names if getattr(args, name, None) is not None}
    try:
        return (defaults or DecodingOptions()).replace(**given)
    except InputError as err:
        raise InputError(_in_flags(str(err).removeprefix("DecodingOptions: "))) from None


def load_engines(args) -> tuple[Any, list]:
    """What `add_engine_arguments` picked: an `inference.Translator` of the first checkpoint (its training weights
    when `args.weights == "training"`) or a `deploy.ctranslate2_translator.CTranslate2Translator`; and the
    translators of the checkpoints after the first, an ensemble with it, their vocabularies checked against the
    first's ([] for one checkpoint or CTranslate2)."""
    if args.engine == "ctranslate2":
        # Named, not imported: CTranslate2 is optional, and deploy/ (which runs our models in other formats) stands
        # above inference/ in the import tree; the one engine that lives there is loaded by its name when asked for.
        CTranslate2Translator = importlib.import_module(CTRANSLATE2_ENGINE).CTranslate2Translator
        engine = CTranslate2Translator(
            args.model, device=args.device, compute_type=args.compute_type, search=args.ct2_search, patience=args.ct2_patience
        )
        return engine, []
    from inference.translator import Translator, check_same_vocabularies

    weights = getattr(args, "weights", "averaged")  # translate.py has no --weights: a checkpoint's only, or its EMA
    first, *others = [Translator.from_checkpoint(path, weights=weights, device=args.device) for path in args.ckpt]
    check_same_vocabularies([first, *others])
    return first, others


def search_label(args) -> str:
    """CTranslate2's beam search as chosen (`--ct2-search`), for records and printed lines; "" for our engine."""
    if args.engine != "ctranslate2":
        return ""
    return "exact search" if args.ct2_search == "exact" else f"fast search, patience {args.ct2_patience:g}"


def flag_of(name: str) -> str:
    return DecodingOptions.__dataclass_fields__[name].metadata["flag"]


def add_decoding_arguments(
    parser, names: tuple[str, ...], title: str = "decoding", shown: dict[str, str] | None = None, **defaults: Any
) -> None:
    """The flags of the options `names`, made from their fields: each defaults to None (the model's own default)
    unless `defaults` gives the script's (translate.py's --beam-size 4, say); `shown`: the default a script's help
    names where the script, not the option, decides it (generate.py's seed 0). `decoding_options` reads them."""
    group = parser.add_argument_group(title)
    for name in names:
        meta = DecodingOptions.__dataclass_fields__[name].metadata
        default, own = defaults.get(name), DecodingOptions.default(name)
        extra = {k: v for k, v in meta.items() if k not in ("flag", "help", "unset")}
        if own is False:
            group.add_argument(meta["flag"], dest=name, action="store_true", default=None, help=meta["help"])
            continue
        label = default if default is not None else "the model's" if name in CHECKPOINT_DEFAULTS else own
        label = (shown or {}).get(name, label if label is not None else meta.get("unset"))
        label = f" (default: {label})" if label is not None else ""
        kind = extra.pop("type", None) or (float if isinstance(own, float) else str if "choices" in extra else int)
        extra.setdefault("metavar", None if "choices" in extra else meta["flag"].removeprefix("--").replace("-", "_").upper())
        group.add_argument(meta["flag"], dest=name, type=kind, default=default, help=meta["help"] + label, **extra)


def _in_flags(message: str) -> str:
    """A check's message in the flags' words: `top_p=1.5` → `--sampling-topp 1.5`, `sampling` → `--sampling`."""
    names = "|".join(sorted((n for n, f in DecodingOptions.__dataclass_fields__.items() if "flag" in f.metadata), key=len)[::-1])
    message = re.sub(rf"\b({names})=", lambda m: flag_of(m.group(1)) + " ", message)
    return re.sub(rf"(?<![-\w])({names})\b", lambda m: flag_of(m.group(1)), message)
