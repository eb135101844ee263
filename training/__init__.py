"""What runs any task, one module a question: the LightningCLI behind scripts/fit.py and its wiring (cli.py); how
a run resumes (resume.py); how it stops early (stopping.py, one stopper at the step boundary; signals.py, how
SIGTERM/SIGINT reach it and end the script); where and when checkpoints are written (checkpointing.py) and how
they reach the disk (checkpoint_io.py); what a run leaves behind (records.py); the callbacks every recipe gets
(callbacks.py); Lightning's private state read in one place (lightning_internals.py); the W&B logger that never
prompts (loggers.py); the precision a run trains in (precision.py); where a time limit stops the schedule, and the
schedule fitted to it (time_budget.py). Errors, exit statuses, atomic writes and checkpoint reading are common/'s; the tasks
themselves are in tasks/.

Importing it runs nothing: the messages no user can act on are filtered when a run starts (`TransformerCLI`); a
notebook that drives Lightning itself calls `common.noise.silence()` for the same."""
