"""Our tokenizers as a Hugging Face folder's (deploy/huggingface.py): a model imported from Marian (SentencePiece,
datamodules.sentencepiece) gets Marian's own files back (`MarianTokenizer`); ours (BPE or unigram in Hugging Face
`tokenizers`, a word or character vocabulary) become one fast tokenizer (`tokenizer.json`) with a post-processor
appending `<eos>`, as our sources end, so `AutoTokenizer` gives our ids. `<unk>` is kept visible in decoded text,
as ours is."""

from __future__ import annotations

import json
from pathlib import Path

from datamodules.sentencepiece import SentencePieceVocab
from datamodules.tokenizers import SubwordTokenizer
from datamodules.vocab import SPECIAL_TOKENS, Vocab

from .marian_shape import ENGINE, HubExportError


def check_tokenizers(model) -> None:
    """Both sides must be one fast tokenizer (ours) or Marian's SentencePiece pair."""
    src, tgt = model.src_tokenizer, model.tgt_tokenizer
    marian = [isinstance(t, SentencePieceVocab) for t in (src, tgt)]
    if all(marian):
        return
    if any(marian) or src.to_dict() != tgt.to_dict():
        raise HubExportError(
            f"cannot export to {ENGINE}: the model has two vocabularies, and one Hugging Face tokenizer serves both "
            "sides; train with one: a corpus data module's shared_vocab: true (the toy data module has two, source "
            "characters and target words, and no such option)"
        )


def fast_tokenizer(tokenizer):
    """One of our tokenizers (`SubwordTokenizer` or `Vocab`) as a Hugging Face `tokenizers.Tokenizer` giving the
    same ids, `<eos>` appended (our sources' framing), and the same text back (`<unk>` visible)."""
    from tokenizers import Regex, decoders, normalizers, pre_tokenizers, processors
    from tokenizers import Tokenizer as HFTokenizer
    from tokenizers.models import WordLevel

    if isinstance(tokenizer, SubwordTokenizer):
        tok = HFTokenizer.from_str(tokenizer.tokenizer.to_str())
    elif isinstance(tokenizer, Vocab):
        tok = HFTokenizer(WordLevel(dict(tokenizer.index), unk_token=SPECIAL_TOKENS[3]))
        if tokenizer.level == "char":  # every non-space character a token, whitespace dropped
            tok.normalizer = normalizers.Replace(Regex(r"\s+"), "")
            tok.pre_tokenizer = pre_tokenizers.Split(Regex("."), behavior="isolated")
            tok.decoder = decoders.Fuse()
        else:  # whitespace-separated words, joined by spaces when decoded (the library's default)
            tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
        tok.add_special_tokens(SPECIAL_TOKENS)
    else:
        raise HubExportError(f"cannot export to Hugging Face: no rule for a {type(tokenizer).__name__} tokenizer")
    eos = SPECIAL_TOKENS[tokenizer.eos_id]
    tok.post_processor = processors.TemplateProcessing(
        single=f"$A {eos}", pair=f"$A {eos} $B {eos}", special_tokens=[(eos, tokenizer.eos_id)]
    )
    # <unk> is no special token to skip: decoded text shows it, as ours does.
    data = json.loads(tok.to_str())
    for added in data.get("added_tokens", []):
        if added["content"] == SPECIAL_TOKENS[3]:
            added["special"] = False
    return HFTokenizer.from_str(json.dumps(data))


def save_tokenizer(transformers, model, folder: Path) -> None:
    src, tgt, max_len = model.src_tokenizer, model.tgt_tokenizer, model.net.config.max_len
    if isinstance(src, SentencePieceVocab):
        (folder / "source.spm").write_bytes(src.model)
        (folder / "target.spm").write_bytes(tgt.model)
        (folder / "vocab.json").write_text(json.dumps(src.index, ensure_ascii=False), encoding="utf-8")
        separate = src.tokens != tgt.tokens
        if separate:
            (folder / "target_vocab.json").write_text(json.dumps(tgt.index, ensure_ascii=False), encoding="utf-8")
        names = {"eos_token": src.tokens[src.eos_id], "unk_token": src.tokens[src.unk_id], "pad_token": src.tokens[src.pad_id]}
        tokenizer = transformers.MarianTokenizer(
            str(folder / "source.spm"),
            str(folder / "target.spm"),
            str(folder / "vocab.json"),
            target_vocab_file=str(folder / "target_vocab.json") if separate else None,
            separate_vocabs=separate,
            model_max_length=max_len,
            **names,
        )
    else:
        pad, bos, eos, _ = SPECIAL_TOKENS
        tokenizer = transformers.PreTrainedTokenizerFast(
            tokenizer_object=fast_tokenizer(src),
            pad_token=pad,
            bos_token=bos,
            eos_token=eos,
            model_max_length=max_len,
            clean_up_tokenization_spaces=False,  # our text as it decodes: no space removed before punctuation
        )
    tokenizer.save_pretrained(folder)
