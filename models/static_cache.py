"""The decoding fast path: the network's own `decode` on a preallocated key/value cache (`models.cache.StaticCache`),
one step whose shapes and addresses never change, so that `torch.compile` or a CUDA graph can capture it.
`StaticDecoder(net, mode)` presents what the searches of `models.decoding` read from a network, so greedy and beam
search run on it unchanged. docs/guide/speed.md ("Fast paths", "The static cache") says how the buffers are written
and masked, what each mode captures, and why outputs are token for token the growing cache's."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch

from common.environment import quiet_cpu_compile

from .beam import beam_search
from .cache import StaticCache
from .checks import STATIC_CACHE_MODES
from .decoding import greedy_decode

if TYPE_CHECKING:
    from .seq2seq import Seq2SeqNet


@dataclass
class _StepState:
    """What one captured step reads and writes, for one (rows, source length, buffer length, dtype)."""

    cache: StaticCache
    tokens: torch.Tensor  # (N, 1) the newest token of each row
    src_pad: torch.Tensor  # (N, S) bool, True = padding
    graph: object = None  # "cuda-graph": the captured step
    logits: torch.Tensor | None = None  # "cuda-graph": its output, rewritten by every replay


class SearchCache:
    """What a search holds: the static cache of its shape, chosen at its first step (`StaticDecoder.decode`), when
    the rows and the source length are known. The decoder keeps one cache per shape, reused by later searches."""

    def __init__(self):
        self.state: _StepState | None = None

    can_drop_rows = False  # its rows are a captured step's shape

    def reorder(self, index: torch.Tensor) -> None:
        self.state.cache.reorder(index)

    def nbytes(self, kind: str | None = None) -> int:
        return 0 if self.state is None else self.state.cache.nbytes(kind)


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
        if mode not in STATIC_CACHE_MODES:
            raise ValueError(f"mode must be one of {STATIC_CACHE_MODES}, got {mode!r}")
        if length_multiple < 1:
            raise ValueError(f"length_multiple must be >= 1, got {length_multiple}")
        device = next(net.parameters()).device
        if mode == "cuda-graph" and device.type != "cuda":
            raise ValueError(f"mode 'cuda-graph' needs the network on a CUDA device, not {device.type}")
        self.net, self.mode, self.length_multiple = net, mode, length_multiple
        self.pad_id, self.max_len = net.pad_id, net.max_len
        self._states: dict[tuple, _StepState] = {}
        self._buffer_len = net.max_len
        self._step = net.decode
        if mode == "compile":
            compile_mode = "reduce-overhead" if device.type == "cuda" else None
            quiet_cpu_compile()
            self._step = torch.compile(net.decode, mode=compile_mode, backend=backend, fullgraph=True)

    # -------------------------------------------------------------------------------- searches

    def greedy(self, src: torch.Tensor, bos_id: int, eos_id: int, max_len: int | Sequence[int]) -> torch.Tensor:
        """`models.decoding.greedy_decode` on the static cache (same arguments, same output)."""
        self._size_for(max_len)
        return greedy_decode(self, src, bos_id, eos_id, max_len, use_cache=True)

    def beam(self, src: torch.Tensor, bos_id: int, eos_id: int, max_len: int | Sequence[int], **kwargs) -> torch.Tensor:
        """`models.beam.beam_search` on the static cache (same arguments, same output)."""
        self._size_for(max_len)
        return beam_search(self, src, bos_id, eos_id, max_len, use_cache=True, **kwargs)

    def _size_for(self, max_len: int | Sequence[int]) -> None:
        longest = max_len if isinstance(max_len, int) else max(max_len, default=1)
        steps = max(1, min(longest, self.net.max_len - 1))  # the searches' own cap
        m = self.length_multiple
        self._buffer_len = min(-(-steps // m) * m, self.net.max_len)

    # ------------------------------------------------------------------- the network interface

    def encode(self, src: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return self.net.encode(src)

    def new_cache(self) -> SearchCache:
        return SearchCache()

    def decode(self, tgt: torch.Tensor, memory: torch.Tensor, src_pad: torch.Tensor, cache: SearchCache) -> torch.Tensor:
        """(N, 1) newest tokens → (N, 1, V) logits: `net.decode` on the static cache, at its next position."""
        if cache is None or tgt.size(1) != 1:
            raise ValueError("a StaticDecoder decodes one new token per step, with its cache")
        if cache.state is None:
            cache.state = self._start(memory, src_pad)
        state = cache.state
        state.cache.start_step()  # outside the captured step: the position it writes
        state.tokens.copy_(tgt)
        if self.mode == "cuda-graph":
            if state.graph is None:
                self._capture(state)
            state.graph.replay()
            return state.logits.clone()  # the next replay rewrites it
        # No memory: the cache holds its keys/values (`_start`), so a step reads only fixed buffers.
        logits = self._step(state.tokens, None, state.src_pad, state.cache)  # (N, 1, V)
        return logits.clone() if self.mode == "compile" else logits  # CUDA graphs' outputs are overwritten

    # ----------------------------------------------------------------------------- internals

    def _start(self, memory: torch.Tensor, src_pad: torch.Tensor) -> _StepState:
        """The buffers for memory's rows and length (allocated on first use), emptied, holding its cross keys/values."""
        N, S, _ = memory.shape
        L, device = self._buffer_len, memory.device.type
        # Under autocast the projections give keys/values in the autocast dtype: the buffers hold that dtype.
        dtype = torch.get_autocast_dtype(device) if torch.is_autocast_enabled(device) else memory.dtype
        state = self._states.get((N, S, L, dtype))
        if state is None:
            state = self._states[(N, S, L, dtype)] = self._allocate(N, S, L, memory.device, dtype)
        state.cache.reset()
        with torch.no_grad():
            self.net.core.cache_memory(memory, state.cache)
            state.src_pad.copy_(src_pad)
        return state

    def _allocate(self, N: int, S: int, L: int, device: torch.device, dtype: torch.dtype) -> _StepState:
        layers = self.net.core.decoder_layers
        attn = layers[0].self_attn
        cache = StaticCache(len(layers), N, attn.num_kv_heads, L, attn.head_dim, S, device, dtype)
        state = _StepState(
            cache=cache,
            tokens=torch.zeros(N, 1, dtype=torch.long, device=device),
            src_pad=torch.zeros(N, S, dtype=torch.bool, device=device),
        )
        if self.mode == "compile":
            # Fixed addresses: the compiled graph may write them in place, and CUDA graphs replay on them.
            for t in (state.tokens, state.src_pad, *cache.tensors()):
                torch._dynamo.mark_static_address(t)
        return state

    def _capture(self, state: _StepState) -> None:
        """Capture `net.decode` on `state`'s tensors in a CUDA graph (after warm-up runs on a side stream,
        as torch.cuda.graphs asks). The warm-up writes the same key/value the real step writes."""
        args = (state.tokens, None, state.src_pad, state.cache)
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side), torch.no_grad():
            for _ in range(3):
                self.net.decode(*args)
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        # Autocast's cache of cast weights must stay off while capturing: the graph would keep reading casts freed
        # when the outer autocast exits (torch.cuda.graphs' advice).
        autocast = torch.autocast(
            "cuda", torch.get_autocast_dtype("cuda"), torch.is_autocast_enabled("cuda"), cache_enabled=False
        )
        with torch.cuda.graph(graph), torch.no_grad(), autocast:
            state.logits = self.net.decode(*args)
        state.graph = graph
