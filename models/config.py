"""Each network's settings, declared once: one typed, frozen dataclass per network that checks its own values (one
`HyperparameterError` line naming the config: models.checks). Each field's name, type, default and check are written
here only; a default that differs is a recipe's (configs/*.yaml). docs/guide/variants.md ("A network's settings")
says what each class holds and how a recipe, a flag and an old checkpoint reach these fields."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, TypeVar

from .activations import ACTIVATIONS
from .checks import Check, Relation, at_least, boolean, check_hparams, divisible, fraction, one_of
from .norms import NORMS
from .positional import POSITIONALS
from .registry import IMAGE, TEXT, Allowed
from .relative import RELATIVE_BIASES

IMAGE_SIZE = 28  # MNIST's side, in pixels
TOKENIZERS = ("rows", "patches")  # MnistNet's ways of cutting an image into tokens
HEADS = ("decoder", "cls", "mean")  # MnistNet's ways of reading a class out of the encoder

C = TypeVar("C", bound="TransformerConfig")


def _schemes_need(h: Mapping[str, Any]) -> str | None:
    """What the chosen position scheme and relative bias need of the other settings (their tables' `needs`)."""
    chosen = ((POSITIONALS, h.get("positional")), (RELATIVE_BIASES, h.get("relative_bias")))
    problems = [scheme.needs(h) for table, name in chosen if (scheme := table.get(name)) is not None and scheme.needs]
    return "; ".join(p for p in problems if isinstance(p, str)) or None


def _residual_free_layer_exists(h: Mapping[str, Any]) -> str | bool:
    layer, layers = h.get("residual_free_layer"), h["num_encoder_layers"]
    return layer is None or layer < layers or f"residual_free_layer={layer}: the encoder has layers 0 to {layers - 1}"


@dataclass(frozen=True, kw_only=True)
class TransformerConfig:
    """The encoder–decoder stack. Names follow `torch.nn.Transformer`; the sizes are a small translation
    model's (a quarter of the paper's base model: `torch.nn.Transformer`'s 512, 8, 6, 6 and 2048 are
    configs/wmt14_en_de.yaml's). The research options after them are off by default, which is
    `torch.nn.Transformer` exactly."""

    d_model: int = 256  # the width of every token's vector
    nhead: int = 4  # attention heads; each gets d_model / nhead dimensions
    num_encoder_layers: int = 3
    num_decoder_layers: int = 3  # 0: an encoder alone (MnistNet's pooling heads)
    dim_feedforward: int = 1024  # the feed-forward's hidden width (of the gate and of the value when gated)
    dropout: float = 0.1  # on attention weights, the feed-forward's hidden units and each sublayer's output
    # a name of models/activations.py's table: "relu", "gelu", "silu" (Marian's swish), the gated "swiglu", ...
    activation: str = "relu"
    layer_norm_eps: float = 1e-5  # every norm's epsilon
    norm_first: bool = False  # pre-norm (each sublayer's input normalised) instead of the paper's post-norm
    bias: bool = True  # biases in the linear layers and LayerNorms
    norm: str = "layernorm"  # or "rmsnorm": every norm, the final ones included (models.norms)
    qk_norm: bool = False  # normalise queries and keys per head (models.attention)
    # grouped-query attention: key/value heads, each shared by nhead / num_kv_heads query heads; None = nhead
    num_kv_heads: int | None = None
    final_norm: bool = True  # a norm after each stack, as torch.nn.Transformer; Marian (OPUS-MT) has none
    # models.positional.POSITIONALS: "sinusoidal" | "sinusoidal_halves" (Marian's [sin | cos] layout) | "learned"
    # (added to the embeddings) | "rotary" (RoPE in self-attention, none in cross-attention, nothing added) | "none";
    # an image's tokens also "sincos2d" (MAE's fixed 2-D table), "learned2d" (row and column tables) or "rotary2d"
    # (axial RoPE in the encoder): MnistNet only
    positional: str = "sinusoidal"
    # models.relative.RELATIVE_BIASES: None | "t5" | "alibi": a bias on the logits of self-attention (T5's and ALiBi's
    # own models take it with positional="none"); an image's tokens also "2d" (Swin's learned bias over the grid)
    relative_bias: str | None = None
    # The encoder layer (from 0) whose self-attention has no residual connection: its output no longer carries each
    # token's position through, which makes the encoder's states less tied to the source language's word order and
    # helps zero-shot translation (Liu et al., 2021: a middle layer). None: every layer has its residuals.
    residual_free_layer: int | None = None

    # What a network reads, "text" or "image" (models.registry): the position schemes and relative biases it takes
    # are those of their tables that fit it, and a variant file (configs/variants/) names it in its `fits`. The
    # stack itself takes every one.
    INPUT: ClassVar[str | None] = None
    # What each field may hold, and how fields relate (models.checks); subclasses extend both.
    CHECKS: ClassVar[Mapping[str, Check]] = {
        "d_model": at_least(1),
        "nhead": at_least(1),
        "num_encoder_layers": at_least(1),
        "num_decoder_layers": at_least(0),
        "dim_feedforward": at_least(1),
        "dropout": fraction,
        "activation": one_of(ACTIVATIONS),  # the tables themselves: an entry added later is allowed at once
        "layer_norm_eps": at_least(0),
        "norm": one_of(NORMS),
        "qk_norm": boolean,
        "num_kv_heads": at_least(1),
        "positional": one_of(POSITIONALS),
        "relative_bias": one_of(RELATIVE_BIASES),
        "residual_free_layer": at_least(0),
    }
    # Each head gets d_model / nhead dimensions; each key/value head serves nhead / num_kv_heads query heads.
    RELATIONS: ClassVar[tuple[Relation, ...]] = (
        divisible("d_model", "nhead"),
        divisible("nhead", "num_kv_heads"),
        _schemes_need,
        _residual_free_layer_exists,
    )

    def __post_init__(self) -> None:
        check_hparams(self, self.as_dict(), self.CHECKS, *self.RELATIONS)

    def as_dict(self) -> dict[str, Any]:
        """Every field's value, by name."""
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}

    @classmethod
    def field_names(cls) -> tuple[str, ...]:
        return tuple(f.name for f in dataclasses.fields(cls))

    @classmethod
    def from_settings(cls: type[C], settings: TransformerConfig | Mapping[str, Any], **derived: Any) -> C:
        """This config of a network's `settings` (a config, or its fields as a checkpoint stores them) and
        `derived` (what comes from the data: vocabulary sizes, the padding id). A field that a mapping lacks (a
        checkpoint older than the field) keeps its default."""
        values = settings.as_dict() if isinstance(settings, TransformerConfig) else dict(settings)
        return cls(**{**values, **derived})


def nested_hparams(hparams: Mapping[str, Any], settings: type[TransformerConfig] | Iterable[str]) -> dict[str, Any]:
    """A task checkpoint's hyperparameters with the network's settings under `net`, as the task modules take them.
    A checkpoint written before they took `net` holds each setting flat, beside the task's own hyperparameters:
    those named like a field of `settings` (a settings class, or the names themselves) are gathered into `net`
    (the others are the task's own)."""
    if "net" in hparams:
        return dict(hparams)
    names = set(settings.field_names() if isinstance(settings, type) else settings)
    return {
        **{k: v for k, v in hparams.items() if k not in names},
        "net": {k: v for k, v in hparams.items() if k in names},
    }


@dataclass(frozen=True, kw_only=True)
class Seq2SeqSettings(TransformerConfig):
    """The translation network, as a user sets it: token embeddings + positions → the stack → vocabulary logits.
    Its vocabulary sizes and padding id come from the data (`Seq2SeqConfig`)."""

    INPUT = TEXT  # the schemes it takes are those that fit "text" (models.registry)

    max_len: int = 256  # the longest sequence, in tokens, either side (positions are tabled up to it)
    tie_embeddings: bool = False  # the output layer reads the target embedding table
    # one table for both sides (a joint subword vocabulary); with tie_embeddings too, the output layer reads it as
    # well (three-way tying, as fairseq's share_all_embeddings)
    share_embeddings: bool = False
    # in training, each source token's whole embedding is dropped with this probability (word dropout,
    # Sennrich & Zhang 2019), before its position is added
    src_token_dropout: float = 0.0
    # multiply the token embeddings by sqrt(d_model) (the paper's rule; off in a Marian model whose config says
    # `scale_embedding: false`)
    scale_embeddings: bool = True
    generator_bias: bool = False  # a bias on the output layer, zero at start (Marian's final_logits_bias)

    CHECKS: ClassVar[Mapping[str, Check]] = {
        **TransformerConfig.CHECKS,
        "num_decoder_layers": at_least(1),  # the decoder writes the translation
        "max_len": at_least(3),  # <bos>, a token, <eos>
        "positional": one_of(Allowed(POSITIONALS, INPUT)),  # a sentence's schemes, not an image's
        "src_token_dropout": fraction,
        "relative_bias": one_of(Allowed(RELATIVE_BIASES, INPUT)),
    }


@dataclass(frozen=True, kw_only=True)
class Seq2SeqConfig(Seq2SeqSettings):
    """The translation network's settings and what the data decides: `Seq2SeqNet`'s argument."""

    src_vocab_size: int  # the source tokenizer's size
    tgt_vocab_size: int  # the target tokenizer's size
    pad_id: int = 0  # the padding token's id (both sides pad alike)

    CHECKS: ClassVar[Mapping[str, Check]] = {
        **Seq2SeqSettings.CHECKS,
        "src_vocab_size": at_least(1),
        "tgt_vocab_size": at_least(1),
        "pad_id": at_least(0),
    }
    RELATIONS: ClassVar[tuple[Relation, ...]] = (
        *Seq2SeqSettings.RELATIONS,
        lambda h: (
            not h["share_embeddings"]
            or h.get("src_vocab_size") == h.get("tgt_vocab_size")
            or f"share_embeddings=True needs one vocabulary; got sizes {h['src_vocab_size']} and {h['tgt_vocab_size']}"
        ),
    )


@dataclass(frozen=True, kw_only=True)
class MnistNetSettings(TransformerConfig):
    """The MNIST classifier, as a user sets it: image → tokens → encoder → head (models/mnist_net.py tells the
    schemes apart). Its stack's settings and their defaults are the stack's, declared once above; the MNIST
    recipes (configs/mnist*.yaml) choose a smaller, pre-norm stack with GELU and learned positions, which trains
    small models from scratch more reliably."""

    INPUT = IMAGE  # the schemes it takes are those that fit "image" (models.registry)

    tokens: str = "patches"  # "rows" (28 tokens of 28 pixels) or "patches" (square ones)
    patch_size: int = 7  # side of a square patch, must divide 28; ignored for rows
    head: str = "decoder"  # "decoder" (learned queries through the decoder), "cls" (a class token, ViT) or "mean"
    num_queries: int = 1  # decoder head: learned query tokens, their outputs are averaged
    stem_channels: int = 0  # feature maps of the convolutional stem; 0 = no stem, tokens are pixels
    stem_layers: int = 2  # 3×3 convolutions (each followed by GELU) in the stem, or in each strided stage
    strided_stem: bool = False  # stride-2 stages that reduce a patch to one token; patches only
    stem_norm: bool = False  # BatchNorm2d after each stem convolution (Xiao et al.'s stem; needs a stem)

    CHECKS: ClassVar[Mapping[str, Check]] = {
        **TransformerConfig.CHECKS,
        "positional": one_of(Allowed(POSITIONALS, INPUT)),
        "relative_bias": one_of(Allowed(RELATIVE_BIASES, INPUT)),
        "tokens": one_of(TOKENIZERS),
        "patch_size": at_least(1),
        "head": one_of(HEADS),
        "num_queries": at_least(1),
        "stem_channels": at_least(0),
        "stem_layers": at_least(1),
    }
    RELATIONS: ClassVar[tuple[Relation, ...]] = (
        *TransformerConfig.RELATIONS,
        lambda h: (
            h["tokens"] != "patches"
            or IMAGE_SIZE % h["patch_size"] == 0
            or f"patch_size={h['patch_size']} must divide the image side, {IMAGE_SIZE}"
        ),
        lambda h: (
            not h["strided_stem"]
            or (h["stem_channels"] > 0 and h["tokens"] == "patches" and h["patch_size"] >= 2)
            or "strided_stem needs stem_channels > 0, tokens='patches' and patch_size >= 2"
        ),
        lambda h: not h["stem_norm"] or h["stem_channels"] > 0 or "stem_norm needs a stem: stem_channels > 0",
        lambda h: (
            h["head"] != "decoder" or h["num_decoder_layers"] >= 1 or "head='decoder' needs num_decoder_layers of at least 1"
        ),
    )


@dataclass(frozen=True, kw_only=True)
class MnistNetConfig(MnistNetSettings):
    """The MNIST classifier's settings and what the data decides: `MnistNet`'s argument."""

    num_classes: int = 10  # the digits

    CHECKS: ClassVar[Mapping[str, Check]] = {**MnistNetSettings.CHECKS, "num_classes": at_least(1)}
