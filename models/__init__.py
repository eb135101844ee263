"""The Transformer core in plain PyTorch, and the networks of each task built on it."""

from .attention import MultiHeadAttention
from .config import MnistNetConfig, Seq2SeqConfig, TransformerConfig
from .decoding import beam_search, greedy_decode
from .mnist_net import MnistNet
from .positional import LearnedPositionalEncoding, SinusoidalPositionalEncoding
from .seq2seq import Seq2SeqNet
from .transformer import DecoderCache, Transformer

__all__ = [
    "DecoderCache",
    "MnistNet",
    "MnistNetConfig",
    "LearnedPositionalEncoding",
    "MultiHeadAttention",
    "Seq2SeqConfig",
    "Seq2SeqNet",
    "SinusoidalPositionalEncoding",
    "Transformer",
    "TransformerConfig",
    "beam_search",
    "greedy_decode",
]
