"""Inference for the translation networks: the `Translator` (translator.py), its `DecodingOptions` (options.py),
the one way from a checkpoint (or a Marian model, marian.py) to a network (networks.py). Beside deploy/, above the
training layer (which imports none of it) and below the tasks, whose validation BLEU goes through a Translator."""

from common.lazy import lazy_exports

# Each name from its module, imported when first used: the scripts' decoding flags (options.py) load no torch.
__getattr__, __dir__, __all__ = lazy_exports(__name__, {"options": ("DecodingOptions",), "translator": ("Translator",)})
