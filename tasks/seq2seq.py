"""`Seq2SeqTransformer`: training and evaluation around `models.Seq2SeqNet`; inference is `inference.Translator`'s."""

from __future__ import annotations

import functools
import math
from typing import get_args

import lightning as L
import torch
import torch.nn.functional as F
from lightning.pytorch.utilities import rank_zero_info
from torchmetrics.classification import MulticlassAccuracy

from common.errors import CheckpointError, HyperparameterError
from datamodules.batching import Seq2SeqBatch
from datamodules.tokenizers import same_vocabulary, tokenizer_from_dict
from inference.networks import TRANSLATION, build_network, read_network, read_pretrained
from inference.options import CHECKPOINT_DEFAULTS, DecodingOptions
from inference.translator import Translator
from models.checks import OPTIMISER, at_least, check_hparams, fraction, one_of
from models.config import Seq2SeqSettings
from models.diagnostics import position_similarity

from .fast_paths import compile_net, mark_bucketed
from .figures import attached_trainer, attention_figure, save_and_log_figure
from .loading import LoadsAnyCheckpoint
from .metrics import TokenMean, scores_by_set
from .schedules import Schedule, adamw_with_warmup
from .scored_sets import scored_sets, translate_shared

# val/encoder_similarity above this: a collapsed encoder (1.000 and 0.986 where the many-to-many collapsed; 0.09 to 0.20 in
# trained Multi30k models, 0.62 a thousand steps into a healthy run; docs/results/multilingual.md)
COLLAPSED_ENCODER = 0.95

SUMMARY_SAMPLES = 10  # validation sentences the best checkpoint translates in the run's summary


class Seq2SeqTransformer(LoadsAnyCheckpoint, L.LightningModule):
    """Encoder–decoder translation. `tokenizers` ({"src": ..., "tgt": ...}, each a tokenizer's `to_dict()`) comes
    from the data module and is stored in the checkpoint: `load_from_checkpoint(path).translate([...])` needs no data."""

    TASK = TRANSLATION

    def __init__(
        self,
        tokenizers: dict | None = None,
        net: Seq2SeqSettings = Seq2SeqSettings(),  # noqa: B008 (frozen: one shared default is safe)
        ban_pad: bool = False,  # no effect: no search generates <pad> or <bos> (kept: older checkpoints name it)
        init_weights: str | None = None,  # a checkpoint of ours whose weights a fit starts from (fine-tuning)
        label_smoothing: float = 0.1,
        lr: float = 5e-4,
        weight_decay: float = 0.01,
        betas: tuple[float, float] = (0.9, 0.98),
        warmup_steps: int = 4000,
        lr_schedule: Schedule = "inverse_sqrt",
        bleu_every_n_epochs: int = 1,
        bleu_val_sentences: int | None = None,  # validation BLEU on the first N sentences (of each direction, multilingual)
        attention_maps: int = 3,
        attention_raw_pieces: bool = False,
        eval_beam_size: int = 4,  # validation's and test's beam (inference's own default is greedy)
        length_penalty: float = DecodingOptions.length_penalty,  # the decoding defaults the checkpoint carries
        max_len_a: float = DecodingOptions.max_len_a,
        max_len_b: int = DecodingOptions.max_len_b,
        eval_batch_size: int = 64,
        compile: bool = False,
        compile_backend: str = "inductor",
        pad_to_multiple: int = 1,  # length bucketing: batch lengths padded up to a multiple (tasks.fast_paths)
        fused_adamw: bool = False,  # one fused kernel for AdamW's update (tasks.fast_paths)
    ):
        """`net`: the network's settings (models/config.py; a recipe's `model.init_args.net`), checked by themselves;
        the vocabulary sizes and padding id come from `tokenizers`. The other arguments are training's and
        evaluation's."""
        super().__init__()
        settings = net if isinstance(net, Seq2SeqSettings) else Seq2SeqSettings(**net)  # a checkpoint's: a dict
        net = settings.as_dict()  # what save_hyperparameters stores: plain data, loadable with weights_only=True
        check_hparams(
            self,
            locals(),
            {
                **OPTIMISER,
                "betas": fraction,
                "warmup_steps": at_least(0),
                "lr_schedule": one_of(get_args(Schedule)),
                "bleu_val_sentences": at_least(1),
                "attention_maps": at_least(0),
                # the decoding defaults a checkpoint carries, checked as the options they become (inference.options)
                "eval_beam_size": DecodingOptions.CHECKS["beam_size"],
                **{name: DecodingOptions.CHECKS[name] for name in CHECKPOINT_DEFAULTS},
                "eval_batch_size": at_least(1),
                "pad_to_multiple": at_least(1),
            },
        )
        if not tokenizers or set(tokenizers) != {"src", "tgt"}:
            raise HyperparameterError(
                "Seq2SeqTransformer needs tokenizers={'src': ..., 'tgt': ...} (a data module's `tokenizers`); "
                "scripts/fit.py passes them from --data automatically"
            )
        if settings.share_embeddings and not same_vocabulary(tokenizers["src"], tokenizers["tgt"]):
            raise HyperparameterError(
                "share_embeddings=True needs one vocabulary for both sides: train the data with shared_vocab=True"
            )
        self.save_hyperparameters()
        self.src_tokenizer = tokenizer_from_dict(tokenizers["src"])
        self.tgt_tokenizer = tokenizer_from_dict(tokenizers["tgt"])
        if self.src_tokenizer.pad_id != self.tgt_tokenizer.pad_id:
            raise HyperparameterError("Seq2SeqTransformer: the source and target tokenizers pad with different ids")
        self.pad_id, self.bos_id, self.eos_id = self.tgt_tokenizer.pad_id, self.tgt_tokenizer.bos_id, self.tgt_tokenizer.eos_id
        self.net = build_network(settings, (self.src_tokenizer, self.tgt_tokenizer))  # the user's settings, the data's sizes
        n_classes = len(self.tgt_tokenizer)
        accuracy = lambda: MulticlassAccuracy(n_classes, average="micro", ignore_index=self.pad_id)
        self.train_acc, self.val_acc, self.test_acc = accuracy(), accuracy(), accuracy()
        self.val_loss, self.test_loss = TokenMean(), TokenMean()
        self._step_tokens = 0  # target tokens of the micro-batches since the last optimizer step, this process
        # Each stage's last BLEU and chrF, in words and with their signatures: what the run's summary reports (and
        # the test's outputs)
        self.score_reports: dict[str, dict] = {}
        if compile:
            # Compiled in place: parameter names (and checkpoints) stay unchanged. Bucketed lengths: one graph per bucket.
            compile_net(self.net, settings.max_len, pad_to_multiple, compile_backend)

    @classmethod
    def from_pretrained(cls, name_or_folder: str, **overrides) -> Seq2SeqTransformer:
        """A Hugging Face Marian (OPUS-MT) model, from its folder or hub name (inference/marian.py), with its weights
        and tokenizers; `overrides` set other arguments (a fine-tuning's lr; `length_penalty`: ours is the default)."""
        read = read_pretrained(name_or_folder)
        model = cls(tokenizers=read.hparams["tokenizers"], net=read.settings, **overrides)
        model.net.load_state_dict(read.weights)
        return model.eval()

    def setup(self, stage: str) -> None:
        """Start a fit from `init_weights` (scripts/import_pretrained.py's checkpoint, say). `setup` runs before
        Lightning restores a resumed run (`--ckpt_path`), whose weights then replace these."""
        path = self.hparams.get("init_weights")
        if stage != "fit" or not path:
            return
        try:
            self.net.load_state_dict(read_network(path).weights)
        except RuntimeError as err:
            first = str(err).strip().splitlines()
            raise CheckpointError(
                f"init_weights: {path} does not fit this model's sizes ({first[1].strip() if len(first) > 1 else first[0]})"
            ) from None
        rank_zero_info(f"weights from {path}")

    def forward(self, src: torch.Tensor, tgt_in: torch.Tensor) -> torch.Tensor:
        return self.net(src, tgt_in)  # (B, T, V)

    def _step(self, batch: Seq2SeqBatch, stage: str, accuracy: MulticlassAccuracy) -> torch.Tensor:
        """The summed loss of the batch's target tokens (see `on_before_optimizer_step` for its normalisation)."""
        src, tgt = batch  # lengths in buckets of pad_to_multiple: the data module's collate function padded them
        tgt_in, tgt_out = tgt[:, :-1], tgt[:, 1:]  # teacher forcing: predict token t+1 from ≤ t
        if self.hparams.compile and self.hparams.pad_to_multiple > 1:
            mark_bucketed(src, tgt_in, tgt_out)
        logits, labels = self.net(src, tgt_in, tgt_out)  # (N, V), (N,): the padded positions left out
        loss_sum = F.cross_entropy(logits, labels, label_smoothing=self.hparams.label_smoothing, reduction="sum")
        accuracy(logits, labels)
        if stage == "train":
            self._step_tokens += labels.numel()
            self.log("train/loss", loss_sum.detach() / labels.numel(), prog_bar=True, batch_size=labels.numel())
        else:
            mean = self.val_loss if stage == "val" else self.test_loss
            mean.update(loss_sum, labels.numel())
            self.log(f"{stage}/loss", mean, prog_bar=True, on_step=False, on_epoch=True)
        self.log(f"{stage}/acc", accuracy, prog_bar=stage != "train", on_step=False, on_epoch=True)
        return loss_sum

    def training_step(self, batch: Seq2SeqBatch, batch_idx: int) -> torch.Tensor:
        return self._step(batch, "train", self.train_acc)

    def on_before_optimizer_step(self, optimizer) -> None:
        """Divide the summed gradients by the target tokens of the whole step, as fairseq does: every process's
        micro-batches together, so each token weighs the same whatever the size of its batch. DDP has averaged
        the gradients over processes and Lightning divided each micro-batch's loss by the accumulation count;
        both factors are undone here. Runs before gradient clipping, which then sees the per-token gradient."""
        trainer = self.trainer
        tokens = torch.tensor(float(self._step_tokens), device=self.device)
        tokens = trainer.strategy.reduce(tokens, reduce_op="sum") if trainer.world_size > 1 else tokens
        self._step_tokens = 0
        scale = trainer.world_size * trainer.accumulate_grad_batches / tokens.clamp(min=1)
        for group in optimizer.param_groups:
            for p in group["params"]:
                if p.grad is not None:
                    p.grad.mul_(scale.to(p.grad.dtype))

    def validation_step(self, batch: Seq2SeqBatch, batch_idx: int) -> None:
        self._step(batch, "val", self.val_acc)
        if batch_idx == 0:  # one batch says it: a collapsed encoder gives every sentence's positions one vector
            similarity = position_similarity(*self.net.encode(batch[0]))
            self._encoder_similarity = float(similarity)
            self.log("val/encoder_similarity", similarity, on_step=False, on_epoch=True, sync_dist=True, batch_size=1)

    def test_step(self, batch: Seq2SeqBatch, batch_idx: int) -> None:
        self._step(batch, "test", self.test_acc)

    # ----------------------------------------------------------------------------------------
    # BLEU / chrF (through `translator`; the data's raw references: tasks/scored_sets.py) and attention maps.

    def _bleu_due(self) -> bool:
        n = self.hparams.bleu_every_n_epochs
        trainer = attached_trainer(self)
        return bool(n) and n > 0 and trainer is not None and not trainer.sanity_checking and (self.current_epoch + 1) % n == 0

    def _score(self, sets: list, stage: str, beam_size: int) -> None:
        if not sets:
            return
        sources = [s for _, pairs, _ in sets for s, _ in pairs]
        hyps = translate_shared(self, sources, beam_size)
        values, lines, signatures = scores_by_set(stage, sets, hyps)
        for key, value in values.items():  # every process holds the same scores: no sync needed
            self.log(key, value, prog_bar=key == f"{stage}/bleu", batch_size=len(sources))
        decoding = f"({'greedy' if beam_size == 1 else f'beam {beam_size}'}; {signatures[f'{stage}/bleu_signature']})"
        line = f"{lines[0]} {decoding}" if len(lines) == 1 else "\n  ".join([decoding[1:-1], *lines])
        self.score_reports[stage] = {"line": line, **signatures}
        if stage == "test":  # kept in the run's folder (training/records.py) for paired tests (scripts/ablate.py)
            self.score_reports[stage]["outputs"] = {"hypotheses": hyps, "references": [r for _, p, _ in sets for _, r in p]}
        if stage != "test":  # a test's line names the checkpoint it scored: the run's summary prints it (run_summary)
            rank_zero_info(f"epoch {self.current_epoch} step {self.global_step}: {line}")

    def on_validation_epoch_end(self) -> None:
        self._warn_if_the_encoder_collapsed()
        if not self._bleu_due():
            return
        sets = scored_sets(attached_trainer(self), "val", self.hparams.bleu_val_sentences)  # None: the whole split
        self._score(sets, "val", beam_size=1)
        if self.hparams.attention_maps > 0 and sets:
            sources = [s for s, _ in sets[0][1][: self.hparams.attention_maps]]
            self.plot_attention(sources, f"attention/epoch{self.current_epoch}")

    def _warn_if_the_encoder_collapsed(self) -> None:
        similarity = getattr(self, "_encoder_similarity", None)
        trainer = attached_trainer(self)
        if similarity is None or trainer is None or trainer.sanity_checking or not similarity > COLLAPSED_ENCODER:
            return
        rank_zero_info(
            f"warning: epoch {self.current_epoch} step {self.global_step}: val/encoder_similarity={similarity:.3f}: the "
            "encoder gives nearly the same vector at every source position, so the decoder cannot read the source "
            "(a learning rate too high for the data is one cause: docs/results/multilingual.md)"
        )

    def on_test_epoch_end(self) -> None:
        # `--trainer.limit_test_batches` shortens the decoding test too: the share of the batches it keeps, of each set.
        loaders = self.trainer.test_dataloaders
        total = sum(len(dl) for dl in (loaders if isinstance(loaders, (list, tuple)) else [loaders]))
        share = min(1.0, sum(self.trainer.num_test_batches) / total) if total else 1.0
        sets = [
            (name, pairs[: math.ceil(share * len(pairs))], in_mean) for name, pairs, in_mean in scored_sets(self.trainer, "test")
        ]
        self._score(sets, "test", beam_size=self.hparams.eval_beam_size)

    def attention_map(self, sentence: str, raw_pieces: bool | None = None, layer: int = -1):
        """A matplotlib figure of `attention_weights(sentence, layer)`. Subword pieces read as words unless
        `raw_pieces` (default: the module's `attention_raw_pieces`); the labels' characters, Chinese
        included, are drawn in a font that has them (`tasks.figures.font_families`)."""
        weights, src_tokens, out_tokens = self.translator.attention_weights(sentence, layer)
        if raw_pieces is None:
            raw_pieces = self.hparams.get("attention_raw_pieces", False)
        return attention_figure(weights.numpy(), src_tokens, out_tokens, title=sentence[:80], raw_pieces=raw_pieces)

    def plot_attention(self, sentences: list[str], prefix: str) -> list:
        """Save (and log) `attention_map` of each sentence as `<log dir>/<prefix>_<i>.png`."""
        return [save_and_log_figure(self, self.attention_map(s), f"{prefix}_{i}") for i, s in enumerate(sentences)]

    def configure_optimizers(self):
        hp = self.hparams
        total = self.trainer.estimated_stepping_batches if hp.lr_schedule == "cosine" else None
        return adamw_with_warmup(self, hp.lr, hp.weight_decay, hp.lr_schedule, hp.warmup_steps, total, hp.betas, hp.fused_adamw)

    def run_summary(self, best_checkpoint: str, datamodule) -> dict:
        """What the end-of-run summary (training/records.py) asks of the task: a few validation sentences
        translated by the best checkpoint, as lines, and the test's line and signatures (`score_reports`)."""
        samples = []
        pairs = datamodule.val_pairs()[:SUMMARY_SAMPLES] if best_checkpoint and hasattr(datamodule, "val_pairs") else []
        if pairs:
            hyps = Translator.from_checkpoint(best_checkpoint).translate([s for s, _ in pairs])
            samples = [
                f"{src}  →  {hyp}" + ("" if hyp == ref else f"   (reference: {ref})") for (src, ref), hyp in zip(pairs, hyps)
            ]
        return {"samples": samples, "test": self.score_reports.get("test", {})}

    # ----------------------------------------------------------------------------------------
    # Inference: inference.Translator on this module's network (kept for notebooks: `model.translate([...])`)

    @functools.cached_property
    def translator(self) -> Translator:
        """The `inference.Translator` of this module's network (the same modules, not a copy) and tokenizers, with
        its hyperparameters' decoding defaults; made once, so that its static decoders serve later calls."""
        return Translator.from_module(self)

    def translate(self, sentences: list[str], **kwargs):
        """`self.translator.translate` (inference/translator.py): the best outputs' texts, or n-best lists."""
        return self.translator.translate(sentences, **kwargs)

    def translate_many(self, sentences: list[str], **kwargs) -> list[str]:
        """`self.translator.translate_many`: `translate` in batches of similar length."""
        return self.translator.translate_many(sentences, **kwargs)
