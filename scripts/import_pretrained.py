"""Import a Hugging Face Marian (OPUS-MT) model as a checkpoint of ours.

    .venv/bin/python scripts/import_pretrained.py Helsinki-NLP/opus-mt-de-en --out opus-mt-de-en.ckpt   # online
    .venv/bin/python scripts/import_pretrained.py path/to/marian_folder --out model.ckpt               # a local copy
    .venv/bin/python scripts/translate.py --ckpt opus-mt-de-en.ckpt --beam-size 4 "Ein Hund rennt."

docs/guide/pretrained.md says what the folder holds, what the checkpoint is, and how multilingual models import.
"""

from __future__ import annotations

import argparse
from pathlib import Path

if __name__ == "__main__":  # run as a file, not imported as scripts.NAME (the tests)
    import _checkout  # noqa: F401  (first: the repository's packages importable, and this Python the project's)

from common.checkpoints import add_output_arguments, output_checkpoint  # noqa: E402
from common.commands import script_parser  # noqa: E402
from common.exits import exit_on_user_error  # noqa: E402
from common.files import atomic_torch_save  # noqa: E402


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = script_parser(__doc__)
    parser.add_argument("model", help="a Marian model's folder, or its Hugging Face hub name (downloaded when online)")
    add_output_arguments(parser)
    parser.add_argument("--length-penalty", type=float, default=1.0, help="beam search's default alpha (default: 1.0)")
    args = parser.parse_args(argv)
    if args.length_penalty < 0:
        parser.error("--length-penalty must be at least 0")
    return args


def checkpoint_of(model) -> dict:
    """A Lightning checkpoint of `model` at step 0, as `load_from_checkpoint` reads it (no loop state: a
    starting point for fine-tuning, not a run to resume)."""
    import lightning as L

    return {
        "state_dict": model.state_dict(),
        "hyper_parameters": dict(model.hparams),
        "pytorch-lightning_version": L.__version__,
        "epoch": 0,
        "global_step": 0,
    }


@exit_on_user_error
def main(argv: list[str] | None = None) -> Path:
    args = parse_args(argv)
    out = output_checkpoint(args)
    from datamodules.languages import target_languages
    from tasks import Seq2SeqTransformer

    model = Seq2SeqTransformer.from_pretrained(args.model, length_penalty=args.length_penalty)
    atomic_torch_save(checkpoint_of(model), out)
    c, size = model.net.config, sum(p.numel() for p in model.parameters())
    vocabularies = f"{len(model.src_tokenizer)}/{len(model.tgt_tokenizer)}"
    languages = target_languages(model.src_tokenizer)  # a multilingual model's >>xx<< tokens
    print(
        f"wrote {out}: {args.model} as a Seq2SeqTransformer ({size / 1e6:.1f}M parameters, d_model={c.d_model}, "
        f"{c.num_encoder_layers}+{c.num_decoder_layers} layers, vocabularies {vocabularies}"
        + (f"; target languages {', '.join(languages)}: translate with --tgt-lang)" if languages else ")")
    )
    return out


if __name__ == "__main__":
    main()
