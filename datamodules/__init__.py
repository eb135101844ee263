"""LightningDataModules and the text utilities they share."""

from common.errors import CorpusFormatError, DataFormatError, DataNotFoundError, HyperparameterError
from common.lazy import lazy_exports

# Each name from its module, imported when first used: a translation run loads no MNIST (torchvision), and
# `from datamodules.corpus_readers import ...` (a script's input) no Lightning.
__getattr__, __dir__, __all__ = lazy_exports(
    __name__,
    {
        "batching": ("Seq2SeqBatch", "collate_pairs"),
        "corpus": ("ParallelCorpusDataModule",),
        "mnist": ("MNISTDataModule",),
        "multilingual": ("MultilingualCorpusDataModule",),
        "samplers": ("TokenBudgetBatchSampler",),
        "tokenizers": ("SubwordTokenizer", "tokenizer_from_dict", "train_tokenizer"),
        "toy": ("ToyTranslationDataModule",),
        "vocab": ("BOS", "EOS", "PAD", "SPECIAL_TOKENS", "UNK", "Vocab"),
    },
)
__all__ += ["CorpusFormatError", "DataFormatError", "DataNotFoundError", "HyperparameterError"]
