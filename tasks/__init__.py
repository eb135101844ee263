"""LightningModules: the training and evaluation logic of each task around a `models/` network."""

from common.lazy import lazy_exports

# Each name from its module, imported when first used: a translation run loads nothing of MNIST's.
__getattr__, __dir__, __all__ = lazy_exports(
    __name__, {"mnist": ("MnistSequenceClassifier",), "seq2seq": ("Seq2SeqTransformer",)}
)
