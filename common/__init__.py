"""The floor every layer stands on, importing no package of the project: the errors every layer raises
(errors.py), the one line and exit status each becomes at an entry point (exits.py), files written whole or
not at all (files.py), and checkpoint files read with one clear error (checkpoints.py)."""
