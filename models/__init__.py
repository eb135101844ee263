"""The Transformer core in plain PyTorch, and the networks of each task built on it."""

from common.lazy import lazy_exports

# Each name from its module, imported when first used: `import models.checks` (a script's argument checks) loads no torch.
__getattr__, __dir__, __all__ = lazy_exports(
    __name__,
    {
        "attention": ("MultiHeadAttention",),
        "beam": ("beam_search",),
        "cache": ("DynamicCache", "StaticCache"),
        "config": ("MnistNetConfig", "MnistNetSettings", "Seq2SeqConfig", "Seq2SeqSettings", "TransformerConfig"),
        "decoding": ("greedy_decode",),
        "mnist_net": ("MnistNet",),
        "positional": ("LearnedPositionalEncoding", "SinusoidalPositionalEncoding"),
        "seq2seq": ("Seq2SeqNet",),
        "transformer": ("Transformer",),
    },
)
