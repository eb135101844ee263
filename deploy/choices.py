"""What scripts/export.py's flags offer, named here without torch so that its `--help` and argument errors answer
before torch loads (deploy/ctranslate2.py, which exports, checks against the same names)."""

# CTranslate2's weight types an export may be quantized to (`--quantization`; its compute types at run time).
QUANTIZATIONS = ("int8", "int8_float32", "int8_float16", "int8_bfloat16", "int16", "float16", "bfloat16", "float32")
