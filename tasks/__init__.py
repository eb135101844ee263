"""LightningModules: the training and evaluation logic of each task around a `models/` network."""

from .seq2seq import Seq2SeqTransformer

__all__ = ["Seq2SeqTransformer"]
