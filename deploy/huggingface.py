"""Export a trained `Seq2SeqTransformer` as a Hugging Face model folder that transformers loads with no code of ours:
a `MarianMTModel` (deploy/marian_shape.py), its tokenizer, `generation_config.json` and a model card
(deploy/model_card.py). What the folder holds, how the tokenizers export and what `generate` computes as ours:
docs/guide/export-deploy.md. Every export checks itself first (deploy/verify.py): a refusal is one
`HubExportError` line with nothing written.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
from pathlib import Path

import torch

from common.files import atomic_output
from datamodules.batching import pad_sequences
from datamodules.sentencepiece import SentencePieceVocab
from datamodules.tokenizers import SubwordTokenizer
from datamodules.vocab import SPECIAL_TOKENS, Vocab
from models.marian import config_to_marian

from .marian_shape import ENGINE, HubExportError, check_exportable, check_loaded, marian_model, marian_shaped
from .model_card import checkpoint_meta, model_card
from .verify import check_greedy, check_scores, probes

__all__ = ["HubExportError", "check_exportable", "checkpoint_meta", "export_huggingface", "marian_shaped", "push_to_hub"]
# What marks an earlier export (a folder that --force may replace).
EXPORT_FILES = ("config.json", "generation_config.json")


def _transformers():
    try:
        import transformers
    except ImportError:
        raise HubExportError(
            'exporting to Hugging Face needs transformers: pip install -e ".[deploy]" (or pip install transformers)'
        ) from None
    transformers.utils.logging.disable_progress_bar()  # a script prints its one line; no bars for a small folder
    return transformers


def generation_config(model) -> dict:
    """`GenerationConfig`'s arguments: our decoder start, beam size, length limit and alpha (docs/guide/export-deploy.md)."""
    hp, tgt, options = model.hparams, model.tgt_tokenizer, model.translator.options
    return dict(
        decoder_start_token_id=tgt.bos_id,
        bos_token_id=tgt.bos_id,
        eos_token_id=tgt.eos_id,
        pad_token_id=tgt.pad_id,
        forced_eos_token_id=tgt.eos_id,  # an output that reaches the limit ends with <eos>, as ours (models/decoding.py)
        num_beams=hp.get("eval_beam_size", 4),
        length_penalty=hp.get("length_penalty", 1.0),
        early_stopping=False,  # stop when no live beam can beat the finished ones: ours with alpha = 0
        max_length=model.net.config.max_len,  # the decoder's start included: max_len - 1 new tokens, as ours
        # ours stops at max_len_a × source + max_len_b, which generate cannot hold: recorded for a user
        max_len_a=options.max_len_a,
        max_len_b=options.max_len_b,
        # our searches never generate <pad> or <bos> (models/decoding.py); generate is told the same
        bad_words_ids=[[token] for token in dict.fromkeys((tgt.pad_id, tgt.bos_id))],
    )


# ---------------------------------------------------------------------------------------------- the tokenizer


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


# ---------------------------------------------------------------------------------------------- the folder


def export_huggingface(
    model,
    out_dir: str | Path,
    force: bool = False,
    ckpt: str | Path | None = None,
    meta: dict | None = None,
    command: str | None = None,
) -> Path:
    """Write `model` (a `Seq2SeqTransformer`) as a Hugging Face Marian folder, checked, then renamed onto `out_dir`
    (`common.files.atomic_output`; docs/guide/export-deploy.md says which `out_dir` `force` replaces). `ckpt` (the
    checkpoint's path), `meta` (`checkpoint_meta`) and `command` (the one that exported) feed the card."""
    out_dir = Path(out_dir)
    check_exportable(model.net.config)
    check_tokenizers(model)
    if out_dir.exists():
        if not force:
            raise HubExportError(f"{out_dir} exists; pass --force to replace an earlier export")
        earlier = all((out_dir / name).is_file() for name in EXPORT_FILES)
        if not out_dir.is_dir() or (any(out_dir.iterdir()) and not earlier):
            raise HubExportError(f"{out_dir} is not an earlier Hugging Face export; refusing to replace it")
    transformers = _transformers()
    shaped, state = marian_shaped(model)
    tgt = model.tgt_tokenizer
    hf = marian_model(transformers, config_to_marian(shaped, tgt.pad_id, tgt.eos_id, tgt.bos_id), state)
    card = model_card(model, shaped, Path(ckpt) if ckpt else None, meta, command)
    with contextlib.suppress(OSError):  # made as `mkdir -p`; one that cannot be made is atomic_output's error
        out_dir.parent.mkdir(parents=True, exist_ok=True)
    with atomic_output(out_dir, folder=True) as tmp:
        _save_weights(hf, tmp)
        transformers.GenerationConfig(**generation_config(model)).save_pretrained(tmp)
        save_tokenizer(transformers, model, tmp)
        (tmp / "README.md").write_text(card, encoding="utf-8")
        verify_export(transformers, model, tmp)
    return out_dir


@torch.no_grad()
def verify_export(transformers, model, folder: Path) -> None:
    """Refuse (`HubExportError`) a folder that transformers loads with a weight missing or unexpected, or whose
    log-probs (every token's, at every position) or greedy outputs of the probes are not ours (deploy/verify.py)."""
    probe = probes(model)
    hf, info = transformers.MarianMTModel.from_pretrained(str(folder), output_loading_info=True)
    check_loaded(info["missing_keys"], [*info["unexpected_keys"], *(m[0] for m in info.get("mismatched_keys", []))])
    hf.eval()
    pad, bos = model.net.pad_id, model.tgt_tokenizer.bos_id
    src = pad_sequences(probe.sources, pad)
    tgt = pad_sequences([[bos, *t] for t in probe.targets], pad)  # (B, T + 1)
    mask = src.ne(pad).long()
    log_probs = hf(input_ids=src, attention_mask=mask, decoder_input_ids=tgt).logits.log_softmax(-1)  # (B, T + 1, V)
    rows = [len(t) + 1 for t in probe.targets]
    ours = [row[:n] for row, n in zip(probe.log_probs, rows)]
    check_scores(ENGINE, ours, [row[:n] for row, n in zip(log_probs, rows)], "log-probs")
    greedy = transformers.GenerationConfig(**{**generation_config(model), "num_beams": 1, "max_length": probe.limit + 1})
    out = hf.generate(input_ids=src, attention_mask=mask, generation_config=greedy)  # (B, 1 + ≤ limit)
    check_greedy(ENGINE, model, probe, out[:, 1:].tolist())  # each row cut at its <eos> there


def _save_weights(hf, folder: Path) -> None:
    """`save_pretrained`, with safetensors' failed write ("I/O error: ... (os error 28)") as the `OSError` it is."""
    try:
        hf.save_pretrained(folder)
    except Exception as err:
        code = re.search(r"os error (\d+)", str(err))
        if code is None:
            raise
        raise OSError(int(code.group(1)), os.strerror(int(code.group(1)))) from None
    # safetensors creates its file private (0600); the folder is for sharing: the mode config.json got (the umask's)
    for weights in folder.glob("*.safetensors"):
        weights.chmod((folder / "config.json").stat().st_mode & 0o777)


def push_to_hub(folder: str | Path, repo_id: str, api=None) -> str:
    """Upload an exported folder to the Hugging Face hub as model `repo_id` (created if needed); its URL.
    No network, no login or a refused upload is one `HubExportError` line."""
    try:
        from huggingface_hub import HfApi
    except ImportError:
        raise HubExportError("--push-to-hub needs huggingface_hub: pip install huggingface_hub") from None
    api = api or HfApi()
    try:
        api.create_repo(repo_id, repo_type="model", exist_ok=True)
        commit = api.upload_folder(folder_path=str(folder), repo_id=repo_id, repo_type="model", commit_message="Upload model")
    except Exception as err:  # offline, no token, no such namespace: each is "the upload did not happen"
        reason = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise HubExportError(
            f"cannot push {folder} to the Hugging Face hub as {repo_id} ({reason}); the folder is written"
        ) from None
    return getattr(commit, "commit_url", None) or f"https://huggingface.co/{repo_id}"
