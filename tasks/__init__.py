"""LightningModules: the training and evaluation logic of each task around a `models/` network."""

from .mnist import MnistSequenceClassifier
from .seq2seq import Seq2SeqTransformer

__all__ = ["MnistSequenceClassifier", "Seq2SeqTransformer"]
