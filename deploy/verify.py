"""What both exporters (deploy/ctranslate2.py, deploy/huggingface.py) share, so that an export is refused rather
than written wrong: allow-lists over the network's settings (`Rule`, `check_settings`), weights each read once
(`Weights`) and probes through both models (docs/guide/export-deploy.md, "Exports that check themselves").
"""

from __future__ import annotations

import copy
import dataclasses
from collections import Counter
from collections.abc import Callable, Iterator, Mapping
from typing import Any, NamedTuple

import torch

from common.errors import InputError
from datamodules.batching import pad_sequences
from models.decoding import greedy_decode, no_specials, special_ids

# Log-probs of ours and of an exported float32 model may differ by this much, absolutely, and pass: rounding stays
# far below it, a wrong weight or setting far above (docs/guide/export-deploy.md, "Exports that check themselves").
TOLERANCE = 1e-3


class ExportError(InputError):
    """A model an engine cannot run as ours does, an output directory that must not be replaced, or a missing
    package: the scripts print it as one line (common.exits.exit_on_user_error)."""


class Rule(NamedTuple):
    """One allow-list entry: `allows(value, config)`, and why anything else is refused."""

    allows: Callable[[Any, Any], bool]
    why: str


ANY = Rule(lambda value, config: True, "")  # every value this version's settings accept


# What every exporter takes as it is: the network's sizes, what training alone reads (dropouts), the embeddings'
# ties and scale, the output bias, a final norm or none, and what the data decides (vocabulary sizes, padding id).
COMMON = dict.fromkeys(
    (
        *("d_model", "nhead", "num_encoder_layers", "num_decoder_layers", "dim_feedforward", "max_len"),
        *("dropout", "src_token_dropout", "tie_embeddings", "share_embeddings", "scale_embeddings", "generator_bias"),
        *("final_norm", "src_vocab_size", "tgt_vocab_size", "pad_id"),
    ),
    ANY,
)


def only(*values, why: str) -> Rule:
    """The setting must be one of `values`."""
    return Rule(lambda value, config: value in values, why)


def check_settings(config, allowed: Mapping[str, Rule], engine: str, error: type[ExportError] = ExportError) -> None:
    """Raise `error` naming the first field of `config` (a network's dataclass settings) that `allowed` has no
    rule for, or whose value its rule refuses."""
    for field in dataclasses.fields(config):
        name, value = field.name, getattr(config, field.name)
        if name not in allowed:
            raise error(f"cannot export to {engine}: the setting {name}={value} has no rule in its exporter")
        if not allowed[name].allows(value, config):
            raise error(f"cannot export to {engine}: {name}={value} ({allowed[name].why})")


class Weights(Mapping):
    """A state dict whose reads are counted, so that `check_used_once` can say which weight an exporter's
    mapping left over, read twice or looked for in vain (an `error`). `in` does not count as a read."""

    def __init__(self, state: Mapping[str, torch.Tensor], engine: str, error: type[ExportError] = ExportError):
        self._state, self.engine, self.error, self.reads = dict(state), engine, error, Counter()

    def __getitem__(self, name: str) -> torch.Tensor:
        if name not in self._state:
            raise self.error(f"cannot export to {self.engine}: the checkpoint has no weight {name}")
        self.reads[name] += 1
        return self._state[name]

    def get(self, name: str, default=None):
        return self[name] if name in self._state else default

    def __contains__(self, name: object) -> bool:
        return name in self._state

    def __iter__(self) -> Iterator[str]:
        return iter(self._state)

    def __len__(self) -> int:
        return len(self._state)

    def check_used_once(self) -> None:
        for problem, names in (
            ("no rule of its exporter uses the weight", [k for k in self._state if not self.reads[k]]),
            ("its exporter reads the weight twice:", [k for k, n in self.reads.items() if n > 1]),
        ):
            if names:
                more = f" (and {len(names) - 1} more)" if len(names) > 1 else ""
                raise self.error(f"cannot export to {self.engine}: {problem} {names[0]}{more}")


# ---------------------------------------------------------------------------------------------- probes


@dataclasses.dataclass(frozen=True)
class Probes:
    """A few random sentences as ids (sources ending in `<eos>`, targets bare) and ours on them: each target's
    teacher-forced log-probs (its tokens, then `<eos>`), the full log-softmax at every target position, and our
    greedy output of each source (`<eos>` last where it ended) within `limit` tokens."""

    sources: list[list[int]]
    targets: list[list[int]]
    limit: int
    scores: list[torch.Tensor]  # (T + 1,) each
    log_probs: torch.Tensor  # (B, T + 1, V), right-padded targets
    greedy: list[list[int]]


def _random_ids(lengths, vocab: int, banned: set[int], generator) -> list[list[int]]:
    allowed = torch.tensor([i for i in range(vocab) if i not in banned])
    return [allowed[torch.randint(len(allowed), (n,), generator=generator)].tolist() for n in lengths]


def _float32_eval(net):
    """`net` in eval mode, float32 and on the CPU (a copy when it is not all three), as the exports are."""
    if not net.training and all(p.dtype == torch.float32 and p.device.type == "cpu" for p in net.parameters()):
        return net
    return copy.deepcopy(net).to("cpu", torch.float32).eval()


@torch.no_grad()
def probes(model) -> Probes:
    """Three random sentences of the model's vocabularies (no special token but `<unk>`) and ours on them."""
    src_tok, tgt_tok, net = model.src_tokenizer, model.tgt_tokenizer, _float32_eval(model.net)
    g = torch.Generator().manual_seed(0)
    longest = net.max_len - 2  # a source with its <eos>, a target with <bos> (input) or <eos> (output), in max_len

    def sentences(tok, lengths):
        return _random_ids([min(n, longest) for n in lengths], len(tok), {tok.pad_id, tok.bos_id, tok.eos_id}, g)

    sources = [[*ids, src_tok.eos_id] for ids in sentences(src_tok, (5, 2, 9))]
    targets = sentences(tgt_tok, (4, 7, 1))
    src = pad_sequences(sources, net.pad_id)  # (B, S)
    tgt = pad_sequences([[tgt_tok.bos_id, *t, tgt_tok.eos_id] for t in targets], net.pad_id)  # (B, T + 2)
    log_probs = net(src, tgt[:, :-1]).log_softmax(-1)  # (B, T + 1, V)
    gathered = log_probs.gather(-1, tgt[:, 1:, None])[..., 0]  # (B, T + 1)
    scores = [row[: len(t) + 1] for row, t in zip(gathered, targets)]
    limit = min(10, net.max_len - 1)
    rows = greedy_decode(net, src, tgt_tok.bos_id, tgt_tok.eos_id, limit)[:, 1:].tolist()
    greedy = [row[: row.index(tgt_tok.eos_id) + 1] if tgt_tok.eos_id in row else row for row in rows]
    return Probes(sources, targets, limit, scores, log_probs, greedy)


def check_scores(engine: str, ours: list[torch.Tensor], theirs: list, what: str = "teacher-forced log-probs") -> None:
    """Refuse in one line when any of `theirs` (per-token log-probs of each probe) is off ours by > `TOLERANCE`."""
    theirs = [torch.as_tensor(b, dtype=torch.float32) for b in theirs]
    same_shapes = all(a.shape == b.shape for a, b in zip(ours, theirs))
    worst = max(float((b - a).abs().max()) for a, b in zip(ours, theirs)) if same_shapes else float("inf")
    if not worst <= TOLERANCE:  # NaN included
        raise ExportError(
            f"cannot export to {engine}: the exported model's {what} differ from ours by {worst:.3g} "
            f"(more than {TOLERANCE:g}) on a probe: a setting or weight it does not compute as we do; nothing was written"
        )


@torch.no_grad()
def check_greedy(engine: str, model, probe: Probes, theirs: list[list[int]]) -> None:
    """Refuse in one line when an exported model's greedy output of a probe is not ours. Where the two first
    part, ours must prefer its token by more than `TOLERANCE` (else the two are a tie that rounding decides)."""
    net, tgt_tok = _float32_eval(model.net), model.tgt_tokenizer
    banned = special_ids(net.pad_id, tgt_tok.bos_id, torch.device("cpu"))
    # The engines run to the limit; ours forces `<eos>` as the limit's token (models/decoding.py): theirs ended so.
    head = [other[: probe.limit - 1] for other in theirs]
    theirs = [h[: h.index(tgt_tok.eos_id) + 1] if tgt_tok.eos_id in h else [*h, tgt_tok.eos_id] for h in head]
    for source, mine, other in zip(probe.sources, probe.greedy, theirs):
        if mine == other:
            continue
        step = next((i for i, (a, b) in enumerate(zip(mine, other)) if a != b), min(len(mine), len(other)))
        tie = step < min(len(mine), len(other))
        if tie:
            prefix = torch.tensor([[tgt_tok.bos_id, *mine[:step]]])
            logits = net(torch.tensor([source]), prefix)[0, -1]  # (V,)
            log_probs = no_specials(logits[None], banned)[0].log_softmax(-1)
            tie = float(log_probs[mine[step]] - log_probs[other[step]]) <= TOLERANCE
        if not tie:
            raise ExportError(
                f"cannot export to {engine}: the exported model's greedy output of a probe parts from ours at token "
                f"{step + 1} ({other[step : step + 3]} where ours has {mine[step : step + 3]}); nothing was written"
            )
