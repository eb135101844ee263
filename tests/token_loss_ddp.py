"""What tests/test_token_loss.py runs under DDP: `python tests/token_loss_ddp.py OUT_FILE` trains one step on 2
CPU processes (gloo), each on its own batch, and rank 0 saves the gradients the optimizer would apply.
Also the shared pieces of those tests: the model, the uneven batches, the gradient-capturing module."""

from __future__ import annotations

import sys
from pathlib import Path

import lightning as L
import torch
from torch.utils.data import DataLoader

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from datamodules.batching import Seq2SeqBatch, pad_sequences  # noqa: E402
from datamodules.toy import ToyTranslationDataModule  # noqa: E402
from datamodules.vocab import BOS, EOS  # noqa: E402
from models import Seq2SeqSettings  # noqa: E402
from tasks import Seq2SeqTransformer  # noqa: E402


class GradCapture(Seq2SeqTransformer):
    """Keeps a copy of the gradients as the optimizer will see them (after the token normalisation)."""

    def on_before_optimizer_step(self, optimizer) -> None:
        super().on_before_optimizer_step(optimizer)
        self.captured = {n: p.grad.detach().clone() for n, p in self.named_parameters() if p.grad is not None}


def model() -> GradCapture:
    torch.manual_seed(0)
    tokenizers = ToyTranslationDataModule().tokenizers
    net = Seq2SeqSettings(
        d_model=16, nhead=2, num_encoder_layers=1, num_decoder_layers=1, dim_feedforward=32, dropout=0.0, max_len=32
    )
    return GradCapture(tokenizers, net=net, label_smoothing=0.1)


def uneven_batches(seed: int = 0, sizes: tuple[int, ...] = (1, 5, 3)) -> list[list[tuple[list[int], list[int]]]]:
    """Micro-batches of very different sizes and lengths, as (source ids, target ids) rows."""
    g = torch.Generator().manual_seed(seed)
    vocab = 8  # ids 4..7: the toy vocabularies' content tokens
    batches = []
    for b, size in enumerate(sizes):
        rows = []
        for _ in range(size):
            s, t = (int(torch.randint(1, 6 + 4 * b, (1,), generator=g)) for _ in range(2))
            src = torch.randint(4, vocab, (s,), generator=g).tolist() + [EOS]
            tgt = [BOS] + torch.randint(4, vocab, (t,), generator=g).tolist() + [EOS]
            rows.append((src, tgt))
        batches.append(rows)
    return batches


def collate(rows: list[tuple[list[int], list[int]]]) -> Seq2SeqBatch:
    return Seq2SeqBatch(pad_sequences([s for s, _ in rows]), pad_sequences([t for _, t in rows]))


def loader(pieces) -> DataLoader:
    """One padded batch per piece, in order (a plain list would be taken for several loaders)."""
    return DataLoader([collate(p) for p in pieces], batch_size=None)


class PerRankBatches(L.LightningDataModule):
    """Rank r trains on batches[r]: an uneven split of work, as token-budget batches are."""

    def __init__(self, batches):
        super().__init__()
        self.batches = batches

    def train_dataloader(self):
        return loader([self.batches[self.trainer.global_rank]])


def trainer(**kwargs) -> L.Trainer:
    settings = dict(
        accelerator="cpu", max_steps=1, logger=False, enable_checkpointing=False, enable_progress_bar=False,
        enable_model_summary=False, limit_val_batches=0, use_distributed_sampler=False,
    )  # fmt: skip
    return L.Trainer(**(settings | kwargs))


if __name__ == "__main__":
    torch.set_num_threads(1)
    net = model()
    trainer(devices=2, strategy="ddp").fit(net, datamodule=PerRankBatches(uneven_batches(sizes=(1, 6))))
    if net.trainer.global_rank == 0:
        torch.save(net.captured, sys.argv[1])
