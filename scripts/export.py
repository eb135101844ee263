"""Export a trained translation checkpoint for deployment.

    .venv/bin/python scripts/export.py --ckpt CKPT --to ctranslate2 OUT_DIR [--quantization int8] [--force]
    .venv/bin/python scripts/translate.py --engine ctranslate2 --model OUT_DIR "Ein Hund rennt."
    .venv/bin/python scripts/export.py --ckpt CKPT --to hf OUT_DIR [--push-to-hub USER/NAME] [--force]

docs/guide/export-deploy.md says what each folder holds, how the network is rewritten for each engine, and the
checks every export passes before OUT_DIR is written.
"""

from __future__ import annotations

import argparse
import shlex
from pathlib import Path

if __name__ == "__main__":  # run as a file, not imported as scripts.NAME (the tests)
    import _checkout  # noqa: F401  (first: the repository's packages importable, and this Python the project's)

from common.checkpoints import add_weights_argument, load_checkpoint, read_checkpoint  # noqa: E402
from common.commands import invocation, script_parser  # noqa: E402
from common.exits import exit_on_user_error  # noqa: E402
from deploy.choices import QUANTIZATIONS  # noqa: E402  (the exporters, which import torch, once the arguments are read)
from deploy.model_card import checkpoint_meta  # noqa: E402


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = script_parser(__doc__)
    parser.add_argument("--ckpt", required=True, help="a Seq2SeqTransformer checkpoint (.ckpt)")
    parser.add_argument(
        "--to", required=True, choices=["ctranslate2", "hf"], help="the engine to export for (hf: a Hugging Face folder)"
    )
    parser.add_argument("out_dir", help="the directory to write (must not exist, unless --force)")
    parser.add_argument("--quantization", default=None, choices=QUANTIZATIONS, help="weight type (default: float32)")
    add_weights_argument(parser, "export")
    parser.add_argument("--push-to-hub", metavar="USER/NAME", help="with --to hf: upload the folder to the Hugging Face hub")
    parser.add_argument("--force", action="store_true", help="replace OUT_DIR if it holds an earlier export")
    args = parser.parse_args(argv)
    if args.to == "hf" and args.quantization:
        parser.error("--quantization is CTranslate2's: a Hugging Face export keeps float32 weights")
    if args.to != "hf" and args.push_to_hub:
        parser.error("--push-to-hub uploads a Hugging Face export: use it with --to hf")
    return args


@exit_on_user_error
def main(argv: list[str] | None = None) -> Path:
    args = parse_args(argv)
    from deploy.ctranslate2 import export_ctranslate2
    from deploy.huggingface import export_huggingface, push_to_hub
    from tasks import Seq2SeqTransformer

    model = load_checkpoint(Seq2SeqTransformer, args.ckpt, weights=args.weights)
    if args.to == "hf":
        command = shlex.join(["python", "scripts/export.py", *invocation(argv, "export")[1]])
        meta = checkpoint_meta(read_checkpoint(args.ckpt))
        out = export_huggingface(model.eval(), args.out_dir, force=args.force, ckpt=args.ckpt, meta=meta, command=command)
        print(f"wrote {out} (a Hugging Face MarianMTModel with its tokenizer, generation config and model card)")
        if args.push_to_hub:
            print(f"pushed to {push_to_hub(out, args.push_to_hub)}")
        return out
    out = export_ctranslate2(model.eval(), args.out_dir, quantization=args.quantization, force=args.force)
    print(f"wrote {out} (CTranslate2, {args.quantization or 'float32'} weights, with the checkpoint's tokenizers)")
    return out


if __name__ == "__main__":
    main()
