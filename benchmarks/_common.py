"""Shared helpers of the benchmark scripts: timing statistics, tables, JSON, environment."""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # `python benchmarks/x.py` puts benchmarks/, not the root, on the path
    sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

from models.config import Seq2SeqConfig, Seq2SeqSettings  # noqa: E402


def device_or_exit(name: str) -> torch.device:
    """The --device argument as a torch.device; one line and exit status 2 when it names a GPU that is not there."""
    device = torch.device(name)
    if device.type == "cuda" and not torch.cuda.is_available():
        print(f"error: --device {name}: no GPU available", file=sys.stderr)
        raise SystemExit(2)
    return device


def parse_sized(parser, argv: list[str] | None, tiny: dict) -> argparse.Namespace:
    """`parser`'s arguments plus the ones every decoding benchmark takes (--device, --seed, --json, --tiny);
    --tiny replaces the sizes with `tiny`'s, a few seconds' run (what the CI smoke tests run)."""
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", default=None)
    parser.add_argument("--tiny", action="store_true", help="a few seconds at a toy size (CI smoke test)")
    args = parser.parse_args(argv)
    if args.tiny:
        for k, v in tiny.items():
            setattr(args, k, v)
    return args


def add_size_arguments(parser: argparse.ArgumentParser, *extra: str, sizes: bool = True, **defaults) -> None:
    """The translation network's size flags, each setting the field of models.config.Seq2SeqSettings it names:
    --d-model, --nhead, --layers (num_encoder_layers and num_decoder_layers alike), --ff (dim_feedforward), and those
    of `extra` ("num_kv_heads", "dropout"); `sizes=False`: those of `extra` only (a benchmark with size presets).
    Their defaults are the config's; `defaults` (by the flag's name: d_model,
    layers, ff, ...) give a benchmark's own size. `sized_config` builds the network's config of them."""
    base = Seq2SeqSettings()
    flags = {
        "d_model": ("--d-model", int, base.d_model, "the width of every token's vector"),
        "nhead": ("--nhead", int, base.nhead, "attention heads"),
        "layers": ("--layers", int, base.num_encoder_layers, "encoder and decoder layers each"),
        "ff": ("--ff", int, base.dim_feedforward, "the feed-forward's hidden width"),
        "num_kv_heads": ("--num-kv-heads", int, base.num_kv_heads, "grouped-query attention (default: nhead)"),
        "dropout": ("--dropout", float, base.dropout, "dropout"),
    }
    for name in (*(("d_model", "nhead", "layers", "ff") if sizes else ()), *extra):
        flag, kind, default, help = flags[name]
        default = defaults.get(name, default)
        parser.add_argument(flag, type=kind, default=default, help=f"{help} (default: {default})")


def sized_settings(args: argparse.Namespace, **options) -> Seq2SeqSettings:
    """The translation network's settings of the command line's sizes (`add_size_arguments`' flags): as many decoder
    layers as encoder ones; `options` set the rest."""
    given = {name: getattr(args, name) for name in ("num_kv_heads", "dropout") if hasattr(args, name)}
    return Seq2SeqSettings(
        d_model=args.d_model,
        nhead=args.nhead,
        num_encoder_layers=args.layers,
        num_decoder_layers=args.layers,
        dim_feedforward=args.ff,
        **{**given, **options},
    )


def sized_config(args: argparse.Namespace, pad_id: int = 0, **options) -> Seq2SeqConfig:
    """The translation network of `sized_settings` with one vocabulary of --vocab tokens."""
    return Seq2SeqConfig.from_settings(
        sized_settings(args, **options), src_vocab_size=args.vocab, tgt_vocab_size=args.vocab, pad_id=pad_id
    )


def row_lengths(batch: int, length: int, pad_frac: float) -> torch.Tensor:
    """(batch,) lengths spread evenly from `length` down to (1 - 2 * pad_frac) of it: the mean
    padded fraction of a right-padded batch is then `pad_frac`, as in a real length-bucketed batch."""
    if batch == 1:
        return torch.full((1,), length)
    return (length * (1 - torch.linspace(0, 2 * pad_frac, batch))).round().clamp(min=1).long()


def padding(batch: int, length: int, pad_frac: float) -> torch.Tensor:
    """(batch, length) bool, True = padding (right-padded rows of `row_lengths`)."""
    return torch.arange(length)[None, :] >= row_lengths(batch, length, pad_frac)[:, None]


def padded_ids(
    batch: int, length: int, vocab: int, pad_frac: float, pad_id: int = 0, generator: torch.Generator | None = None
) -> torch.Tensor:
    """(batch, length) random token ids in [3, vocab), right-padded with `pad_id` (see `row_lengths`)."""
    ids = torch.randint(3, vocab, (batch, length), generator=generator)
    return ids.masked_fill(padding(batch, length, pad_frac), pad_id)


def sync(device: torch.device | str) -> None:
    if torch.device(device).type == "cuda":
        torch.cuda.synchronize()


def timed(fn, device) -> float:
    """Seconds one call of `fn` takes, the device drained before and after."""
    sync(device)
    start = time.perf_counter()
    fn()
    sync(device)
    return time.perf_counter() - start


def peak_cpu_bytes(fn) -> int:
    """Peak bytes of the profiler-tracked CPU allocations during one call of `fn`, above what was
    live before it (activations, gradients, temporaries; not the weights or optimizer state)."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        fn()
    events = sorted(
        (e.start_ns(), e.nbytes())
        for e in prof.profiler.kineto_results.events()
        if e.name() == "[memory]" and e.device_type() == torch.autograd.DeviceType.CPU
    )
    live = peak = 0
    for _, nbytes in events:
        live += nbytes
        peak = max(peak, live)
    return peak


def summary(times: list[float]) -> dict:
    """Median and spread (min, max, interquartile range) of a list of seconds."""
    times = sorted(times)
    q = statistics.quantiles(times, n=4) if len(times) >= 2 else [times[0]] * 3
    return {
        "median_s": statistics.median(times),
        "min_s": times[0],
        "max_s": times[-1],
        "iqr_s": q[2] - q[0],
        "n": len(times),
        "times_s": times,
    }


def ratio_summary(num: list[float], den: list[float]) -> dict:
    """Per-repeat ratios num[i] / den[i] of paired, interleaved measurements: median and range.

    Pairing the i-th runs of two contenders cancels most of the drift that other jobs on a
    shared machine add to both (they ran within the same second or so)."""
    ratios = sorted(a / b for a, b in zip(num, den))
    return {"median": statistics.median(ratios), "min": ratios[0], "max": ratios[-1], "n": len(ratios)}


def environment(device: str) -> dict:
    env = {
        "torch": torch.__version__,
        "python": platform.python_version(),
        "machine": platform.machine(),
        "processor": _cpu_name(),
        "cpu_count": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "omp_num_threads": os.environ.get("OMP_NUM_THREADS", "unset"),
        "device": device,
    }
    if torch.device(device).type == "cuda":
        env["gpu"] = torch.cuda.get_device_name()
    with contextlib.suppress(OSError):  # no load average on some systems
        env["load_average_1min"] = os.getloadavg()[0]
    return env


def _cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def print_table(headers: list[str], rows: list[list], title: str | None = None) -> str:
    """A markdown table (pastes into the README as is); returns it and prints it."""
    cells = [[str(h) for h in headers]] + [[_fmt(c) for c in row] for row in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    lines = ["| " + " | ".join(c.ljust(w) for c, w in zip(r, widths)) + " |" for r in cells]
    lines.insert(1, "|" + "|".join("-" * (w + 2) for w in widths) + "|")
    text = ("\n" + title + "\n\n" if title else "") + "\n".join(lines)
    print(text, flush=True)
    return text


def _fmt(value) -> str:
    if isinstance(value, float):
        if value == 0 or 0.01 <= abs(value) < 1e5:
            return f"{value:.3g}" if abs(value) < 100 else f"{value:,.0f}"
        return f"{value:.3g}"
    return str(value)


def write_json(path: str | None, payload: dict) -> None:
    if path:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        Path(path).write_text(json.dumps(payload, indent=2, default=str))
        print(f"wrote {path}")


def resolve_dtype(name: str) -> torch.dtype:
    return {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}[name]
