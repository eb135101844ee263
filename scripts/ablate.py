"""Run one recipe once per research variant (and seed) and write a table: what each option does to
the score, the size and the speed of a baseline you trust.

    python scripts/ablate.py --recipe configs/mnist_subset.yaml --seeds 0 1 2 --out docs/ablation_mnist.md \
        -- --data.data_dir ../shared/data/mnist
    python scripts/ablate.py --recipe configs/multi30k.yaml --variants baseline rotary swiglu \
        -- --data.data_dir ../shared/data/multi30k --trainer.max_time 00:00:10:00

Each run is `scripts/fit.py --config RECIPE --config configs/variants/<variant>.yaml --seed_everything S`
plus whatever follows `--`, in a folder of its own under `--root`, one run after another. W&B logs
them in one group, `ablation-<recipe>`, each named `<variant>-s<seed>`. The table gives, per
variant: the test score (mean ± sample standard deviation over the seeds), the best validation
score, the parameters, the median training step and the wall time of a run. One seed gives no
standard deviation: read differences smaller than the seed-to-seed spread as noise.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # run from a checkout without `pip install -e .` too
VARIANTS_DIR = ROOT / "configs" / "variants"

from common.environment import require_environment  # noqa: E402

require_environment()  # another Python than the project's: one line naming .venv/bin/python, not a traceback

from common.errors import OutputError  # noqa: E402
from common.exits import exit_on_user_error, write_fault, writing_to  # noqa: E402
from common.files import atomic_output  # noqa: E402


def variant_names() -> list[str]:
    names = sorted(p.stem for p in VARIANTS_DIR.glob("*.yaml"))
    return ["baseline"] + [n for n in names if n != "baseline"]


def parse_args(argv: list[str] | None = None) -> tuple[argparse.Namespace, list[str]]:
    argv = list(sys.argv[1:] if argv is None else argv)
    extra = argv[argv.index("--") + 1 :] if "--" in argv else []
    argv = argv[: argv.index("--")] if "--" in argv else argv
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], allow_abbrev=False, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--recipe", required=True, help="a recipe in configs/, e.g. configs/mnist_subset.yaml")
    parser.add_argument(
        "--variants", nargs="+", default=None, help=f"names in configs/variants/ (default: all, {', '.join(variant_names())})"
    )
    parser.add_argument("--seeds", nargs="+", type=int, default=[0])
    parser.add_argument("--root", default=None, help="folder of the runs (default: runs/ablation/<recipe>)")
    parser.add_argument("--out", default=None, help="write the markdown table here too (and the raw results as .json beside it)")
    args = parser.parse_args(argv)
    recipe = Path(args.recipe)
    if not recipe.is_file():
        parser.error(f"--recipe {recipe}: no such file")
    args.variants = args.variants or variant_names()
    unknown = [v for v in args.variants if not (VARIANTS_DIR / f"{v}.yaml").is_file()]
    if unknown:
        parser.error(f"unknown variant(s) {', '.join(unknown)}; known: {', '.join(variant_names())}")
    args.root = Path(args.root or ROOT / "runs" / "ablation" / recipe.stem)
    return args, extra


def run_one(recipe: Path, variant: str, seed: int, folder: Path, extra: list[str]) -> dict:
    """One fit.py run; its summary.json, with the command, exit status and wall time added."""
    cmd = [
        sys.executable,
        str(ROOT / "scripts" / "fit.py"),
        "--config",
        str(recipe),
        "--config",
        str(VARIANTS_DIR / f"{variant}.yaml"),
        "--seed_everything",
        str(seed),
        "--trainer.default_root_dir",
        str(folder),
        "--trainer.enable_progress_bar",
        "false",
    ]
    if not any(a.startswith("--trainer.logger") for a in extra):  # W&B (the default): one group, named runs
        cmd += [f"--trainer.logger.group=ablation-{recipe.stem}", f"--trainer.logger.name={variant}-s{seed}"]
    cmd += extra
    folder.mkdir(parents=True, exist_ok=True)
    start = time.monotonic()
    with open(folder / "output.log", "w") as log:
        status = subprocess.run(cmd, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT).returncode
    result = {
        "variant": variant,
        "seed": seed,
        "status": status,
        "wall_seconds": time.monotonic() - start,
        "command": " ".join(cmd[1:]),
    }
    summaries = sorted(folder.rglob("summary.json"), key=lambda p: p.stat().st_mtime)
    if status == 0 and summaries:
        result.update(json.loads(summaries[-1].read_text()))
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


def table(results: list[dict], recipe: Path, extra: list[str]) -> str:
    scored = [score_of(r) for r in results if score_of(r)]
    metric = scored[0][0] if scored else "test score"
    monitor = next((r["monitor"] for r in results if r.get("monitor")), "best validation")
    lines = [
        f"| variant | seeds | {metric} | best {monitor} | parameters | median step (ms) | wall time (min) |",
        "|---|---|---|---|---|---|---|",
    ]
    for variant in dict.fromkeys(r["variant"] for r in results):
        runs = [r for r in results if r["variant"] == variant]
        ok = [r for r in runs if r["status"] == 0 and "parameters" in r]
        seeds_cell = f"{len(ok)}" + (f" ({len(runs) - len(ok)} failed)" if len(ok) < len(runs) else "")
        if not ok:
            lines.append(f"| {variant} | {seeds_cell} | – | – | – | – | – |")
            continue
        scale = 100 if monitor.endswith("acc") else 1
        best = [scale * r["best_score"] for r in ok if r.get("best_score") is not None]
        step_ms = statistics.median(r["step_ms"] for r in ok if r.get("step_ms")) if any(r.get("step_ms") for r in ok) else None
        wall = statistics.mean(r["wall_seconds"] for r in ok) / 60
        lines.append(
            f"| {variant} | {seeds_cell} | {mean_std([score_of(r)[1] for r in ok if score_of(r)])} | {mean_std(best)} "
            f"| {ok[0]['parameters']:,} | {f'{step_ms:.1f}' if step_ms else '–'} | {wall:.1f} |"
        )
    seeds = sorted({r["seed"] for r in results})
    lines += [
        "",
        f"Recipe `{recipe}` plus `{' '.join(extra) or '(nothing)'}`; seeds {', '.join(map(str, seeds))}; "
        "each row's variant file is `configs/variants/<variant>.yaml`.",
    ]
    return "\n".join(lines) + "\n"


@exit_on_user_error
def main(argv: list[str] | None = None) -> int:
    """A full disk or an unwritable --out or --root is one line naming it, exit status 1; --out's place
    is tried (temporary files beside it) before the first run, and the table and its .json appear only
    once complete."""
    args, extra = parse_args(argv)
    recipe = Path(args.recipe)
    results = []
    with contextlib.ExitStack() as outputs:
        if args.out:
            out = Path(args.out)
            try:
                out.parent.mkdir(parents=True, exist_ok=True)
            except OSError as err:
                raise OutputError(write_fault(err, out), err.errno) from None
            table_tmp = outputs.enter_context(atomic_output(out))
            json_tmp = outputs.enter_context(atomic_output(out.with_suffix(".json")))
        for seed in args.seeds:  # every variant once before any is repeated: a partial sweep is still a table
            for variant in args.variants:
                result = run_one(recipe, variant, seed, args.root / f"{variant}-s{seed}", extra)
                shown = score_of(result)
                if result["status"] != 0:
                    shown = f"failed (exit {result['status']}), see {args.root / f'{variant}-s{seed}' / 'output.log'}"
                else:
                    shown = f"{shown[0]} {shown[1]:.2f}" if shown else f"best {result.get('monitor')} {result.get('best_score')}"
                with writing_to("standard output"):
                    print(f"{variant} seed {seed}: {shown}", flush=True)
                results.append(result)
        text = table(results, recipe, extra)
        with writing_to("standard output"):
            print(text, flush=True)
        if args.out:
            table_tmp.write_text(text)
            json_tmp.write_text(json.dumps(results, indent=1) + "\n")
    return 0 if all(r["status"] == 0 for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
