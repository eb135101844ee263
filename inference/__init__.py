"""Inference for the translation networks: the `Translator` (translator.py), its `DecodingOptions` (options.py),
the one way from a checkpoint (or a Marian model, marian.py) to a network (networks.py). Beside deploy/, above the
training layer (which imports none of it) and below the tasks, whose validation BLEU goes through a Translator."""

from .options import DecodingOptions
from .translator import Translator

__all__ = ["DecodingOptions", "Translator"]
