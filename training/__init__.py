"""What runs any task: the LightningCLI behind scripts/fit.py (cli.py), the callbacks every recipe
gets (callbacks.py), the W&B logger that never prompts (loggers.py), and checkpoint loading with
one-line errors for the scripts (loading.py). The tasks themselves are in tasks/."""
