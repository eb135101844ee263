"""`Seq2SeqTransformer`: training, evaluation and translation around `models.Seq2SeqNet`."""

from __future__ import annotations

import warnings

import lightning as L
import torch
import torch.nn.functional as F
from torchmetrics.classification import MulticlassAccuracy

from datamodules.batching import Seq2SeqBatch, encode_source, pad_sequences
from datamodules.vocab import BOS, EOS, PAD, tokenizer_from_dict
from models import Seq2SeqNet

from .schedules import Schedule, warmup_lr_lambda


class Seq2SeqTransformer(L.LightningModule):
    """Encoder–decoder translation. `tokenizers` ({"src": ..., "tgt": ...}, each a tokenizer's
    `to_dict()`) comes from the data module and is stored in the checkpoint, so
    `Seq2SeqTransformer.load_from_checkpoint(path).translate([...])` needs no data."""

    def __init__(
        self,
        tokenizers: dict | None = None,
        d_model: int = 256,
        nhead: int = 4,
        num_encoder_layers: int = 3,
        num_decoder_layers: int = 3,
        dim_feedforward: int = 1024,
        dropout: float = 0.1,
        activation: str = "relu",
        norm_first: bool = False,
        positional: str = "sinusoidal",
        max_len: int = 256,
        tie_embeddings: bool = False,
        label_smoothing: float = 0.1,
        lr: float = 5e-4,
        weight_decay: float = 0.01,
        betas: tuple[float, float] = (0.9, 0.98),
        warmup_steps: int = 4000,
        lr_schedule: Schedule = "inverse_sqrt",
    ):
        super().__init__()
        if not tokenizers or set(tokenizers) != {"src", "tgt"}:
            raise ValueError(
                "Seq2SeqTransformer needs tokenizers={'src': ..., 'tgt': ...} (a data module's `tokenizers`); "
                "scripts/fit.py passes them from --data automatically"
            )
        self.save_hyperparameters()
        self.src_tokenizer = tokenizer_from_dict(tokenizers["src"])
        self.tgt_tokenizer = tokenizer_from_dict(tokenizers["tgt"])
        self.net = Seq2SeqNet(
            len(self.src_tokenizer), len(self.tgt_tokenizer), d_model, nhead, num_encoder_layers,
            num_decoder_layers, dim_feedforward, dropout, activation, norm_first, max_len, positional,
            tie_embeddings, pad_id=PAD,
        )
        n_classes = len(self.tgt_tokenizer)
        self.train_acc = MulticlassAccuracy(n_classes, average="micro", ignore_index=PAD)
        self.val_acc = MulticlassAccuracy(n_classes, average="micro", ignore_index=PAD)
        self.test_acc = MulticlassAccuracy(n_classes, average="micro", ignore_index=PAD)

    def forward(self, src: torch.Tensor, tgt_in: torch.Tensor) -> torch.Tensor:
        return self.net(src, tgt_in)  # (B, T, V)

    def _step(self, batch: Seq2SeqBatch, stage: str, accuracy: MulticlassAccuracy) -> torch.Tensor:
        src, tgt = batch
        tgt_in, tgt_out = tgt[:, :-1], tgt[:, 1:]  # teacher forcing: predict token t+1 from ≤ t
        logits = self(src, tgt_in)  # (B, T, V)
        loss = F.cross_entropy(
            logits.flatten(0, 1), tgt_out.flatten(), ignore_index=PAD, label_smoothing=self.hparams.label_smoothing
        )
        accuracy(logits.flatten(0, 1), tgt_out.flatten())
        on_step = stage == "train"
        self.log(f"{stage}/loss", loss, prog_bar=True, on_step=on_step, on_epoch=not on_step, batch_size=src.size(0))
        self.log(f"{stage}/acc", accuracy, prog_bar=stage != "train", on_step=False, on_epoch=True)
        return loss

    def training_step(self, batch: Seq2SeqBatch, batch_idx: int) -> torch.Tensor:
        return self._step(batch, "train", self.train_acc)

    def validation_step(self, batch: Seq2SeqBatch, batch_idx: int) -> None:
        self._step(batch, "val", self.val_acc)

    def test_step(self, batch: Seq2SeqBatch, batch_idx: int) -> None:
        self._step(batch, "test", self.test_acc)

    def configure_optimizers(self):
        hp = self.hparams
        # No weight decay on biases, LayerNorm gains and embeddings' padding rows alike: 1-D params.
        decay = [p for p in self.parameters() if p.requires_grad and p.dim() >= 2]
        no_decay = [p for p in self.parameters() if p.requires_grad and p.dim() < 2]
        optimizer = torch.optim.AdamW(
            [{"params": decay, "weight_decay": hp.weight_decay}, {"params": no_decay, "weight_decay": 0.0}],
            lr=hp.lr, betas=tuple(hp.betas),
        )
        total = self.trainer.estimated_stepping_batches if hp.lr_schedule == "cosine" else None
        scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, warmup_lr_lambda(hp.lr_schedule, hp.warmup_steps, total))
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": scheduler, "interval": "step"}}

    # ----------------------------------------------------------------------------------------
    # Inference

    def encode_sources(self, sentences: list[str]) -> torch.Tensor:
        """Strings → (B, S) padded source ids on this module's device. Over-long sentences are
        truncated to the model's `max_len` with a warning; empty ones are refused."""
        ids = []
        for i, sentence in enumerate(sentences):
            if not isinstance(sentence, str) or not sentence.strip():
                raise ValueError(f"sentence {i} is empty: there is nothing to translate")
            encoded = self.src_tokenizer.encode(sentence)
            if len(encoded) + 1 > self.net.max_len:
                warnings.warn(
                    f"sentence {i} has {len(encoded)} tokens; truncated to the model's max_len={self.net.max_len}",
                    stacklevel=3,
                )
            ids.append(encode_source(self.src_tokenizer, sentence, self.net.max_len))
        return pad_sequences(ids, PAD).to(self.device)

    @torch.no_grad()
    def translate(
        self, sentences: list[str], beam_size: int = 1, max_len: int | None = None, use_cache: bool = True, **beam_kwargs
    ) -> list[str]:
        """Translate a batch of sentences. `max_len` caps the output tokens (default: twice the
        longest source plus 10, within the model's positions)."""
        if isinstance(sentences, str):
            sentences = [sentences]
        if not sentences:
            return []
        was_training = self.training
        self.eval()
        try:
            src = self.encode_sources(sentences)
            limit = max_len if max_len is not None else 2 * src.size(1) + 10
            if beam_size == 1:
                out = self.net.greedy_decode(src, BOS, EOS, limit, use_cache=use_cache)
            else:
                out = self.net.beam_search(src, BOS, EOS, limit, beam_size=beam_size, **beam_kwargs)
        finally:
            self.train(was_training)
        return [self.tgt_tokenizer.decode(row.tolist()) for row in out]
