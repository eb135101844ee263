"""The encoder–decoder Transformer on embeddings (Vaswani et al., 2017), batch-first. Its settings
(`models.config.TransformerConfig`) follow `torch.nn.Transformer`'s names and layer defaults, its final LayerNorm after
each stack included (present in post-norm too), so `Transformer.from_torch` can copy its weights; every research option
(README, "Research variants"), Marian's `final_norm=False` included, is off by default: `torch.nn.Transformer` exactly."""

from __future__ import annotations

import torch
from torch import nn

from .cache import DynamicCache, StaticCache
from .config import TransformerConfig
from .layers import DecoderLayer, EncoderLayer
from .masks import causal_mask, padding_mask
from .norms import make_norm
from .positional import RotaryEmbedding


class Transformer(nn.Module):
    def __init__(
        self,
        config: TransformerConfig = TransformerConfig(),  # noqa: B008 (frozen: one shared default is safe)
        *,
        rotary: bool = False,  # rotary positions in self-attention (the embeddings then carry none)
        encoder_bias: nn.Module | None = None,  # a relative position bias of self-attention (models.relative)
        decoder_bias: nn.Module | None = None,  # the decoder's, over the new queries and every cached key
        encoder_rotary: nn.Module | None = None,  # the encoder's own rotary tables (MnistNet's 2-D ones)
    ):
        """`config`: the stack's sizes and options. The position schemes are modules or flags that the network on
        top derives from its own config (its `positional` and `relative_bias`), not settings of the stack."""
        super().__init__()
        self.config = c = config
        self.encoder_layers = nn.ModuleList(EncoderLayer(c, i != c.residual_free_layer) for i in range(c.num_encoder_layers))
        self.decoder_layers = nn.ModuleList(DecoderLayer(c) for _ in range(c.num_decoder_layers))
        self.encoder_norm = make_norm(c.norm, c.d_model, c.layer_norm_eps, c.bias) if c.final_norm else nn.Identity()
        self.decoder_norm = make_norm(c.norm, c.d_model, c.layer_norm_eps, c.bias) if c.final_norm else nn.Identity()
        # One table of (cos, sin) per forward pass, shared by every layer (as the masks are).
        self.rotary = RotaryEmbedding(c.d_model // c.nhead) if rotary else None
        self.encoder_rotary = encoder_rotary
        # Called once per forward pass too: (L or 1, H, T, S), layer i takes slice i (or the shared one).
        self.encoder_bias, self.decoder_bias = encoder_bias, decoder_bias

    def _rope(self, x: torch.Tensor, offset: int | torch.Tensor = 0):
        """Rotary tables of x's T positions after `offset` (the cache's), or None."""
        return None if self.rotary is None else self.rotary(x.size(1), offset, x.device, x.dtype)

    @staticmethod
    def _layer_bias(bias: torch.Tensor | None, i: int) -> torch.Tensor | None:
        """Layer i's (1, H, T, S) slice of an (L or 1, H, T, S) bias: its own, or the one all layers share."""
        return None if bias is None else bias[i if bias.size(0) > 1 else 0][None]

    def encode(self, src: torch.Tensor, src_key_padding_mask: torch.Tensor | None = None) -> torch.Tensor:
        """(B, S, D) source embeddings → (B, S, D) memory. Mask: (B, S) bool, True = padding."""
        mask = padding_mask(src_key_padding_mask)
        S = src.size(1)
        rope = self._rope(src) if self.encoder_rotary is None else self.encoder_rotary(S, 0, src.device, src.dtype)
        bias = None if self.encoder_bias is None else self.encoder_bias(S, S)  # (L or 1, H, S, S)
        x = src
        for i, layer in enumerate(self.encoder_layers):
            x = layer(x, mask, rope, self._layer_bias(bias, i))
        return self.encoder_norm(x)

    def decode(
        self,
        tgt: torch.Tensor,  # (B, T, D) target embeddings: the whole prefix, or only the new steps with a cache
        memory: torch.Tensor | None,  # (B, S, D); may be None once `cache` holds the cross keys/values
        tgt_key_padding_mask: torch.Tensor | None = None,  # (B, past + T) bool, True = padding
        memory_key_padding_mask: torch.Tensor | None = None,  # (B, S) bool, True = padding
        cache: DynamicCache | StaticCache | None = None,  # models.cache
        need_weights: bool = False,
    ) -> torch.Tensor | tuple[torch.Tensor, list[torch.Tensor]]:
        """Causal decoding. With `need_weights`, also returns each layer's cross-attention
        weights, (B, H, T, S), for plotting (a slower matmul-softmax path)."""
        T = tgt.size(1)
        if cache is None:
            offset, keys = 0, T
            # The training case (no target padding) keeps SDPA's own causal path. Written as a conditional
            # expression so that torch.compile(dynamic=True) gets a plain bool rather than a symbolic one, which
            # SDPA rejects (a graph break in every decoder layer).
            is_causal = True if tgt_key_padding_mask is None and T > 1 else False  # noqa: SIM210
            self_mask = None if is_causal else causal_mask(T, tgt_key_padding_mask, 0, tgt.device)
        else:
            # The new queries sit at positions offset … offset + T - 1 (a static cache's offset is a tensor) and
            # read `keys` keys: the cached ones and theirs, or a static cache's whole buffer, its unwritten part masked.
            offset, keys, is_causal = cache.offset, cache.key_length(T), False
            self_mask = cache.self_mask(T, tgt_key_padding_mask, tgt.device)  # (B or 1, 1, T, keys) or None
            if not cache.has_memory:  # the first step: the memory's keys/values, projected once per source
                self.cache_memory(memory, cache)
        memory_mask = padding_mask(memory_key_padding_mask)
        rope = self._rope(tgt, offset)
        # The new queries' rows of the bias, over every key: (L or 1, H, T, keys).
        bias = None if self.decoder_bias is None else self.decoder_bias(T, keys, offset)
        x, weights = tgt, []
        for i, layer in enumerate(self.decoder_layers):
            x, w = layer(x, memory, self_mask, memory_mask, is_causal, cache, i, need_weights, rope, self._layer_bias(bias, i))
            weights.append(w)
        x = self.decoder_norm(x)
        return (x, weights) if need_weights else x

    def forward(
        self,
        src: torch.Tensor,  # (B, S, D)
        tgt: torch.Tensor,  # (B, T, D)
        src_key_padding_mask: torch.Tensor | None = None,
        tgt_key_padding_mask: torch.Tensor | None = None,
    ) -> torch.Tensor:  # (B, T, D)
        memory = self.encode(src, src_key_padding_mask)
        return self.decode(tgt, memory, tgt_key_padding_mask, src_key_padding_mask)

    def new_cache(self) -> DynamicCache:
        return DynamicCache(len(self.decoder_layers))

    def cache_memory(self, memory: torch.Tensor, cache: DynamicCache | StaticCache) -> None:
        """Store every decoder layer's cross-attention keys/values of (B, S, D) `memory` in `cache`: done once per
        source, by the first cached `decode`, or ahead of a captured step (models.static_cache)."""
        for i, layer in enumerate(self.decoder_layers):
            cache.store_memory(i, *layer.cross_attn.project_kv(memory))  # (B, Hkv, S, Dh) each

    @classmethod
    def from_torch(cls, module: nn.Transformer) -> Transformer:
        """A `Transformer` with the weights of a batch-first or sequence-first `torch.nn.Transformer`."""
        enc0 = module.encoder.layers[0]
        attn = enc0.self_attn
        config = TransformerConfig(
            d_model=attn.embed_dim,
            nhead=attn.num_heads,
            num_encoder_layers=len(module.encoder.layers),
            num_decoder_layers=len(module.decoder.layers),
            dim_feedforward=enc0.linear1.out_features,
            dropout=enc0.dropout.p,
            activation=_activation_name(enc0.activation),
            layer_norm_eps=enc0.norm1.eps,
            norm_first=enc0.norm_first,
            bias=attn.in_proj_bias is not None,
        )
        model = cls(config)
        model.to(device=attn.in_proj_weight.device, dtype=attn.in_proj_weight.dtype)
        model.load_state_dict(_convert_torch_state_dict(module.state_dict()))
        return model


def _activation_name(activation) -> str:
    import torch.nn.functional as F

    if activation in (F.relu, "relu") or isinstance(activation, nn.ReLU):
        return "relu"
    if activation in (F.gelu, "gelu") or isinstance(activation, nn.GELU):
        return "gelu"
    raise ValueError(f"Only relu and gelu activations can be converted, got {activation!r}")


def _convert_torch_state_dict(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Rename torch.nn.Transformer's keys to ours; split cross-attention's in_proj into q and kv."""
    out = {}
    for key, value in state.items():
        key = key.replace("encoder.layers.", "encoder_layers.").replace("decoder.layers.", "decoder_layers.")
        key = key.replace("encoder.norm.", "encoder_norm.").replace("decoder.norm.", "decoder_norm.")
        key = key.replace("multihead_attn.", "cross_attn.")
        key = key.replace(".linear1.", ".ff.linear1.").replace(".linear2.", ".ff.linear2.")
        if ".cross_attn.in_proj_" in key:
            d = value.size(0) // 3
            suffix = key.rsplit("in_proj_", 1)[1]  # "weight" or "bias"
            prefix = key.split(".cross_attn.")[0] + ".cross_attn."
            out[prefix + "q_proj." + suffix] = value[:d]
            out[prefix + "kv_proj." + suffix] = value[d:]
            continue
        key = key.replace(".self_attn.in_proj_", ".self_attn.qkv_proj.")
        out[key] = value
    return out
