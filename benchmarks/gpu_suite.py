"""The project's GPU measurements in two parts that each fit five minutes on one H100, first step to last table
(a cluster's debug slot), run from a checkout's root with the project's venv, or on a machine's own PyTorch without
installing the project (its `python3` in place of `.venv/bin/python`; docs/guide/gpu-suite.md):

    PYTHONPATH=. .venv/bin/python benchmarks/gpu_suite.py --out runs/gpu_suite                 # both parts, 10 minutes
    PYTHONPATH=. .venv/bin/python benchmarks/gpu_suite.py --out runs/gpu_suite --part speed    # within 5 minutes
    PYTHONPATH=. .venv/bin/python benchmarks/gpu_suite.py --out runs/gpu_suite --part quality  # within 5 minutes
    PYTHONPATH=. .venv/bin/python benchmarks/gpu_suite.py --out /tmp/suite --device cpu --tiny  # toy size (CI)

The speed part:
  1. test_cuda: tests/test_cuda.py, the core's invariants on the device; a failing test stops the part;
  2. peers_base: benchmarks/peers.py at base size (bf16, on Multi30k's token-budget batches when --data-dir has
     them): training tokens/s, MFU and peak memory against torch.nn.Transformer, HF Marian and x-transformers;
     greedy and beam-4 decoding at batch 1 and 64, ours with and without the static cache captured in CUDA graphs,
     against HF `generate` and CTranslate2;
  3. peers_big: the same at big size, training only (MFU).
The quality part:
  4. multi30k_gpu: configs/multi30k_gpu.yaml trained for what the part's budget leaves (its max_time set to the
     step's limit less FIT_RESERVE_S for start-up and the test), then tested: test BLEU and wall time.
     With --tiny: multi30k_gpu_tiny, the same recipe with every setting its own (compiled with dynamic shapes,
     fused AdamW, EMA, BLEU validation, the beam test) but the sizes in TINY_SIZES, on a slice of Multi30k
     (TINY_PAIRS): the path a GPU run takes, rehearsed on the CPU in CI (no score).

Each step is a subprocess with its own time limit; one whose limit exceeds what is left of its part's budget is
skipped with a line saying so. A missing requirement (torch older than MIN_TORCH, a package the project imports,
pytest for the speed part, jsonargparse for scripts/fit.py) stops the suite with one line and exit status 2
before any step; a missing optional peer (transformers, x-transformers, ctranslate2) is named in one line and its
rows are left out. Each step writes `<step>.md` (its tables), `<step>.json` (its numbers) and `<step>.log` (its
stderr) into --out; `suite.md` holds the device, driver, torch, CUDA, commit and every step's figures in the form
of docs/results/benchmarks-gpu.md, and `suite.json` the same as numbers.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.metadata
import json
import re
import shlex
import subprocess
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # `python benchmarks/gpu_suite.py` puts benchmarks/, not the root, on the path
    sys.path.insert(0, str(ROOT))
PY = sys.executable
MIN_TORCH = (2, 11)  # the oldest torch the suite runs on (the cluster images'); the newest is pyproject.toml's pin
PART_BUDGET_MIN = 5.0
FIT_RESERVE_S = 100  # the fit step's start-up, data preparation, final test and exit, beside its max_time (60 s
# was too few on a fresh H200, 2026-11-28: killed after its summary)
BASE = ["--size", "base", "--decode-batches", "1", "64"]
# Beyond what the project's packages import, what each part runs (import name: pip name): scripts/fit.py's
# LightningCLI needs jsonargparse with its `signatures` extra (tests/test_cuda.py trains through it too).
CLI_NEEDS = {
    "jsonargparse": "jsonargparse[signatures]",
    "docstring_parser": "docstring-parser",
    "typeshed_client": "typeshed-client",
}
PART_NEEDS = {"speed": {"pytest": "pytest", **CLI_NEEDS}, "quality": CLI_NEEDS}
PIP_NAMES = {"yaml": "pyyaml", "PIL": "pillow", "google": "protobuf"}  # import names that are not the package's
GPU_RECIPE = ROOT / "configs" / "multi30k_gpu.yaml"
# What --tiny changes of the GPU recipe: the network's and vocabularies' sizes, a few steps, pairs of each split.
TINY_SIZES = {
    "model.init_args.net.d_model": 32,
    "model.init_args.net.nhead": 2,
    "model.init_args.net.num_encoder_layers": 1,
    "model.init_args.net.num_decoder_layers": 1,
    "model.init_args.net.dim_feedforward": 64,
    "data.init_args.src_vocab_size": 300,
    "data.init_args.tgt_vocab_size": 300,
    "trainer.max_steps": 10,  # two epochs of the slice: BLEU validation (every 2nd epoch) picks the checkpoint tested
}
TINY_PAIRS = {"train": 400, "val": 16, "test": 16}
VERSIONS = ["lightning", "torchmetrics", "jsonargparse", "transformers", "x-transformers", "ctranslate2", "sacrebleu"]


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", required=True, help="folder for the tables (created; files in it are replaced)")
    p.add_argument("--part", default="all", choices=["speed", "quality", "all"], help="all: speed, then quality")
    p.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    p.add_argument("--tiny", action="store_true", help="every step at a toy size (what CI runs on a CPU)")
    p.add_argument("--budget-min", type=float, default=PART_BUDGET_MIN, help="each part's time budget (default 5)")
    multi30k = str(ROOT.parent / "shared" / "data" / "multi30k")
    p.add_argument("--data-dir", default=multi30k, help="Multi30k: the peers' real batches and the quality part's data")
    args = p.parse_args(argv)
    args.parts = ["speed", "quality"] if args.part == "all" else [args.part]
    return args


def steps(args, part: str) -> list[dict]:
    """A part's steps in order: name, command, time limit (s), and whether a failure stops the part."""
    if part == "quality":
        return [fit_step(args)]
    peers = [PY, str(ROOT / "benchmarks" / "peers.py"), "--device", args.device]
    if args.tiny:
        peers += ["--tiny"]
    else:
        peers += ["--repeats", "5", "--warmup", "2"]
        if Path(args.data_dir).is_dir():  # real batches and padding, as configs/multi30k_gpu.yaml's sampler
            peers += ["--corpus", args.data_dir, "--max-tokens", "4096"]
    if args.device == "cuda":
        peers += ["--dtype", "bf16", "--static-cache", "cuda-graph"]
    test_cuda = [PY, "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider", "tests/test_cuda.py"]
    return [
        dict(name="test_cuda", cmd=test_cuda, limit=120, stop_on_failure=True, json=False),
        dict(name="peers_base", cmd=[*peers, *BASE], limit=130),
        dict(name="peers_big", cmd=[*peers, "--size", "big", "--task", "train"], limit=50),
    ]


def fit_step(args) -> dict:
    """configs/multi30k_gpu.yaml as shipped, on the device asked: for what the part's budget leaves on Multi30k, or
    with --tiny for a few steps of a toy-sized network on a slice of it, every other setting the recipe's own
    (compiled with dynamic shapes, fused AdamW, EMA, precision from the machine, BLEU validation, the beam test)."""
    limit, name = 290, "multi30k_gpu"
    fit = [PY, str(ROOT / "scripts" / "fit.py"), "--config", str(GPU_RECIPE)]
    if args.tiny:
        name, data_dir = "multi30k_gpu_tiny", multi30k_slice(Path(args.data_dir), Path(args.out) / "multi30k_slice")
        fit += [f"--{key}={value}" for key, value in TINY_SIZES.items()]
    else:
        train_s, data_dir = limit - FIT_RESERVE_S, args.data_dir
        fit += ["--trainer.max_time", f"00:00:{train_s // 60:02d}:{train_s % 60:02d}"]
    fit += ["--data.init_args.data_dir", str(data_dir), "--trainer.accelerator", "gpu" if args.device == "cuda" else "cpu",
            "--trainer.logger", "CSVLogger", "--trainer.enable_progress_bar", "false",
            "--trainer.default_root_dir", str(Path(args.out) / f"{name}_run")]  # fmt: skip
    return dict(name=name, cmd=fit, limit=limit, json=False, fit=True)


def multi30k_slice(data_dir: Path, out: Path) -> Path:
    """The first TINY_PAIRS pairs of each of the GPU recipe's splits in `data_dir`, as plain files in `out`."""
    import gzip

    import yaml

    data = yaml.safe_load(GPU_RECIPE.read_text())["data"]["init_args"]
    out.mkdir(parents=True, exist_ok=True)
    for split, pairs in TINY_PAIRS.items():
        prefix = data[f"{split}_prefix"]
        for lang in (data["src_lang"], data["tgt_lang"]):
            packed, plain = data_dir / f"{prefix}.{lang}.gz", data_dir / f"{prefix}.{lang}"
            with gzip.open(packed, "rt", encoding="utf-8") if packed.exists() else open(plain, encoding="utf-8") as f:
                lines = [line for _, line in zip(range(pairs), f)]
            (out / f"{prefix}.{lang}").write_text("".join(lines), encoding="utf-8")
    return out


# ------------------------------------------------------------------------------------------
# What must be there before the first step


def requirement_error(args) -> str | None:
    """The one line naming what the suite cannot run without, or None when everything is there."""
    try:
        import torch
    except ImportError:
        return f"error: the GPU suite needs PyTorch {'.'.join(map(str, MIN_TORCH))} or newer (the machine's own): none found"
    version = tuple(int(x) for x in re.findall(r"\d+", torch.__version__)[:2])
    if version < MIN_TORCH:
        return f"error: torch {torch.__version__} is older than {'.'.join(map(str, MIN_TORCH))}, the oldest the suite runs on"
    if args.device == "cuda" and not torch.cuda.is_available():
        return "error: --device cuda: no GPU available (use --device cpu --tiny for the CPU run)"
    try:
        for package in ("models", "datamodules", "training", "tasks"):
            module = importlib.import_module(package)
            for name in getattr(module, "__all__", ()):  # the packages import their names when first used
                getattr(module, name)
    except ModuleNotFoundError as err:
        top = (err.name or "").partition(".")[0]
        pip_name = PIP_NAMES.get(top, top)
        return f"error: the project needs {pip_name}, which is not installed ({_install_hint(pip_name)})"
    from peers import installed  # the project imports, now known to work

    for part in args.parts:
        for module, pip_name in PART_NEEDS[part].items():
            if not installed(module):
                return f"error: the {part} part needs {pip_name}, which is not installed ({_install_hint(pip_name)})"
    if "quality" in args.parts and not Path(args.data_dir).is_dir():
        return f"error: --data-dir {args.data_dir}: no such folder (the quality part trains on Multi30k there)"
    return None


def _install_hint(pip_name: str) -> str:
    return f"pip install '{pip_name}'; offline: benchmarks/node_wheels.txt, docs/guide/gpu-suite.md"


# ------------------------------------------------------------------------------------------
# Running the steps


def run_step(step: dict, out: Path) -> dict:
    """Run one step with its time limit; its stdout (tables) → <name>.md, stderr → <name>.log, --json → <name>.json."""
    cmd = list(step["cmd"])
    if step.get("json", True):
        cmd += ["--json", str(out / f"{step['name']}.json")]
    start = time.perf_counter()
    try:
        result = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, timeout=step["limit"])
        returncode, stdout, stderr = result.returncode, result.stdout, result.stderr
    except subprocess.TimeoutExpired as err:
        returncode = None
        stdout = err.stdout.decode() if isinstance(err.stdout, bytes) else err.stdout or ""
        stderr = err.stderr.decode() if isinstance(err.stderr, bytes) else err.stderr or ""
    seconds = time.perf_counter() - start
    (out / f"{step['name']}.md").write_text(f"# {step['name']}\n\n`{' '.join(cmd)}`\n\n{stdout}\n")
    (out / f"{step['name']}.log").write_text(stderr)
    if returncode is None:
        status, detail = "timed out", f"stopped at its {step['limit']} s limit"
    elif returncode != 0:
        status, detail = "failed", f"exit {returncode}: {_last_line(stderr) or _last_line(stdout)}"
    elif step["name"] == "test_cuda":
        status, detail = pytest_outcome(stdout)
    else:
        status, detail = "ok", ""
    record = {"name": step["name"], "status": status, "detail": detail, "seconds": round(seconds, 1), "command": cmd}
    if step.get("fit"):
        record.update(fit_result(out / f"{step['name']}_run", seconds))
        (out / f"{step['name']}.json").write_text(json.dumps(record, indent=1) + "\n")
    return record


def pytest_outcome(stdout: str) -> tuple[str, str]:
    """("ok", "15 passed") when tests ran and passed; ("skipped", "18 skipped: needs a CUDA device") when none ran."""
    counts = {kind: int(n) for n, kind in re.findall(r"(\d+) (passed|skipped|deselected|xfailed|xpassed)", stdout)}
    detail = ", ".join(f"{n} {kind}" for kind, n in counts.items())
    if counts.get("passed", 0) + counts.get("xpassed", 0) == 0:
        reason = re.search(r"^SKIPPED \[\d+\] [^:]+:\d+: (.+)$", stdout, re.M)
        return "skipped", detail + (f": {reason.group(1)}" if reason else "")
    return "ok", detail


def fit_result(root: Path, seconds: float) -> dict:
    """Steps, fit time, the checkpoint tested, its test BLEU and wall time of the fit step, from the run's summary.json."""
    summaries = sorted(root.rglob("summary.json"))
    if not summaries:
        return {"wall_seconds": round(seconds, 1)}
    summary = json.loads(summaries[-1].read_text())
    result = {"steps": summary.get("steps"), "fit_seconds": summary.get("fit_seconds"), "wall_seconds": round(seconds, 1)}
    if summary.get("tested"):
        result |= {"tested": summary["tested"], "test_bleu": summary["test"].get("test/bleu"),
                   "bleu_signature": summary.get("test_bleu_signature"), "monitor": summary.get("monitor"),
                   "best_score": summary.get("best_score")}  # fmt: skip
    return result


def _last_line(text: str) -> str:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[-1][:200] if lines else ""


def status_text(record: dict) -> str:
    return record["status"] + (f" ({record['detail']})" if record["detail"] else "")


def run_part(args, part: str, out: Path) -> list[dict]:
    budget, start, records = args.budget_min * 60, time.perf_counter(), []
    print(f"{part} part: budget {budget:.0f} s", flush=True)
    for step in steps(args, part):
        left = budget - (time.perf_counter() - start)
        if step["limit"] > left:
            detail = f"its {step['limit']} s limit > the {left:.0f} s left of the {part} part's {budget:.0f} s"
            records.append({"name": step["name"], "status": "skipped", "detail": detail, "seconds": 0})
        else:
            records.append(run_step(step, out))
        records[-1]["part"] = part
        r = records[-1]
        print(f"  {r['name']}: {status_text(r)}, {r['seconds']} s", flush=True)
        if step.get("stop_on_failure") and r["status"] == "failed":  # a broken invariant; a slow step is no reason
            print(f"{part} part stopped: {step['name']} did not pass (see {out / step['name']}.md)", file=sys.stderr)
            break
    return records


# ------------------------------------------------------------------------------------------
# What the machine is, and the table to paste


def environment(device: str, missing_peers: list[str]) -> dict:
    import torch
    from _common import environment as machine

    env = {
        "date_utc": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "commit": _run(["git", "rev-parse", "HEAD"]) or "unknown (not a git checkout)",
        "dirty": bool(_run(["git", "status", "--porcelain", "--untracked-files=no"])),
        **machine(device),
    }
    if device == "cuda":  # only a GPU run names CUDA: a CUDA build of torch run on the CPU used none of it
        props = torch.cuda.get_device_properties(0)
        env["gpu_memory_gib"] = round(props.total_memory / 2**30, 1)
        env["driver"] = (_run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"]) or "unknown").splitlines()[0]
        env["cuda"] = torch.version.cuda
    env["packages"] = {name: _version(name) for name in VERSIONS if _version(name)}
    env["missing_peers"] = missing_peers
    return env


def _version(distribution: str) -> str | None:
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return None


def _run(cmd: list[str]) -> str:
    try:
        return subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, timeout=30).stdout.strip()
    except (OSError, subprocess.TimeoutExpired):
        return ""


def hardware_line(env: dict) -> str:
    packages = ", ".join(f"{name} {v}" for name, v in env["packages"].items())
    if env["device"] == "cuda":
        machine = f"one {env['gpu']} ({env['gpu_memory_gib']} GiB, driver {env['driver']}), {env['cpu_count']} CPU cores"
        software = f"torch {env['torch']} (CUDA {env['cuda']})"
    else:
        machine = f"the CPU alone ({env['processor']}, {env['cpu_count']} cores, {env['torch_threads']} torch threads), no GPU"
        software = f"torch {env['torch']}"
    return f"Hardware and software: {machine}; {software}, Python {env['python']}, {packages}."


def suite_markdown(args, env: dict, records: list[dict], total: float, out: Path) -> str:
    """suite.md: docs/results/benchmarks-gpu.md's form (when, where, the command, then each step's figures)."""
    commit = f"`{env['commit'][:7]}`" if env["commit"][0].isalnum() and " " not in env["commit"] else env["commit"]
    commit += " with local changes" if env["dirty"] else ""
    what = "at toy size (--tiny)" if args.tiny else ("both parts" if args.part == "all" else f"the {args.part} part")
    lines = [f"### GPU suite: {what} on {env.get('gpu', 'the CPU')}", "",
             f"Measured {env['date_utc']} at {commit}, {total:.0f} s in all.", "", hardware_line(env), ""]  # fmt: skip
    if env["missing_peers"]:
        lines += [f"Not installed, so left out of the peers' tables: {', '.join(env['missing_peers'])}.", ""]
    from common.commands import program

    command = shlex.join([program(PY), "benchmarks/gpu_suite.py", *sys.argv[1:]])  # as run, from the checkout's root
    lines += ["```bash", f"PYTHONPATH=. {command}", "```", ""]
    lines += ["| part | step | status | seconds |", "| --- | --- | --- | --- |"]
    for r in records:
        lines.append(f"| {r['part']} | {r['name']} | {status_text(r)} | {r['seconds']} |")
    for r in records:
        if r["status"] == "ok" and r["name"].startswith("peers"):
            lines += ["", f"#### {r['name']}", "", *_tables(out / f"{r['name']}.md")]
    fit = next((r for r in records if r.get("wall_seconds") is not None), None)
    if fit:
        lines += ["", f"#### {fit['name']}", "", fit_line(fit)]
    return "\n".join(lines) + "\n"


def _tables(path: Path) -> list[str]:
    """The tables and notes a benchmark printed (its .md less the heading, the command and 'wrote ...')."""
    body = [line for line in path.read_text().splitlines()[4:] if not line.startswith("wrote ")]
    return "\n".join(body).strip().splitlines()


def fit_line(fit: dict) -> str:
    minutes = f"{fit['wall_seconds'] / 60:.1f} min wall time"
    if fit["status"] != "ok" and fit.get("test_bleu") is None:
        return f"{fit['name']}: not scored (the step {status_text(fit)}; see {fit['name']}.log), {minutes}."
    if fit["name"] == "multi30k_gpu_tiny":
        return (
            f"The GPU recipe at toy size, {fit.get('steps')} steps on a slice of Multi30k with every setting of its own "
            f"but the sizes, {minutes}; nothing scored (--tiny)."
        )
    if fit.get("test_bleu") is None:
        return f"Multi30k: trained, but no test BLEU in its summary (see {fit['name']}.log), {minutes}."
    # a step killed after writing its summary (start-up or exit slower than FIT_RESERVE_S allows) is scored, and says so
    overran = "." if fit["status"] == "ok" else f"; the step {status_text(fit)} after writing its summary."
    return (
        f"Multi30k test_2016_flickr: **{fit['test_bleu']:.2f} BLEU** ({fit['bleu_signature']}), the {fit['tested']} "
        f"checkpoint ({fit['monitor']} {fit['best_score']}); {fit['steps']} steps in {fit['fit_seconds'] / 60:.1f} min of "
        f"training, {minutes}{overran}"
    )


def main(argv=None) -> int:
    args = parse_args(argv)
    error = requirement_error(args)
    if error:
        print(error, file=sys.stderr)
        return 2
    from peers import OPTIONAL_PEERS, missing_peers  # after the check above: it imports torch and the project

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    missing = [OPTIONAL_PEERS[module][0] for module in missing_peers()] if "speed" in args.parts else []
    for name in missing:
        print(f"note: {name} is not installed: its rows are left out of the peers' tables", flush=True)
    if "speed" in args.parts and not args.tiny and not Path(args.data_dir).is_dir():
        print(f"note: --data-dir {args.data_dir}: no such folder; the peers train and decode random ids", flush=True)
    env = environment(args.device, missing)
    start, records = time.perf_counter(), []
    print(f"GPU suite → {out} ({args.device}{', tiny' if args.tiny else ''}): {', '.join(args.parts)}", flush=True)
    for part in args.parts:
        records += run_part(args, part, out)
    total = time.perf_counter() - start
    (out / "suite.md").write_text(suite_markdown(args, env, records, total, out))
    (out / "suite.json").write_text(json.dumps({"environment": env, "total_seconds": total, "steps": records}, indent=1) + "\n")
    print(f"wrote {out / 'suite.md'} and suite.json ({total:.0f} s)")
    return 1 if any(r["status"] in ("failed", "timed out") for r in records) else 0


if __name__ == "__main__":
    sys.exit(main())
