"""LightningDataModules and the text utilities they share."""

from . import tokenizers as _tokenizers  # noqa: F401  (registers the subword kind for tokenizer_from_dict)
from .batching import Seq2SeqBatch, collate_pairs
from .corpus import ParallelCorpusDataModule, TokenBudgetBatchSampler
from .errors import CorpusFormatError, DataFormatError, DataNotFoundError, HyperparameterError
from .mnist import MNISTDataModule
from .tokenizers import SubwordTokenizer, train_tokenizer
from .toy import ToyTranslationDataModule
from .vocab import BOS, EOS, PAD, SPECIAL_TOKENS, UNK, Vocab, tokenizer_from_dict

__all__ = [
    "BOS", "EOS", "PAD", "SPECIAL_TOKENS", "UNK",
    "CorpusFormatError", "DataFormatError", "DataNotFoundError", "HyperparameterError", "MNISTDataModule", "ParallelCorpusDataModule", "Seq2SeqBatch", "SubwordTokenizer",
    "TokenBudgetBatchSampler", "ToyTranslationDataModule", "Vocab", "collate_pairs", "tokenizer_from_dict",
    "train_tokenizer",
]
