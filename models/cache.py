"""Key/value caches for incremental decoding, one object per search, as Hugging Face's Cache classes: `DynamicCache`
grows at every step, `StaticCache` is written in place for a captured step (models.static_cache). The decoder's
attention knows one interface, whatever the cache (docs/guide/speed.md, "The static cache", lists it)."""

from __future__ import annotations

import torch

from .masks import causal_mask
from .positional import positions


class _Cache:
    """What both caches hold alike: per layer, self-attention's `keys`/`values` and the memory's (cross-attention's)
    `memory_keys`/`memory_values`, each (rows, Hkv, positions, Dh)."""

    keys: list
    values: list
    memory_keys: list
    memory_values: list
    can_drop_rows = True  # a search may keep fewer rows (`reorder`) as sentences finish; not a captured step's

    def memory(self, layer: int) -> tuple[torch.Tensor, torch.Tensor]:
        return self.memory_keys[layer], self.memory_values[layer]

    def nbytes(self, kind: str | None = None) -> int:
        """Bytes held by the cached tensors: all of them, or only "self" or "cross" attention's."""
        groups = {"self": self.keys + self.values, "cross": self.memory_keys + self.memory_values}
        return sum(t.numel() * t.element_size() for k, ts in groups.items() if kind in (None, k) for t in ts if t is not None)


class DynamicCache(_Cache):
    """Self-attention keys/values grown by the new tokens at every step; cross-attention's stored once."""

    def __init__(self, num_layers: int):
        self.keys: list[torch.Tensor | None] = [None] * num_layers  # per layer (B, Hkv, T, Dh)
        self.values: list[torch.Tensor | None] = [None] * num_layers
        self.memory_keys: list[torch.Tensor | None] = [None] * num_layers  # per layer (B, Hkv, S, Dh)
        self.memory_values: list[torch.Tensor | None] = [None] * num_layers

    @property
    def length(self) -> int:
        """Number of target positions already decoded (the offset of the next position)."""
        return 0 if self.keys[0] is None else self.keys[0].size(2)

    @property
    def offset(self) -> int:
        """The position of the first new token (a static cache's is a tensor)."""
        return self.length

    def key_length(self, new: int) -> int:
        """How many keys self-attention reads once `new` tokens are stored."""
        return self.length + new

    def self_mask(self, new: int, key_padding_mask: torch.Tensor | None, device) -> torch.Tensor | None:
        """Bool (B or 1, 1, new, length + new), True = attend, or None when a single new query sees every key."""
        return causal_mask(new, key_padding_mask, self.length, device)

    def update(self, layer: int, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(B, Hkv, T, Dh) new keys/values → (B, Hkv, past + T, Dh) all of them."""
        if self.keys[layer] is not None:
            k = torch.cat([self.keys[layer], k], dim=2)
            v = torch.cat([self.values[layer], v], dim=2)
        self.keys[layer], self.values[layer] = k, v
        return k, v

    @property
    def has_memory(self) -> bool:
        return self.memory_keys[0] is not None

    def store_memory(self, layer: int, k: torch.Tensor, v: torch.Tensor) -> None:
        self.memory_keys[layer], self.memory_values[layer] = k, v

    def reorder(self, index: torch.Tensor) -> None:
        """Rows `index` in place of the rows (beam search: the beams that survive a step). Only self-attention's
        keys/values move: a beam's parent is a beam of the same sentence, whose memory rows are the same."""
        self._select(index, (self.keys, self.values))

    def keep(self, index: torch.Tensor) -> None:
        """Keep batch rows `index`, fewer than there are (finished sentences leave the batch): memory's too."""
        self._select(index, (self.keys, self.values, self.memory_keys, self.memory_values))

    @staticmethod
    def _select(index: torch.Tensor, groups) -> None:
        for tensors in groups:
            for i, t in enumerate(tensors):
                if t is not None:
                    tensors[i] = t.index_select(0, index)


class StaticCache(_Cache):
    """Preallocated self- and cross-attention buffers for N rows, L target positions and S source positions,
    written in place: the same shapes and addresses at every step, so a captured step can replay.

    The position written next is `position`, a (1,) tensor, set by the owner between steps (`start_step`), so that
    the step itself reads no Python number that changes with t. Attention reads the whole (N, Hkv, L, Dh) buffer;
    `self_mask` hides the positions after each query's own (those not written yet get weight exactly 0)."""

    can_drop_rows = False  # its rows are a captured step's shape

    def __init__(self, num_layers: int, rows: int, kv_heads: int, length: int, head_dim: int, source_length: int, device, dtype):
        # Zeros, not empty: the masked positions get weight 0, and 0 × a NaN left in memory would be NaN.
        buffer = lambda n: torch.zeros(rows, kv_heads, n, head_dim, device=device, dtype=dtype)
        self.keys = [buffer(length) for _ in range(num_layers)]  # per layer (N, Hkv, L, Dh)
        self.values = [buffer(length) for _ in range(num_layers)]
        self.memory_keys = [buffer(source_length) for _ in range(num_layers)]  # per layer (N, Hkv, S, Dh)
        self.memory_values = [buffer(source_length) for _ in range(num_layers)]
        self.position = torch.zeros(1, dtype=torch.long, device=device)  # (1,) where the next token goes
        self.key_positions = torch.arange(length, device=device)  # (L,) each buffer slot's position
        self.capacity = length
        self.length = 0  # positions written or being written: kept outside the captured step
        self.has_memory = False

    def tensors(self) -> list[torch.Tensor]:
        """Every tensor a step reads or writes (a compiler may take their addresses as fixed)."""
        return [*self.keys, *self.values, *self.memory_keys, *self.memory_values, self.position, self.key_positions]

    def reset(self) -> None:
        """Empty for a new search: positions are written again from 0, the memory stored again."""
        self.length, self.has_memory = 0, False

    def start_step(self, new: int = 1) -> None:
        """Before a step (outside a captured one): its `new` tokens go to positions length … length + new - 1."""
        if self.length + new > self.capacity:
            raise ValueError(f"the static cache holds {self.capacity} positions; step {self.length + new} asked")
        self.position.fill_(self.length)
        self.length += new

    @property
    def offset(self) -> torch.Tensor:
        return self.position  # (1,): a tensor, so one captured step serves every t

    def key_length(self, new: int) -> int:
        return self.capacity  # attention reads the whole buffer

    def self_mask(self, new: int, key_padding_mask: torch.Tensor | None, device) -> torch.Tensor:
        """Bool (1, 1, new, L), True = attend: each new query sees the slots up to its own position."""
        if key_padding_mask is not None:
            raise ValueError("a static cache decodes unpadded targets: no target padding mask")
        queries = positions(self.position, new, self.position.device)  # (new,)
        return (self.key_positions[None, :] <= queries[:, None])[None, None]

    def update(self, layer: int, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(N, Hkv, T, Dh) new keys/values written at `position` … → the (N, Hkv, L, Dh) buffers."""
        slots = positions(self.position, k.size(2), self.position.device)  # (T,)
        keys, values = self.keys[layer], self.values[layer]
        keys.index_copy_(2, slots, k.to(keys.dtype))  # under autocast: the buffer's dtype
        values.index_copy_(2, slots, v.to(values.dtype))
        return keys, values

    def store_memory(self, layer: int, k: torch.Tensor, v: torch.Tensor) -> None:
        self.memory_keys[layer].copy_(k)
        self.memory_values[layer].copy_(v)
        self.has_memory = True

    def reorder(self, index: torch.Tensor) -> None:
        """Keep rows `index` (the beams that survive a step), in place so that captured steps see them.
        The memory's buffers stay: a beam's parent is a beam of the same sentence, with the same source."""
        for t in self.keys + self.values:
            t.copy_(t.index_select(0, index))
