"""Compare two or more systems' translations of one test set: BLEU and chrF with paired significance tests.

    .venv/bin/python scripts/compare.py --ref data/multi30k/test_2016_flickr.en.gz --hyps baseline.txt rotary.txt
    .venv/bin/python scripts/compare.py --ref REF --hyps BASE SYS1 SYS2 [--metrics bleu] [--paired-bs-n 1000] \
        [--paired-ar-n 10000] [--seed 12345] [--json results.json]

docs/guide/decoding.md ("Comparing systems") says what each number is and how it matches sacrebleu's.
"""

from __future__ import annotations

import argparse
import json

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
        help="each system's translations, line-aligned with --ref; the first is the baseline",
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


def read_files(ref: str, hyps: list[str]) -> tuple[list[str], list[list[str]]]:
    """The references and each system's lines, of equal counts: else one line naming the file and both counts."""
    if len(hyps) < 2:
        raise InputError(f"--hyps: give at least two systems, the baseline first (got {len(hyps)})")
    if twice := sorted({h for h in hyps if hyps.count(h) > 1}):
        raise InputError(f"--hyps: {twice[0]} given twice: each system once, the baseline first")
    paths = [require_file(ref, "--ref"), *(require_file(h, "--hyps") for h in hyps)]
    from datamodules.corpus_readers import iter_lines  # gzip or plain; undecodable text is one line naming it

    refs, *systems = [list(iter_lines(path)) for path in paths]
    if not refs:
        raise InputError(f"{ref} is empty: nothing to compare")
    for path, lines in zip(hyps, systems):
        if len(lines) != len(refs):
            raise InputError(f"{path} has {len(lines)} lines but {ref} has {len(refs)}: each line translates one reference")
    return refs, systems


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


@exit_on_user_error
def main(argv: list[str] | None = None) -> dict:
    args = parse_args(argv)
    refs, systems = read_files(args.ref, args.hyps)
    # --json's place is tried (a temporary file beside it) before the tests; the file appears only once complete.
    with atomic_output(args.json) as json_tmp:
        from tasks.metrics import default_bleu_tokenize
        from tasks.significance import paired_tests

        tokenize = args.tokenize or default_bleu_tokenize(refs)
        named = list(zip(args.hyps, systems))
        results = paired_tests(named, refs, args.metrics, tokenize, args.paired_bs_n, args.paired_ar_n, args.seed)
        results["references"] = args.ref
        if json_tmp is not None:
            json_tmp.write_text(json.dumps(results, indent=1) + "\n", encoding="utf-8")
    print_lines(
        f"{len(refs)} sentences of {args.ref}; baseline {args.hyps[0]}; paired bootstrap: {args.paired_bs_n} "
        f"resamples, approximate randomisation (AR): {args.paired_ar_n} trials; seed {args.seed}",
        *("\n" + "\n".join(table(results, metric)) for metric in args.metrics),
        "\nmean ± 95% CI: the bootstrap's estimate of the system's score (not of the difference); Δ: score minus the "
        "baseline's; p: the chance of an absolute difference this large were the system and the baseline one "
        "process, * below 0.05 (a Δ of 0 never)",
    )
    return results


if __name__ == "__main__":
    main()
