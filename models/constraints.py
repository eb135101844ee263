"""What an output may hold (`Constraints`), as masks over next-token log-probs that every search applies.

A banned token's log-prob becomes -inf and nothing is renormalised: a hypothesis's score stays the model's own
log-probability of its tokens, so scoring an output as a given target (models.scoring.score_targets) gives its
search score back, forced prefixes included.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from .checks import SEARCH_CHECKS, check_hparams
from .decoding import NEG_INF


@dataclass
class Constraints:
    """What an output may hold. `min_len`: tokens before `<eos>`; `no_repeat_ngram_size` n: no n-gram
    of generated tokens twice; `banned`: ids never generated (unk); `prefix`: (B, P) ids each output
    starts with, -1 after a row's own prefix. A forced token keeps its log-prob even where another
    rule would ban it."""

    min_len: int = 0
    no_repeat_ngram_size: int = 0
    banned: Sequence[int] = ()
    prefix: torch.Tensor | None = None

    def __post_init__(self):
        check_hparams(self, {"min_len": self.min_len, "no_repeat_ngram_size": self.no_repeat_ngram_size}, SEARCH_CHECKS)

    def rows(self, repeat: int) -> torch.Tensor | None:
        """The prefix of every row of a (B*repeat, ...) batch."""
        return None if self.prefix is None else self.prefix.repeat_interleave(repeat, dim=0)

    def apply(self, logp: torch.Tensor, seqs: torch.Tensor, eos_id: int, prefix: torch.Tensor | None) -> torch.Tensor:
        """Mask (N, V) next-token log-probs of (N, t) prefixes (`<bos>` first) to -inf where banned."""
        generated = seqs.size(1) - 1
        forced = None
        if prefix is not None and generated < prefix.size(1):
            forced = prefix[:, generated]  # (N,) the forced token, or -1
            forced_logp = logp.gather(1, forced.clamp(min=0)[:, None])  # (N, 1)
        if self.banned:
            logp[:, list(self.banned)] = NEG_INF
        if generated < self.min_len:
            logp[:, eos_id] = NEG_INF
        if self.no_repeat_ngram_size:
            ban_repeated_ngrams(logp, seqs[:, 1:], self.no_repeat_ngram_size)
        if forced is not None:
            rows = forced.ge(0)  # (N,)
            logp[rows] = NEG_INF
            logp[rows, forced[rows]] = forced_logp[rows, 0]
        return logp


def ban_repeated_ngrams(logp: torch.Tensor, generated: torch.Tensor, n: int) -> None:
    """In place: ban every token that would complete an n-gram already in `generated` (N, t), i.e.
    the token after each earlier occurrence of the last n - 1 tokens."""
    t = generated.size(1)
    if t < max(n - 1, 1) or (n > 1 and t < n):
        return
    grams = generated.unfold(1, n, 1)  # (N, t - n + 1, n)
    if n == 1:
        match = torch.ones(grams.shape[:2], dtype=torch.bool, device=logp.device)
    else:
        match = grams[:, :, :-1].eq(generated[:, t - n + 1 :][:, None]).all(-1)  # (N, G)
    rows, cols = match.nonzero(as_tuple=True)
    logp[rows, grams[rows, cols, -1]] = NEG_INF
