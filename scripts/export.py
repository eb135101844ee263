"""Export a trained translation checkpoint for deployment.

    python scripts/export.py --ckpt CKPT --to ctranslate2 OUT_DIR [--quantization int8] [--force]
    python scripts/translate.py --engine ctranslate2 --model OUT_DIR "Ein Hund rennt."

OUT_DIR gets CTranslate2's model (model.bin, vocabularies, config.json) and our tokenizers
(tokenizers.json), so the directory alone translates text (deploy/ctranslate2.py says how the
weights map and which options cannot). `--quantization` stores the weights as CTranslate2 runs them
(int8, int16, float16, ...; default float32); a float32 export can still be run in int8 with
`translate.py --compute-type int8`. A checkpoint of a run with `--ema_decay` is exported with its
averaged weights unless `--weights training`. OUT_DIR's parent folders are created as `mkdir -p` would;
an existing OUT_DIR is replaced only with --force, and only if it is an earlier export. A bad checkpoint,
an option CTranslate2 cannot represent, or no `ctranslate2` package: one line on stderr, exit status 2.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # run from a checkout without `pip install -e .` too

from deploy.ctranslate2 import QUANTIZATIONS, export_ctranslate2  # noqa: E402
from training.faults import exit_on_user_error  # noqa: E402
from training.loading import add_weights_argument, load_checkpoint, load_training_weights  # noqa: E402


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ckpt", required=True, help="a Seq2SeqTransformer checkpoint (.ckpt)")
    parser.add_argument("--to", required=True, choices=["ctranslate2"], help="the engine to export for")
    parser.add_argument("out_dir", help="the directory to write (must not exist, unless --force)")
    parser.add_argument("--quantization", default=None, choices=QUANTIZATIONS, help="weight type (default: float32)")
    add_weights_argument(parser, "export")
    parser.add_argument("--force", action="store_true", help="replace OUT_DIR if it holds an earlier export")
    return parser.parse_args(argv)


@exit_on_user_error
def main(argv: list[str] | None = None) -> Path:
    args = parse_args(argv)
    from tasks import Seq2SeqTransformer

    model = load_checkpoint(Seq2SeqTransformer, args.ckpt)
    if args.weights == "training":
        load_training_weights(model, args.ckpt)
    out = export_ctranslate2(model.eval(), args.out_dir, quantization=args.quantization, force=args.force)
    print(f"wrote {out} (CTranslate2, {args.quantization or 'float32'} weights, with the checkpoint's tokenizers)")
    return out


if __name__ == "__main__":
    main()
