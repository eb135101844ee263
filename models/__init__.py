"""The Transformer core in plain PyTorch, and the networks of each task built on it."""

from .attention import MultiHeadAttention
from .beam import beam_search
from .cache import DynamicCache, StaticCache
from .config import MnistNetConfig, MnistNetSettings, Seq2SeqConfig, Seq2SeqSettings, TransformerConfig
from .decoding import greedy_decode
from .mnist_net import MnistNet
from .positional import LearnedPositionalEncoding, SinusoidalPositionalEncoding
from .seq2seq import Seq2SeqNet
from .transformer import Transformer

__all__ = [
    "DynamicCache",
    "MnistNet",
    "MnistNetConfig",
    "MnistNetSettings",
    "LearnedPositionalEncoding",
    "MultiHeadAttention",
    "Seq2SeqConfig",
    "Seq2SeqNet",
    "Seq2SeqSettings",
    "SinusoidalPositionalEncoding",
    "StaticCache",
    "Transformer",
    "TransformerConfig",
    "beam_search",
    "greedy_decode",
]
