"""The model card (README.md) of a Hugging Face export (deploy/huggingface.py): what the model is, how to load
it, its recipe and data, its test BLEU, its checkpoint and the command that made it."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from common.runs import data_settings, run_record
from datamodules.languages import target_languages, target_tag

if TYPE_CHECKING:  # an annotation only: scripts/generate.py reads a run's record here before torch loads
    from models.config import Seq2SeqConfig


def model_card(
    model, shaped: Seq2SeqConfig, ckpt: Path | None = None, meta: dict | None = None, command: str | None = None
) -> str:
    """README.md: what the model is, how to load it, its recipe and data, its test BLEU (from the run's summary.json
    beside `ckpt`), its checkpoint (`meta`: `checkpoint_meta`) and the commands that made it."""
    hp, c, opts = model.hparams, model.net.config, model.translator.options
    record = run_record(ckpt)
    summary = record.get("summary") or {}
    meta = meta or {}
    data = data_settings(record.get("config", ""))
    languages = [lang for lang in (data.get("src_lang"), data.get("tgt_lang")) if lang]
    targets = list(target_languages(model.src_tokenizer))  # a multilingual model's: a >>xx<< token starts a source
    tag = target_tag(targets[0]) + " " if targets else ""
    front = ["---", "library_name: transformers", "pipeline_tag: translation", "tags:", "- translation", "- marian"]
    if languages:
        front += ["language:", *[f"- {lang}" for lang in languages]]
    front += ["---", ""]
    title = f"# {ckpt.stem if ckpt else 'seq2seq'}: a Transformer translation model ({'→'.join(languages) or 'Marian'})"
    lines = [
        title,
        "",
        "An encoder–decoder Transformer trained from scratch with a PyTorch Lightning codebase, exported as a "
        "`MarianMTModel`: it loads with `transformers` alone.",
        "",
        "```python",
        "from transformers import AutoModelForSeq2SeqLM, AutoTokenizer",
        'tokenizer = AutoTokenizer.from_pretrained("THIS_FOLDER")',
        'model = AutoModelForSeq2SeqLM.from_pretrained("THIS_FOLDER")',
        f'batch = tokenizer(["{tag}a sentence to translate"], return_tensors="pt", padding=True)',
        "print(tokenizer.batch_decode(model.generate(**batch, num_beams=1), skip_special_tokens=True))",
        '# transformers 4 also has pipeline("translation", model="THIS_FOLDER")',
        "```",
        "",
        "## Model",
        "",
        f"- {c.num_encoder_layers} encoder and {c.num_decoder_layers} decoder layers, d_model {c.d_model}, "
        f"{c.nhead} heads, feed-forward {c.dim_feedforward} ({c.activation}), dropout {c.dropout}, post-norm",
        f"- vocabulary: {len(model.src_tokenizer)} tokens ({model.src_tokenizer.kind})"
        + (", one table for both sides" if c.share_embeddings else "")
        + (", the output layer tied to it" if c.tie_embeddings else ""),
        f"- positions: fixed sinusoids, up to {c.max_len} tokens a side",
        *(
            [f"- target languages: {', '.join(targets)}, each asked for by its token first in the source ({tag.strip()})"]
            if targets
            else []
        ),
        f"- parameters: {sum(p.numel() for p in model.parameters()):,}",
    ]
    if shaped.num_encoder_layers != c.num_encoder_layers:
        lines.append(
            "- the trained network ends each stack with a LayerNorm, which Marian lacks: the exported model has one more "
            "layer per stack whose sublayers add zero and whose norms apply it (exact up to LayerNorm's epsilon)"
        )
    lines += ["", "## Training", ""]
    if data:
        lines.append("- data: " + ", ".join(f"{k}={v}" for k, v in data.items()))
    recipe = {k: hp[k] for k in ("lr", "lr_schedule", "warmup_steps", "label_smoothing", "weight_decay") if k in hp}
    lines.append("- optimisation: " + ", ".join(f"{k}={v}" for k, v in recipe.items()))
    if meta.get("global_step") is not None:
        lines.append(f"- checkpoint: epoch {meta.get('epoch')}, step {meta.get('global_step')}")
    if meta.get("monitor"):
        lines.append(f"- selected by {meta['monitor']} = {meta.get('best_score')}")
    lines += ["", "## Evaluation", ""]
    test = summary.get("test") or {}
    if "test/bleu" in test:
        tested = f" ({summary['tested']})" if summary.get("tested") else ""
        lines.append(
            f"- test BLEU {test['test/bleu']:.2f}{tested}, beam {hp.get('eval_beam_size')}, alpha {hp.get('length_penalty')}"
        )
        if summary.get("test_bleu_signature"):
            lines.append(f"- SacreBLEU signature: `{summary['test_bleu_signature']}`")
    else:
        lines.append("- no test score was recorded beside the checkpoint")
    lines += [
        "",
        "## Decoding",
        "",
        f"`generation_config.json` sets beam {hp.get('eval_beam_size')} and `length_penalty` {hp.get('length_penalty')}. "
        "The training code's beam search divides scores by GNMT's ((5 + n) / 6) ** alpha where `generate` divides by "
        "n ** length_penalty: with 0 (or greedy search) the two give the same outputs.",
        "",
        f"Length: the training code stops an output at {opts.max_len_a} × S + {opts.max_len_b} tokens (S: that "
        f"sentence's source in tokens, its end token included), `generate` at `max_length` {c.max_len} (the "
        "model's positions); pass "
        f"`max_new_tokens=min(int({opts.max_len_a} * input_ids.shape[1] + {opts.max_len_b}), {c.max_len - 1})` with one "
        "sentence (or sentences of one length) a call to stop where it does (the config records `max_len_a` and "
        "`max_len_b`).",
        "",
        "## How it was made",
        "",
        "```",
        command or "deploy.huggingface.export_huggingface(model, OUT_DIR)",
        "```",
    ]
    if record.get("config"):
        lines += ["", "The training run's configuration (`config.yaml`):", "", "```yaml", record["config"].strip(), "```"]
    return "\n".join(front + lines) + "\n"


def checkpoint_meta(state: dict) -> dict:
    """The epoch, step and best monitored score a Lightning checkpoint records (for the card)."""
    meta = {"epoch": state.get("epoch"), "global_step": state.get("global_step")}
    for value in (state.get("callbacks") or {}).values():  # a ModelCheckpoint's (or a subclass's) state
        if isinstance(value, dict) and value.get("monitor") and value.get("best_model_score") is not None:
            meta["monitor"], meta["best_score"] = value["monitor"], round(float(value["best_model_score"]), 4)
            break
    return meta
