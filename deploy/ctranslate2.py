"""Export a trained `Seq2SeqTransformer` to CTranslate2, the C++ inference engine translation models are deployed
with: our weights in its `TransformerSpec`, our tokenizers beside them, read back by `CTranslate2Translator`
(deploy/ctranslate2_translator.py). What would make a naive conversion translate differently, and how every export
checks itself before it is moved into place (deploy/verify.py; each failure one `ExportError` line, nothing
written): docs/guide/export-deploy.md.
"""

from __future__ import annotations

import contextlib
import json
import os
from pathlib import Path

import torch

from common.files import atomic_output
from datamodules.languages import tokens_of
from datamodules.vocab import PAD, SPECIAL_TOKENS
from inference.options import CHECKPOINT_DEFAULTS
from models.activations import ACTIVATIONS
from models.config import Seq2SeqConfig
from models.positional import SinusoidalPositionalEncoding

from .choices import QUANTIZATIONS  # named without torch, for scripts/export.py's flags
from .verify import ANY, COMMON, ExportError, Rule, Weights, check_greedy, check_scores, check_settings, only, probes

TOKENIZERS_FILE = "tokenizers.json"  # our tokenizers and decoding defaults, beside CTranslate2's model.bin


def _ctranslate2():
    try:
        import ctranslate2
    except ImportError:
        raise ExportError("CTranslate2 is not installed: pip install -e '.[deploy]'") from None
    return ctranslate2


ENGINE = "CTranslate2"
# What CTranslate2's TransformerSpec computes as we do, for every field of the network's settings
# (models/config.py: Seq2SeqConfig); a field missing here is refused until someone decides (tests/test_export_settings.py).
ALLOWED = {
    **COMMON,
    "activation": Rule(
        lambda value, config: ACTIVATIONS[value].ctranslate2 is not None,
        "its entry in models/activations.py names no CTranslate2 activation",
    ),
    "layer_norm_eps": ANY,
    "norm_first": ANY,
    "bias": ANY,  # without biases: CTranslate2's LayerNorm gets a zero one
    "norm": only("layernorm", "rmsnorm", why="CTranslate2's norms are LayerNorm and RMSNorm"),
    "qk_norm": only(False, why="CTranslate2's attention has no query/key norms"),
    "num_kv_heads": ANY,
    "positional": only(
        "sinusoidal",
        "sinusoidal_halves",
        "learned",
        why="CTranslate2's encoder–decoder adds a position table to the embeddings: rotary positions in our "
        "rotate-half layout and no positions at all have no equivalent",
    ),
    "relative_bias": only(None, why="CTranslate2's encoder–decoder has no relative position biases"),
    "residual_free_layer": only(None, why="CTranslate2's encoder layers all have residual connections"),
}


def check_exportable(config: Seq2SeqConfig) -> None:
    """Raise `ExportError` naming the first setting of a network (`model.net.config`) outside `ALLOWED`."""
    check_settings(config, ALLOWED, ENGINE)


def vocabulary(tokenizer) -> list[str]:
    """The token string of every id (CTranslate2 vocabularies are lists of strings, index = id)."""
    tokens = tokens_of(tokenizer)
    ours = tokenizer.pad_id == PAD  # an imported Marian tokenizer has its own specials (datamodules.sentencepiece)
    if (ours and tokens[: len(SPECIAL_TOKENS)] != SPECIAL_TOKENS) or len(set(tokens)) != len(tokens):
        raise ExportError("the tokenizer's pieces are not unique strings with the special tokens first")
    return tokens


def _converter_class():
    _ctranslate2()
    from ctranslate2.converters import Converter

    class Seq2SeqConverter(Converter):
        def __init__(self, model):
            self.model = model

        def _load(self):
            return build_spec(self.model)

    return Seq2SeqConverter


def build_spec(model):
    """The `ctranslate2.specs.TransformerSpec` of a `Seq2SeqTransformer`'s (or a `Translator`'s) weights and
    vocabularies."""
    _ctranslate2()
    from ctranslate2.specs import common_spec, transformer_spec

    net = model.net
    config = net.config
    check_exportable(config)
    activation = ACTIVATIONS[config.activation]
    kv_heads = config.num_kv_heads or config.nhead
    final_norm = config.final_norm
    options = dict(
        pre_norm=final_norm,  # declares each stack's final norm; post-norm models set pre_norm back below
        activation=common_spec.Activation[activation.ctranslate2],
        ffn_glu=activation.gated,
        rms_norm=config.norm == "rmsnorm",
        num_heads_kv=kv_heads if kv_heads != config.nhead else None,
    )
    encoder = transformer_spec.TransformerEncoderSpec(config.num_encoder_layers, config.nhead, **options)
    decoder = transformer_spec.TransformerDecoderSpec(config.num_decoder_layers, config.nhead, **options)
    spec = transformer_spec.TransformerSpec(encoder, decoder)

    # Copies: CTranslate2 quantizes the spec's arrays in place, which must not touch the model's weights.
    state = Weights({k: v.detach().to("cpu", torch.float32, copy=True) for k, v in net.state_dict().items()}, ENGINE)
    for name, stack, side, positions in (("encoder", encoder, "src", net.src_pos), ("decoder", decoder, "tgt", net.tgt_pos)):
        # Our post-norm stacks end with a norm too (docs/guide/export-deploy.md): the spec, built as
        # pre-norm, declared it; the flag the layers read says post-norm.
        stack.pre_norm = config.norm_first
        _set_embeddings(stack, state, side, positions, config.scale_embeddings)
        if final_norm:
            _set_norm(stack.layer_norm, state, f"core.{name}_norm")
        for i, layer in enumerate(stack.layer):
            prefix = f"core.{name}_layers.{i}"
            # Each attention, then the feed-forward, with its norm: norm1, norm2 (, norm3 in the decoder).
            attentions = [(layer.self_attention, "self_attn")] + ([(layer.attention, "cross_attn")] if name == "decoder" else [])
            for n, (sublayer, ours) in enumerate(attentions, 1):
                _set_attention(sublayer, state, f"{prefix}.{ours}", self_attention=ours == "self_attn")
                _set_norm(sublayer.layer_norm, state, f"{prefix}.norm{n}")
            _set_ffn(layer.ffn, state, f"{prefix}.ff", activation.gated)
            _set_norm(layer.ffn.layer_norm, state, f"{prefix}.norm{len(attentions) + 1}")
    decoder.projection.weight = state["generator.weight"]
    if "generator.bias" in state:  # Marian's final_logits_bias
        decoder.projection.bias = state["generator.bias"]
    state.check_used_once()

    tgt, names = model.tgt_tokenizer, vocabulary(model.tgt_tokenizer)
    spec.config.bos_token, spec.config.eos_token, spec.config.unk_token = (names[i] for i in (tgt.bos_id, tgt.eos_id, tgt.unk_id))
    spec.config.decoder_start_token = names[tgt.bos_id]
    spec.config.layer_norm_epsilon = config.layer_norm_eps
    spec.register_source_vocabulary(vocabulary(model.src_tokenizer))
    spec.register_target_vocabulary(vocabulary(model.tgt_tokenizer))
    return spec


def _set_embeddings(stack, state, side: str, positions, scale: bool) -> None:
    table = stack.embeddings[0] if isinstance(stack.embeddings, list) else stack.embeddings  # the encoder's is a list
    table.weight = state[f"{side}_embed.weight"]
    stack.scale_embeddings = scale  # ours multiply by sqrt(d_model) before adding positions, as CTranslate2 does
    if isinstance(positions, SinusoidalPositionalEncoding):  # no weight: a table derived from the shape
        stack.position_encodings.encodings = positions.pe.detach().to("cpu", torch.float32, copy=True)  # (max_len, D)
    else:  # learned (ALLOWED has no other)
        stack.position_encodings.encodings = state[f"{side}_pos.embedding.weight"]


def _set_norm(spec, state, prefix) -> None:
    spec.gamma = state[f"{prefix}.weight"]
    if f"{prefix}.bias" in state:
        spec.beta = state[f"{prefix}.bias"]
    elif hasattr(spec, "beta"):  # our LayerNorm without a bias (bias=False); CTranslate2's always has one
        spec.beta = torch.zeros_like(spec.gamma)


def _set_linear(spec, state, prefix) -> None:
    spec.weight = state[f"{prefix}.weight"]
    if f"{prefix}.bias" in state:
        spec.bias = state[f"{prefix}.bias"]


def _set_attention(spec, state, prefix, self_attention: bool) -> None:
    # CTranslate2 fuses q/k/v (self-attention) and k/v (cross-attention) in this order, as we do.
    if self_attention:
        _set_linear(spec.linear[0], state, f"{prefix}.qkv_proj")
    else:
        _set_linear(spec.linear[0], state, f"{prefix}.q_proj")
        _set_linear(spec.linear[1], state, f"{prefix}.kv_proj")
    _set_linear(spec.linear[-1], state, f"{prefix}.out_proj")


def _set_ffn(spec, state, prefix, gated: bool) -> None:
    if gated:  # our linear1 holds [gate; value]; CTranslate2 splits them
        weight, bias = state[f"{prefix}.linear1.weight"], state.get(f"{prefix}.linear1.bias")
        gate_w, value_w = weight.chunk(2, dim=0)
        spec.linear_0.weight, spec.linear_0_noact.weight = gate_w.contiguous(), value_w.contiguous()
        if bias is not None:
            gate_b, value_b = bias.chunk(2)
            spec.linear_0.bias, spec.linear_0_noact.bias = gate_b.contiguous(), value_b.contiguous()
    else:
        _set_linear(spec.linear_0, state, f"{prefix}.linear1")
    _set_linear(spec.linear_1, state, f"{prefix}.linear2")


def export_ctranslate2(model, out_dir: str | Path, quantization: str | None = None, force: bool = False) -> Path:
    """Write `model` (a `Seq2SeqTransformer` or an `inference.Translator`) as a CTranslate2 model directory, with
    our tokenizers and its decoding defaults. Refused in one `ExportError` line with nothing written: a setting
    outside `ALLOWED`, a weight `build_spec` does not use exactly once, a float32 conversion that does not compute
    ours (`verify_export`; quantized after it). How `out_dir` is replaced: docs/guide/export-deploy.md."""
    out_dir = Path(out_dir)
    if quantization is not None and quantization not in QUANTIZATIONS:
        raise ExportError(f"quantization must be one of {', '.join(QUANTIZATIONS)}; got {quantization!r}")
    check_exportable(model.net.config)
    if out_dir.exists():
        if not force:
            raise ExportError(f"{out_dir} exists; pass --force to replace an earlier export")
        if not out_dir.is_dir() or (any(out_dir.iterdir()) and not (out_dir / "model.bin").is_file()):
            raise ExportError(f"{out_dir} is not an earlier CTranslate2 export; refusing to replace it")
    converter = _converter_class()(model)
    # The parent folders are made as `mkdir -p` makes them (`exported/` on a fresh clone); one that cannot
    # be made (a regular file in the way, no permission) is named by atomic_output's error below.
    with contextlib.suppress(OSError):
        out_dir.parent.mkdir(parents=True, exist_ok=True)
    options = (model.translator if hasattr(model, "translator") else model).options  # a task module's, or a Translator's
    meta = {
        "tokenizers": {"src": model.src_tokenizer.to_dict(), "tgt": model.tgt_tokenizer.to_dict()},
        "max_len": model.net.config.max_len,
        "decoding": {name: getattr(options, name) for name in CHECKPOINT_DEFAULTS},  # the model's decoding defaults
        "quantization": quantization or "float32",
    }
    with atomic_output(out_dir, folder=True) as tmp:
        converter.convert(str(tmp), force=True)  # float32; force: tmp is ours, made empty
        verify_export(model, tmp)
        if quantization not in (None, "float32"):
            converter.convert(str(tmp), quantization=quantization, force=True)
        (tmp / TOKENIZERS_FILE).write_text(json.dumps(meta))
    return out_dir


def verify_export(model, folder: Path) -> None:
    """Refuse (`ExportError`) a float32 export in `folder` whose log-probs or greedy outputs of the probes are not
    ours (deploy/verify.py), run as `CTranslate2Translator` runs it: our special tokens, `<pad>` and `<bos>`
    never generated, no minimum length."""
    ct2 = _ctranslate2()
    probe = probes(model)
    src_vocab, tgt_vocab = vocabulary(model.src_tokenizer), vocabulary(model.tgt_tokenizer)
    tgt = model.tgt_tokenizer
    threads = int(os.environ.get("OMP_NUM_THREADS", "0") or 0)
    try:
        translator = ct2.Translator(str(folder), device="cpu", compute_type="float32", intra_threads=threads)
    except RuntimeError as err:
        raise ExportError(f"cannot export to {ENGINE}: it cannot load the converted model ({err})") from None
    sources = [[src_vocab[i] for i in ids] for ids in probe.sources]
    scored = translator.score_batch(sources, [[tgt_vocab[i] for i in ids] for ids in probe.targets], max_input_length=0)
    check_scores(ENGINE, probe.scores, [r.log_probs for r in scored])
    results = translator.translate_batch(
        sources,
        beam_size=1,
        max_decoding_length=probe.limit,
        min_decoding_length=0,
        suppress_sequences=[[tgt_vocab[i]] for i in dict.fromkeys((tgt.pad_id, tgt.bos_id))],
        return_end_token=True,
        max_input_length=0,
    )
    index = {token: i for i, token in enumerate(tgt_vocab)}
    check_greedy(ENGINE, model, probe, [[index[t] for t in r.hypotheses[0]] for r in results])
