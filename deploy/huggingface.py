"""Export a trained `Seq2SeqTransformer` as a Hugging Face model folder: a `MarianMTModel` and its tokenizer.

    export_huggingface(model, "exported/multi30k-hf")   # then, with no code of ours:
    AutoModelForSeq2SeqLM.from_pretrained("exported/multi30k-hf"), AutoTokenizer.from_pretrained(...)

The folder holds `config.json` and `model.safetensors` (a `MarianMTModel`), the tokenizer and its config,
`generation_config.json` (the decoder's start, the beam size, the length limit) and a model card (`README.md`).
Marian (the OPUS-MT models) is our post-norm encoder–decoder with fixed sinusoids; the network is rewritten
into its shape (`marian_shaped`), which is still a network of ours, so the rewrite is checked in our own code:
  - our sinusoids interleave sin and cos (PE[p, 2i], PE[p, 2i+1]) where Marian's are [sin | cos] halves. The
    two tables differ by a fixed permutation of the model dimension, and the residual stream is equivariant
    under it: every weight that reads the stream (q/k/v, fc1, the output layer) has its input columns
    permuted, every one that writes it (the embeddings, out_proj, fc2, the norms) its outputs, and the
    network computes the same function with Marian's table (`residual_permutation`);
  - a norm after each stack (ours by default, as torch.nn.Transformer's) has no place in Marian. Each stack
    gets one more layer whose sublayers add exactly zero (their value and output weights are zero) and whose
    norms apply what ours apply: the last layer's norm is split into a plain standardisation and its gain and
    bias, then the final norm. Standardising a standardised vector again divides it by sqrt(1 - eps/v + eps)
    (v: the variance before the norm, eps = 1e-5), so this step is exact up to a relative 1e-5 · |1 - v| / v;
  - Marian's output layer has a bias (`final_logits_bias`): zero for a model of ours without one.
Options Marian cannot express are refused by `check_exportable`, one line naming the option.

Tokenizers: a model imported from Marian (SentencePiece, datamodules.sentencepiece) gets Marian's own files
back (`MarianTokenizer`); ours (BPE or unigram in Hugging Face `tokenizers`, a word or character vocabulary)
become one fast tokenizer (`tokenizer.json`) with a post-processor appending `<eos>`, as our sources end, so
`AutoTokenizer` gives our ids. One tokenizer serves both sides, so ours need one vocabulary for both (the
data's `shared_vocab: true`); a model with two is refused. `<unk>` is kept visible in decoded text, as ours is.
One difference remains: a special token's name typed in the text ("<unk>") is that token for Hugging Face's
tokenizers, and five characters for our character vocabulary.

Beam search: `generate` normalises scores by length ** length_penalty, ours by GNMT's ((5 + n) / 6) ** alpha;
with 0 both rank by the sum of log-probs and give the same outputs (tests/test_export_hf.py). The generation
config carries our alpha as `length_penalty`, so a plain `generate` is close to ours, not equal.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import re
from pathlib import Path

import torch

from common.errors import InputError
from common.files import atomic_output
from datamodules.sentencepiece import SentencePieceVocab
from datamodules.tokenizers import SubwordTokenizer
from datamodules.vocab import SPECIAL_TOKENS, Vocab
from models.config import Seq2SeqConfig
from models.marian import ACTIVATIONS_TO_MARIAN, config_to_marian, state_dict_to_marian
from models.seq2seq import Seq2SeqNet

MARIAN_LAYER_NORM_EPS = 1e-5  # torch's LayerNorm default, which Marian's layers use
# What marks an earlier export (a folder that --force may replace).
EXPORT_FILES = ("config.json", "generation_config.json")


class HubExportError(InputError):
    """A model Marian cannot express, an output folder that must not be replaced, a missing package or an
    upload that failed: one line (the scripts print it with exit status 2)."""


def _transformers():
    try:
        import transformers
    except ImportError:
        raise HubExportError(
            'exporting to Hugging Face needs transformers: pip install -e ".[deploy]" (or pip install transformers)'
        ) from None
    transformers.utils.logging.disable_progress_bar()  # a script prints its one line; no bars for a small folder
    return transformers


def check_exportable(config: Seq2SeqConfig) -> None:
    """Raise `HubExportError` naming the first setting of a network (`model.net.config`) that Marian cannot express."""
    c = config
    refusals = [
        (c.norm_first, "pre-norm (norm_first=True): Marian's layers are post-norm"),
        (c.norm != "layernorm", f"norm={c.norm}: Marian's norms are LayerNorms"),
        (not c.bias, "bias=False: Marian's linear layers and norms have biases"),
        (c.qk_norm, "query/key norms (qk_norm=True): Marian's attention has none"),
        (
            c.num_kv_heads not in (None, c.nhead),
            f"grouped-query attention (num_kv_heads={c.num_kv_heads}): Marian has one key/value head per query head",
        ),
        (
            c.activation not in ACTIVATIONS_TO_MARIAN,
            f"activation={c.activation}: Marian's feed-forward is ungated (relu, gelu, silu)",
        ),
        (
            c.positional not in ("sinusoidal", "sinusoidal_halves"),
            f"positional={c.positional}: Marian's positions are fixed sinusoids added to the embeddings",
        ),
        (c.relative_bias is not None, f"relative position biases (relative_bias={c.relative_bias}): Marian has none"),
        (
            c.layer_norm_eps != MARIAN_LAYER_NORM_EPS,
            f"layer_norm_eps={c.layer_norm_eps}: Marian's norms use {MARIAN_LAYER_NORM_EPS}",
        ),
    ]
    for refused, why in refusals:
        if refused:
            raise HubExportError(f"cannot export to Hugging Face: {why}")


def check_tokenizers(model) -> None:
    """Both sides must be one fast tokenizer (ours) or Marian's SentencePiece pair."""
    src, tgt = model.src_tokenizer, model.tgt_tokenizer
    marian = [isinstance(t, SentencePieceVocab) for t in (src, tgt)]
    if all(marian):
        return
    if any(marian) or src.to_dict() != tgt.to_dict():
        raise HubExportError(
            "cannot export to Hugging Face: separate source and target vocabularies (the data's shared_vocab=false) "
            "cannot be one Hugging Face tokenizer; train with one vocabulary (shared_vocab: true)"
        )


# ---------------------------------------------------------------------------------------------- weights


def residual_permutation(d_model: int) -> torch.Tensor:
    """The order of our interleaved sinusoid's dimensions in Marian's [sin | cos] table: even ones, then odd."""
    return torch.cat([torch.arange(0, d_model, 2), torch.arange(1, d_model, 2)])


# Our modules by how they touch the residual stream (the model dimension), by the last part of their names.
_READS = ("qkv_proj", "q_proj", "kv_proj", "linear1", "src_embed", "tgt_embed", "generator")  # weight columns
_WRITES = ("out_proj", "linear2")  # weight rows and bias
_NORM = re.compile(r"(encoder_|decoder_)?norm\d?")  # gain and bias


def permute_residual(state: dict, perm: torch.Tensor) -> dict:
    """`state` (a `Seq2SeqNet.state_dict()`) with the model dimension reordered by `perm`: the network computes
    the same function on permuted vectors x[perm]. Embedding tables and weights reading the stream have their
    columns permuted, weights writing it their rows, the norms' gains and biases their entries."""
    out = {}
    for name, value in state.items():
        module, param = name.rsplit(".", 1)
        leaf = module.rsplit(".", 1)[-1]
        if leaf in _READS:
            out[name] = value[:, perm] if param == "weight" else value  # a bias lives in the layer's output space
        elif leaf in _WRITES:
            out[name] = value[perm, :] if param == "weight" else value[perm]
        elif _NORM.fullmatch(leaf):
            out[name] = value[perm]
        else:  # a weight this rule does not know: a new option, which check_exportable must refuse
            raise HubExportError(f"cannot export to Hugging Face: no rule for the weight {name}")
    return out


def _zero_sublayers(state: dict, prefix: str, like: str) -> None:
    """Layer `prefix`'s linear weights and biases, shaped like layer `like`'s, all zero: each sublayer adds 0."""
    for name, value in list(state.items()):
        if name.startswith(like + ".") and ".norm" not in name:
            state[prefix + name[len(like) :]] = torch.zeros_like(value)


def _norm(state: dict, name: str, weight: torch.Tensor, bias: torch.Tensor) -> None:
    state[f"{name}.weight"], state[f"{name}.bias"] = weight, bias


def _move_final_norms(state: dict, config: Seq2SeqConfig) -> None:
    """Each stack's final norm as one more layer (see the module docstring), in place."""
    ones, zeros = torch.ones(config.d_model), torch.zeros(config.d_model)
    for stack, n, norms in (("encoder", config.num_encoder_layers, 2), ("decoder", config.num_decoder_layers, 3)):
        last, extra = f"core.{stack}_layers.{n - 1}", f"core.{stack}_layers.{n}"
        _zero_sublayers(state, extra, last)
        last_norm = f"{last}.norm{norms}"
        gain, bias = state[f"{last_norm}.weight"], state[f"{last_norm}.bias"]
        _norm(state, last_norm, ones, zeros)  # a plain standardisation: the gain and bias move to the new layer
        steps = [(gain, bias)] if norms == 2 else [(ones, zeros), (gain, bias)]
        steps.append((state.pop(f"core.{stack}_norm.weight"), state.pop(f"core.{stack}_norm.bias")))
        for i, (w, b) in enumerate(steps, 1):
            _norm(state, f"{extra}.norm{i}", w, b)


def marian_shaped(model) -> tuple[Seq2SeqConfig, dict]:
    """Our network rewritten in Marian's shape (module docstring): its config (post-norm, [sin | cos] positions,
    no final norms, an output bias) and its weights, under our names. `Seq2SeqNet(config)` with these weights
    computes what `model.net` computes."""
    config = model.net.config
    check_exportable(config)
    state = {k: v.detach().to("cpu", torch.float32, copy=True) for k, v in model.net.state_dict().items()}
    if config.positional == "sinusoidal":
        state = permute_residual(state, residual_permutation(config.d_model))
    if not config.generator_bias:
        state["generator.bias"] = torch.zeros(config.tgt_vocab_size)
    if "generator.weight" not in state:  # a tied output layer is saved under its table's name only
        state["generator.weight"] = state["tgt_embed.weight"]
    if config.final_norm:
        _move_final_norms(state, config)
    extra = int(config.final_norm)  # the layer each stack's final norm became
    shaped = dataclasses.replace(
        config,
        positional="sinusoidal_halves",
        final_norm=False,
        generator_bias=True,
        num_encoder_layers=config.num_encoder_layers + extra,
        num_decoder_layers=config.num_decoder_layers + extra,
    )
    Seq2SeqNet(shaped).load_state_dict(state)  # every weight in place, each of its shape
    return shaped, state


def generation_config(model) -> dict:
    """`GenerationConfig`'s arguments: our decoder start, beam size, length limit and alpha (module docstring)."""
    hp, tgt = model.hparams, model.tgt_tokenizer
    config = dict(
        decoder_start_token_id=tgt.bos_id,
        bos_token_id=tgt.bos_id,
        eos_token_id=tgt.eos_id,
        pad_token_id=tgt.pad_id,
        forced_eos_token_id=None,
        num_beams=hp.get("eval_beam_size", 4),
        length_penalty=hp.get("length_penalty", 1.0),
        early_stopping=False,  # stop when no live beam can beat the finished ones: ours with alpha = 0
        max_length=model.net.config.max_len,  # the decoder's start included: max_len - 1 new tokens, as ours
        # our searches never generate <pad> or <bos> (models/decoding.py); generate is told the same
        bad_words_ids=[[token] for token in dict.fromkeys((tgt.pad_id, tgt.bos_id))],
    )
    return config


def _load_weights(transformers, config: dict, state: dict):
    """A `MarianMTModel` of `config` holding `state` (ours, Marian-shaped); any weight left unfilled is a bug."""
    hf = transformers.MarianMTModel(transformers.MarianConfig(**config))
    theirs = state_dict_to_marian(state)
    wanted = hf.state_dict()
    missing = [k for k in wanted if k not in theirs and "embed_positions" not in k]
    if missing:
        raise HubExportError(f"cannot export to Hugging Face: no weight for {', '.join(missing[:3])}")
    hf.load_state_dict({k: v for k, v in theirs.items() if k in wanted}, strict=False)
    return hf.eval()


# ---------------------------------------------------------------------------------------------- tokenizers


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


def _save_tokenizer(transformers, model, folder: Path) -> None:
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


# ---------------------------------------------------------------------------------------------- the card


def _run_record(ckpt: Path | None) -> dict:
    """What the training run left beside its checkpoint: its summary.json (the test scores) and config.yaml."""
    record: dict = {}
    if ckpt is None:
        return record
    for folder in list(ckpt.resolve().parents)[:3]:
        summary, config = folder / "summary.json", folder / "config.yaml"
        if "summary" not in record and summary.is_file():
            with contextlib.suppress(OSError, ValueError):
                record["summary"] = json.loads(summary.read_text(encoding="utf-8"))
        if "config" not in record and config.is_file():
            with contextlib.suppress(OSError):
                record["config"] = config.read_text(encoding="utf-8")
    return record


def model_card(
    model, shaped: Seq2SeqConfig, ckpt: Path | None = None, meta: dict | None = None, command: str | None = None
) -> str:
    """README.md: what the model is, how to load it, its recipe and data, its test BLEU (from the run's summary.json
    beside `ckpt`), its checkpoint (`meta`: `checkpoint_meta`) and the commands that made it."""
    hp, c = model.hparams, model.net.config
    record = _run_record(ckpt)
    summary = record.get("summary") or {}
    meta = meta or {}
    data = _data_settings(record.get("config", ""))
    languages = [lang for lang in (data.get("src_lang"), data.get("tgt_lang")) if lang]
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
        'batch = tokenizer(["a sentence to translate"], return_tensors="pt", padding=True)',
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
        "## How it was made",
        "",
        "```",
        command or "deploy.huggingface.export_huggingface(model, OUT_DIR)",
        "```",
    ]
    if record.get("config"):
        lines += ["", "The training run's configuration (`config.yaml`):", "", "```yaml", record["config"].strip(), "```"]
    return "\n".join(front + lines) + "\n"


def _data_settings(config_yaml: str) -> dict:
    """The data settings worth a card (languages, corpus, vocabulary) from a run's config.yaml."""
    if not config_yaml:
        return {}
    import yaml

    try:
        data = (yaml.safe_load(config_yaml) or {}).get("data", {}) or {}
    except yaml.YAMLError:
        return {}
    args = data.get("init_args", data) if isinstance(data, dict) else {}
    keys = ("data_dir", "src_lang", "tgt_lang", "train_prefix", "test_prefix", "src_tokenizer", "src_vocab_size", "shared_vocab")
    return {k: args[k] for k in keys if isinstance(args, dict) and args.get(k) is not None}


def checkpoint_meta(state: dict) -> dict:
    """The epoch, step and best monitored score a Lightning checkpoint records (for the card)."""
    meta = {"epoch": state.get("epoch"), "global_step": state.get("global_step")}
    for value in (state.get("callbacks") or {}).values():  # a ModelCheckpoint's (or a subclass's) state
        if isinstance(value, dict) and value.get("monitor") and value.get("best_model_score") is not None:
            meta["monitor"], meta["best_score"] = value["monitor"], round(float(value["best_model_score"]), 4)
            break
    return meta


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
    complete (`common.files.atomic_output`): a full disk leaves nothing half-written and is an `OutputError`.
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
    hf = _load_weights(transformers, config_to_marian(shaped, tgt.pad_id, tgt.eos_id, tgt.bos_id), state)
    card = model_card(model, shaped, Path(ckpt) if ckpt else None, meta, command)
    with contextlib.suppress(OSError):  # made as `mkdir -p`; one that cannot be made is atomic_output's error
        out_dir.parent.mkdir(parents=True, exist_ok=True)
    with atomic_output(out_dir, folder=True) as tmp:
        _save_weights(hf, tmp)
        transformers.GenerationConfig(**generation_config(model)).save_pretrained(tmp)
        _save_tokenizer(transformers, model, tmp)
        (tmp / "README.md").write_text(card, encoding="utf-8")
    return out_dir


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
