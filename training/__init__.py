"""What runs any task: the LightningCLI behind scripts/fit.py (cli.py), the callbacks every recipe
gets (callbacks.py), where checkpoints are written (checkpointing.py), stopping on SIGTERM/SIGINT with a
checkpoint (signals.py), Lightning's private state read in one place (lightning_internals.py), the W&B logger that
never prompts (loggers.py), checkpoint loading (loading.py), and the one place where every entry point
turns bad input and environment faults into one line and an exit status (faults.py). The tasks
themselves are in tasks/."""

from .noise import silence

silence()  # Lightning's and torch's messages no user can act on, for every entry point and notebook (noise.py)
