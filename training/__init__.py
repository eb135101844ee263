"""What runs any task: the LightningCLI behind scripts/fit.py (cli.py) and the modules it wires, one question each
(docs/guide/layout.md says which file owns which decision). The tasks themselves are in tasks/.

Importing it runs nothing: the messages no user can act on are filtered when a run starts (`TransformerCLI`); a
notebook that drives Lightning itself calls `common.noise.silence()` for the same."""
