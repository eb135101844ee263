"""Our network in the shape of Hugging Face's `MarianMTModel` (deploy/huggingface.py exports it): what Marian can
express (`ALLOWED`, the allow-list of deploy/verify.py), the rewrite of the weights into its shape
(`marian_shaped`: the residual stream permuted into Marian's [sin | cos] layout, the final norms moved into one
more layer) and the `MarianMTModel` holding them (`marian_model`), every weight used exactly once. Why this
computes ours, and how closely: docs/guide/export-deploy.md.
"""

from __future__ import annotations

import dataclasses
import re

import torch

from models.activations import ACTIVATIONS
from models.config import Seq2SeqConfig
from models.marian import state_dict_to_marian
from models.seq2seq import Seq2SeqNet

from .verify import COMMON, ExportError, Rule, Weights, check_settings, only

ENGINE = "Hugging Face"
MARIAN_LAYER_NORM_EPS = 1e-5  # torch's LayerNorm default, which Marian's layers use
# Marian's sinusoid tables: buffers transformers makes itself from the config when it builds or loads a model.
RECREATED = ("model.encoder.embed_positions.weight", "model.decoder.embed_positions.weight")
# state_dict_to_marian fills every name an embedding table may have; a config with two tables has no `shared`.
ALIASES = ("model.shared.weight",)


class HubExportError(ExportError):
    """A model Marian cannot express, an output folder that must not be replaced, a missing package or an
    upload that failed: one line (the scripts print it with exit status 2)."""


# What a MarianMTModel computes as we do, for every field of the network's settings (models/config.py:
# Seq2SeqConfig); a field missing here is refused until someone decides (tests/test_export_settings.py).
ALLOWED = {
    **COMMON,
    "activation": Rule(
        lambda value, config: bool(ACTIVATIONS[value].marian) and not ACTIVATIONS[value].gated,
        "its entry in models/activations.py names no Marian activation; Marian's feed-forward is ungated",
    ),
    "layer_norm_eps": only(MARIAN_LAYER_NORM_EPS, why=f"Marian's norms use {MARIAN_LAYER_NORM_EPS}"),
    "norm_first": only(False, why="Marian's layers are post-norm"),
    "bias": only(True, why="Marian's linear layers and norms have biases"),
    "norm": only("layernorm", why="Marian's norms are LayerNorms"),
    "qk_norm": only(False, why="Marian's attention has no query/key norms"),
    "num_kv_heads": Rule(lambda value, config: value in (None, config.nhead), "Marian has one key/value head per query head"),
    "positional": only("sinusoidal", "sinusoidal_halves", why="Marian's positions are fixed sinusoids added to the embeddings"),
    "relative_bias": only(None, why="Marian has no relative position biases"),
    "residual_free_layer": only(None, why="Marian's encoder layers all have residual connections"),
}


def check_exportable(config: Seq2SeqConfig) -> None:
    """Raise `HubExportError` naming the first setting of a network (`model.net.config`) outside `ALLOWED`."""
    check_settings(config, ALLOWED, ENGINE, HubExportError)


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
        else:  # a weight this rule does not know: a module no export has a rule for
            raise HubExportError(f"cannot export to {ENGINE}: no rule of its exporter uses the weight {name}")
    return out


def _zero_sublayers(state: dict, prefix: str, like: str) -> None:
    """Layer `prefix`'s linear weights and biases, shaped like layer `like`'s, all zero: each sublayer adds 0."""
    for name, value in list(state.items()):
        if name.startswith(like + ".") and ".norm" not in name:
            state[prefix + name[len(like) :]] = torch.zeros_like(value)


def _norm(state: dict, name: str, weight: torch.Tensor, bias: torch.Tensor) -> None:
    state[f"{name}.weight"], state[f"{name}.bias"] = weight, bias


def _move_final_norms(state: dict, config: Seq2SeqConfig) -> None:
    """Each stack's final norm as one more layer (docs/guide/export-deploy.md), in place."""
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
    """Our network rewritten in Marian's shape (docs/guide/export-deploy.md): its config (post-norm, [sin | cos] positions,
    no final norms, an output bias) and its weights, under our names. `Seq2SeqNet(config)` with these weights
    computes what `model.net` computes."""
    config = model.net.config
    check_exportable(config)
    state = {k: v.detach().to("cpu", torch.float32, copy=True) for k, v in model.net.state_dict().items()}
    if config.positional == "sinusoidal":
        state = permute_residual(state, residual_permutation(config.d_model))
    if not config.generator_bias:
        state["generator.bias"] = torch.zeros(config.tgt_vocab_size)
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
    loaded = Seq2SeqNet(shaped).load_state_dict(state, strict=False)  # each weight of its shape, or a RuntimeError
    for problem, names in (
        ("no rule of its exporter uses the weight", loaded.unexpected_keys),
        ("no weight", loaded.missing_keys),
    ):
        if names:
            raise HubExportError(f"cannot export to {ENGINE}: {problem} {names[0]}")
    return shaped, state


def marian_model(transformers, config: dict, state: dict):
    """A `MarianMTModel` of `config` holding `state` (ours, Marian-shaped), each of its weights read once
    (`Weights`), every weight of the model filled but the sinusoid tables transformers makes itself."""
    hf = transformers.MarianMTModel(transformers.MarianConfig(**config))
    weights = Weights(state, ENGINE, HubExportError)
    theirs = state_dict_to_marian(weights)
    weights.check_used_once()
    wanted = hf.state_dict()
    loaded = hf.load_state_dict({k: v for k, v in theirs.items() if k in wanted or k not in ALIASES}, strict=False)
    check_loaded(loaded.missing_keys, loaded.unexpected_keys)
    return hf.eval()


def check_loaded(missing, unexpected) -> None:
    """Refuse a `MarianMTModel` load that left a weight unfilled (but the sinusoid tables, `RECREATED`) or was
    given one it has no place for."""
    missing = [k for k in missing if k not in RECREATED]
    for what, names in (("no weight for", missing), ("a weight it has no place for:", list(unexpected))):
        if names:
            raise HubExportError(f"cannot export to {ENGINE}: the MarianMTModel has {what} {', '.join(names[:3])}")
