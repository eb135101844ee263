"""Marian (OPUS-MT) models in our core: their config as our options (`options_from_config`), their weights under our
names (`state_dict_from_marian`), and both backwards for the Hugging Face export (docs/guide/pretrained.md lists the
options a Marian model sets). Marian's q, k and v are three matrices where ours are fused, so the weights are
concatenated on import and split on export, as `layer_names` pairs them."""

from __future__ import annotations

import torch

from common.errors import InputError

from .activations import ACTIVATIONS  # each entry's `marian`: Hugging Face's names for it (ACT2FN's), or none


class MarianFormatError(InputError):
    """A `config.json` or weights file that is not a Marian model we can convert; the message names the file."""


def options_from_config(config: dict, where: str = "config.json") -> dict:
    """A Marian `config.json` (as a dict) → the fields of our `models.config.Seq2SeqConfig` (the network's shape
    and Marian's options) but the vocabulary sizes and the padding id, which the tokenizers give."""
    if config.get("model_type") != "marian":
        raise MarianFormatError(f"{where} is not a Marian model's (model_type={config.get('model_type')!r}, expected 'marian')")
    same = [("encoder_attention_heads", "decoder_attention_heads"), ("encoder_ffn_dim", "decoder_ffn_dim")]
    for a, b in same:
        if config.get(a) != config.get(b):
            raise MarianFormatError(f"{where}: {a}={config.get(a)} differs from {b}={config.get(b)}; our core has one value")
    activation = config.get("activation_function", "gelu")
    ours = {theirs: name for name, entry in ACTIVATIONS.items() for theirs in entry.marian}
    if activation not in ours:
        raise MarianFormatError(f"{where}: activation_function={activation!r} has no equivalent here ({', '.join(ours)})")
    for flag in ("normalize_before", "add_final_layer_norm", "normalize_embedding"):  # BART's, never OPUS-MT's
        if config.get(flag):
            raise MarianFormatError(f"{where}: {flag}=true has no equivalent here (OPUS-MT models are post-norm, without it)")
    try:
        return dict(
            d_model=int(config["d_model"]),
            nhead=int(config["encoder_attention_heads"]),
            num_encoder_layers=int(config["encoder_layers"]),
            num_decoder_layers=int(config["decoder_layers"]),
            dim_feedforward=int(config["encoder_ffn_dim"]),
            dropout=float(config.get("dropout", 0.1)),
            activation=ours[activation],
            norm_first=False,
            positional="sinusoidal_halves",
            max_len=int(config.get("max_position_embeddings", 512)),
            tie_embeddings=bool(config.get("tie_word_embeddings", True)),
            share_embeddings=bool(config.get("share_encoder_decoder_embeddings", True)),
            scale_embeddings=bool(config.get("scale_embedding", False)),
            final_norm=False,
            generator_bias=True,
        )
    except (KeyError, TypeError, ValueError) as err:
        raise MarianFormatError(f"{where}: missing or malformed {err}") from None


def config_to_marian(config, pad_id: int, eos_id: int, bos_id: int) -> dict:
    """`options_from_config` backwards: a Marian-shaped `Seq2SeqConfig` (post-norm, [sin | cos] positions, no final
    norm, an output bias: deploy/huggingface.py's `marian_shaped`) and our target tokenizer's ids → `MarianConfig`'s
    arguments; the decoder starts with our `<bos>`."""
    c = config
    return dict(
        vocab_size=c.src_vocab_size,
        decoder_vocab_size=c.tgt_vocab_size,
        d_model=c.d_model,
        encoder_layers=c.num_encoder_layers,
        decoder_layers=c.num_decoder_layers,
        encoder_attention_heads=c.nhead,
        decoder_attention_heads=c.nhead,
        encoder_ffn_dim=c.dim_feedforward,
        decoder_ffn_dim=c.dim_feedforward,
        activation_function=ACTIVATIONS[c.activation].marian[0],  # deploy/marian_shape.py refuses one without
        dropout=c.dropout,
        attention_dropout=c.dropout,  # ours applies `dropout` there too
        activation_dropout=c.dropout,
        max_position_embeddings=c.max_len,
        scale_embedding=c.scale_embeddings,
        share_encoder_decoder_embeddings=c.share_embeddings,
        tie_word_embeddings=c.tie_embeddings,
        pad_token_id=pad_id,
        eos_token_id=eos_id,
        bos_token_id=bos_id,
        decoder_start_token_id=bos_id,
        forced_eos_token_id=None,
    )


def _get(state: dict, *names: str) -> torch.Tensor:
    """The first of `names` that the weights hold (tied tables may be saved under one name only)."""
    for name in names:
        if name in state:
            return state[name]
    raise MarianFormatError(f"the weights hold none of {', '.join(names)}")


def layer_names(ours: dict) -> list[tuple[str, tuple[str, ...]]]:
    """Each linear layer and norm of our stacks (by the keys of `ours`, a `Seq2SeqNet.state_dict()`) with the
    Marian ones it holds, in the order ours concatenates them: (ours, (theirs, ...)), without ".weight"/".bias"."""
    names = []
    for stack, cross in (("encoder", False), ("decoder", True)):
        i = 0
        while f"core.{stack}_layers.{i}.norm1.weight" in ours:
            o, t = f"core.{stack}_layers.{i}", f"{stack}.layers.{i}"
            names += [
                (f"{o}.self_attn.qkv_proj", (f"{t}.self_attn.q_proj", f"{t}.self_attn.k_proj", f"{t}.self_attn.v_proj")),
                (f"{o}.self_attn.out_proj", (f"{t}.self_attn.out_proj",)),
                (f"{o}.norm1", (f"{t}.self_attn_layer_norm",)),
            ]
            if cross:
                names += [
                    (f"{o}.cross_attn.q_proj", (f"{t}.encoder_attn.q_proj",)),
                    (f"{o}.cross_attn.kv_proj", (f"{t}.encoder_attn.k_proj", f"{t}.encoder_attn.v_proj")),
                    (f"{o}.cross_attn.out_proj", (f"{t}.encoder_attn.out_proj",)),
                    (f"{o}.norm2", (f"{t}.encoder_attn_layer_norm",)),
                ]
            names += [
                (f"{o}.ff.linear1", (f"{t}.fc1",)),
                (f"{o}.ff.linear2", (f"{t}.fc2",)),
                (f"{o}.norm{3 if cross else 2}", (f"{t}.final_layer_norm",)),
            ]
            i += 1
    return names


def state_dict_from_marian(state: dict, ours: dict) -> dict:
    """Marian's weights (`MarianMTModel.state_dict()` or its saved file) renamed and fused into the keys of
    `ours` (a `Seq2SeqNet.state_dict()`, for its key set and shapes)."""
    state = {k.removeprefix("model."): v for k, v in state.items()}
    out: dict[str, torch.Tensor] = {}
    out["src_embed.weight"] = _get(state, "encoder.embed_tokens.weight", "shared.weight")
    out["tgt_embed.weight"] = _get(state, "decoder.embed_tokens.weight", "shared.weight")
    if "generator.weight" in ours:
        out["generator.weight"] = _get(state, "lm_head.weight", "decoder.embed_tokens.weight", "shared.weight")
    out["generator.bias"] = _get(state, "final_logits_bias").reshape(-1)
    for name, parts in layer_names(ours):
        for kind in ("weight", "bias"):
            out[f"{name}.{kind}"] = torch.cat([_get(state, f"{p}.{kind}") for p in parts], dim=0)
    for name, value in out.items():
        if name not in ours or ours[name].shape != value.shape:
            shape = tuple(ours[name].shape) if name in ours else "no such weight"
            raise MarianFormatError(
                f"the weights do not fit the config: {name} is {tuple(value.shape)} here, {shape} in the model"
            )
    missing = sorted(set(ours) - set(out))
    if missing:
        raise MarianFormatError(f"the weights do not fit the config: nothing for {', '.join(missing[:3])}")
    return out


def state_dict_to_marian(ours: dict) -> dict:
    """The inverse of `state_dict_from_marian`: a Marian-shaped `Seq2SeqNet.state_dict()` (post-norm, no final
    norms, an output bias; see deploy/huggingface.py) under `MarianMTModel`'s names, its fused matrices split.
    Every embedding name is filled (`shared`, each side's table, `lm_head`): `MarianMTModel.load_state_dict`
    takes the ones its config ties. Each of `ours` is read once (deploy.verify.Weights counts the reads)."""
    src = ours["src_embed.weight"]
    out = {
        "model.shared.weight": src,
        "model.encoder.embed_tokens.weight": src,
        "model.decoder.embed_tokens.weight": ours["tgt_embed.weight"],
        "lm_head.weight": ours["generator.weight"],
        "final_logits_bias": ours["generator.bias"].reshape(1, -1),
    }
    for name, parts in layer_names(ours):
        for kind in ("weight", "bias"):
            for part, value in zip(parts, ours[f"{name}.{kind}"].chunk(len(parts), dim=0)):
                out[f"model.{part}.{kind}"] = value.contiguous()
    return out
