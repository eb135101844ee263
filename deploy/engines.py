"""The engines a trained translator runs on, as the scripts pick them: this project's PyTorch module
(`--engine torch --ckpt CKPT`) or CTranslate2 (`--engine ctranslate2 --model DIR`, from scripts/export.py)."""

from __future__ import annotations

from training.loading import load_checkpoint, load_training_weights


def add_engine_arguments(parser) -> None:
    """The flags that pick what translates, shared by scripts/translate.py and scripts/evaluate.py."""
    parser.add_argument("--ckpt", help="a Seq2SeqTransformer checkpoint (.ckpt), for --engine torch")
    parser.add_argument("--engine", default="torch", choices=["torch", "ctranslate2"], help="default: torch")
    parser.add_argument("--model", help="a directory written by scripts/export.py, for --engine ctranslate2")
    parser.add_argument(
        "--compute-type", default="default", help="CTranslate2's compute type (default: the exported weights' own)"
    )
    parser.add_argument("--device", default="cpu", help="torch or CTranslate2 device (default: cpu)")


def check_engine_arguments(parser, args) -> None:
    if args.engine == "torch" and not args.ckpt:
        parser.error("--ckpt is required (or --engine ctranslate2 --model DIR)")
    if args.engine == "ctranslate2" and not args.model:
        parser.error("--engine ctranslate2 needs --model DIR (a directory written by scripts/export.py)")


def load_translator(args):
    """What `add_engine_arguments` picked: a `Seq2SeqTransformer` in eval mode (with its training weights
    when `args.weights == "training"`) or a `deploy.ctranslate2.CTranslate2Translator`; both translate
    with `translate` and `translate_many`."""
    if args.engine == "ctranslate2":
        from .ctranslate2 import CTranslate2Translator  # imported only when asked for: CTranslate2 is optional

        return CTranslate2Translator(args.model, device=args.device, compute_type=args.compute_type)
    from tasks import Seq2SeqTransformer

    model = load_checkpoint(Seq2SeqTransformer, args.ckpt, map_location=args.device)
    if getattr(args, "weights", "averaged") == "training":
        load_training_weights(model, args.ckpt)
    return model.eval()
