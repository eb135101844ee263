"""Prepare a recipe's corpus ahead of training (on a login node, say): train its tokenizers and write the
token ids of every split to the memory-mapped cache that every later run and process reads.

    .venv/bin/python scripts/prepare.py --config configs/wmt14_en_de.yaml
    .venv/bin/python scripts/prepare.py --config configs/multi30k.yaml --data.data_dir ../shared/data/multi30k
    .venv/bin/python scripts/prepare.py --config configs/multi30k.yaml --data.cache_dir /scratch/cache

docs/guide/training.md ("Before and after a run") says which options it reads and what a later run finds.
"""

from __future__ import annotations

import sys
import time
from typing import Any

if __name__ == "__main__":  # run as a file, not imported as scripts.NAME (the tests)
    import _checkout  # noqa: F401  (first: the repository's packages importable, and this Python the project's)

from common.commands import answer_stored_help  # noqa: E402

if __name__ == "__main__":
    answer_stored_help("prepare")  # the parser's `--help`, stored: at once, not after Lightning's imports

import lightning as L  # noqa: E402
from jsonargparse import ActionConfigFile  # noqa: E402

from common.exits import exit_on_user_error  # noqa: E402
from datamodules.corpus import ParallelCorpusDataModule, check_corpus_settings  # noqa: E402
from datamodules.multilingual import MultilingualCorpusDataModule  # noqa: E402
from datamodules.preparation import PreparedCorpus  # noqa: E402
from training.arguments import RecipeParser  # noqa: E402

# The parts of a recipe that preparing the data does not use; accepted so that a whole recipe file parses.
OTHER_RECIPE_KEYS = (
    "seed_everything",
    "ema_decay",
    "fit_schedule_to_time",
    "trainer",
    "checkpoint",
    "model",
    "optimizer",
    "lr_scheduler",
    "ckpt_path",
)


@exit_on_user_error
def main(args: list[str] | None = None) -> None:
    parser = RecipeParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--config", action=ActionConfigFile, help="a recipe (configs/*.yaml)")
    parser.add_subclass_arguments(L.LightningDataModule, "data", required=True)
    for key in OTHER_RECIPE_KEYS:
        parser.add_argument(f"--{key}", type=Any, default=None, help="(read by scripts/fit.py, ignored here)")
    cfg = parser.parse_args(args)
    # The recipe's data settings, checked as the data module checks them; no data module is made.
    name = cfg.data.class_path.rsplit(".", 1)[-1]
    if name == MultilingualCorpusDataModule.__name__:  # checks itself and reads nothing until asked
        data = MultilingualCorpusDataModule(**vars(cfg.data.init_args))
        data.prepare_data()
        print(f"prepared, in {data.cache_root}: the joint tokenizer and {len(data.corpora)} directions' token ids")
        return
    if name != ParallelCorpusDataModule.__name__:
        print(f"{name} keeps no prepared cache: nothing to prepare", file=sys.stderr)
        return
    settings = dict(vars(cfg.data.init_args))
    check_corpus_settings(settings, name)
    corpus = PreparedCorpus(settings)
    start = time.monotonic()
    cached = set(corpus.cache_root.iterdir()) if corpus.cache_root.is_dir() else set()
    corpus.prepare()
    if set(corpus.cache_root.iterdir()) == cached:
        print(f"already prepared, in {corpus.cache_root} (nothing to do):")
    else:
        print(f"prepared in {time.monotonic() - start:.0f} s, in {corpus.cache_root}:")
    for line in corpus.describe():
        print(f"  {line}")


if __name__ == "__main__":
    main()
