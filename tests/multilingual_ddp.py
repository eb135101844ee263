"""What tests/test_multilingual_data.py runs under DDP: `python tests/multilingual_ddp.py DATA_DIR OUT_FILE` trains
one step of a tiny model on 2 CPU processes (gloo) from the multilingual data module over DATA_DIR (prepared by the
caller); rank 0 saves the gradients the optimizer would apply and the batch each rank trained on."""

from __future__ import annotations

import sys
from pathlib import Path

import torch
import torch.distributed as dist

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from datamodules.multilingual import MultilingualCorpusDataModule  # noqa: E402
from models import Seq2SeqSettings  # noqa: E402
from tests.token_loss_ddp import GradCapture, trainer  # noqa: E402

PAIRS = ["de-en", "fr-en", "en-cs"]


class BatchAndGradCapture(GradCapture):
    """GradCapture that also keeps the (source, target) ids of every training batch it is given."""

    def on_fit_start(self) -> None:
        self.seen = []

    def on_train_batch_start(self, batch, batch_idx) -> None:
        self.seen.append((batch.src.tolist(), batch.tgt.tolist()))


def data_module(data_dir: str) -> MultilingualCorpusDataModule:
    return MultilingualCorpusDataModule(
        data_dir=data_dir, pairs=PAIRS, vocab_size=300, max_tokens=64, max_len=24, temperature=2.0, download=False
    )


def model(dm: MultilingualCorpusDataModule) -> BatchAndGradCapture:
    torch.manual_seed(0)
    net = Seq2SeqSettings(
        d_model=16, nhead=2, num_encoder_layers=1, num_decoder_layers=1, dim_feedforward=32, dropout=0.0, max_len=32
    )
    return BatchAndGradCapture(dm.tokenizers, net=net, label_smoothing=0.1)


if __name__ == "__main__":
    torch.set_num_threads(1)
    dm = data_module(sys.argv[1])
    net = model(dm)
    trainer(devices=2, strategy="ddp").fit(net, datamodule=dm)
    seen = [None, None]
    dist.all_gather_object(seen, net.seen)
    if net.trainer.global_rank == 0:
        torch.save({"grads": net.captured, "batches": seen}, sys.argv[2])
