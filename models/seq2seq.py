"""The translation network: token embeddings + positions → `Transformer` → vocabulary logits."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from .positional import positional_encoding
from .relative import relative_bias_1d
from .transformer import DecoderCache, Transformer


class Seq2SeqNet(nn.Module):
    def __init__(
        self,
        src_vocab_size: int,
        tgt_vocab_size: int,
        d_model: int = 512,
        nhead: int = 8,
        num_encoder_layers: int = 6,
        num_decoder_layers: int = 6,
        dim_feedforward: int = 2048,
        dropout: float = 0.1,
        activation: str = "relu",
        norm_first: bool = False,
        max_len: int = 256,
        positional: str = "sinusoidal",
        tie_embeddings: bool = False,
        share_embeddings: bool = False,
        pad_id: int = 0,
        norm: str = "layernorm",
        qk_norm: bool = False,
        num_kv_heads: int | None = None,
        src_token_dropout: float = 0.0,
        relative_bias: str | None = None,
        scale_embeddings: bool = True,
        final_norm: bool = True,
        generator_bias: bool = False,
    ):
        """`positional`: "sinusoidal" | "sinusoidal_halves" | "learned" (added to the embeddings) | "rotary"
        (RoPE in the encoder's and the decoder's self-attention, none in cross-attention, nothing added) | "none".
        `relative_bias`: None | "t5" | "alibi", a bias on the logits of the encoder's and the decoder's
        self-attention (models.relative; T5's and ALiBi's own models take it with `positional="none"`). `norm`,
        `qk_norm`, `num_kv_heads`, `final_norm` and the `activation`s: see models.transformer.Transformer.
        `src_token_dropout`: in training, each source token's whole embedding is dropped with this
        probability (word dropout, Sennrich & Zhang 2019), before its position is added.
        `scale_embeddings`: multiply the token embeddings by sqrt(d_model) (the paper's rule; off in a Marian
        model whose config says `scale_embedding: false`). `generator_bias`: a bias on the output layer,
        zero at start (Marian's `final_logits_bias`)."""
        super().__init__()
        self.pad_id, self.max_len, self.d_model = pad_id, max_len, d_model
        self.src_token_dropout = src_token_dropout
        self.src_embed = nn.Embedding(src_vocab_size, d_model, padding_idx=pad_id)
        if share_embeddings and src_vocab_size != tgt_vocab_size:
            raise ValueError(f"share_embeddings needs one vocabulary; got sizes {src_vocab_size} and {tgt_vocab_size}")
        # share_embeddings: one table for both sides (a joint subword vocabulary); with tie_embeddings
        # too, the generator reads the same table (three-way tying, as fairseq's share_all_embeddings).
        self.tgt_embed = self.src_embed if share_embeddings else nn.Embedding(tgt_vocab_size, d_model, padding_idx=pad_id)
        self.src_pos = positional_encoding(positional, d_model, max_len)  # None for rotary
        self.tgt_pos = positional_encoding(positional, d_model, max_len)
        self.embed_dropout = nn.Dropout(dropout)
        self.core = Transformer(
            d_model,
            nhead,
            num_encoder_layers,
            num_decoder_layers,
            dim_feedforward,
            dropout,
            activation,
            norm_first=norm_first,
            norm=norm,
            qk_norm=qk_norm,
            num_kv_heads=num_kv_heads,
            rotary=positional == "rotary",
            encoder_bias=relative_bias_1d(relative_bias, nhead, causal=False),
            decoder_bias=relative_bias_1d(relative_bias, nhead, causal=True),
            final_norm=final_norm,
        )
        self.generator = nn.Linear(d_model, tgt_vocab_size, bias=generator_bias)
        if generator_bias:
            nn.init.zeros_(self.generator.bias)
        for emb in dict.fromkeys((self.src_embed, self.tgt_embed)):  # once each, in order, when shared
            # Scaled by sqrt(d_model) in forward, so start at unit variance / sqrt(d_model).
            nn.init.normal_(emb.weight, std=d_model**-0.5)
            emb.weight.data[pad_id].zero_()
        if tie_embeddings:
            self.generator.weight = self.tgt_embed.weight
        self.embed_scale = math.sqrt(d_model) if scale_embeddings else 1.0

    def _check_len(self, length: int) -> None:
        if length > self.max_len:
            raise ValueError(f"sequence of {length} tokens exceeds the model's max_len={self.max_len}")

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
        cache: DecoderCache | None = None,
        need_weights: bool = False,
    ):
        """→ logits (B, T, V) (and cross-attention weights per layer when asked)."""
        out = self.decode_features(tgt, memory, src_pad, cache, need_weights)
        if need_weights:
            return self.generator(out[0]), out[1]
        return self.generator(out)

    def decode_features(self, tgt, memory, src_pad, cache=None, need_weights=False):
        """`decode` without the generator: the decoder's outputs (B, T, D) (and weights when asked)."""
        offset = cache.length if cache is not None else 0
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
