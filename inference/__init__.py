"""Inference for the translation networks: the `Translator` (translator.py), its `DecodingOptions` (options.py)
and the Marian reader (marian.py). Below the training layer, whose end-of-run summary translates with a Translator,
and the tasks, whose validation BLEU goes through one; checkpoints are read with common.checkpoints."""

from .options import DecodingOptions
from .translator import Translator

__all__ = ["DecodingOptions", "Translator"]
