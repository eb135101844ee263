"""Reading a Hugging Face Marian (OPUS-MT) model, from its folder or a hub name's download (`huggingface_hub`), into
our network's settings, weights (models/marian.py) and tokenizers (datamodules/sentencepiece.py), without
`transformers`: docs/guide/pretrained.md says what a folder holds. Each fault is one `InputError` line.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import torch
from tokenizers import Tokenizer as HFTokenizer

from common.errors import InputError
from datamodules.sentencepiece import SentencePieceVocab
from datamodules.tokenizers import SubwordTokenizer
from models.marian import MarianFormatError, options_from_config

WEIGHT_FILES = ("model.safetensors", "pytorch_model.bin")
NEEDED = ("config.json", "source.spm", "target.spm", "vocab.json")
_HUB_NAME = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")


def marian_folder(name_or_folder: str | Path) -> Path:
    """The local folder of a Marian model: `name_or_folder` itself, or a hub name's download."""
    path = Path(name_or_folder)
    if path.is_dir():
        return path
    name = str(name_or_folder)
    if path.exists() or not _HUB_NAME.match(name):
        raise InputError(f"{name}: no such folder (a Marian model's folder, or a hub name such as Helsinki-NLP/opus-mt-de-en)")
    try:
        from huggingface_hub import snapshot_download
    except ImportError:
        raise InputError(
            f"{name} is no folder here, and downloading it needs huggingface_hub: pip install huggingface_hub"
        ) from None
    patterns = [*NEEDED, "target_vocab.json", "tokenizer.json", "generation_config.json", *WEIGHT_FILES]
    try:
        return Path(snapshot_download(name, allow_patterns=patterns))
    except Exception as err:  # offline, no such repository, a gated one: each is the same "cannot get it"
        reason = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise InputError(f"{name}: no such folder, and it cannot be downloaded from the Hugging Face hub ({reason})") from None


def _read_weights(folder: Path) -> dict[str, torch.Tensor]:
    for name in WEIGHT_FILES:
        path = folder / name
        if not path.is_file():
            continue
        try:
            if name.endswith(".safetensors"):
                from safetensors.torch import load_file

                return load_file(path)
            return torch.load(path, map_location="cpu", weights_only=True)
        except Exception as err:  # a truncated or foreign file fails in the reader's own way
            raise MarianFormatError(f"{path} is not a readable weights file ({str(err).strip()[:120]})") from None
    raise InputError(f"{folder} has no weights file ({' or '.join(WEIGHT_FILES)})")


def _read_json(path: Path) -> dict:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as err:
        raise MarianFormatError(f"{path} is not readable JSON ({err})") from None
    if not isinstance(data, dict):
        raise MarianFormatError(f"{path} is not a JSON object")
    return data


def _spm_tokenizers(folder: Path, options: dict, config: dict) -> tuple[SentencePieceVocab, SentencePieceVocab]:
    """A Marian folder's SentencePiece models and id tables (vocab.json, target_vocab.json)."""
    src_vocab = _read_json(folder / "vocab.json")
    tgt_vocab, tgt_file = src_vocab, "vocab.json"
    if not options["share_embeddings"] and (folder / "target_vocab.json").is_file():
        tgt_vocab, tgt_file = _read_json(folder / "target_vocab.json"), "target_vocab.json"
    if len(src_vocab) != len(tgt_vocab):
        raise MarianFormatError(
            f"{folder}: vocab.json has {len(src_vocab):,} entries and target_vocab.json {len(tgt_vocab):,}; models whose "
            "source and target vocabularies differ in size are not supported (one pad_token_id, last on both sides)"
        )
    names = {"eos": "</s>", "unk": "<unk>", "pad": "<pad>"}
    try:
        src = SentencePieceVocab.from_vocab((folder / "source.spm").read_bytes(), src_vocab, **names)
        tgt = SentencePieceVocab.from_vocab((folder / "target.spm").read_bytes(), tgt_vocab, **names)
    except (ValueError, RuntimeError, OSError) as err:  # sentencepiece raises RuntimeError on a foreign file
        raise MarianFormatError(f"{folder}: the tokenizer files do not read as Marian's ({str(err).strip()[:120]})") from None
    pad = config.get("pad_token_id")
    for name, vocab in (("vocab.json", src), (tgt_file, tgt)):
        if pad is not None and vocab.pad_id != pad:
            raise MarianFormatError(f"{folder}: {name} puts <pad> at {vocab.pad_id}, config.json's pad_token_id is {pad}")
    return src, tgt


def _fast_tokenizer(folder: Path, config: dict) -> SubwordTokenizer:
    """The one `tokenizer.json` of a folder that scripts/export.py wrote (`--to hf`): ours, for both sides."""
    try:
        tokenizer = HFTokenizer.from_file(str(folder / "tokenizer.json"))
        tokenizer.post_processor = None  # the <eos> it appends is the framing's (datamodules.batching)
        ours = SubwordTokenizer(tokenizer)
    except Exception as err:  # tokenizers raises its own Exception subclass on a foreign file
        raise MarianFormatError(f"{folder / 'tokenizer.json'} is not a tokenizer of ours ({str(err).strip()[:120]})") from None
    if config.get("pad_token_id") != ours.pad_id:
        raise MarianFormatError(
            f"{folder}: tokenizer.json puts <pad> at {ours.pad_id}, config.json's pad_token_id is {config.get('pad_token_id')}"
        )
    return ours


def read_marian(folder: Path) -> tuple[dict, dict, dict[str, torch.Tensor]]:
    """A Marian folder → (our network's settings, `models.config.Seq2SeqConfig` fields but the vocabularies';
    our tokenizers' `to_dict()`s {"src", "tgt"}; Marian's weights)."""
    ours = not (folder / "source.spm").is_file() and (folder / "tokenizer.json").is_file()  # scripts/export.py's
    missing = [] if ours else [name for name in NEEDED if not (folder / name).is_file()]
    if missing:
        raise InputError(f"{folder} is not a Marian model's folder: {', '.join(missing)} missing")
    config = _read_json(folder / "config.json")
    options = options_from_config(config, str(folder / "config.json"))
    src, tgt = (_fast_tokenizer(folder, config),) * 2 if ours else _spm_tokenizers(folder, options, config)
    weights = _read_weights(folder)
    # Which tables are one is read from the weights: transformers 5 keeps the encoder's, the decoder's and the
    # output layer's apart unless `tie_word_embeddings`, whatever `share_encoder_decoder_embeddings` says.
    state = {k.removeprefix("model."): v for k, v in weights.items()}
    enc = state.get("encoder.embed_tokens.weight", state.get("shared.weight"))
    dec = state.get("decoder.embed_tokens.weight", state.get("shared.weight"))
    out = state.get("lm_head.weight", dec)
    if enc is None or dec is None:
        raise MarianFormatError(f"{folder}: the weights hold no embeddings (encoder.embed_tokens or shared)")
    options["share_embeddings"] = enc.shape == dec.shape and torch.equal(enc, dec) and src.to_dict() == tgt.to_dict()
    options["tie_embeddings"] = out is not None and out.shape == dec.shape and torch.equal(out, dec)
    return options, {"src": src.to_dict(), "tgt": tgt.to_dict()}, weights
