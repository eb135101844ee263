"""Run one recipe once per research variant (and seed) and write a table: what each option does to
the score, the size and the speed of a baseline you trust.

    .venv/bin/python scripts/ablate.py --recipe configs/mnist_subset.yaml --seeds 0 1 2 --out docs/ablation_mnist.md \
        -- --data.data_dir ../shared/data/mnist
    .venv/bin/python scripts/ablate.py --recipe configs/multi30k.yaml --variants baseline rotary my_variant.yaml \
        -- --data.data_dir ../shared/data/multi30k --trainer.max_time 00:00:10:00

docs/guide/variants.md ("Ablation") says which variants run, what the table gives and how a stopped sweep resumes.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

if __name__ == "__main__":  # run as a file, not imported as scripts.NAME (the tests)
    import _checkout  # noqa: F401  (first: the repository's packages importable, and this Python the project's)

from common.commands import invocation, program, resume_command, script_parser  # noqa: E402
from common.environment import ROOT  # noqa: E402
from common.errors import InputError, OutputError  # noqa: E402
from common.exits import exit_on_user_error, print_lines, write_fault  # noqa: E402
from common.files import atomic_output, atomic_write_text  # noqa: E402
from common.signals import Relay, Stopped  # noqa: E402
from training.variants import VARIANTS_DIR, Variant, misfit, read_variant, recipe_task, task_input, variants  # noqa: E402

RESULT = "result.json"  # in each run's folder, once the run has ended: what --resume reads back


def parse_args(argv: list[str]) -> tuple[argparse.Namespace, list[str]]:
    """The sweep's arguments, and fit.py's: those after `--`."""
    extra = argv[argv.index("--") + 1 :] if "--" in argv else []
    argv = argv[: argv.index("--")] if "--" in argv else argv
    parser = script_parser(__doc__)
    parser.add_argument("--recipe", required=True, help="a recipe in configs/, e.g. configs/mnist_subset.yaml")
    parser.add_argument(
        "--variants",
        nargs="+",
        default=None,
        help="names in configs/variants/ or paths of variant files (default: every file there that fits the recipe)",
    )
    parser.add_argument("--seeds", nargs="+", type=int, default=[0])
    parser.add_argument("--root", default=None, help="folder of the runs (default: runs/ablation/<recipe>)")
    parser.add_argument("--out", default=None, help="write the markdown table here too (and the raw results as .json beside it)")
    parser.add_argument(
        "--resume",
        action="store_true",
        help="read back the runs in --root that finished with exit status 0 instead of running them again",
    )
    args = parser.parse_args(argv)
    recipe = Path(args.recipe)
    if not recipe.is_file():
        parser.error(f"--recipe {recipe}: no such file")
    task = recipe_task(recipe)
    try:
        args.variants = [_variant(v) for v in args.variants] if args.variants else variants(task_input(task))
    except InputError as err:
        parser.error(str(err))
    labels = [v.name for v in args.variants]
    if len(set(labels)) < len(labels):
        parser.error(f"two variants share a label (their file names): {', '.join(sorted(labels))}")
    for variant in args.variants:
        if why := misfit(variant.fits, task):
            parser.error(f"variant {variant.name} does not fit {recipe}: {why}")
    args.root = Path(args.root or ROOT / "runs" / "ablation" / recipe.stem)
    return args, extra


def _variant(spec: str) -> Variant:
    """A name in configs/variants/, or the path of a variant file."""
    path = Path(spec) if spec.endswith((".yaml", ".yml")) else VARIANTS_DIR / f"{spec}.yaml"
    if not path.is_file():
        known = ", ".join(v.name for v in variants())
        raise InputError(f"unknown variant(s) {spec}: no file {path}; known: {known}, or a variant file's path")
    return read_variant(path)


def run_one(recipe: Path, variant: Variant, seed: int, folder: Path, extra: list[str], stop: Relay) -> dict:
    """One fit.py run; its summary.json, with the command, exit status and wall time added."""
    cmd = [sys.executable, str(ROOT / "scripts" / "fit.py"), "--config", str(recipe), "--config", str(variant.path)]
    cmd += ["--seed_everything", str(seed), "--trainer.default_root_dir", str(folder), "--trainer.enable_progress_bar", "false"]
    if not any(a.startswith("--trainer.logger") for a in extra):  # W&B (the default): one group, named runs
        cmd += [f"--trainer.logger.group=ablation-{recipe.stem}", f"--trainer.logger.name={variant.name}-s{seed}"]
    cmd += extra
    folder.mkdir(parents=True, exist_ok=True)
    start = time.monotonic()
    with open(folder / "output.log", "w") as log:
        status = stop.wait(cmd, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT)
    result = {
        "variant": variant.name,
        "file": str(variant.path),
        "seed": seed,
        "status": status,
        "wall_seconds": time.monotonic() - start,
        "command": " ".join(cmd[1:]),
    }
    summaries = sorted(folder.rglob("summary.json"), key=lambda p: p.stat().st_mtime)
    if status == 0 and summaries:
        result.update(json.loads(summaries[-1].read_text()), run_folder=str(summaries[-1].parent))
    return result


def score_of(result: dict) -> tuple[str, float] | None:
    """The run's headline test score: BLEU for translation, accuracy (in %) for classification."""
    test = result.get("test") or {}
    if "test/bleu" in test:
        return "test BLEU", test["test/bleu"]
    if "test/acc" in test:
        return "test accuracy (%)", 100 * test["test/acc"]
    return None


def mean_std(values: list[float]) -> str:
    if not values:
        return "–"
    if len(values) == 1:
        return f"{values[0]:.2f}"
    return f"{statistics.mean(values):.2f} ± {statistics.stdev(values):.2f}"


def versus_baseline(results: list[dict]) -> tuple[str, dict[str, str], str] | None:
    """(the baseline: the variant named so, else the first; {variant: its "Δ | p" cells}; the test's signature): each
    variant's test
    translations against the baseline's of the same seed, pooled over the seeds both ran, by sacrebleu's paired
    bootstrap (tasks/significance.py). None when no run kept its test translations (MNIST: accuracy, no test)."""
    from training.records import read_test_outputs

    names = list(dict.fromkeys(r["variant"] for r in results))
    base = "baseline" if "baseline" in names else names[0]
    runs: dict[str, dict] = {}
    for r in results:
        if r["status"] == 0 and (found := read_test_outputs(r.get("run_folder"), r.get("test_outputs"))):
            runs.setdefault(r["variant"], {})[r["seed"]] = found
    if not runs:
        return None
    from tasks.significance import pooled_bootstrap, significant

    signature = next((r["test_bleu_signature"] for r in results if r["variant"] == base and r.get("test_bleu_signature")), "")
    tokenize = next((part[4:] for part in signature.split("|") if part.startswith("tok:")), "13a")  # as the test's
    cells, signature = {base: "(baseline) | –"}, "none: no variant shares a seed with it"
    for variant in [n for n in names if n != base]:
        test = pooled_bootstrap(runs.get(base, {}), runs.get(variant, {}), tokenize)
        cells[variant] = f"{test['delta']:+.2f} | {test['p_bs']:.3f}{'*' * significant(test)}" if test else "– | –"
        signature = test["signature"] if test else signature
    return base, cells, signature


def table(results: list[dict], recipe: Path, extra: list[str]) -> str:
    scored = [score_of(r) for r in results if score_of(r)]
    metric = scored[0][0] if scored else "test score"
    monitor = next((r["monitor"] for r in results if r.get("monitor")), "best validation")
    versus = versus_baseline(results)
    paired = f" Δ BLEU vs {versus[0]}, seeds pooled | p (paired bootstrap) |" if versus else ""
    lines = [
        f"| variant | seeds | {metric} |{paired} best {monitor} | parameters | median step (ms) | wall time (min) |",
        "|---|---|---|" + ("---|---|" if versus else "") + "---|---|---|---|",
    ]
    for variant in dict.fromkeys(r["variant"] for r in results):
        runs = [r for r in results if r["variant"] == variant]
        ok = [r for r in runs if r["status"] == 0 and "parameters" in r]
        seeds_cell = f"{len(ok)}" + (f" ({len(runs) - len(ok)} failed)" if len(ok) < len(runs) else "")
        cells = f" {versus[1].get(variant, '– | –')} |" if versus else ""
        if not ok:
            lines.append(f"| {variant} | {seeds_cell} | – |{cells} – | – | – | – |")
            continue
        scale = 100 if monitor.endswith("acc") else 1
        best = [scale * r["best_score"] for r in ok if r.get("best_score") is not None]
        step_ms = statistics.median(r["step_ms"] for r in ok if r.get("step_ms")) if any(r.get("step_ms") for r in ok) else None
        wall = statistics.mean(r["wall_seconds"] for r in ok) / 60
        lines.append(
            f"| {variant} | {seeds_cell} | {mean_std([score_of(r)[1] for r in ok if score_of(r)])} |{cells} {mean_std(best)} "
            f"| {ok[0]['parameters']:,} | {f'{step_ms:.1f}' if step_ms else '–'} | {wall:.1f} |"
        )
    seeds = sorted({r["seed"] for r in results})
    own = {r["variant"]: r["file"] for r in results if r.get("file") and Path(r["file"]).parent != VARIANTS_DIR}
    lines += [
        "",
        f"Recipe `{recipe}` plus `{' '.join(extra) or '(nothing)'}`; seeds {', '.join(map(str, seeds))}; "
        "each row's variant file is `configs/variants/<variant>.yaml`"
        + "".join(f", but {name}'s is `{file}`" for name, file in own.items())
        + "."
        + (
            f" Δ, p: each variant's test translations against {versus[0]}'s of the same seed, pooled over the seeds "
            f"both ran, by sacrebleu's paired bootstrap (`{versus[2]}`); * p below 0.05 (a Δ of 0 never)."
            if versus
            else ""
        ),
    ]
    return "\n".join(lines) + "\n"


def finished(folder: Path) -> dict | None:
    """The result of the run in `folder` if it ended with exit status 0 (what --resume reads back), else None."""
    path = folder / RESULT
    result = json.loads(path.read_text()) if path.is_file() else None
    return result if result and result["status"] == 0 else None


@exit_on_user_error
def main(argv: list[str] | None = None) -> int:
    """The sweep; its exit statuses (a signal: 128 + its number) are in docs/guide/faults-and-exits.md."""
    script, argv = invocation(argv, "ablate")
    args, extra = parse_args(argv)
    recipe = Path(args.recipe)
    stop = Relay()
    results = []
    plan = [(variant, seed) for seed in args.seeds for variant in args.variants]  # each variant once before any repeats
    with contextlib.suppress(Stopped), contextlib.ExitStack() as outputs:
        if args.out:
            out = Path(args.out)
            try:
                out.parent.mkdir(parents=True, exist_ok=True)
            except OSError as err:
                raise OutputError(write_fault(err, out), err.errno) from None
            table_tmp = outputs.enter_context(atomic_output(out))
            json_tmp = outputs.enter_context(atomic_output(out.with_suffix(".json")))
        for number, (variant, seed) in enumerate(plan, 1):
            folder = args.root / f"{variant.name}-s{seed}"
            if stop.signum is not None:
                break
            which = f"[{number}/{len(plan)}] {variant.name} seed {seed}"
            if args.resume and (result := finished(folder)):
                print_lines(f"{which}: finished before, read back from {folder / RESULT}")
                results.append(result)
                continue
            print_lines(f"{which}: running {program(str(variant.path))}, output in {folder / 'output.log'}")
            result = run_one(recipe, variant, seed, folder, extra, stop)
            if stop.signum is not None:
                break  # stopped by the signal: not a finished run
            atomic_write_text(folder / RESULT, json.dumps(result, indent=1) + "\n")  # whole, or not there for --resume
            shown = score_of(result)
            if result["status"] != 0:
                shown = f"failed (exit {result['status']}), see {folder / 'output.log'}"
            else:
                shown = f"{shown[0]} {shown[1]:.2f}" if shown else f"best {result.get('monitor')} {result.get('best_score')}"
            print_lines(f"{variant.name} seed {seed}: {shown}")
            results.append(result)
        if stop.signum is not None:
            name = signal.Signals(stop.signum).name
            print_lines(f"stopped by {name}: {len(results)} of {len(plan)} runs finished" + (":\n" if results else "."))
            if results:
                print_lines(table(results, recipe, extra))
            print_lines(f"resume the rest with: {resume_command(argv, script, switch='--resume')}")
            raise Stopped(stop.signum)  # out of the outputs: --out is written only with a complete table
        text = table(results, recipe, extra)
        print_lines(text)
        if args.out:
            table_tmp.write_text(text)
            json_tmp.write_text(json.dumps(results, indent=1) + "\n")
    if stop.signum is not None:
        return 128 + stop.signum
    return 0 if all(r["status"] == 0 for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
