"""The translation network: token embeddings + positions → `Transformer` → vocabulary logits."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from .cache import DynamicCache, StaticCache
from .config import Seq2SeqConfig
from .positional import position_scheme
from .registry import Tokens
from .relative import relative_bias
from .transformer import Transformer


class Seq2SeqNet(nn.Module):
    def __init__(self, config: Seq2SeqConfig):
        """`config`: the vocabulary sizes, the positions and embeddings, and the stack's settings, each field
        explained in models/config.py."""
        super().__init__()
        self.config = c = config
        self.pad_id, self.max_len, self.d_model = c.pad_id, c.max_len, c.d_model  # what the searches read (models.decoding)
        self.src_token_dropout = c.src_token_dropout
        self.src_embed = nn.Embedding(c.src_vocab_size, c.d_model, padding_idx=c.pad_id)
        self.tgt_embed = self.src_embed if c.share_embeddings else nn.Embedding(c.tgt_vocab_size, c.d_model, padding_idx=c.pad_id)
        source, target = Tokens(c, c.max_len), Tokens(c, c.max_len, causal=True)
        positions = position_scheme(c.positional, source)  # models.positional.POSITIONALS
        self.src_pos = positions.added  # None for rotary and none
        self.tgt_pos = position_scheme(c.positional, target).added
        self.embed_dropout = nn.Dropout(c.dropout)
        self.core = Transformer(
            c,
            rotary=positions.rotary,
            encoder_bias=relative_bias(c.relative_bias, source),  # models.relative.RELATIVE_BIASES
            decoder_bias=relative_bias(c.relative_bias, target),
        )
        self.generator = nn.Linear(c.d_model, c.tgt_vocab_size, bias=c.generator_bias)
        if c.generator_bias:
            nn.init.zeros_(self.generator.bias)
        for emb in dict.fromkeys((self.src_embed, self.tgt_embed)):  # once each, in order, when shared
            # Scaled by sqrt(d_model) in forward, so start at unit variance / sqrt(d_model).
            nn.init.normal_(emb.weight, std=c.d_model**-0.5)
            emb.weight.data[c.pad_id].zero_()
        if c.tie_embeddings:
            self.generator.weight = self.tgt_embed.weight
        self.embed_scale = math.sqrt(c.d_model) if c.scale_embeddings else 1.0

    def _check_len(self, length: int) -> None:
        if length > self.max_len:
            raise ValueError(f"sequence of {length} tokens exceeds the model's max_len={self.max_len}")

    def new_cache(self) -> DynamicCache:
        """An empty key/value cache for incremental `decode` (what the searches of models.decoding start from)."""
        return self.core.new_cache()

    def encode(self, src: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(B, S) ids → memory (B, S, D) and its padding mask (B, S), True = padding."""
        self._check_len(src.size(1))
        src_pad = src.eq(self.pad_id)
        x = self.src_embed(src) * self.embed_scale  # (B, S, D)
        if self.training and self.src_token_dropout > 0:
            # One draw per token, not per channel: the encoder must do without the whole token, while its
            # position still says one was there. Kept tokens are scaled by 1 / (1 - p), as nn.Dropout does.
            x = x * F.dropout(x.new_ones(*src.shape, 1), self.src_token_dropout)  # (B, S, 1) mask
        if self.src_pos is not None:  # rotary positions enter the attention instead
            x = self.src_pos(x)
        return self.core.encode(self.embed_dropout(x), src_pad), src_pad

    def decode(
        self,
        tgt: torch.Tensor,  # (B, T) ids: the whole prefix, or only the new ones with a cache
        memory: torch.Tensor,  # (B, S, D)
        src_pad: torch.Tensor,  # (B, S)
        cache: DynamicCache | StaticCache | None = None,  # models.cache
        need_weights: bool = False,
    ):
        """→ logits (B, T, V) (and cross-attention weights per layer when asked)."""
        out = self.decode_features(tgt, memory, src_pad, cache, need_weights)
        if need_weights:
            return self.generator(out[0]), out[1]
        return self.generator(out)

    def decode_features(self, tgt, memory, src_pad, cache=None, need_weights=False):
        """`decode` without the generator: the decoder's outputs (B, T, D) (and weights when asked)."""
        offset = cache.offset if cache is not None else 0  # a static cache's is a (1,) tensor: models.cache
        if isinstance(offset, int):  # a static cache's buffers are no longer than max_len: nothing to check
            self._check_len(offset + tgt.size(1))
        # Targets are right-padded (see datamodules.batching), so the causal mask already hides
        # every padded key from every real query: no target padding mask, and SDPA keeps its
        # fast causal path. Outputs at padded positions are ignored by the loss.
        x = self.tgt_embed(tgt) * self.embed_scale
        if self.tgt_pos is not None:
            x = self.tgt_pos(x, offset)
        return self.core.decode(self.embed_dropout(x), memory, None, src_pad, cache, need_weights)

    def forward(self, src: torch.Tensor, tgt: torch.Tensor, tgt_out: torch.Tensor | None = None):
        """Teacher forcing: (B, S) source ids, (B, T) target input ids → (B, T, V) logits.

        With `tgt_out` (B, T), the next tokens, only the real (non-padding) positions go through the
        generator: → (N, V) logits and their (N,) labels, N = tokens of `tgt_out` that are not padding.
        The generator is a step's largest matmul (8k × 256 per position for Multi30k), so at 25 %
        padding this saves a quarter of it; cross-entropy over the N equals the (B, T, V) one with
        `ignore_index=pad_id`. (An argument of `forward`, not a method, so `compile` covers it.)"""
        memory, src_pad = self.encode(src)
        if tgt_out is None:
            return self.decode(tgt, memory, src_pad)
        hidden = self.decode_features(tgt, memory, src_pad)  # (B, T, D)
        real = tgt_out.ne(self.pad_id)  # (B, T)
        return self.generator(hidden[real]), tgt_out[real]  # (N, V), (N,)
