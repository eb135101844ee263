"""How soon the scripts answer: the wall time of each script's `--help` and of one argument error (the median of
--repeats runs, each a fresh interpreter), and of `from inference import Translator`; their CPU time (which a core
shared with other work leaves about as it is), the heavy packages each imported and its costliest imports
(`python -X importtime`, a run not timed).

    taskset -c 1 .venv/bin/python benchmarks/startup.py                  # pinned to one idle core
    taskset -c 1 .venv/bin/python benchmarks/startup.py --only translate fit --json startup.json

A help or an argument error is answered before torch, Lightning, torchvision, transformers, datasets or sacrebleu
load (tests/test_imports.py). scripts/fit.py's and prepare.py's parsers are jsonargparse's, built from Lightning's
classes (`import lightning` loads torchmetrics, which loads torchvision, transformers and matplotlib where they are
installed): their `--help` and the errors it can tell (an unknown option, a missing `--config` file, a word where
a number or a listed choice is wanted) come from the parser's text, stored in scripts/help/; fit.py's case here is
a value of the wrong type, prepare.py's an unknown option. An option under `--model.` or `--data.`, and the types
the text cannot judge (paths, classes), are still the parser's, seconds later.
The standard library only: the measuring interpreter imports nothing it measures."""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
HEAVY = ("torch", "lightning", "torchvision", "transformers", "datasets", "sacrebleu")
# Each script's one argument error: its arguments (paths that need not exist: the error comes first) and a
# word of its `error:` line (argparse's begins with the program's name; jsonargparse's goes on for a few lines).
ERRORS = {
    "translate": (["--ckpt", "missing.ckpt", "--batch-size", "0", "Ein Hund rennt."], "--batch-size"),
    "evaluate": (["--ckpt", "missing.ckpt", "--src", "s.de", "--ref", "r.en", "--batch-size", "0"], "--batch-size"),
    "generate": (["--ckpt", "missing.ckpt", "--src", "s.de", "--output", "out", "--shard-size", "0"], "--shard-size"),
    "export": (["--ckpt", "missing.ckpt", "--to", "hf", "--quantization", "int8", "out"], "--quantization"),
    "average_checkpoints": (["runs", "--last", "1", "--out", "avg.ckpt"], "--last"),
    "prepare": (["--config", "configs/toy_translation.yaml", "--dat.data_dir", "x"], "--dat.data_dir"),
    "import_pretrained": (["opus-mt-de-en", "--out", "m.ckpt", "--length-penalty", "-1"], "--length-penalty"),
    "fit": (["--config", "configs/toy_translation.yaml", "--trainer.max_epochs", "many"], "max_epochs"),
    "compare": (["--ref", "ref.en", "--hyps", "a.en", "b.en", "--seed", "0"], "--seed"),  # where the checkout has it
}
TRANSLATOR = "from inference import Translator"


def command(case: str, root: Path) -> list[str]:
    """The command of a case: `SCRIPT --help`, `SCRIPT error`, or the import."""
    if case == "import":
        return [sys.executable, "-c", TRANSLATOR]
    name, kind = case.split(" ")
    return [sys.executable, str(root / "scripts" / f"{name}.py"), *(["--help"] if kind == "--help" else ERRORS[name][0])]


def check(case: str, result: subprocess.CompletedProcess) -> str | None:
    """What is wrong with a case's run, or None: a help exits 0 with a usage, an error 2 with its `error:` line."""
    if case == "import" or case.endswith("--help"):
        ok = result.returncode == 0 and (case == "import" or "usage" in result.stdout.lower())
        return None if ok else f"exit status {result.returncode}: {result.stderr.strip()[-300:]}"
    word = ERRORS[case.split(" ")[0]][1]
    said = re.search(r"^(\S+: )?error: .*", result.stderr, flags=re.M)  # argparse's line has the program first
    if result.returncode != 2 or "Traceback" in result.stderr or not said or word not in result.stderr[said.start() :]:
        return f"exit status {result.returncode}: {result.stderr.strip()[-300:]!r}"
    return None


def timed(cmd: list[str], root: Path, env: dict) -> tuple[float, float, subprocess.CompletedProcess]:
    """The wall time of a run, its CPU time (user and system: what a core shared with other work still tells),
    and the run."""
    before, start = resource.getrusage(resource.RUSAGE_CHILDREN), time.perf_counter()
    result = subprocess.run(cmd, capture_output=True, text=True, cwd=root, env=env)
    wall, after = time.perf_counter() - start, resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime, result


def imports(cmd: list[str], root: Path, env: dict) -> tuple[list[str], list[tuple[str, float]]]:
    """The heavy packages a run imports and its five costliest top-level imports (cumulative seconds)."""
    result = subprocess.run([cmd[0], "-X", "importtime", *cmd[1:]], capture_output=True, text=True, cwd=root, env=env)
    rows = re.findall(r"^import time:\s+\d+ \|\s+(\d+) \|( *)(\S+)$", result.stderr, flags=re.M)
    heavy = sorted({name.partition(".")[0] for _, _, name in rows} & set(HEAVY))
    top = sorted(((name, int(us) / 1e6) for us, indent, name in rows if indent == " "), key=lambda r: -r[1])[:5]
    return heavy, top


def cpu() -> str:
    info = Path("/proc/cpuinfo").read_text() if Path("/proc/cpuinfo").exists() else ""
    names = re.findall(r"^model name\s*:\s*(.*)$", info, flags=re.M)
    return names[0] if names else platform.processor() or platform.machine()


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=3, help="runs of each case; the median is reported (default: 3)")
    parser.add_argument("--only", nargs="+", choices=sorted(ERRORS), help="these scripts only (default: all)")
    parser.add_argument("--no-import", action="store_true", help="leave out the `from inference import Translator` row")
    parser.add_argument("--root", type=Path, default=ROOT, help="the checkout measured (default: this one; an earlier "
                        "commit's, from `git archive`, with this interpreter)")  # fmt: skip
    parser.add_argument("--json", default=None, help="also write the results here")
    args = parser.parse_args(argv)
    root = args.root.resolve()
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(root), "WANDB_MODE": "offline"}
    names = [name for name in args.only or ERRORS if (root / "scripts" / f"{name}.py").is_file()]
    cases = [f"{name} {kind}" for name in names for kind in ("--help", "error")]
    cases += [] if args.no_import else ["import"]
    cores = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []
    print(f"{root}: {cpu()}; cores {cores}; python {platform.python_version()}; median of {args.repeats} runs")
    print(f"| {'case':32} | wall s | min s |  CPU s | heavy imports (importtime)   | costliest imports (s)")
    print(f"|{'-' * 34}|{'-' * 8}|{'-' * 7}|{'-' * 8}|{'-' * 30}|{'-' * 40}")
    results = []
    for case in cases:
        cmd = command(case, root)
        runs = [timed(cmd, root, env) for _ in range(args.repeats)]
        wall, cpu_s = [w for w, _, _ in runs], [c for _, c, _ in runs]
        problem = check(case, runs[-1][2])
        heavy, top = imports(cmd, root, env)
        label = TRANSLATOR if case == "import" else f"{case.split()[0]}.py {case.split()[1]}"
        costly = ", ".join(f"{name} {s:.2f}" for name, s in top)
        print(
            f"| {label:32} | {statistics.median(wall):6.2f} | {min(wall):5.2f} | {statistics.median(cpu_s):6.2f} "
            f"| {', '.join(heavy) or 'none':28} | {costly}" + (f"  WRONG: {problem}" if problem else ""),
            flush=True,
        )
        results.append(
            dict(case=label, median_s=statistics.median(wall), min_s=min(wall), cpu_s=statistics.median(cpu_s),
                 heavy_imports=heavy, costliest_imports=top, problem=problem)
        )  # fmt: skip
    data = {"root": str(root), "cpu": cpu(), "cores": cores, "python": platform.python_version(), "results": results}
    if args.json:
        Path(args.json).write_text(json.dumps({**data, "repeats": args.repeats}, indent=2) + "\n")
    return data


if __name__ == "__main__":
    main()
