"""Every GPU measurement of the project in one command, in a stated order, within a time budget
(25 minutes on one H100): a lent GPU's half hour gives the whole table instead of an afternoon of debugging.

    python benchmarks/gpu_suite.py --out runs/gpu_suite              # on a GPU: the full suite
    python benchmarks/gpu_suite.py --out /tmp/suite --device cpu --tiny   # every step at toy size on a CPU (CI)

Order (each step a subprocess with its own time limit; a step that no longer fits in what is left of
the budget is recorded as skipped, not started):
  1. tests/test_cuda.py: the core's invariants on the device; a failure stops the suite;
  2. static-cache decoding (benchmarks/static_decode.py), base size, batch 64 then batch 1, bf16;
  3. peers, base size (benchmarks/peers.py, on Multi30k's token-budget batches when --data-dir has it): training
     tokens/s, MFU, peak memory; decoding at batch 1 and 64,
     greedy and beam 4, HF generate and CTranslate2 beside ours;
  4. peers, big size: training only (MFU);
  5. torch.compile check (benchmarks/compile_check.py): graphs compiled over padded lengths;
  6. configs/multi30k_gpu.yaml trained under its max_time, then tested: test BLEU and wall time.
Each step writes `<step>.md` (its printed tables, as markdown), `<step>.json` (its numbers) and `<step>.log`
(its stderr) into --out; `suite.md` and `suite.json` list every step with its status and seconds, after the
GPU, driver, torch and CUDA versions and the git commit. With --tiny every step runs at a toy size
(the Multi30k step: a few steps of the toy recipe with the same fast paths), in a couple of minutes on one core.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PY = sys.executable
BUDGET_S = 25 * 60
BASE = ["--d-model", "512", "--nhead", "8", "--layers", "6", "--ff", "2048"]


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", required=True, help="folder for the tables (created; files in it are replaced)")
    p.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    p.add_argument("--tiny", action="store_true", help="every step at a toy size (what CI runs on a CPU)")
    p.add_argument("--budget-min", type=float, default=BUDGET_S / 60, help="the whole suite's time budget (default 25)")
    multi30k = str(ROOT.parent / "shared" / "data" / "multi30k")
    p.add_argument("--data-dir", default=multi30k, help="Multi30k: the peers' real batches (steps 3-4) and step 6")
    return p.parse_args(argv)


def steps(args) -> list[dict]:
    """The suite's steps in order: name, command, time limit (s), and whether a failure stops the suite."""
    dev, tiny = ["--device", args.device], ["--tiny"] if args.tiny else []
    bench = lambda name: [PY, str(ROOT / "benchmarks" / f"{name}.py")]
    out = []
    out.append(dict(name="test_cuda", cmd=[PY, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider", "tests/test_cuda.py"],
                    limit=240, stop_on_failure=True, json=False))  # fmt: skip
    if args.tiny:
        out.append(dict(name="static_decode", cmd=[*bench("static_decode"), *dev, *tiny], limit=120))
    else:
        for batch in (64, 1):
            out.append(dict(name=f"static_decode_b{batch}", cmd=[*bench("static_decode"), *dev, *BASE, "--vocab", "8000",
                            "--batch", str(batch), "--dtype", "bf16"], limit=180))  # fmt: skip
    peers = [*bench("peers"), *dev, *tiny]
    if args.device == "cuda":
        peers += ["--dtype", "bf16", "--static-cache", "cuda-graph"]
    if not args.tiny and Path(args.data_dir).is_dir():  # real batches and padding, as configs/multi30k_gpu.yaml's sampler
        peers += ["--corpus", args.data_dir, "--max-tokens", "4096"]
    out.append(dict(name="peers_base", cmd=[*peers, "--size", "base", "--decode-batches", "1", "64"], limit=360))
    out.append(dict(name="peers_big", cmd=[*peers, "--size", "big", "--task", "train"], limit=180))
    compile_check = [*bench("compile_check"), *dev, *tiny] + (["--backend", "eager"] if args.tiny else [])
    out.append(dict(name="compile_check", cmd=compile_check, limit=150))
    out.append(dict(name="multi30k_gpu", cmd=fit_command(args), limit=120 if args.tiny else 660, json=False, fit=True))
    return out


def fit_command(args) -> list[str]:
    fit = [PY, str(ROOT / "scripts" / "fit.py"), "--trainer.logger", "CSVLogger", "--trainer.enable_progress_bar", "false"]
    root = ["--trainer.default_root_dir", str(Path(args.out) / "multi30k_gpu_run")]
    if args.tiny:  # the toy recipe with the recipe's fast paths, a few steps, on the device asked
        accel = "gpu" if args.device == "cuda" else "cpu"
        return [*fit, "--config", str(ROOT / "configs" / "toy_translation.yaml"), "--trainer.max_steps", "6",
                "--trainer.accelerator", accel, "--data.init_args.pad_to_multiple", "8",
                "--model.init_args.fused_adamw", "true", *root]  # fmt: skip
    return [*fit, "--config", str(ROOT / "configs" / "multi30k_gpu.yaml"), "--data.init_args.data_dir", args.data_dir, *root]


def environment() -> dict:
    import torch

    env = {
        "date_utc": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "commit": _run(["git", "rev-parse", "HEAD"]) or "unknown",
        "dirty": bool(_run(["git", "status", "--porcelain", "--untracked-files=no"])),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "python": sys.version.split()[0],
    }
    if torch.cuda.is_available():
        env["gpu"] = torch.cuda.get_device_name()
        env["driver"] = _run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"]) or "unknown"
        env["gpu_memory_gib"] = round(torch.cuda.get_device_properties(0).total_memory / 2**30, 1)
    return env


def _run(cmd: list[str]) -> str:
    try:
        return subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, timeout=30).stdout.strip()
    except (OSError, subprocess.TimeoutExpired):
        return ""


def run_step(step: dict, out: Path) -> dict:
    """Run one step with its time limit; its stdout (tables) → <name>.md, stderr → <name>.log, --json → <name>.json."""
    cmd = list(step["cmd"])
    if step.get("json", True):
        cmd += ["--json", str(out / f"{step['name']}.json")]
    start = time.perf_counter()
    try:
        result = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, timeout=step["limit"])
        status, stdout, stderr = (
            ("ok" if result.returncode == 0 else f"failed (exit {result.returncode})"),
            result.stdout,
            result.stderr,
        )
    except subprocess.TimeoutExpired as err:
        status = f"timed out after {step['limit']} s"
        stdout = err.stdout.decode() if isinstance(err.stdout, bytes) else err.stdout or ""
        stderr = err.stderr.decode() if isinstance(err.stderr, bytes) else err.stderr or ""
    seconds = time.perf_counter() - start
    (out / f"{step['name']}.md").write_text(f"# {step['name']}\n\n`{' '.join(cmd)}`\n\n{stdout}\n")
    (out / f"{step['name']}.log").write_text(stderr)
    record = {"name": step["name"], "status": status, "seconds": round(seconds, 1), "command": cmd}
    if step.get("fit"):
        record.update(fit_result(stdout + stderr, out / "multi30k_gpu_run", seconds))
        (out / f"{step['name']}.json").write_text(json.dumps(record, indent=1) + "\n")
    return record


def fit_result(output: str, root: Path, seconds: float) -> dict:
    """Test BLEU and wall time of the fit step: from the run's summary.json, else from its printed summary."""
    summaries = sorted(root.rglob("summary.json"))
    if summaries:
        summary = json.loads(summaries[-1].read_text())
        return {"test_bleu": summary["test"].get("test/bleu"), "fit_seconds": summary.get("fit_seconds"), "wall_seconds": seconds,
                "steps": summary.get("steps"), "bleu_signature": summary.get("test_bleu_signature"),
                "monitor": summary.get("monitor"), "best_score": summary.get("best_score")}  # fmt: skip
    match = re.search(r"test/bleu: ([\d.]+)", output)
    return {"test_bleu": float(match.group(1)) if match else None, "wall_seconds": seconds}


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.device == "cuda":
        import torch

        if not torch.cuda.is_available():
            print("error: --device cuda: no GPU available (use --device cpu --tiny for the CPU run)", file=sys.stderr)
            return 2
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    env = environment()
    budget, start, records = args.budget_min * 60, time.perf_counter(), []
    print(f"GPU suite → {out} ({args.device}{', tiny' if args.tiny else ''}); budget {args.budget_min:.0f} min", flush=True)
    for step in steps(args):
        left = budget - (time.perf_counter() - start)
        if step["limit"] > left:
            status = f"skipped: {step['limit']} s limit > {left:.0f} s left"
            records.append({"name": step["name"], "status": status, "seconds": 0})
        else:
            records.append(run_step(step, out))
        print(f"  {records[-1]['name']}: {records[-1]['status']} ({records[-1]['seconds']} s)", flush=True)
        if step.get("stop_on_failure") and records[-1]["status"] != "ok":
            print(f"stopped: {step['name']} did not pass (see {out / step['name']}.md)", file=sys.stderr)
            break
    total = time.perf_counter() - start
    lines = ["# GPU suite", "", *(f"- {k}: {v}" for k, v in env.items()), f"- total: {total:.0f} s", ""]
    lines += ["| step | status | seconds |", "|---|---|---|"]
    lines += [f"| {r['name']} | {r['status']} | {r['seconds']} |" for r in records]
    fit = next((r for r in records if r["name"] == "multi30k_gpu" and "test_bleu" in r), None)
    if fit:
        lines += ["", f"Multi30k: test BLEU {fit['test_bleu']}, wall time {fit['wall_seconds']:.0f} s"]
    (out / "suite.md").write_text("\n".join(lines) + "\n")
    (out / "suite.json").write_text(json.dumps({"environment": env, "total_seconds": total, "steps": records}, indent=1) + "\n")
    print("\n".join(lines))
    return 0 if all(r["status"] == "ok" for r in records) else 1


if __name__ == "__main__":
    sys.exit(main())
