"""Inference for the translation networks: the `Translator` (translator.py), its `DecodingOptions` (options.py)
and the Marian reader (marian.py). Above the training layer (checkpoints are read with common.checkpoints), below
the tasks, whose validation BLEU goes through a Translator."""

from .options import DecodingOptions
from .translator import Translator

__all__ = ["DecodingOptions", "Translator"]
