"""The training precision a recipe gets when it names none (docs/guide/training.md, "Precision"): bf16 autocast where
the machine computes bf16 natively (a GPU of compute capability 8.0 or later; a CPU with AVX-512 BF16 or AMX, or an
Arm CPU with the BF16 extension), else fp32, where emulated bf16 makes a step many times slower
(docs/results/benchmarks-training.md, "Precision and threads"), with one line saying which and why. fp16 autocast
asked for on a CPU, which Lightning silently replaces with bf16 autocast, is replaced here as the machine decides
(`asked_precision`); a GPU asked for on a machine without one is one line (`check_accelerator`)."""

from __future__ import annotations

import platform
from pathlib import Path

import torch

from common.errors import HyperparameterError

BF16 = "bf16-mixed"
FP32 = "32-true"
FP16 = "16-mixed"
# Lightning's older spellings, taken with a warning that names site-packages: the names they stand for.
OLD_SPELLINGS = {"16": FP16, "bf16": BF16, "32": FP32, "64": "64-true"}
# /proc/cpuinfo's flags of a CPU that computes bf16 natively (x86: AVX-512 BF16, AMX; Arm: the BF16 extension).
NATIVE_BF16_FLAGS = ("avx512_bf16", "amx_bf16", "bf16")


def cpu_flags() -> set[str]:
    """The CPU's feature flags as Linux reports them in /proc/cpuinfo (x86 `flags`, Arm `Features`); empty
    where there is no such file (macOS, Windows)."""
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return set()
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if key.strip() in ("flags", "Features"):
            return set(value.split())
    return set()


def _on_cuda(accelerator) -> bool:
    name = str(accelerator or "auto").lower()
    return name in ("gpu", "cuda") or (name == "auto" and torch.cuda.is_available())


def machine_precision(accelerator) -> tuple[str, str]:
    """The precision to train in on this machine with `accelerator` (the trainer's setting), and why."""
    if _on_cuda(accelerator):
        if not torch.cuda.is_available():
            return FP32, "no CUDA device"
        name = torch.cuda.get_device_name()
        if torch.cuda.is_bf16_supported(including_emulation=False):
            return BF16, f"{name} computes bf16 natively"
        return FP32, f"{name} has no native bf16 (compute capability below 8.0), where bf16 is emulated and slow"
    native = sorted(set(NATIVE_BF16_FLAGS) & cpu_flags())
    if native:
        return BF16, f"this CPU computes bf16 natively ({', '.join(native)} in /proc/cpuinfo)"
    return FP32, (
        f"this {platform.machine() or ''} CPU has no native bf16 (no {', '.join(NATIVE_BF16_FLAGS)} in /proc/cpuinfo), "
        "where bf16 autocast is emulated and many times slower"
    )


def _on_cpu(accelerator) -> bool:
    name = str(accelerator or "auto").lower()
    return name == "cpu" or (name == "auto" and not torch.cuda.is_available() and not torch.backends.mps.is_available())


def asked_precision(asked, accelerator) -> tuple[str, str | None]:
    """The precision to train in when `--trainer.precision` is `asked` (in Lightning's older spellings too) with
    `accelerator`, and the line saying why it is not what was asked (None when it is). On a CPU, Lightning has no
    fp16 autocast: it trains `16-mixed` in bf16 autocast, which where bf16 is not native is the emulated path
    many times slower than fp32. Here fp16 autocast on a CPU becomes what the machine computes natively."""
    name = OLD_SPELLINGS.get(str(asked), str(asked))
    if name != FP16 or not _on_cpu(accelerator):
        return name, None
    precision, reason = machine_precision("cpu")
    if precision == BF16:
        why = f"bf16 autocast instead, as {reason}"
    else:
        why = (
            "not bf16 autocast either, which Lightning would run instead: "
            f"{reason.replace('many times slower', 'about 10× slower a step than fp32')}"
        )
    other = f"{FP32} for fp32" if precision == BF16 else f"{BF16} to insist"
    return precision, (
        f"--trainer.precision {asked}: a CPU has no fp16 autocast (Lightning's {FP16} is for GPUs); "
        f"training in {precision}: {why}; --trainer.precision {other}"
    )


def precision_line(precision: str, reason: str) -> str:
    """The one line a run prints about the precision it chose."""
    other = FP32 if precision == BF16 else BF16
    return f"precision {precision}: {reason}; --trainer.precision {other} to choose otherwise"


def check_accelerator(accelerator) -> None:
    """A GPU asked for on a machine without one is one line before any data is read, rather than
    Lightning's `MisconfigurationException` and its traceback once the trainer is built."""
    if not isinstance(accelerator, str) or accelerator.lower() not in ("gpu", "cuda"):
        return
    if accelerator.lower() == "gpu" and torch.backends.mps.is_available():
        return
    if not torch.cuda.is_available():
        build = f"CUDA {torch.version.cuda}" if torch.version.cuda else "no CUDA support"
        raise HyperparameterError(
            f"--trainer.accelerator {accelerator}: no CUDA GPU is available on this machine "
            f"(torch {torch.__version__}, built with {build}, finds none); use --trainer.accelerator cpu, "
            "or auto to take a GPU where there is one"
        )
