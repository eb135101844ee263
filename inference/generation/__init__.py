"""Corpus generation (scripts/generate.py): batch inference whose output is training data (distillation,
back-translation). `input.py` reads what is decoded, `plan.py` cuts it into batches and shards and puts the
written shards together, `run.py` decodes the shards on one process or many (Lightning's prediction loop)."""
