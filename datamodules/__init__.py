"""LightningDataModules and the text utilities they share."""

from common.errors import CorpusFormatError, DataFormatError, DataNotFoundError, HyperparameterError

from .batching import Seq2SeqBatch, collate_pairs
from .corpus import ParallelCorpusDataModule
from .mnist import MNISTDataModule
from .multilingual import MultilingualCorpusDataModule
from .samplers import TokenBudgetBatchSampler
from .tokenizers import SubwordTokenizer, tokenizer_from_dict, train_tokenizer
from .toy import ToyTranslationDataModule
from .vocab import BOS, EOS, PAD, SPECIAL_TOKENS, UNK, Vocab

__all__ = [
    "BOS",
    "EOS",
    "PAD",
    "SPECIAL_TOKENS",
    "UNK",
    "CorpusFormatError",
    "DataFormatError",
    "DataNotFoundError",
    "HyperparameterError",
    "MNISTDataModule",
    "MultilingualCorpusDataModule",
    "ParallelCorpusDataModule",
    "ToyTranslationDataModule",
    "Seq2SeqBatch",
    "SubwordTokenizer",
    "TokenBudgetBatchSampler",
    "Vocab",
    "collate_pairs",
    "tokenizer_from_dict",
    "train_tokenizer",
]
