"""Export a trained `Seq2SeqTransformer` as a Hugging Face model folder: a `MarianMTModel` and its tokenizer.

    export_huggingface(model, "exported/multi30k-hf")   # then, with no code of ours:
    AutoModelForSeq2SeqLM.from_pretrained("exported/multi30k-hf"), AutoTokenizer.from_pretrained(...)

The folder holds `config.json` and `model.safetensors` (a `MarianMTModel`), the tokenizer and its config,
`generation_config.json` (the decoder's start, the beam size, the length limit) and a model card (`README.md`).
Marian (the OPUS-MT models) is our post-norm encoder–decoder with fixed sinusoids; the network is rewritten
into its shape (deploy/marian_shape.py: the sinusoids' layout permuted, each stack's final norm one more layer),
which is still a network of ours, so the rewrite is checked in our own code. Tokenizers: deploy/hf_tokenizer.py;
one tokenizer serves both sides, so a model of ours with two vocabularies is refused. The card:
deploy/model_card.py.

Every export checks itself (deploy/verify.py): `ALLOWED` (deploy/marian_shape.py) names, for each field of the
network's settings, the values Marian expresses; each weight of the checkpoint is used exactly once and the
`MarianMTModel` has no weight unfilled (but the sinusoid tables transformers makes itself); and the folder,
loaded by transformers before it is moved into place, must give our log-probs and greedy outputs on a few
random probes. Each failure is one `HubExportError` line, and nothing is written.

Beam search: `generate` normalises scores by length ** length_penalty, ours by GNMT's ((5 + n) / 6) ** alpha;
with 0 both rank by the sum of log-probs and give the same outputs (tests/test_export_hf.py). The generation
config carries our alpha as `length_penalty`, so a plain `generate` is close to ours, not equal.
Length: ours stops at max_len_a × the source's length + max_len_b tokens, a rule `GenerationConfig` cannot hold
(its `max_length` and `max_new_tokens` are fixed numbers; a stopping criterion is not saved with it). The
config's `max_length` is the model's `max_len` (max_len - 1 new tokens, the cap of ours too), and it records
max_len_a and max_len_b, which `generate` ignores: `max_new_tokens=min(int(a * S + b), max_len - 1)`, S a
source's tokens with `<eos>`, makes `generate` stop where ours stops, for the sources of that one limit (ours
gives each sentence its own limit; `generate` takes one a call). At the limit both end an output
with `<eos>` (`forced_eos_token_id`); `generate` gives that token a log-prob of 0, ours the model's own.
"""

from __future__ import annotations

import contextlib
import os
import re
from pathlib import Path

import torch

from common.files import atomic_output
from models.marian import config_to_marian

from .hf_tokenizer import check_tokenizers, save_tokenizer
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
    """`GenerationConfig`'s arguments: our decoder start, beam size, length limit and alpha (module docstring)."""
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
        # ours stops at max_len_a × source + max_len_b, which generate cannot (module docstring): recorded for a user
        max_len_a=options.max_len_a,
        max_len_b=options.max_len_b,
        # our searches never generate <pad> or <bos> (models/decoding.py); generate is told the same
        bad_words_ids=[[token] for token in dict.fromkeys((tgt.pad_id, tgt.bos_id))],
    )


# ---------------------------------------------------------------------------------------------- the folder


def export_huggingface(
    model,
    out_dir: str | Path,
    force: bool = False,
    ckpt: str | Path | None = None,
    meta: dict | None = None,
    command: str | None = None,
) -> Path:
    """Write `model` (a `Seq2SeqTransformer`) as a Hugging Face Marian folder (module docstring).

    An existing `out_dir` is replaced only with `force`, and only if it is empty or an earlier export (it holds
    config.json and generation_config.json). The folder is written beside `out_dir` and renamed onto it once
    complete and checked (module docstring; a refusal is one `HubExportError` line, with nothing written)
    (`common.files.atomic_output`): a full disk leaves nothing half-written and is an `OutputError`.
    `ckpt` (the checkpoint's path), `meta` (`checkpoint_meta`) and `command` (the one that exported) feed the card."""
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
    src = torch.nn.utils.rnn.pad_sequence([torch.tensor(s) for s in probe.sources], batch_first=True, padding_value=pad)
    tgt = [torch.tensor([bos, *t]) for t in probe.targets]
    tgt = torch.nn.utils.rnn.pad_sequence(tgt, batch_first=True, padding_value=pad)  # (B, T + 1)
    mask = src.ne(pad).long()
    log_probs = hf(input_ids=src, attention_mask=mask, decoder_input_ids=tgt).logits.log_softmax(-1)  # (B, T + 1, V)
    rows = [len(t) + 1 for t in probe.targets]
    ours = [row[:n] for row, n in zip(probe.log_probs, rows)]
    check_scores(ENGINE, ours, [row[:n] for row, n in zip(log_probs, rows)], "log-probs")
    greedy = transformers.GenerationConfig(**{**generation_config(model), "num_beams": 1, "max_length": probe.limit + 1})
    out = hf.generate(input_ids=src, attention_mask=mask, generation_config=greedy)  # (B, 1 + ≤ limit)
    eos = model.tgt_tokenizer.eos_id
    greedy = [row[: row.index(eos) + 1] if eos in row else row for row in out[:, 1:].tolist()]
    check_greedy(ENGINE, model, probe, greedy)


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
