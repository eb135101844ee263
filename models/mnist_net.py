"""An MNIST classifier built on the project's own `Transformer`: image → tokens → encoder → head.

Tokens are rows (28 tokens of 28 pixels, the seed's layout) or square patches (4×4 → 49 tokens,
7×7 → 16 tokens), each linearly embedded plus a learned position (or a sinusoidal one, or rotary
positions in self-attention over the reading order, or none: `positional`). The tokens lie on an h × w grid
(rows: 28 × 1; 7×7 patches: 4 × 4), which two schemes read in 2-D: `positional="sincos2d"`, MAE's fixed
2-D sin-cos table (models.positional2d), and `relative_bias="2d"`, Swin's learned bias on every encoder
layer's logits for each pair's (Δrow, Δcol) (models.relative); a class token gets a zero row of the former
and BEiT's three extra entries of the latter; the decoder head's queries get neither. `positional="rotary2d"`
(axial RoPE, models.positional2d) rotates the encoder's queries and keys by row and column instead. The 1-D relative
biases of translation (`relative_bias="t5"` or `"alibi"`) read the reading order, as rotary positions do
(the decoder head's queries included), so that every file of configs/variants/ applies here too. An optional convolutional stem
(`stem_channels`, `stem_layers`: 3×3 convolutions at full resolution, Xiao et al. 2021, "Early
convolutions help transformers see better") runs over the image first; a token is then its patch
of the stem's feature maps instead of raw pixels. With `strided_stem` the stem itself brings each
p×p patch down to one position: ⌈log2 p⌉ stages of 3×3 convolutions, each stage's first one of stride 2
and doubling the feature maps, over the image zero-padded to a multiple (28 → 32 for 7×7 patches, so
32 → 16 → 8 → 4 and 16 tokens); a token is then one position of the last map, and neighbouring tokens
see overlapping pixels (the convolutional stem of Xiao et al. proper). `stem_norm` puts a BatchNorm after
every stem convolution, as their stem has (conv, BN, activation); a convolution followed by one has no bias. Heads:
  - "decoder": learned query token(s) go through the core's decoder, cross-attending to the
    encoded image (the seed's design, with a learned query instead of a constant one);
  - "cls": a learned class token is prepended to the encoder input and read out (ViT);
  - "mean": the encoder outputs are averaged.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from .positional import positional_encoding
from .positional2d import AxialRotaryEmbedding, SinCos2dPositionalEncoding
from .relative import TEXT_RELATIVE_BIASES, SwinRelativeBias2d, relative_bias_1d
from .transformer import Transformer

IMAGE_SIZE = 28
TOKENIZERS = ("rows", "patches")
HEADS = ("decoder", "cls", "mean")
POSITIONALS_2D = ("sincos2d", "rotary2d")  # beside models.positional's 1-D ones
RELATIVE_BIASES_2D = ("2d",)  # beside models.relative's 1-D ones


class MnistNet(nn.Module):
    def __init__(
        self,
        tokens: str = "patches",  # "rows" or "patches"
        patch_size: int = 7,  # side of a square patch, must divide 28; ignored for rows
        head: str = "decoder",  # "decoder", "cls" or "mean"
        num_queries: int = 1,  # decoder head: learned query tokens, their outputs are averaged
        d_model: int = 128,
        nhead: int = 4,
        num_encoder_layers: int = 4,
        num_decoder_layers: int = 1,  # decoder head only; pooling heads build no decoder
        dim_feedforward: int = 256,
        dropout: float = 0.1,
        activation: str = "gelu",
        norm_first: bool = True,  # pre-norm trains small models from scratch more reliably
        num_classes: int = 10,
        positional: str = "learned",  # "learned", "sinusoidal", "rotary" (1-D, reading order), "sincos2d", "rotary2d", "none"
        norm: str = "layernorm",  # the core's options: see models.transformer.Transformer
        qk_norm: bool = False,
        num_kv_heads: int | None = None,
        stem_channels: int = 0,  # feature maps of the convolutional stem; 0 = no stem, tokens are pixels
        stem_layers: int = 2,  # 3×3 convolutions (each followed by GELU) in the stem, or in each strided stage
        strided_stem: bool = False,  # stride-2 stages that reduce a patch to one token (see above); patches only
        stem_norm: bool = False,  # BatchNorm2d after each stem convolution (needs a stem)
        relative_bias: str | None = None,  # "2d": Swin's bias over the token grid; "t5", "alibi": 1-D (reading order)
    ):
        super().__init__()
        if tokens not in TOKENIZERS:
            raise ValueError(f"tokens must be one of {TOKENIZERS}, got {tokens!r}")
        if head not in HEADS:
            raise ValueError(f"head must be one of {HEADS}, got {head!r}")
        if tokens == "patches" and IMAGE_SIZE % patch_size:
            raise ValueError(f"patch_size must divide {IMAGE_SIZE}, got {patch_size}")
        if stem_channels < 0 or stem_layers < 1:
            raise ValueError(f"need stem_channels >= 0 and stem_layers >= 1, got {stem_channels} and {stem_layers}")
        if strided_stem and (not stem_channels or tokens != "patches" or patch_size < 2):
            raise ValueError(
                f"strided_stem needs stem_channels > 0, tokens='patches' and patch_size >= 2, "
                f"got {stem_channels}, {tokens!r} and {patch_size}"
            )
        if stem_norm and not stem_channels:
            raise ValueError("stem_norm normalises the stem's convolutions: it needs stem_channels > 0")
        if relative_bias not in (None, *RELATIVE_BIASES_2D, *TEXT_RELATIVE_BIASES):
            raise ValueError(
                f"relative_bias must be one of {RELATIVE_BIASES_2D + TEXT_RELATIVE_BIASES} or None, got {relative_bias!r}"
            )
        if head == "decoder" and (num_decoder_layers < 1 or num_queries < 1):
            raise ValueError("the decoder head needs num_decoder_layers >= 1 and num_queries >= 1")
        # A row is a 1×28 patch, so both layouts share one tokenizer.
        self.patch = (1, IMAGE_SIZE) if tokens == "rows" else (patch_size, patch_size)
        self.grid = (IMAGE_SIZE // self.patch[0], IMAGE_SIZE // self.patch[1])  # (h, w) of the tokens
        self.num_tokens = self.grid[0] * self.grid[1]
        self.head_kind = head

        stem, channels = [], 1

        def conv(out: int, stride: int = 1) -> list[nn.Module]:  # 3×3, grid kept (stride 1) or halved (2)
            norm = [nn.BatchNorm2d(out)] if stem_norm else []
            return [nn.Conv2d(channels, out, 3, stride=stride, padding=1, bias=not stem_norm), *norm, nn.GELU()]

        if strided_stem:
            stages = math.ceil(math.log2(patch_size))  # each stage halves the grid (ceil: 7 → 4 for a 7×7 grid)
            grid = IMAGE_SIZE // patch_size
            stem.append(nn.ZeroPad2d((grid * 2**stages - IMAGE_SIZE) // 2))  # 28 → grid·2^stages, centred
            for stage in range(stages):
                out = stem_channels * 2**stage
                for layer in range(stem_layers):
                    stem += conv(out, stride=2 if layer == 0 else 1)
                    channels = out
            self.patch = (1, 1)  # the stem's last map is grid × grid: a token is one position of it
        else:
            for _ in range(stem_layers if stem_channels else 0):
                stem += conv(stem_channels)  # keeps the 28×28 grid
                channels = stem_channels
        self.stem = nn.Sequential(*stem)  # empty (the identity, no parameters) without a stem
        self.embed = nn.Linear(channels * self.patch[0] * self.patch[1], d_model)  # a token's C·ph·pw values → D
        extra = 1 if head == "cls" else 0
        if positional == "sincos2d":
            self.pos = SinCos2dPositionalEncoding(d_model, *self.grid, extra_tokens=extra)
        elif positional == "rotary2d":  # in the encoder's attention; nothing added
            self.pos = None
        else:
            self.pos = positional_encoding(positional, d_model, self.num_tokens + extra)  # None for rotary, none
        self.dropout = nn.Dropout(dropout)
        self.core = Transformer(
            d_model=d_model,
            nhead=nhead,
            num_encoder_layers=num_encoder_layers,
            num_decoder_layers=num_decoder_layers if head == "decoder" else 0,
            dim_feedforward=dim_feedforward,
            dropout=dropout,
            activation=activation,
            norm_first=norm_first,
            norm=norm,
            qk_norm=qk_norm,
            num_kv_heads=num_kv_heads,
            rotary=positional == "rotary",  # the decoder head's queries get positions 0 … Q-1 too
            encoder_bias=(
                SwinRelativeBias2d(nhead, *self.grid, num_layers=num_encoder_layers, extra_tokens=extra)
                if relative_bias == "2d"
                else relative_bias_1d(relative_bias, nhead, causal=False)
            ),
            decoder_bias=(
                relative_bias_1d(relative_bias, nhead, causal=True) if relative_bias != "2d" and head == "decoder" else None
            ),
            encoder_rotary=(
                AxialRotaryEmbedding(d_model // nhead, *self.grid, extra_tokens=extra) if positional == "rotary2d" else None
            ),
        )
        if head == "decoder":
            self.queries = nn.Parameter(torch.randn(1, num_queries, d_model) * 0.02)  # (1, Q, D)
        elif head == "cls":
            self.cls_token = nn.Parameter(torch.randn(1, 1, d_model) * 0.02)  # (1, 1, D)
        self.classifier = nn.Linear(d_model, num_classes)

    def tokenize(self, images: torch.Tensor) -> torch.Tensor:
        """(B, C, H, W) → (B, N, C * ph * pw), tokens in reading order (left to right, top to bottom)."""
        ph, pw = self.patch
        B, C, H, W = images.shape  # 28×28, or the strided stem's grid × grid
        x = images.reshape(B, C, H // ph, ph, W // pw, pw)  # (B, C, gh, ph, gw, pw)
        x = x.permute(0, 2, 4, 1, 3, 5)  # (B, gh, gw, C, ph, pw)
        return x.reshape(B, self.num_tokens, C * ph * pw)  # (B, N, P)

    def embed_tokens(self, images: torch.Tensor) -> torch.Tensor:
        """(B, 1, 28, 28) → (B, N, D): stem (if any), tokens, linear embedding; no positions yet."""
        return self.embed(self.tokenize(self.stem(images)))

    def forward(self, images: torch.Tensor) -> torch.Tensor:  # (B, 1, 28, 28) → (B, num_classes)
        x = self.embed_tokens(images)  # (B, N, D)
        if self.head_kind == "cls":
            x = torch.cat([self.cls_token.expand(x.size(0), -1, -1), x], dim=1)  # (B, 1 + N, D)
        if self.pos is not None:
            x = self.pos(x)
        memory = self.core.encode(self.dropout(x))  # (B, N(+1), D), final norm applied
        if self.head_kind == "decoder":
            queries = self.queries.expand(x.size(0), -1, -1)  # (B, Q, D)
            # Queries attend causally to each other and freely to every image token.
            features = self.core.decode(queries, memory).mean(dim=1)  # (B, Q, D) → (B, D)
        elif self.head_kind == "cls":
            features = memory[:, 0]  # (B, D)
        else:
            features = memory.mean(dim=1)  # (B, D)
        return self.classifier(features)  # (B, num_classes)
