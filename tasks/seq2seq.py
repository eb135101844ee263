"""`Seq2SeqTransformer`: training, evaluation and translation around `models.Seq2SeqNet`."""

from __future__ import annotations

import os
import sys
import warnings
from typing import get_args

import lightning as L
import torch
import torch.nn.functional as F
from lightning.pytorch.utilities import rank_zero_info
from torchmetrics.classification import MulticlassAccuracy

import datamodules
from datamodules.batching import Seq2SeqBatch, frame_source, map_in_length_batches, pad_sequences
from datamodules.tokenizers import tokenizer_from_dict
from models import Seq2SeqNet
from models.checks import OPTIMISER, at_least, check_hparams, fraction, one_of
from models.config import Seq2SeqConfig
from models.decoding import Constraints, Hypothesis, align, beam_search, beam_search_nbest, greedy_decode, sample, score_targets
from models.errors import HyperparameterError, InputError
from models.static_cache import StaticDecoder
from training.callbacks import evaluated_label
from training.errors import CheckpointError
from training.loading import read_checkpoint
from training.loggers import log_text

from .fast_paths import compile_net, mark_bucketed
from .figures import attention_figure, save_and_log_figure
from .metrics import TokenMean, corpus_scores
from .schedules import Schedule, adamw_with_warmup


def _caller_stacklevel() -> int:
    """The `stacklevel` that points a warning at the first frame outside this package, the data modules and
    torch (whose no_grad wrapper sits between `translate` and its caller): the user's line."""
    internal = tuple(os.path.dirname(m.__file__) for m in (sys.modules[__name__], datamodules, torch))
    frame, level = sys._getframe(1), 1
    while frame is not None and frame.f_code.co_filename.startswith(internal):
        frame, level = frame.f_back, level + 1
    return level


def _same_vocabulary(src: dict, tgt: dict) -> bool:
    """Whether two tokenizers' `to_dict()`s number the same pieces alike (one table for both sides): equal, or,
    for Marian's (two SentencePiece models over one `vocab.json`), with the same pieces."""
    return src == tgt or ("pieces" in src and src.get("pieces") == tgt.get("pieces"))


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
        norm: str = "layernorm",
        qk_norm: bool = False,
        num_kv_heads: int | None = None,
        layer_norm_eps: float = 1e-5,
        bias: bool = True,  # biases in the linear layers and norms
        max_len: int = 256,
        tie_embeddings: bool = False,
        share_embeddings: bool = False,
        src_token_dropout: float = 0.0,  # word dropout on the source: a token's whole embedding, in training
        relative_bias: str | None = None,  # "t5" or "alibi": a bias on self-attention's logits (models.relative)
        # Marian's (OPUS-MT's) differences from the paper, for imported models (tasks/pretrained.py):
        scale_embeddings: bool = True,  # embeddings × sqrt(d_model)
        final_norm: bool = True,  # a norm after each stack
        generator_bias: bool = False,  # a bias on the output layer (Marian's final_logits_bias)
        ban_pad: bool = False,  # no effect: no search generates <pad> or <bos> (kept: older checkpoints name it)
        init_weights: str | None = None,  # a checkpoint of ours whose weights a fit starts from (fine-tuning)
        label_smoothing: float = 0.1,
        lr: float = 5e-4,
        weight_decay: float = 0.01,
        betas: tuple[float, float] = (0.9, 0.98),
        warmup_steps: int = 4000,
        lr_schedule: Schedule = "inverse_sqrt",
        bleu_every_n_epochs: int = 1,
        bleu_val_sentences: int | None = None,
        attention_maps: int = 3,
        attention_raw_pieces: bool = False,
        eval_beam_size: int = 4,
        length_penalty: float = 1.0,
        max_len_a: float = 1.5,
        max_len_b: int = 10,
        eval_batch_size: int = 64,
        compile: bool = False,
        compile_backend: str = "inductor",
        pad_to_multiple: int = 1,  # length bucketing: batch lengths padded up to a multiple (tasks.fast_paths)
        fused_adamw: bool = False,  # one fused kernel for AdamW's update (tasks.fast_paths)
    ):
        super().__init__()
        # The network's settings are checked by its config's rules (models/config.py), in the same line as this
        # module's own options, under this module's name.
        check_hparams(
            self,
            locals(),
            {
                **Seq2SeqConfig.CHECKS,
                **OPTIMISER,
                "betas": fraction,
                "warmup_steps": at_least(0),
                "lr_schedule": one_of(get_args(Schedule)),
                "bleu_val_sentences": at_least(1),
                "attention_maps": at_least(0),
                "eval_beam_size": at_least(1),
                "max_len_a": at_least(0),
                "max_len_b": at_least(0),
                "eval_batch_size": at_least(1),
                "pad_to_multiple": at_least(1),
            },
            *Seq2SeqConfig.RELATIONS,
        )
        if not tokenizers or set(tokenizers) != {"src", "tgt"}:
            raise HyperparameterError(
                "Seq2SeqTransformer needs tokenizers={'src': ..., 'tgt': ...} (a data module's `tokenizers`); "
                "scripts/fit.py passes them from --data automatically"
            )
        if share_embeddings and not _same_vocabulary(tokenizers["src"], tokenizers["tgt"]):
            raise HyperparameterError(
                "share_embeddings=True needs one vocabulary for both sides: train the data with shared_vocab=True"
            )
        self.save_hyperparameters()
        self.src_tokenizer = tokenizer_from_dict(tokenizers["src"])
        self.tgt_tokenizer = tokenizer_from_dict(tokenizers["tgt"])
        if self.src_tokenizer.pad_id != self.tgt_tokenizer.pad_id:
            raise HyperparameterError("Seq2SeqTransformer: the source and target tokenizers pad with different ids")
        self.pad_id, self.bos_id, self.eos_id = self.tgt_tokenizer.pad_id, self.tgt_tokenizer.bos_id, self.tgt_tokenizer.eos_id
        # The network's config: every hyperparameter named like one of its fields, and what the data decides.
        config = Seq2SeqConfig.from_hparams(
            self.hparams, src_vocab_size=len(self.src_tokenizer), tgt_vocab_size=len(self.tgt_tokenizer), pad_id=self.pad_id
        )
        self.net = Seq2SeqNet(config)
        n_classes = len(self.tgt_tokenizer)
        self.train_acc = MulticlassAccuracy(n_classes, average="micro", ignore_index=self.pad_id)
        self.val_acc = MulticlassAccuracy(n_classes, average="micro", ignore_index=self.pad_id)
        self.test_acc = MulticlassAccuracy(n_classes, average="micro", ignore_index=self.pad_id)
        self.val_loss, self.test_loss = TokenMean(), TokenMean()
        self._step_tokens = 0  # target tokens of the micro-batches since the last optimizer step, this process
        # SacreBLEU signature of the last score of each stage ("val", "test"), for summaries.
        self.bleu_signatures: dict[str, str] = {}
        if compile:
            # Compiled in place: parameter names (and checkpoints) stay unchanged. Bucketed lengths: one graph per bucket.
            compile_net(self.net, max_len, pad_to_multiple, compile_backend)

    @classmethod
    def from_pretrained(cls, name_or_folder: str, **overrides) -> Seq2SeqTransformer:
        """A Hugging Face Marian (OPUS-MT) model, from its folder or hub name, with its weights and tokenizers;
        `overrides` set other arguments (a fine-tuning's lr, say). See tasks/pretrained.py."""
        from .pretrained import from_pretrained  # the module imports this one

        return from_pretrained(name_or_folder, **overrides)

    def setup(self, stage: str) -> None:
        """Start a fit from `init_weights` (scripts/import_pretrained.py's checkpoint, say). `setup` runs before
        Lightning restores a resumed run (`--ckpt_path`), whose weights then replace these."""
        path = self.hparams.get("init_weights")
        if stage != "fit" or not path:
            return
        state = read_checkpoint(path)["state_dict"]
        try:
            self.load_state_dict(state)
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

    def test_step(self, batch: Seq2SeqBatch, batch_idx: int) -> None:
        self._step(batch, "test", self.test_acc)

    # ----------------------------------------------------------------------------------------
    # BLEU / chrF and attention maps
    #
    # References are the data module's raw sentences (`val_pairs()` / `test_pairs()`), not ids
    # decoded back to text: batches are length-sorted tensors, and decoding ids would hand SacreBLEU
    # the tokenizer's normalised text (NFKC, <unk>s, a word Vocab's lost punctuation spacing) instead
    # of the true detokenised reference. A data module without `*_pairs()` gets no BLEU.

    def _bleu_due(self) -> bool:
        n = self.hparams.bleu_every_n_epochs
        trainer = self._trainer
        return bool(n) and n > 0 and trainer is not None and not trainer.sanity_checking and (self.current_epoch + 1) % n == 0

    def _pairs(self, stage: str) -> list[tuple[str, str]]:
        datamodule = getattr(self._trainer, "datamodule", None) if self._trainer is not None else None
        get = getattr(datamodule, f"{stage}_pairs", None)
        return list(get()) if callable(get) else []

    def _translate_shared(self, sources: list[str], beam_size: int) -> list[str]:
        """Translate `sources`, each process its share (every world_size-th sentence) under DDP;
        every process gets all hypotheses back in input order."""
        world = self.trainer.world_size
        if world == 1 or not (torch.distributed.is_available() and torch.distributed.is_initialized()):
            return self.translate_many(sources, beam_size=beam_size)
        rank = self.trainer.global_rank
        gathered: list[list[str] | None] = [None] * world
        torch.distributed.all_gather_object(gathered, self.translate_many(sources[rank::world], beam_size=beam_size))
        hyps: list[str] = [""] * len(sources)
        for r, share in enumerate(gathered):
            hyps[r::world] = share
        return hyps

    def _score(self, pairs: list[tuple[str, str]], stage: str, beam_size: int) -> None:
        if not pairs:
            return
        hyps = self._translate_shared([s for s, _ in pairs], beam_size)
        scores = corpus_scores(hyps, [r for _, r in pairs])
        for name in ("bleu", "chrf"):
            # Every process holds the same score: no sync needed.
            self.log(f"{stage}/{name}", scores[name], prog_bar=name == "bleu", batch_size=len(pairs))
        self.bleu_signatures[stage] = scores["bleu_signature"]
        if stage == "test":
            log_text(self, {"test/bleu_signature": scores["bleu_signature"], "test/chrf_signature": scores["chrf_signature"]})
        # A test scores a checkpoint: named with its weights, not by the trainer's epoch and step (the run's last).
        where = evaluated_label(self.trainer) if stage == "test" else f"epoch {self.current_epoch} step {self.global_step}"
        rank_zero_info(
            f"{where}: {stage}/bleu={scores['bleu']:.2f} "
            f"{stage}/chrf={scores['chrf']:.2f} on {len(pairs)} sentences "
            f"({'greedy' if beam_size == 1 else f'beam {beam_size}'}; {scores['bleu_signature']})"
        )

    def on_validation_epoch_end(self) -> None:
        if not self._bleu_due():
            return
        pairs = self._pairs("val")[: self.hparams.bleu_val_sentences]  # None: the whole split
        self._score(pairs, "val", beam_size=1)
        if self.hparams.attention_maps > 0 and pairs:
            self.plot_attention([s for s, _ in pairs[: self.hparams.attention_maps]], f"attention/epoch{self.current_epoch}")

    def on_test_epoch_end(self) -> None:
        self._score(self._pairs("test"), "test", beam_size=self.hparams.eval_beam_size)

    def _pieces(self, tokenizer, ids: list[int]) -> list[str]:
        specials = {tokenizer.pad_id: "<pad>", tokenizer.bos_id: "<bos>", tokenizer.eos_id: "<eos>"}
        inner = getattr(tokenizer, "tokenizer", None)  # a SubwordTokenizer's Hugging Face tokenizer
        out = []
        for i in ids:
            if i in specials:
                out.append(specials[i])
            elif inner is not None:
                out.append(inner.id_to_token(i) or "?")
            else:
                out.append(tokenizer.tokens[i] if hasattr(tokenizer, "tokens") else str(i))
        return out

    @torch.no_grad()
    def attention_weights(self, sentence: str, layer: int = -1) -> tuple[torch.Tensor, list[str], list[str]]:
        """Greedy-translate one sentence and return the decoder's cross-attention over the source,
        averaged over heads, of `layer`: ((T, S) weights, source pieces, output pieces)."""
        was_training = self.training
        self.eval()
        try:
            src = self.encode_sources([sentence])
            out = self._decode_best([sentence], 1, None, True, None)
            out = out[0].tolist()
            if self.eos_id in out:
                out = out[: out.index(self.eos_id) + 1]
            memory, src_pad = self.net.encode(src)
            tgt_in = torch.tensor([out[:-1] if len(out) > 1 else out], device=src.device)
            _, weights = self.net.decode(tgt_in, memory, src_pad, need_weights=True)
        finally:
            self.train(was_training)
        w = weights[layer][0].float().mean(0).cpu()  # (T, S)
        return w, self._pieces(self.src_tokenizer, src[0].tolist()), self._pieces(self.tgt_tokenizer, out[1:])

    def attention_map(self, sentence: str, raw_pieces: bool | None = None, layer: int = -1):
        """A matplotlib figure of `attention_weights(sentence, layer)`. Subword pieces read as words unless
        `raw_pieces` (default: the module's `attention_raw_pieces`); the labels' characters, Chinese
        included, are drawn in a font that has them (`tasks.figures.font_families`)."""
        weights, src_tokens, out_tokens = self.attention_weights(sentence, layer)
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

    # ----------------------------------------------------------------------------------------
    # Inference

    def encode_sources(self, sentences: list[str]) -> torch.Tensor:
        """Strings → (B, S) padded source ids on this module's device. Over-long sentences are
        truncated to the model's `max_len` with a warning; empty ones are refused."""
        ids = []
        for i, sentence in enumerate(sentences):
            if not isinstance(sentence, str) or not sentence.strip():
                raise InputError(f"sentence {i} is empty: there is nothing to translate")
            encoded = self.src_tokenizer.encode(sentence)
            if len(encoded) + 1 > self.net.max_len:
                warnings.warn(
                    f"sentence {i} has {len(encoded)} tokens; truncated to the model's max_len={self.net.max_len}",
                    stacklevel=_caller_stacklevel(),
                )
            ids.append(frame_source(encoded, self.net.max_len, self.src_tokenizer.eos_id))
        return pad_sequences(ids, self.pad_id).to(self.device)

    def _default_max_len(self, src: torch.Tensor) -> int:
        """a·S + b output tokens for an (B, S) source batch (max_len_a, max_len_b), within the model's positions."""
        return int(self.hparams.max_len_a * src.size(1) + self.hparams.max_len_b)

    @torch.no_grad()
    def translate_many(
        self, sentences: list[str], beam_size: int = 1, batch_size: int | None = None, on_batch=None, **kwargs
    ) -> list[str]:
        """`translate` over many sentences in batches of similar length; results in input order. `on_batch(batch)`
        is called after each batch (progress lines)."""
        batch_size = batch_size or self.hparams.eval_batch_size
        translate = lambda batch: self.translate(batch, beam_size=beam_size, **kwargs)
        return map_in_length_batches(translate, sentences, batch_size, on_batch)

    @torch.no_grad()
    def translate(
        self,
        sentences: list[str],
        beam_size: int = 1,
        max_len: int | None = None,
        use_cache: bool = True,
        nbest: int | None = None,
        length_penalty: float | None = None,
        static_cache: str | None = None,
        **tools,
    ) -> list[str] | list[list[Hypothesis]]:
        """Translate a batch of sentences. `max_len` caps the output tokens (default:
        max_len_a × longest source + max_len_b, within the model's positions). With `beam_size` > 1,
        beam search with the module's `length_penalty` unless one is given.

        With `nbest`, returns for each sentence its `nbest` best `models.decoding.Hypothesis` (text,
        tokens, each token's log-prob, score), best first; else the best one's text. `tools` are the
        decoding tools of `decode_hypotheses` (ensemble, sampling, constraints, prefixes, alignments).

        `static_cache` ("eager", "compile" or "cuda-graph"): plain greedy or beam search with the preallocated
        cache and captured step of models.static_cache (the same outputs; the decoder and its compiled steps
        are kept for later calls); not with `nbest` or the tools."""
        if isinstance(sentences, str):
            sentences = [sentences]
        if static_cache is not None and not use_cache:
            raise ValueError("static_cache is a key/value cache: it cannot be used with use_cache=False")
        if not sentences:
            return []
        if nbest is None and not tools:  # plain greedy or beam search (the tools' path gives the same outputs)
            out = self._decode_best(sentences, beam_size, max_len, use_cache, length_penalty, static_cache)
            return [self.tgt_tokenizer.decode(row.tolist()) for row in out]
        if static_cache is not None:
            raise InputError("static_cache decodes the plain greedy or beam search: not with nbest or the decoding tools")
        hyps = self.decode_hypotheses(sentences, beam_size, max_len, use_cache, nbest or 1, length_penalty, **tools)
        return [h[0].text for h in hyps] if nbest is None else hyps

    def _decode_best(self, sentences, beam_size, max_len, use_cache, length_penalty, static_cache=None) -> torch.Tensor:
        """(B, L) ids of each sentence's best output: greedy search, or beam search."""
        was_training = self.training
        self.eval()
        try:
            src = self.encode_sources(sentences)
            limit = max_len if max_len is not None else self._default_max_len(src)
            limit = min(limit, self.net.max_len - 1)
            alpha = self.hparams.length_penalty if length_penalty is None else length_penalty
            if static_cache is not None:
                decoder = self._static_decoder(static_cache)
                if beam_size == 1:
                    return decoder.greedy(src, self.bos_id, self.eos_id, limit)
                return decoder.beam(src, self.bos_id, self.eos_id, limit, beam_size=beam_size, length_penalty=alpha)
            if beam_size == 1:
                return greedy_decode(self.net, src, self.bos_id, self.eos_id, limit, use_cache=use_cache)
            return beam_search(
                self.net, src, self.bos_id, self.eos_id, limit, beam_size=beam_size, length_penalty=alpha, use_cache=use_cache
            )
        finally:
            self.train(was_training)

    def _static_decoder(self, mode: str) -> StaticDecoder:
        """One `StaticDecoder` per mode and device, kept so that its buffers and compiled steps serve later calls."""
        decoders = self.__dict__.setdefault("_static_decoders", {})  # not a submodule: nothing new in the state dict
        key = (mode, self.device)
        if key not in decoders:
            decoders[key] = StaticDecoder(self.net, mode)
        return decoders[key]

    def score_alpha(self, beam_size: int = 1, length_penalty: float | None = None, sampling: bool = False) -> float:
        """The length penalty alpha that scores rank by: the given or the module's one for beam search,
        0 for greedy search and sampling (which rank by the plain sum of log-probs)."""
        if beam_size == 1 or sampling:
            return 0.0
        return self.hparams.length_penalty if length_penalty is None else length_penalty

    def _ensemble_nets(self, ensemble, alignment_layer: int | None = None) -> list:
        """This module's network and those of `ensemble` (other `Seq2SeqTransformer`s), in eval mode; an
        `InputError` for an `alignment_layer` that one of them lacks."""
        check_same_vocabularies([self, *ensemble])
        for member in ensemble:
            member.eval()
        nets = [self.net, *(m.net for m in ensemble)]
        layers = min(net.config.num_decoder_layers for net in nets)
        if alignment_layer is not None and not -layers <= alignment_layer < layers:
            raise InputError(
                f"alignment layer {alignment_layer} is out of range: the model has {layers} decoder layers "
                f"(0 to {layers - 1}, or -{layers} to -1 from the last)"
            )
        return nets

    @torch.no_grad()
    def decode_hypotheses(
        self,
        sentences: list[str],
        beam_size: int = 1,
        max_len: int | None = None,
        use_cache: bool = True,
        nbest: int = 1,
        length_penalty: float | None = None,
        ensemble: list[Seq2SeqTransformer] = (),
        sampling: bool = False,
        temperature: float = 1.0,
        top_k: int = 0,
        top_p: float = 1.0,
        seed: int | None = None,
        min_len: int = 0,
        no_repeat_ngram_size: int = 0,
        ban_unk: bool = False,
        prefixes: list[str] | None = None,
        alignment_layer: int | None = None,
    ) -> list[list[Hypothesis]]:
        """The `nbest` best hypotheses of each sentence, best first, by beam search (greedy when
        `beam_size` is 1), or `nbest` samples with `sampling` (`temperature`, `top_k`, `top_p`,
        a `seed`). `ensemble`: more models whose log-probs are averaged with this one's
        (models.decoding.StepScorer); `min_len`, `no_repeat_ngram_size`, `ban_unk` and `prefixes`
        (one target prefix per sentence, "" for none) constrain the outputs; `alignment_layer`
        adds each hypothesis's alignment from that decoder layer's cross-attention."""
        if not sampling and nbest > beam_size:
            raise InputError(f"nbest={nbest} is larger than beam_size={beam_size}: a beam holds at most beam_size hypotheses")
        if not 0 < top_p <= 1:
            raise InputError(f"top_p must be in (0, 1], got {top_p}")
        if temperature <= 0:
            raise InputError(f"temperature must be > 0, got {temperature}")
        if prefixes is not None and len(prefixes) != len(sentences):
            raise InputError(f"{len(prefixes)} prefixes for {len(sentences)} sentences: give one per sentence")
        nets = self._ensemble_nets(ensemble, alignment_layer)
        was_training = self.training
        self.eval()
        try:
            src = self.encode_sources(sentences)
            limit = max_len if max_len is not None else self._default_max_len(src)
            limit = min(limit, min(net.max_len for net in nets) - 1)
            banned = (self.tgt_tokenizer.unk_id,) if ban_unk else ()
            constraints = Constraints(min_len, no_repeat_ngram_size, banned, self._prefix_ids(prefixes))
            alpha = self.score_alpha(beam_size, length_penalty, sampling)
            if sampling:
                generator = None if seed is None else torch.Generator(src.device).manual_seed(seed)
                hyps = sample(
                    nets,
                    src,
                    self.bos_id,
                    self.eos_id,
                    limit,
                    nbest,
                    temperature,
                    top_k,
                    top_p,
                    generator,
                    alpha,
                    use_cache,
                    constraints,
                )
            else:
                hyps = beam_search_nbest(
                    nets, src, self.bos_id, self.eos_id, limit, beam_size, nbest, alpha, use_cache, constraints
                )
            if alignment_layer is not None:
                flat = [(b, h) for b, row in enumerate(hyps) for h in row]
                rows = torch.tensor([b for b, _ in flat], device=src.device)
                for (_, h), pairs in zip(
                    flat, align(nets, src[rows], [h.tokens for _, h in flat], self.bos_id, self.eos_id, alignment_layer)
                ):
                    h.alignment = pairs
        finally:
            self.train(was_training)
        for row in hyps:
            for h in row:
                h.text = self.tgt_tokenizer.decode(h.tokens)
        return hyps

    def _prefix_ids(self, prefixes: list[str] | None) -> torch.Tensor | None:
        """(B, P) target ids each output must start with, -1 after a sentence's own prefix; None when there are none."""
        if prefixes is None:
            return None
        ids = [self.tgt_tokenizer.encode(p) if p and p.strip() else [] for p in prefixes]
        if not any(ids):
            return None
        return pad_sequences(ids, -1).to(self.device)

    @torch.no_grad()
    def score(
        self,
        sentences: list[str],
        references: list[str],
        length_penalty: float = 0.0,
        ensemble: list[Seq2SeqTransformer] = (),
        alignment_layer: int | None = None,
    ) -> list[Hypothesis]:
        """Each (sentence, reference) pair's `Hypothesis` by teacher forcing: the reference's tokens
        and `<eos>`, each one's log-prob, and the score a search with this `length_penalty` would
        rank it by (`score_alpha` gives the one of a decoding setting); with `alignment_layer`, the
        reference's alignment to its source (forced alignment)."""
        if len(references) != len(sentences):
            raise InputError(f"{len(references)} references for {len(sentences)} sentences: give one per sentence")
        if not sentences:
            return []
        nets = self._ensemble_nets(ensemble, alignment_layer)
        targets = [self.tgt_tokenizer.encode(r) for r in references]
        limit = min(net.max_len for net in nets)
        for i, t in enumerate(targets):
            if len(t) + 1 > limit - 1:
                raise InputError(f"reference {i} has {len(t)} tokens: more than the model's max_len={limit} allows")
        was_training = self.training
        self.eval()
        try:
            src = self.encode_sources(sentences)
            hyps = score_targets(nets, src, targets, self.bos_id, self.eos_id, length_penalty)
            if alignment_layer is not None:
                for h, pairs in zip(hyps, align(nets, src, [h.tokens for h in hyps], self.bos_id, self.eos_id, alignment_layer)):
                    h.alignment = pairs
        finally:
            self.train(was_training)
        for h in hyps:
            h.text = self.tgt_tokenizer.decode(h.tokens)
        return hyps


def check_same_vocabularies(models: list[Seq2SeqTransformer]) -> None:
    """An ensemble's models must read and write the same ids: the same source and target tokenizers."""
    first = models[0]
    for i, other in enumerate(models[1:], 1):
        for side in ("src", "tgt"):
            if getattr(other, f"{side}_tokenizer").to_dict() != getattr(first, f"{side}_tokenizer").to_dict():
                raise InputError(
                    f"the ensemble's model {i + 1} has another {'source' if side == 'src' else 'target'} vocabulary "
                    "than model 1: an ensemble needs models trained on the same vocabularies"
                )
