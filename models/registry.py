"""Name → builder tables of the research options, as timm's registries but plain dicts: the activations, norms,
position schemes and relative position biases. A setting's allowed values are its table's names (models.config),
read each time a config checks itself: an entry added to a table, in its file or at run time, is a value the
settings take at once, with no other list to edit. docs/guide/variants.md ("Adding a variant") says what a
`Scheme` builds for one stack's `Tokens`, which networks it `fits` and what it `needs` of the other settings.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

TEXT, IMAGE = "text", "image"  # what a network reads: its settings class's INPUT (models.config)
INPUTS = (TEXT, IMAGE)


@dataclass(frozen=True)
class Tokens:
    """What a scheme is built for: one stack's tokens, and the network's settings (`config`). A sentence holds up to
    `length` tokens; an image's tokens lie on a `grid` (h, w) in reading order, after `extra` tokens that lie on no
    row or column (a class token), `length` in all. `causal`: the decoder's (its queries see no later key)."""

    config: Any  # a models.config.TransformerConfig (not imported: the config reads these tables)
    length: int
    causal: bool = False
    grid: tuple[int, int] | None = None
    extra: int = 0

    @property
    def d_model(self) -> int:
        return self.config.d_model

    @property
    def nhead(self) -> int:
        return self.config.nhead

    @property
    def head_dim(self) -> int:
        return self.config.d_model // self.config.nhead

    @property
    def num_layers(self) -> int:
        """The stack's layers: the decoder's when causal, else the encoder's."""
        return self.config.num_decoder_layers if self.causal else self.config.num_encoder_layers


@dataclass(frozen=True)
class Scheme:
    """`build(tokens)`: what the scheme gives a network for one stack (models.positional.Positions for a position
    scheme; a bias module or None for a relative bias). `fits`: the networks it is for. `needs(settings)`: a line
    saying what the other settings (a mapping of every field) must be for it, or None/True when they do."""

    build: Callable[[Tokens], Any]
    fits: tuple[str, ...] = INPUTS
    needs: Callable[[Mapping[str, Any]], str | bool | None] | None = None


class Allowed(Collection[str]):
    """The names of `table` that fit `network` ("text", "image"; None: every name), read at each use, so that
    an entry registered after this view was made is allowed too. What `models.checks.one_of` takes: iterating it
    gives the allowed values, in the table's order."""

    def __init__(self, table: Mapping[str, Any], network: str | None = None):
        self.table, self.network = table, network

    def __iter__(self) -> Iterator[str]:
        return (name for name, entry in self.table.items() if self._fits(entry))

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and name in self.table and self._fits(self.table[name])

    def __len__(self) -> int:
        return sum(1 for _ in self)

    def __repr__(self) -> str:
        return repr(tuple(self))

    def _fits(self, entry: Any) -> bool:
        return self.network is None or self.network in getattr(entry, "fits", INPUTS)


def lookup(table: Mapping[str, Any], name: str, setting: str) -> Any:
    """`table[name]`, or a ValueError naming the setting and its allowed values (the configs refuse such a name
    first: this is for a network built without one)."""
    if name not in table:
        raise ValueError(f"{setting} must be one of {tuple(table)}, got {name!r}")
    return table[name]
