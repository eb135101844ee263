"""An MNIST classifier built on the project's own `Transformer`: image → tokens → encoder → head.

Tokens are rows (28 tokens of 28 pixels, the seed's layout) or square patches (4×4 → 49 tokens,
7×7 → 16 tokens), each linearly embedded plus a learned position (or a sinusoidal one, or rotary
positions in self-attention over the reading order: `positional`). Heads:
  - "decoder": learned query token(s) go through the core's decoder, cross-attending to the
    encoded image (the seed's design, with a learned query instead of a constant one);
  - "cls": a learned class token is prepended to the encoder input and read out (ViT);
  - "mean": the encoder outputs are averaged.
"""

from __future__ import annotations

import torch
from torch import nn

from .positional import positional_encoding
from .transformer import Transformer

IMAGE_SIZE = 28
TOKENIZERS = ("rows", "patches")
HEADS = ("decoder", "cls", "mean")


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
        positional: str = "learned",  # "learned", "sinusoidal" or "rotary" (1-D, over the reading order)
        norm: str = "layernorm",  # the core's options: see models.transformer.Transformer
        qk_norm: bool = False,
        num_kv_heads: int | None = None,
    ):
        super().__init__()
        if tokens not in TOKENIZERS:
            raise ValueError(f"tokens must be one of {TOKENIZERS}, got {tokens!r}")
        if head not in HEADS:
            raise ValueError(f"head must be one of {HEADS}, got {head!r}")
        if tokens == "patches" and IMAGE_SIZE % patch_size:
            raise ValueError(f"patch_size must divide {IMAGE_SIZE}, got {patch_size}")
        if head == "decoder" and (num_decoder_layers < 1 or num_queries < 1):
            raise ValueError("the decoder head needs num_decoder_layers >= 1 and num_queries >= 1")
        # A row is a 1×28 patch, so both layouts share one tokenizer.
        self.patch = (1, IMAGE_SIZE) if tokens == "rows" else (patch_size, patch_size)
        self.num_tokens = (IMAGE_SIZE // self.patch[0]) * (IMAGE_SIZE // self.patch[1])
        self.head_kind = head

        self.embed = nn.Linear(self.patch[0] * self.patch[1], d_model)  # pixels of a token → D
        extra = 1 if head == "cls" else 0
        self.pos = positional_encoding(positional, d_model, self.num_tokens + extra)  # None for rotary
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
        )
        if head == "decoder":
            self.queries = nn.Parameter(torch.randn(1, num_queries, d_model) * 0.02)  # (1, Q, D)
        elif head == "cls":
            self.cls_token = nn.Parameter(torch.randn(1, 1, d_model) * 0.02)  # (1, 1, D)
        self.classifier = nn.Linear(d_model, num_classes)

    def tokenize(self, images: torch.Tensor) -> torch.Tensor:
        """(B, 1, 28, 28) → (B, N, ph * pw), tokens in reading order (left to right, top to bottom)."""
        ph, pw = self.patch
        B = images.size(0)
        x = images.reshape(B, IMAGE_SIZE // ph, ph, IMAGE_SIZE // pw, pw)  # (B, gh, ph, gw, pw)
        x = x.permute(0, 1, 3, 2, 4)  # (B, gh, gw, ph, pw)
        return x.reshape(B, self.num_tokens, ph * pw)  # (B, N, P)

    def forward(self, images: torch.Tensor) -> torch.Tensor:  # (B, 1, 28, 28) → (B, num_classes)
        x = self.embed(self.tokenize(images))  # (B, N, D)
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
