"""Compare two or more systems' translations of one test set: BLEU and chrF with paired significance tests.

    .venv/bin/python scripts/compare.py --ref data/multi30k/test_2016_flickr.en.gz --hyps baseline.txt rotary.txt
    .venv/bin/python scripts/compare.py --ref REF --hyps BASE SYS1 SYS2 [--metrics bleu] [--paired-bs-n 1000] \
        [--paired-ar-n 10000] [--seed 12345] [--json results.json]
    .venv/bin/python scripts/compare.py --ref REF --hyps a_s0.txt,a_s1.txt,a_s2.txt b_s0.txt,b_s1.txt,b_s2.txt

docs/guide/decoding.md ("Comparing systems") says what each number is and how it matches sacrebleu's.
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

if __name__ == "__main__":  # run as a file, not imported as scripts.NAME (the tests)
    import _checkout  # noqa: F401  (first: the repository's packages importable, and this Python the project's)

from common.commands import add_tokenize_argument, require_at_least_one, script_parser  # noqa: E402
from common.errors import InputError  # noqa: E402
from common.exits import exit_on_user_error, print_lines  # noqa: E402
from common.files import atomic_output, require_file  # noqa: E402

NAMES = {"bleu": "BLEU", "chrf": "chrF"}


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = script_parser(__doc__)
    parser.add_argument("--ref", required=True, help="the reference translations, one a line (plain or .gz)")
    parser.add_argument(
        "--hyps",
        nargs="+",
        required=True,
        metavar="SYS",
        help="each system's translations, line-aligned with --ref; the first is the baseline. A system run with "
        "several seeds: its files joined by commas, as many for every system, the i-th of each paired with the "
        "baseline's i-th",
    )
    parser.add_argument("--metrics", nargs="+", choices=list(NAMES), default=list(NAMES), help="(default: bleu chrf)")
    add_tokenize_argument(parser)
    parser.add_argument("--paired-bs-n", type=int, default=1000, help="bootstrap resamples (default: 1000, as sacrebleu)")
    parser.add_argument(
        "--paired-ar-n", type=int, default=10000, help="approximate randomisation trials (default: 10000, as sacrebleu)"
    )
    parser.add_argument("--seed", type=int, default=12345, help="the tests' seed (default: 12345, sacrebleu's)")
    parser.add_argument("--json", default=None, metavar="OUT", help="also write the results to this file as JSON")
    args = parser.parse_args(argv)
    require_at_least_one(parser, args, "paired_bs_n", "paired_ar_n")
    if args.seed < 1:  # sacrebleu takes a seed of 0 for none (its PairedTest: `seed if seed else None`)
        parser.error("--seed must be at least 1 (sacrebleu takes 0 as no seed)")
    args.metrics = list(dict.fromkeys(args.metrics))
    return args


def read_files(ref: str, hyps: list[str]) -> tuple[list[str], list[list[list[str]]]]:
    """The references and each system's lines, one list a seed, of equal counts: else one line naming the file and
    both counts."""
    if len(hyps) < 2:
        raise InputError(f"--hyps: give at least two systems, the baseline first (got {len(hyps)})")
    seeds = [[h] if Path(h).is_file() else h.split(",") for h in hyps]  # a file whose name has a comma is one file
    if len({len(files) for files in seeds}) > 1:
        counts = ", ".join(f"{h} {len(files)}" for h, files in zip(hyps, seeds))
        raise InputError(f"--hyps: every system needs as many seeds' files, the i-th of each paired ({counts})")
    every = [f for files in seeds for f in files]
    if twice := sorted({f for f in every if every.count(f) > 1}):
        raise InputError(f"--hyps: {twice[0]} given twice: each file once, the baseline first")
    paths = [require_file(ref, "--ref"), *(require_file(f, "--hyps") for f in every)]
    from datamodules.corpus_readers import iter_lines  # gzip or plain; undecodable text is one line naming it

    refs, *lines = [list(iter_lines(path)) for path in paths]
    if not refs:
        raise InputError(f"{ref} is empty: nothing to compare")
    for path, read in zip(every, lines):
        if len(read) != len(refs):
            raise InputError(f"{path} has {len(read)} lines but {ref} has {len(refs)}: each line translates one reference")
    k = len(seeds[0])
    return refs, [lines[i : i + k] for i in range(0, len(lines), k)]


def table(results: dict, metric: str) -> list[str]:
    """One metric's lines: each system's score, mean ± CI, and but for the baseline Δ and p-values."""
    width = max(len(r["name"]) for r in results["systems"]) + len(" (baseline)")
    lines = [f"{NAMES[metric]:<{width}}  {'score':>6}  {'mean ± 95% CI':>15}  {'Δ':>6}  {'p (bootstrap)':>13}  {'p (AR)':>8}"]
    for row in results["systems"]:
        cell = row[metric]
        name = row["name"] + (" (baseline)" if row["baseline"] else "")
        line = f"{name:<{width}}  {cell['score']:6.2f}  {cell['mean']:8.2f} ± {cell['ci']:4.2f}"
        if not row["baseline"]:
            same = cell["delta"] == 0  # sacrebleu's p is its floor there: no difference, nothing significant
            line += f"  {cell['delta']:+6.2f}  {_p(cell['p_bs'], same):>13}  {_p(cell['p_ar'], same):>8}"
        lines.append(line)
    lines += [f"  signature ({test}): {sig}" for test, sig in results["signatures"][metric].items()]
    return lines


def _p(value: float | None, same: bool) -> str:
    return "–" if value is None else f"{value:.4f}" + ("*" if value < 0.05 and not same else " ")


def by_seed(per_seed: list[dict], metric: str) -> list[str]:
    """Several seeds: each system's score on each seed, their mean and standard deviation, and but for the baseline
    each seed's Δ and bootstrap p against the baseline's run of the same seed."""
    rows = [[results["systems"][i][metric] for results in per_seed] for i in range(len(per_seed[0]["systems"]))]
    names = [row["name"] for row in per_seed[0]["systems"]]
    width = max(len(n) for n in names) + len(" (baseline)")
    cells = [
        [f"{c['score']:6.2f}" + (f" ({c['delta']:+.2f}, p {c['p_bs']:.3f})" if i else "") for c in row]
        for i, row in enumerate(rows)
    ]
    column = max(len(cell) for row in cells for cell in row)
    lines = [f"{NAMES[metric]} by seed ({len(per_seed)}; Δ and p (bootstrap) against the baseline's run of the seed)"]
    for i, (name, row) in enumerate(zip(names, rows)):
        scores = [c["score"] for c in row]
        each = "  ".join(cell.ljust(column) for cell in cells[i])
        spread = f"mean {statistics.mean(scores):.2f} ± {statistics.stdev(scores):.2f} sd"
        lines.append(f"{name + (' (baseline)' if not i else ''):<{width}}  {each}  {spread}")
    return lines


@exit_on_user_error
def main(argv: list[str] | None = None) -> dict:
    args = parse_args(argv)
    refs, systems = read_files(args.ref, args.hyps)
    # --json's place is tried (a temporary file beside it) before the tests; the file appears only once complete.
    with atomic_output(args.json) as json_tmp:
        from tasks.metrics import default_bleu_tokenize
        from tasks.significance import paired_tests, pooled

        tokenize = args.tokenize or default_bleu_tokenize(refs)
        k = len(systems[0])

        def test(seed_lines: list[list[str]], references: list[str]) -> dict:
            named = list(zip(args.hyps, seed_lines))
            return paired_tests(named, references, args.metrics, tokenize, args.paired_bs_n, args.paired_ar_n, args.seed)

        # Several seeds: pooled, the i-th run of each system against the baseline's i-th, one test set repeated.
        results = test([pooled(runs) for runs in systems], pooled([refs] * k))
        results["references"], results["pooled_seeds"] = args.ref, k
        if k > 1:
            results["by_seed"] = [test([runs[i] for runs in systems], refs) for i in range(k)]
        if json_tmp is not None:
            json_tmp.write_text(json.dumps(results, indent=1) + "\n", encoding="utf-8")
    pooled = f"; {k} seeds a system, pooled (the i-th run of each paired with the baseline's i-th)" if k > 1 else ""
    print_lines(
        f"{len(refs)} sentences of {args.ref}; baseline {args.hyps[0]}; paired bootstrap: {args.paired_bs_n} "
        f"resamples, approximate randomisation (AR): {args.paired_ar_n} trials; seed {args.seed}{pooled}",
        *("\n" + "\n".join(table(results, metric)) for metric in args.metrics),
        *("\n" + "\n".join(by_seed(results["by_seed"], metric)) for metric in (args.metrics if k > 1 else [])),
        "\nmean ± 95% CI: the bootstrap's estimate of the system's score (not of the difference); Δ: score minus the "
        "baseline's; p: the chance of an absolute difference this large were the system and the baseline one "
        "process, * below 0.05 (a Δ of 0 never)",
    )
    return results


if __name__ == "__main__":
    main()
