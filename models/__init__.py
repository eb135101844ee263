"""The Transformer core in plain PyTorch, and the networks of each task built on it."""

from .attention import MultiHeadAttention
from .cache import DynamicCache, StaticCache
from .config import MnistNetConfig, Seq2SeqConfig, TransformerConfig
from .decoding import beam_search, greedy_decode
from .mnist_net import MnistNet
from .positional import LearnedPositionalEncoding, SinusoidalPositionalEncoding
from .seq2seq import Seq2SeqNet
from .transformer import Transformer

__all__ = [
    "DynamicCache",
    "MnistNet",
    "MnistNetConfig",
    "LearnedPositionalEncoding",
    "MultiHeadAttention",
    "Seq2SeqConfig",
    "Seq2SeqNet",
    "SinusoidalPositionalEncoding",
    "StaticCache",
    "Transformer",
    "TransformerConfig",
    "beam_search",
    "greedy_decode",
]
