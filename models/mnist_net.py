"""An MNIST classifier built on the project's own `Transformer`: image → tokens (rows or square patches, after an
optional convolutional stem) → encoder → head ("decoder", "cls" or "mean"), each setting a field of
`models.config.MnistNetConfig`, which checks them; docs/guide/variants.md ("The MNIST network") says what each does."""

from __future__ import annotations

import dataclasses
import math

import torch
from torch import nn

from .config import IMAGE_SIZE, MnistNetConfig
from .positional import position_scheme
from .registry import Tokens
from .relative import relative_bias
from .transformer import Transformer


class MnistNet(nn.Module):
    def __init__(self, config: MnistNetConfig = MnistNetConfig()):  # noqa: B008 (frozen: one shared default is safe)
        """`config`: the tokens, head, stem and positions, and the stack's settings (models/config.py)."""
        super().__init__()
        self.config = c = config
        # A row is a 1×28 patch, so both layouts share one tokenizer.
        self.patch = (1, IMAGE_SIZE) if c.tokens == "rows" else (c.patch_size, c.patch_size)
        self.grid = (IMAGE_SIZE // self.patch[0], IMAGE_SIZE // self.patch[1])  # (h, w) of the tokens
        self.num_tokens = self.grid[0] * self.grid[1]
        self.head_kind = c.head

        stem, channels = [], 1

        def conv(out: int, stride: int = 1) -> list[nn.Module]:  # 3×3, grid kept (stride 1) or halved (2)
            norm = [nn.BatchNorm2d(out)] if c.stem_norm else []
            return [nn.Conv2d(channels, out, 3, stride=stride, padding=1, bias=not c.stem_norm), *norm, nn.GELU()]

        if c.strided_stem:
            stages = math.ceil(math.log2(c.patch_size))  # each stage halves the grid (ceil: 7 → 4 for a 7×7 grid)
            grid = IMAGE_SIZE // c.patch_size
            stem.append(nn.ZeroPad2d((grid * 2**stages - IMAGE_SIZE) // 2))  # 28 → grid·2^stages, centred
            for stage in range(stages):
                out = c.stem_channels * 2**stage
                for layer in range(c.stem_layers):
                    stem += conv(out, stride=2 if layer == 0 else 1)
                    channels = out
            self.patch = (1, 1)  # the stem's last map is grid × grid: a token is one position of it
        else:
            for _ in range(c.stem_layers if c.stem_channels else 0):
                stem += conv(c.stem_channels)  # keeps the 28×28 grid
                channels = c.stem_channels
        self.stem = nn.Sequential(*stem)  # empty (the identity, no parameters) without a stem
        self.embed = nn.Linear(channels * self.patch[0] * self.patch[1], c.d_model)  # a token's C·ph·pw values → D
        extra = 1 if c.head == "cls" else 0
        # The encoder's tokens lie on the grid (after a class token); the decoder head's queries are a sequence.
        encoder = Tokens(c, extra + self.num_tokens, grid=self.grid, extra=extra)
        queries = Tokens(c, c.num_queries, causal=True)
        positions = position_scheme(c.positional, encoder)  # models.positional.POSITIONALS
        self.pos = positions.added  # None for the rotary schemes and "none"
        self.dropout = nn.Dropout(c.dropout)
        self.core = Transformer(
            # The pooling heads build no decoder.
            c if c.head == "decoder" else dataclasses.replace(c, num_decoder_layers=0),
            rotary=positions.rotary,  # the decoder head's queries get positions 0 … Q-1 too
            encoder_bias=relative_bias(c.relative_bias, encoder),  # models.relative.RELATIVE_BIASES
            decoder_bias=relative_bias(c.relative_bias, queries) if c.head == "decoder" else None,
            encoder_rotary=positions.encoder_rotary,
        )
        if c.head == "decoder":
            self.queries = nn.Parameter(torch.randn(1, c.num_queries, c.d_model) * 0.02)  # (1, Q, D)
        elif c.head == "cls":
            self.cls_token = nn.Parameter(torch.randn(1, 1, c.d_model) * 0.02)  # (1, 1, D)
        self.classifier = nn.Linear(c.d_model, c.num_classes)

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
