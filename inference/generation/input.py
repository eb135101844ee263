"""What scripts/generate.py decodes: a text file (with its references, if given), or a split of a corpus read through
the data module's own sources (datamodules/sources.py), and the languages that name the output files."""

from __future__ import annotations

import contextlib
import inspect
import re
from pathlib import Path

from common.checkpoints import read_checkpoint
from common.errors import CheckpointError, InputError
from common.files import require_file
from common.runs import data_settings, run_record
from datamodules.corpus_readers import iter_aligned, iter_lines
from datamodules.languages import parse_direction
from datamodules.sources import SPLITS, corpus_source


def add_input_arguments(parser) -> None:
    group = parser.add_argument_group("input: a file, or a corpus's split")
    group.add_argument("--src", help="sentences to decode, one a line (plain or .gz)")
    group.add_argument("--ref", help="their references, line-aligned with --src: written beside the outputs")
    group.add_argument("--data-dir", help="a corpus folder, read as --data.data_dir is by scripts/fit.py")
    group.add_argument("--format", default="aligned", choices=["aligned", "tatoeba", "hf"], help="the corpus's format")
    group.add_argument("--split", default="train", choices=SPLITS, help="the corpus's split to decode (default: train)")
    group.add_argument("--dataset", help="--format hf: a Hugging Face dataset (default: local files in --data-dir)")
    group.add_argument("--dataset-config", help="--format hf: the dataset's configuration")
    group.add_argument("--src-lang", help="the input's language (default: from the run that made the model, or --src's name)")
    # --tgt-lang, the outputs' language, is the decoding flag (inference.flags): a multilingual model is asked for it


def languages(args, engine) -> tuple[str, str]:
    """The source and target languages, for the files' names: as given, else the training run's (the checkpoint's
    data settings, or its run's config.yaml beside or above it), else the source's from --src's name (train.de.gz:
    de). A bilingual model whose run names its languages takes no others (its English outputs in `train.fr` would be
    a corpus that lies); a multilingual model's are ISO 639-1 codes, as its data module reads them."""
    run = trained_languages(args.ckpt[0]) if args.engine == "torch" else {}
    named = re.fullmatch(r".*\.([A-Za-z_-]{2,8})", Path(args.src).name.removesuffix(".gz")) if args.src else None
    src = args.src_lang or run.get("src_lang") or (named.group(1) if named else None)
    tgt = args.tgt_lang or run.get("tgt_lang")
    if not src or not tgt:
        missing = " and ".join(flag for flag, lang in (("--src-lang", src), ("--tgt-lang", tgt)) if not lang)
        raise InputError(f"give {missing}: the output files are named by language (DIR/PREFIX.LANG)")
    if src == tgt:
        raise InputError(f"--src-lang and --tgt-lang are both {src!r}: the two files would be one")
    if not engine.languages:
        flags = (("--src-lang", args.src_lang, run.get("src_lang")), ("--tgt-lang", args.tgt_lang, run.get("tgt_lang")))
        for flag, given, trained in flags:
            if given and trained and given != trained:
                raise InputError(
                    f"{flag} {given}: this model was trained {run['src_lang']}→{run['tgt_lang']} ({args.ckpt[0]}'s run), "
                    f"so its {'input' if flag == '--src-lang' else 'outputs'} are {trained}: give {trained}, or no {flag}"
                )
    else:
        parse_direction(f"{src}-{tgt}", "--src-lang/--tgt-lang")  # the multilingual data module's codes
    return src, tgt


def trained_languages(ckpt: str) -> dict:
    """The languages a checkpoint's run was trained on: its data module's saved settings, else its config.yaml's."""
    with contextlib.suppress(CheckpointError):
        saved = read_checkpoint(ckpt, verify=False).get("datamodule_hyper_parameters") or {}
        if saved.get("src_lang") and saved.get("tgt_lang"):
            return {"src_lang": saved["src_lang"], "tgt_lang": saved["tgt_lang"]}
    return data_settings(run_record(Path(ckpt)).get("config", ""))


def read_input(args, src_lang: str, tgt_lang: str) -> tuple[list[str], list[str] | None, str, int]:
    """The source lines, the references (None without), a description of where they came from (a corpus split is
    read in the direction `src_lang` → `tgt_lang`, `languages(args)`), and how many --src lines had spaces at an end:
    decoded and written stripped, as the data module reads every line."""
    if bool(args.src) == bool(args.data_dir):
        raise InputError("give the input as --src FILE or as --data-dir DIR (with --format and --split), one of them")
    if args.src:
        require_file(args.src, "--src")
        if args.ref:
            require_file(args.ref, "--ref")
            raw, refs = zip(*iter_aligned(Path(args.src), Path(args.ref), strip=False))
            refs = [t.strip() for t in refs]
        else:
            raw, refs = list(iter_lines(Path(args.src), strip=False)), None
        if not raw:
            raise InputError(f"{args.src} is empty: nothing to generate")
        sources = [line.strip() for line in raw]
        return sources, refs, args.src, sum(a != b for a, b in zip(raw, sources))
    if args.ref:
        raise InputError("--ref goes with --src: a corpus's split has its references")
    from datamodules.corpus import ParallelCorpusDataModule  # Lightning's: here, not before generate.py's arguments

    defaults = {k: p.default for k, p in inspect.signature(ParallelCorpusDataModule.__init__).parameters.items() if k != "self"}
    settings = {**defaults, "data_dir": args.data_dir, "format": args.format, "src_lang": src_lang, "tgt_lang": tgt_lang}
    settings.update(dataset=args.dataset, dataset_config=args.dataset_config)
    source = corpus_source(settings)
    pairs = list(source.pairs(args.split))
    return [s for s, _ in pairs], [t for _, t in pairs], source.describe(args.split), 0
