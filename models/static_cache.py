"""The decoding fast path: a preallocated (static) key/value cache and a decode step whose shapes and
addresses never change from one step to the next, so that it can be captured: by `torch.compile`
(mode "reduce-overhead" on CUDA, which replays CUDA graphs) or by a CUDA graph directly.

Today's cache (`models.transformer.DecoderCache`) grows by one position per step (a `torch.cat` per
layer): every step has new shapes and new tensors, which no graph can replay. Here each decoder layer
owns a (N, Hkv, L, Dh) key buffer and value buffer allocated once (N = sentences × beams, L ≥ the
steps decoded); step t writes its key/value at position t in place (`index_copy_`) and attends over
the whole buffer, a mask (positions ≤ t) hiding what is not written yet. The position t is a tensor,
not a Python int, so the same captured step serves every t. Cross-attention keys/values are
projected once per source into buffers of their own.

`StaticDecoder(net, mode)` presents what the searches of `models.decoding` read from a network
(`encode`, `decode`, `new_cache()`, `pad_id`, `max_len`), so greedy and beam search run on it
unchanged; `greedy` and `beam` below size the buffers for the steps asked and call them:

    decoder = StaticDecoder(net, mode="compile")      # build once: compiled steps are kept per shape
    out = decoder.greedy(src, bos_id, eos_id, max_len)
    out = decoder.beam(src, bos_id, eos_id, max_len, beam_size=4)

Outputs are token for token those of the growing cache (tests/test_static_cache.py): the buffer's
unwritten positions get attention weight exactly 0. Under bf16 autocast the attention over the whole
buffer rounds otherwise than over the positions written, by up to one bf16 step in the logits: the tokens
are the same in every configuration tested, but a search may part where its top two logits are that close. Modes:
  - "eager": no capture (the reference; on a CPU about the speed of the growing cache);
  - "compile": `torch.compile` of the step; on CUDA with mode="reduce-overhead" (CUDA graphs), on
    the CPU the inductor's default mode. One compilation per (rows, source length, buffer length);
  - "cuda-graph": the eager step captured in a `torch.cuda.CUDAGraph` per shape and replayed
    (CUDA only): launch overhead gone without a compiler.
Buffer lengths are rounded up to `length_multiple` so that the shapes (and compilations) stay few.
The encoder and the beam reordering (one `index_select` per buffer) run eagerly between steps.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch

from .decoding import beam_search, greedy_decode
from .masks import padding_mask

if TYPE_CHECKING:
    from .seq2seq import Seq2SeqNet

MODES = ("eager", "compile", "cuda-graph")


@dataclass
class _StepState:
    """The tensors one captured step reads and writes, for one (rows, source length, buffer length)."""

    tokens: torch.Tensor  # (N, 1) the newest token of each row
    slot: torch.Tensor  # (1,) long: the position written this step
    positions: torch.Tensor  # (L,) 0 … L-1, compared with `slot` for the self-attention mask
    memory_mask: torch.Tensor  # (N, 1, 1, S) bool, True = attend
    self_kv: list[tuple[torch.Tensor, torch.Tensor]]  # per layer (N, Hkv, L, Dh) keys, values
    cross_kv: list[tuple[torch.Tensor, torch.Tensor]]  # per layer (N, Hkv, S, Dh) keys, values
    graph: object = None  # "cuda-graph": the captured step
    logits: torch.Tensor | None = None  # "cuda-graph": its output, rewritten by every replay


class StaticCache:
    """The `DecoderCache` interface (`length`, `reorder`, `nbytes`) over a `StaticDecoder`'s buffers."""

    def __init__(self):
        self.length = 0  # positions decoded so far = the slot the next step writes
        self.state: _StepState | None = None  # bound by the first step, which knows the rows and the source

    def reorder(self, index: torch.Tensor) -> None:
        """Keep rows `index` (the beams that survive a step), in place so that captured steps see them.
        Cross-attention buffers stay: a beam's parent is a beam of the same sentence, with the same source."""
        for k, v in self.state.self_kv:
            k.copy_(k.index_select(0, index))
            v.copy_(v.index_select(0, index))

    def nbytes(self, kind: str | None = None) -> int:
        """Bytes of the preallocated buffers: all, or only "self" or "cross" attention's."""
        if self.state is None:
            return 0
        groups = {"self": self.state.self_kv, "cross": self.state.cross_kv}
        return sum(t.numel() * t.element_size() for k, kv in groups.items() if kind in (None, k) for pair in kv for t in pair)


class StaticDecoder:
    """A `Seq2SeqNet` (in eval mode) decoded with preallocated buffers and a capturable step. Keep one per
    network and mode: the buffers, compiled steps and graphs of each shape are reused by later calls."""

    def __init__(
        self,
        net: Seq2SeqNet,
        mode: str = "eager",
        length_multiple: int = 32,  # buffer lengths are multiples of this (capped at the net's positions)
        backend: str = "inductor",  # torch.compile's backend in mode "compile" ("aot_eager": tests, in seconds)
    ):
        if mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
        if length_multiple < 1:
            raise ValueError(f"length_multiple must be >= 1, got {length_multiple}")
        device = next(net.parameters()).device
        if mode == "cuda-graph" and device.type != "cuda":
            raise ValueError(f"mode 'cuda-graph' needs the network on a CUDA device, not {device.type}")
        self.net, self.mode, self.length_multiple = net, mode, length_multiple
        self.pad_id, self.max_len = net.pad_id, net.max_len
        self._states: dict[tuple, _StepState] = {}
        self._buffer_len = net.max_len
        self._step = self._eager_step
        if mode == "compile":
            compile_mode = "reduce-overhead" if device.type == "cuda" else None
            self._step = torch.compile(self._eager_step, mode=compile_mode, backend=backend, fullgraph=True)

    # -------------------------------------------------------------------------------- searches

    def greedy(self, src: torch.Tensor, bos_id: int, eos_id: int, max_len: int) -> torch.Tensor:
        """`models.decoding.greedy_decode` on the static cache (same arguments, same output)."""
        self._size_for(max_len)
        return greedy_decode(self, src, bos_id, eos_id, max_len, use_cache=True)

    def beam(self, src: torch.Tensor, bos_id: int, eos_id: int, max_len: int, **kwargs) -> torch.Tensor:
        """`models.decoding.beam_search` on the static cache (same arguments, same output)."""
        self._size_for(max_len)
        return beam_search(self, src, bos_id, eos_id, max_len, use_cache=True, **kwargs)

    def _size_for(self, max_len: int) -> None:
        steps = max(1, min(max_len, self.net.max_len - 1))  # the searches' own cap
        m = self.length_multiple
        self._buffer_len = min(-(-steps // m) * m, self.net.max_len)

    # ------------------------------------------------------------------- the network interface

    def encode(self, src: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return self.net.encode(src)

    def new_cache(self) -> StaticCache:
        return StaticCache()

    def decode(self, tgt: torch.Tensor, memory: torch.Tensor, src_pad: torch.Tensor, cache: StaticCache) -> torch.Tensor:
        """(N, 1) newest tokens → (N, 1, V) logits, the step written at position `cache.length`."""
        if cache is None or tgt.size(1) != 1:
            raise ValueError("a StaticDecoder decodes one new token per step, with its cache")
        if cache.length == 0:
            cache.state = self._bind(memory, src_pad)
        elif cache.length >= cache.state.positions.numel():
            raise ValueError(f"the static cache holds {cache.state.positions.numel()} positions; step {cache.length + 1} asked")
        st = cache.state
        st.tokens.copy_(tgt)
        st.slot.fill_(cache.length)
        cache.length += 1
        if self.mode == "cuda-graph":
            if st.graph is None:
                self._capture(st)
            st.graph.replay()
            return st.logits.clone()  # the next replay rewrites it
        logits = self._step(st.tokens, st.slot, st.positions, st.memory_mask, st.self_kv, st.cross_kv)
        return logits.clone() if self.mode == "compile" else logits  # CUDA graphs' outputs are overwritten

    # ----------------------------------------------------------------------------- internals

    def _bind(self, memory: torch.Tensor, src_pad: torch.Tensor) -> _StepState:
        """The buffers for memory's rows and length (allocated on first use), with its cross keys/values."""
        N, S, _ = memory.shape
        L, device = self._buffer_len, memory.device.type
        # Under autocast the projections give keys/values in the autocast dtype: the buffers hold that dtype.
        dtype = torch.get_autocast_dtype(device) if torch.is_autocast_enabled(device) else memory.dtype
        st = self._states.get((N, S, L, dtype))
        if st is None:
            st = self._states[(N, S, L, dtype)] = self._allocate(N, S, L, memory.device, dtype)
        with torch.no_grad():
            for layer, (k, v) in zip(self.net.core.decoder_layers, st.cross_kv):
                new_k, new_v = layer.cross_attn.project_kv(memory)  # (N, Hkv, S, Dh)
                k.copy_(new_k)
                v.copy_(new_v)
            st.memory_mask.copy_(padding_mask(src_pad))
        return st

    def _allocate(self, N: int, S: int, L: int, device: torch.device, dtype: torch.dtype) -> _StepState:
        layers = self.net.core.decoder_layers
        attn = layers[0].self_attn
        shape = (N, attn.num_kv_heads, L, attn.head_dim)
        cross = (N, attn.num_kv_heads, S, attn.head_dim)
        # Zeros, not empty: the masked positions get weight 0, and 0 × a NaN left in memory would be NaN.
        zeros = lambda size: torch.zeros(size, device=device, dtype=dtype)
        st = _StepState(
            tokens=torch.zeros(N, 1, dtype=torch.long, device=device),
            slot=torch.zeros(1, dtype=torch.long, device=device),
            positions=torch.arange(L, device=device),
            memory_mask=torch.zeros(N, 1, 1, S, dtype=torch.bool, device=device),
            self_kv=[(zeros(shape), zeros(shape)) for _ in layers],
            cross_kv=[(zeros(cross), zeros(cross)) for _ in layers],
        )
        if self.mode == "compile":
            # Fixed addresses: the compiled graph may write them in place, and CUDA graphs replay on them.
            for t in (st.tokens, st.slot, st.positions, st.memory_mask, *(x for kv in st.self_kv + st.cross_kv for x in kv)):
                torch._dynamo.mark_static_address(t)
        return st

    def _positions(self, slot: torch.Tensor, dtype: torch.dtype):
        """What position `slot` adds to the embedding ((1, D) or None) and its rotary tables (or None)."""
        net = self.net
        added = None
        if net.tgt_pos is not None:
            table = net.tgt_pos.pe if hasattr(net.tgt_pos, "pe") else net.tgt_pos.embedding.weight  # (max_len, D)
            added = table.index_select(0, slot).to(dtype)  # (1, D)
        rope = None
        if net.core.rotary is not None:
            # Row `slot` of the tables of all positions: the same numbers the growing cache computes at its offset.
            cos, sin = net.core.rotary(net.max_len, 0, slot.device, dtype)  # (max_len, Dh)
            rope = cos.index_select(0, slot), sin.index_select(0, slot)  # (1, Dh)
        return added, rope

    def _eager_step(self, tokens, slot, positions, memory_mask, self_kv, cross_kv) -> torch.Tensor:
        """(N, 1) tokens at position `slot` → (N, 1, V) logits; writes each layer's key/value at `slot`."""
        net = self.net
        x = net.tgt_embed(tokens) * net.embed_scale  # (N, 1, D)
        added, rope = self._positions(slot, x.dtype)
        if added is not None:
            x = x + added
        self_mask = (positions <= slot).view(1, 1, 1, -1)  # (1, 1, 1, L): the positions written so far
        core, bias = net.core, None
        if core.decoder_bias is not None:
            # Row `slot` of the bias of all L positions: a relative bias depends on key − query only, so these are
            # the numbers the growing cache computes at its offset (the keys after `slot` are masked).
            L = positions.numel()
            bias = core.decoder_bias(L, L, 0).index_select(2, slot)  # (layers or 1, H, 1, L)
        for i, (layer, (k, v), (ck, cv)) in enumerate(zip(core.decoder_layers, self_kv, cross_kv)):
            cache = {"self": {"k": k, "v": v, "slot": slot}, "cross": {"k": ck, "v": cv}}
            x, _ = layer(x, None, self_mask, memory_mask, False, cache, False, rope, core._layer_bias(bias, i))
        return net.generator(net.core.decoder_norm(x))  # (N, 1, V)

    def _capture(self, st: _StepState) -> None:
        """Capture the eager step on `st`'s tensors in a CUDA graph (after warm-up runs on a side stream,
        as torch.cuda.graphs asks). The warm-up writes the same key/value the real step writes."""
        args = (st.tokens, st.slot, st.positions, st.memory_mask, st.self_kv, st.cross_kv)
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side), torch.no_grad():
            for _ in range(3):
                self._eager_step(*args)
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        # Autocast's cache of cast weights must stay off while capturing: the graph would keep reading casts freed
        # when the outer autocast exits (torch.cuda.graphs' advice).
        autocast = torch.autocast(
            "cuda", torch.get_autocast_dtype("cuda"), torch.is_autocast_enabled("cuda"), cache_enabled=False
        )
        with torch.cuda.graph(graph), torch.no_grad(), autocast:
            st.logits = self._eager_step(*args)
        st.graph = graph
