"""What the tests share, each defined once: where things are, the environment a script runs in and how to run one,
tiny untrained nets and their inputs, small data sets written on the fly, and small trainers and checkpoints.
Test modules import from here (and take fixtures from tests/conftest.py), never from each other."""

from __future__ import annotations

import gzip
import hashlib
import importlib.util
import io
import json
import logging
import os
import random
import shutil
import struct
import subprocess
import sys
from functools import partial
from pathlib import Path
from typing import NamedTuple

import lightning as L
import torch
from torch import nn
from torch.utils.data import TensorDataset

from datamodules.vocab import Vocab
from models import Seq2SeqConfig, Seq2SeqNet, Transformer, TransformerConfig
from models.config import Seq2SeqSettings
from models.relative import T5RelativeBias
from training.checkpointing import BestCheckpoint, checkpoint_callbacks

ROOT = Path(__file__).resolve().parents[1]
SHARED_DATA = ROOT.parent / "shared" / "data"  # the offline copies of the real data sets

# One thread per tiny model (no oversubscription of a small machine); W&B offline, never prompting.
ENV = {**os.environ, "OMP_NUM_THREADS": "1", "WANDB_MODE": "offline", "WANDB_SILENT": "true"}
ENV.pop("WANDB_API_KEY", None)
FIT = [sys.executable, str(ROOT / "scripts" / "fit.py")]
# The one time limit of every subprocess (and wait) the tests start. It guards against a hang; it is not a speed
# check: room for a machine several times slower than ours on one loaded core, and a fresh venv's first start
# (byte-compiling, a cold import of torch). Speed is measured by the benchmarks, which print numbers.
HANG_TIMEOUT = 1800
# The toy recipe's model (configs/toy_translation.yaml) with a constant learning rate: learns the 3 pairs in 25 epochs.
TOY_MODEL = dict(
    net=Seq2SeqSettings(d_model=64, num_encoder_layers=2, num_decoder_layers=2, dim_feedforward=128, max_len=32),
    lr=3e-3,
    warmup_steps=30,
    lr_schedule="constant",
    label_smoothing=0.0,
)
# A smaller model still, for the baselines' and averaging's runs of a few epochs on generated data.
TINY = dict(
    net=Seq2SeqSettings(d_model=32, nhead=2, num_encoder_layers=1, num_decoder_layers=1, dim_feedforward=64, max_len=48),
    label_smoothing=0.0,
    lr=3e-3,
    warmup_steps=10,
    lr_schedule="constant",
    attention_maps=0,
)


def quiet_trainer(root: Path | None = None, **kwargs) -> L.Trainer:
    """A Trainer for in-process tests: CPU, no logger, no checkpoints, no progress bar or model summary
    (each can be turned back on through `kwargs`), writing under `root`."""
    defaults = dict(
        accelerator="cpu",
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        default_root_dir=root,
    )
    return L.Trainer(**{**defaults, **kwargs})


def trainer_with_callbacks(root: Path, callbacks: list, **kwargs) -> L.Trainer:
    """A trainer with `callbacks`, a `BestCheckpoint` among them given its last.ckpt and helpers as the CLI does."""
    wired = [
        c
        for callback in callbacks
        for c in (checkpoint_callbacks(callback) if isinstance(callback, BestCheckpoint) else [callback])
    ]
    return quiet_trainer(root, callbacks=wired, **{"max_epochs": 3, "enable_checkpointing": True, **kwargs})


def run(cmd: list[str], timeout: float = HANG_TIMEOUT, env: dict | None = None, **kwargs) -> subprocess.CompletedProcess:
    """Run a command from the repository's root with ENV, capturing its text output."""
    return subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, env=env or ENV, timeout=timeout, **kwargs)


def env_hiding(*modules: str) -> dict:
    """ENV with the top-level `modules` hidden from the interpreter and its children, as if they were not installed
    (tests/hide_packages/sitecustomize.py, put first on PYTHONPATH)."""
    path = [str(ROOT / "tests" / "hide_packages"), str(ROOT), *filter(None, [ENV.get("PYTHONPATH")])]
    return {**ENV, "PYTHONPATH": os.pathsep.join(path), "HIDE_PACKAGES": ",".join(modules)}


def script(name: str, *args: str, **kwargs) -> subprocess.CompletedProcess:
    """Run scripts/<name>.py with `args` (see `run`)."""
    return run([sys.executable, str(ROOT / "scripts" / f"{name}.py"), *args], **kwargs)


def fit(root: Path, *extra: str, env: dict | None = None, timeout: float = HANG_TIMEOUT) -> subprocess.CompletedProcess:
    """scripts/fit.py with `extra`, writing under `root`, without a progress bar. The root directory
    comes after `extra`: a --config there would otherwise set its own."""
    return run(
        [*FIT, *extra, "--trainer.default_root_dir", str(root), "--trainer.enable_progress_bar", "false"],
        timeout=timeout,
        env=env,
    )


def save_checkpoint(model: L.LightningModule, path: Path) -> Path:
    """What Lightning's weights-only checkpoint holds, written without a Trainer."""
    torch.save(
        {"state_dict": model.state_dict(), "hyper_parameters": dict(model.hparams), "pytorch-lightning_version": L.__version__},
        path,
    )
    return path


# ---------------------------------------------------------------------------------------------- scripts: errors, runs in-process


def assert_one_line_error(result: subprocess.CompletedProcess, *words: str) -> str:
    """Non-zero exit; no traceback; exactly one `error: …` line, the last thing on stderr, naming `words`."""
    assert result.returncode != 0, result.stdout[-2000:] + result.stderr[-2000:]
    assert "Traceback" not in result.stderr, result.stderr[-3000:]
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, result.stderr[-3000:]
    assert result.stderr.strip().splitlines()[-1] == errors[0]
    for word in words:
        assert word in errors[0], errors[0]
    return errors[0]


def load_script(name):
    """scripts/<name>.py imported as a module, to call its `main` in this process."""
    spec = importlib.util.spec_from_file_location(f"script_{name}", ROOT / "scripts" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def run_script(capsys, name: str, *argv: str) -> tuple[int, str, str]:
    """scripts/<name>.py's main in this process → (exit status, stdout, stderr)."""
    try:
        load_script(name).main(list(argv))
        code = 0
    except SystemExit as exit_info:
        code = exit_info.code
    out = capsys.readouterr()
    return code, out.out, out.err


class Ran(NamedTuple):
    """A script's run in this process, named as `subprocess.run`'s result is."""

    returncode: int
    stdout: str
    stderr: str


def fit_here(capsys, caplog, root: Path, *extra: str) -> Ran:
    """`fit` in this process: for tests of what a run does and writes, not of its process (signals, imports, the
    interpreter's exit). Lightning's logged lines (`rank_zero_info`) join stderr, as in a child's."""
    with caplog.at_level(logging.INFO):
        code, out, err = run_script(
            capsys, "fit", *extra, "--trainer.default_root_dir", str(root), "--trainer.enable_progress_bar", "false"
        )
    logged = caplog.text
    caplog.clear()
    return Ran(code, out, err + logged)


def parse(stdout: str) -> list[list[str]]:
    return [line.split("\t") for line in stdout.splitlines()]


# ---------------------------------------------------------------------------------------------- faults


def snapshot(folder: Path) -> dict[str, str]:
    """Every file and folder under `folder` (itself included): relative path -> sha256 ("folder" for one)."""
    if not folder.exists():
        return {}
    entries = {}
    for path in [folder, *sorted(folder.rglob("*"))]:
        key = str(path.relative_to(folder))
        entries[key] = "folder" if path.is_dir() else hashlib.sha256(path.read_bytes()).hexdigest()
    return entries


def succeeds(cmd, **kwargs) -> bool:
    try:
        return subprocess.run(cmd, capture_output=True, timeout=HANG_TIMEOUT, **kwargs).returncode == 0
    except (OSError, subprocess.SubprocessError):
        return False


def can_mount() -> bool:
    return shutil.which("unshare") is not None and succeeds(["unshare", "-m", "sh", "-c", "mount -t tmpfs -o size=64k x /mnt"])


# The script as a tmpfs sees it: the earlier outputs copied in, filled up or made read-only, snapshots
# copied out before and after (the mount goes with the namespace).
IN_TMPFS = """set -e
mount -t tmpfs -o size=1m faults "$PLACE"
cp -a "$EARLIER"/. "$PLACE"/
if [ "$FAULT" = full ]; then dd if=/dev/zero of="$PLACE/filler" bs=64k 2>/dev/null || true; fi
if [ "$FAULT" = read-only ]; then mount -o remount,ro "$PLACE"; fi
cp -a "$PLACE"/. "$BEFORE"/
set +e
"$@"
status=$?
cp -a "$PLACE"/. "$AFTER"/
exit $status
"""


# ---------------------------------------------------------------------------------------------- tiny nets

PAD, BOS, EOS = 0, 1, 2
SPECIALS = (PAD, BOS)  # never generated by any search (models.decoding.no_specials): the oracles skip them too


def tiny_net(
    seed: int = 0,
    *,
    src_vocab: int = 24,
    tgt_vocab: int = 24,
    d_model: int = 32,
    nhead: int = 4,
    num_encoder_layers: int = 2,
    num_decoder_layers: int = 2,
    dim_feedforward: int = 48,
    max_len: int = 40,
    eos_bias: float | None = None,
    dtype: torch.dtype = torch.float32,
    **options,
) -> Seq2SeqNet:
    """An untrained, dropout-free net in eval mode, built after `torch.manual_seed(seed)`; `options` are further
    `Seq2SeqConfig` fields. `eos_bias`, on the `<eos>` logit (a generator with a bias: the searches and the static
    decoder all read `net.generator`), makes some sentences finish early and others run to max_len."""
    torch.manual_seed(seed)
    config = Seq2SeqConfig(src_vocab_size=src_vocab, tgt_vocab_size=tgt_vocab, d_model=d_model, nhead=nhead,
                           num_encoder_layers=num_encoder_layers, num_decoder_layers=num_decoder_layers,
                           dim_feedforward=dim_feedforward, dropout=0.0, max_len=max_len, pad_id=PAD,
                           **options)  # fmt: skip
    net = Seq2SeqNet(config)
    if eos_bias is not None:
        generator = nn.Linear(d_model, tgt_vocab)
        with torch.no_grad():
            generator.weight.copy_(net.generator.weight)
            generator.bias.zero_()
            generator.bias[EOS] = eos_bias
        net.generator = generator
    return spread_learned_biases(net).to(dtype).eval()  # T5's table starts at zero: a bias there to be sliced wrong


# The nets of the search tests: float64, so that cached/uncached and batched/alone decoding agree to ~1e-15, scores
# computed step by step and by teacher forcing to ~1e-12, and no near-tie between candidates can flip a choice.
search_net = partial(tiny_net, src_vocab=12, tgt_vocab=8, d_model=16, nhead=2, num_encoder_layers=1,
                     dim_feedforward=32, eos_bias=0.3, dtype=torch.float64)  # fmt: skip
# An untrained 20 → 30-token translator: it decodes long, so decoding tests cover many steps.
small_net = partial(tiny_net, src_vocab=20, tgt_vocab=30, dim_feedforward=64)


def spread_learned_biases(net: torch.nn.Module) -> torch.nn.Module:
    """T5's tables start small; at unit scale a bias applied at a wrong offset changes outputs well beyond
    the tolerances of the invariants."""
    with torch.no_grad():
        for module in net.modules():
            if isinstance(module, T5RelativeBias):
                module.table.normal_()
    return net


def sources(lengths=(7, 3, 5, 1), vocab: int = 24, seed: int = 0) -> torch.Tensor:
    """(B, S) random ids, right-padded to the longest."""
    g = torch.Generator().manual_seed(seed)
    src = torch.full((len(lengths), max(lengths)), PAD)
    for i, n in enumerate(lengths):
        src[i, :n] = torch.randint(3, vocab, (n,), generator=g)
    return src


# The search tests' sources, in the search nets' source vocabulary.
search_sources = partial(sources, lengths=(7, 3, 5, 1, 6), vocab=12)


def exhaustive_width(vocab: int, max_len: int) -> int:
    """Candidates at the last step when nothing is pruned: every non-<eos> prefix × vocab."""
    return (vocab - 1) ** (max_len - 1) * vocab


def strip(row: torch.Tensor) -> list[int]:
    """A hypothesis without its right padding (up to and including the first <eos>)."""
    row = row.tolist()
    return row[: row.index(EOS, 1) + 1] if EOS in row[1:] else row


# The core alone (models.Transformer) and its oracle, torch.nn.Transformer, on (B, T, D) inputs.
D, H = 32, 4


def small_core(num_encoder_layers: int, num_decoder_layers: int, **options) -> Transformer:
    """An untrained D-wide, H-head core with a 64-wide feed-forward and no dropout, in eval mode."""
    config = TransformerConfig(
        d_model=D, nhead=H, num_encoder_layers=num_encoder_layers, num_decoder_layers=num_decoder_layers,
        dim_feedforward=64, dropout=0.0, **options,
    )  # fmt: skip
    return Transformer(config).eval()


def torch_reference(norm_first: bool, activation: str, layers: int = 2) -> torch.nn.Transformer:
    return torch.nn.Transformer(
        d_model=D,
        nhead=H,
        num_encoder_layers=layers,
        num_decoder_layers=layers,
        dim_feedforward=64,
        dropout=0.0,
        activation=activation,
        norm_first=norm_first,
        batch_first=True,
    )


def padded_inputs(B=3, S=7, T=6):
    src, tgt = torch.randn(B, S, D), torch.randn(B, T, D)
    src_pad = torch.zeros(B, S, dtype=torch.bool)
    src_pad[1, 4:] = True
    src_pad[2, 6:] = True
    tgt_pad = torch.zeros(B, T, dtype=torch.bool)
    tgt_pad[1, 3:] = True
    return src, tgt, src_pad, tgt_pad


def padded_source_ids() -> torch.Tensor:
    src = torch.randint(4, 20, (4, 9))  # (B, S), 0 is padding
    src[1, 6:] = 0
    src[3, 2:] = 0
    return src


# ---------------------------------------------------------------------------------------------- data written on the fly

# A small generated English/Chinese corpus: enough repetition for BPE merges, no files needed.
_EN_SUBJ = ["I", "You", "Tom", "Mary", "We", "They", "The old man", "My sister"]
_EN_VERB = ["like", "want", "saw", "bought", "don't need", "can't find", "painted", "forgot"]
_EN_OBJ = ["apples.", "the red car.", "a new book!", "his dog?", "that house, again.", '"Hamlet".']
_ZH_SUBJ = ["我", "你", "汤姆", "玛丽", "我们", "他们"]
_ZH_VERB = ["喜欢", "想要", "看见了", "买了", "不需要"]
_ZH_OBJ = ["苹果。", "那辆红车。", "一本新书！", "他的狗？"]


def english(n: int = 400, seed: int = 0) -> list[str]:
    rng = random.Random(seed)
    return [f"{rng.choice(_EN_SUBJ)} {rng.choice(_EN_VERB)} {rng.choice(_EN_OBJ)}" for _ in range(n)]


def chinese(n: int = 400, seed: int = 0) -> list[str]:
    rng = random.Random(seed)
    return [f"{rng.choice(_ZH_SUBJ)}{rng.choice(_ZH_VERB)}{rng.choice(_ZH_OBJ)}" for _ in range(n)]


def write_tatoeba(path: Path, pairs: list[tuple[str, str]]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    lines = [f"{e}\t{z}\tCC-BY 2.0 (France) Attribution: tatoeba.org #{i}" for i, (e, z) in enumerate(pairs)]
    path.write_text("\ufeff" + "\n".join(lines) + "\n", encoding="utf-8")
    return path


def write_idx(path: Path, array: torch.Tensor, compress: bool) -> None:
    """The IDX format MNIST ships in: magic (0, 0, dtype 0x08 = ubyte, ndim), big-endian dims, bytes."""
    header = struct.pack(">BBBB", 0, 0, 0x08, array.dim()) + struct.pack(f">{array.dim()}I", *array.shape)
    data = header + array.to(torch.uint8).numpy().tobytes()
    if compress:
        path = path.with_name(path.name + ".gz")
        data = gzip.compress(data)
    path.write_bytes(data)


def fake_mnist(root: Path, n_train: int = 60, n_test: int = 20) -> tuple[torch.Tensor, torch.Tensor]:
    """Random digits in torchvision's layout; training files gzipped, test files plain."""
    raw = root / "MNIST" / "raw"
    raw.mkdir(parents=True)
    g = torch.Generator().manual_seed(0)
    train_x, test_x = (torch.randint(0, 256, (n, 28, 28), generator=g) for n in (n_train, n_test))
    train_y, test_y = torch.arange(n_train) % 10, (torch.arange(n_test) * 3) % 10
    write_idx(raw / "train-images-idx3-ubyte", train_x, compress=True)
    write_idx(raw / "train-labels-idx1-ubyte", train_y, compress=True)
    write_idx(raw / "t10k-images-idx3-ubyte", test_x, compress=False)
    write_idx(raw / "t10k-labels-idx1-ubyte", test_y, compress=False)
    return test_x, test_y


def random_digits(n: int, seed: int = 0) -> TensorDataset:
    g = torch.Generator().manual_seed(seed)
    return TensorDataset(torch.randn(n, 1, 28, 28, generator=g), torch.randint(0, 10, (n,), generator=g))


def recipe_args(kind: str, data: Path) -> list[str]:
    """Command-line arguments of a small run of each data module, on data written to `data`."""
    if kind == "toy":  # 16 batches an epoch
        return []
    if kind == "mnist":  # random digits, 100 training images in batches of 8: 13 batches an epoch
        fake_mnist(data, n_train=110)
        return [
            "--config",
            str(ROOT / "configs" / "mnist_subset.yaml"),
            "--data.data_dir",
            str(data),
            "--data.init_args.val_size",
            "10",
            "--data.init_args.batch_size",
            "8",
            "--model.init_args.net.d_model",
            "16",
            "--model.init_args.net.num_encoder_layers",
            "1",
            "--model.init_args.net.dim_feedforward",
            "32",
        ]  # augmentation and dropout stay on
    write_tatoeba(data / "cmn.txt", list(zip(english(), chinese())))  # 16 batches of 384 tokens
    return [
        "--config",
        str(ROOT / "configs" / "cmn_eng.yaml"),
        "--data.init_args.data_dir",
        str(data),
        "--data.init_args.max_tokens",
        "384",
        "--data.init_args.src_vocab_size",
        "60",
        "--data.init_args.tgt_vocab_size",
        "80",
        "--model.init_args.net.d_model",
        "16",
        "--model.init_args.net.nhead",
        "2",
        "--model.init_args.net.dim_feedforward",
        "32",
        "--model.init_args.net.num_encoder_layers",
        "1",
        "--model.init_args.net.num_decoder_layers",
        "1",
        "--model.init_args.warmup_steps",
        "10",
        "--model.init_args.bleu_every_n_epochs",
        "100",
    ]


# ---------------------------------------------------------------------------------------------- Marian (OPUS-MT)

MARIAN_SOURCES = [
    "Ein Hund rennt durch den Schnee.",
    "Zwei Männer spielen Fußball auf einer Wiese.",
    "Eine Frau mit einem roten Hut liest ein Buch.",
    "Kinder.",
    "Ein kleines Mädchen klettert in ein Spielhaus aus Holz, während ihr Vater zuschaut.",
]


# name → (MarianConfig arguments, separate vocabularies, the </s> bias of tests/test_pretrained.py's "ends" regime)
MARIAN_CONFIGS = {
    "shared-tied-swish": (
        dict(
            d_model=32,
            encoder_attention_heads=4,
            encoder_layers=2,
            decoder_layers=2,
            ffn=64,
            activation_function="swish",
            scale_embedding=True,
        ),
        False,
        4.0,
    ),
    "separate-untied-gelu": (
        dict(
            d_model=48,
            encoder_attention_heads=3,
            encoder_layers=1,
            decoder_layers=3,
            ffn=96,
            activation_function="gelu",
            scale_embedding=False,
            tie_word_embeddings=False,
            share_encoder_decoder_embeddings=False,
        ),
        True,
        6.0,
    ),
    "shared-untied-relu": (
        dict(
            d_model=64,
            encoder_attention_heads=8,
            encoder_layers=3,
            decoder_layers=1,
            ffn=32,
            activation_function="relu",
            scale_embedding=True,
            tie_word_embeddings=False,
        ),
        False,
        4.0,
    ),
}


def multi30k_lines(name: str, n: int) -> list[str]:
    with gzip.open(SHARED_DATA / "multi30k" / name, "rt", encoding="utf-8") as f:
        return [next(f).strip() for _ in range(n)]


def train_spm(lines: list[str], vocab_size: int) -> bytes:
    import sentencepiece as spm

    model = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(lines),
        model_writer=model,
        vocab_size=vocab_size,
        model_type="unigram",
        unk_id=0,
        bos_id=-1,
        eos_id=-1,
        pad_id=-1,
        minloglevel=2,
        num_threads=1,
    )
    return model.getvalue()


def marian_vocab(*models: bytes, tags: tuple[str, ...] = ()) -> dict[str, int]:
    """Marian's id table: </s> 0, <unk> 1, the pieces of `models` in order, a multilingual model's `tags`
    (`>>fr<<`, ..., which no SentencePiece model holds), <pad> last."""
    import sentencepiece as spm

    pieces = ["</s>", "<unk>"]
    for model in models:
        proc = spm.SentencePieceProcessor(model_proto=model)
        pieces += [p for p in (proc.id_to_piece(i) for i in range(proc.get_piece_size())) if p not in pieces]
    return {p: i for i, p in enumerate([*pieces, *tags, "<pad>"])}


def make_marian(folder: Path, spm_models, name: str, seed: int = 0, eos_bias: float = 3.0, init_std: float = 0.2, languages=()):
    """A random Marian model and its tokenizer saved in `folder`, as `save_pretrained` writes them; with
    `languages`, a multilingual one, their `>>xx<<` tags in its source vocabulary (OPUS-MT's en-ROMANCE, say)."""
    import transformers

    args, separate, _ = MARIAN_CONFIGS[name]
    args = dict(args)
    src_model, tgt_model = spm_models
    tags = tuple(f">>{language}<<" for language in languages)
    src_vocab = marian_vocab(src_model, tags=tags) if separate else marian_vocab(src_model, tgt_model, tags=tags)
    tgt_vocab = marian_vocab(tgt_model) if separate else src_vocab
    if separate:  # one <pad> id on both sides, as Marian's config has one pad_token_id: equal sizes
        size = max(len(src_vocab), len(tgt_vocab))
        for vocab in (src_vocab, tgt_vocab):
            pieces = sorted(vocab, key=vocab.get)[:-1]
            pieces += [f"<extra{i}>" for i in range(size - 1 - len(pieces))] + ["<pad>"]
            vocab.clear()
            vocab.update({p: i for i, p in enumerate(pieces)})
    pad = len(tgt_vocab) - 1
    ffn = args.pop("ffn")
    config = transformers.MarianConfig(
        vocab_size=len(src_vocab),
        decoder_vocab_size=len(tgt_vocab),
        decoder_ffn_dim=ffn,
        encoder_ffn_dim=ffn,
        decoder_attention_heads=args["encoder_attention_heads"],
        max_position_embeddings=128,
        pad_token_id=pad,
        decoder_start_token_id=pad,
        eos_token_id=0,
        forced_eos_token_id=None,
        init_std=init_std,
        **args,
    )
    torch.manual_seed(seed)
    model = transformers.MarianMTModel(config).eval()
    with torch.no_grad():  # every weight random, norms and biases included, so that no mapping passes by luck
        for pname, p in model.named_parameters():
            if "layer_norm" in pname:
                p.copy_((1.0 if pname.endswith("weight") else 0.0) + 0.2 * torch.randn_like(p))
            elif pname.endswith("bias"):
                p.normal_(0, 0.2)
        model.final_logits_bias.normal_(0, 0.5)
        model.final_logits_bias[0, 0] += eos_bias  # </s> likely enough that decodes end before the length limit
    folder.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(folder)
    (folder / "source.spm").write_bytes(src_model)
    (folder / "target.spm").write_bytes(tgt_model)
    (folder / "vocab.json").write_text(json.dumps(src_vocab))
    if separate:
        (folder / "target_vocab.json").write_text(json.dumps(tgt_vocab))
    tokenizer = transformers.MarianTokenizer(
        str(folder / "source.spm"),
        str(folder / "target.spm"),
        str(folder / "vocab.json"),
        target_vocab_file=str(folder / "target_vocab.json") if separate else None,
        separate_vocabs=separate,
    )
    return model, tokenizer


def forced_eos(eos: int, limit: int):
    """A `generate` logits processor that ends an output at `limit` new tokens as ours does (models/decoding.py):
    `<eos>` the only token left, with its own log-prob (OPUS-MT's `forced_eos_token_id` sets it to 0 instead)."""
    from transformers import LogitsProcessor, LogitsProcessorList

    class ForcedEos(LogitsProcessor):
        def __call__(self, input_ids, scores):
            if input_ids.shape[-1] < limit:  # the decoder start token and fewer than limit - 1 new tokens
                return scores
            forced = torch.full_like(scores, float("-inf"))
            forced[:, eos] = scores[:, eos]
            return forced

    return LogitsProcessorList([ForcedEos()])


def marian_generate(hf, batch, pad: int, **settings) -> torch.Tensor:
    """`generate` of a Marian model as our searches decode: <pad> never generated, no forced </s> but ours at 40."""
    import transformers

    config = transformers.GenerationConfig(
        do_sample=False,
        max_new_tokens=40,
        bad_words_ids=[[pad]],
        pad_token_id=pad,
        eos_token_id=0,
        decoder_start_token_id=pad,
        forced_eos_token_id=None,
        early_stopping=False,
        **settings,
    )
    return hf.generate(**batch, generation_config=config, logits_processor=forced_eos(0, 40))  # </s> as ours


def assert_same_rows(ours: torch.Tensor, theirs: torch.Tensor, pad: int) -> None:
    """Two (B, L) id batches equal once padded to one width."""
    width = max(ours.size(1), theirs.size(1))
    grow = lambda t: torch.cat([t, t.new_full((t.size(0), width - t.size(1)), pad)], dim=1)  # noqa: E731
    assert torch.equal(grow(ours), grow(theirs)), (ours, theirs)


# ---------------------------------------------------------------------------------------------- exported models

# A word vocabulary for random models whose outputs are read as text (w0 ... w59).
WORDS = Vocab([f"w{i}" for i in range(60)], "word").to_dict()


def sharpened_model(decoding: dict | None = None, **options):
    """A small random model whose weights are scaled up, so that its next-token distributions are far
    from uniform and a wrongly mapped weight shows in the log-probabilities. `options`: network settings;
    `decoding`: the module's decoding defaults."""
    from tasks import Seq2SeqTransformer

    torch.manual_seed(0)
    model = Seq2SeqTransformer(
        tokenizers={"src": WORDS, "tgt": WORDS},
        net=Seq2SeqSettings(d_model=32, num_encoder_layers=2, num_decoder_layers=2, dim_feedforward=64, max_len=64, **options),
        **(decoding or {}),
    ).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.mul_(3) if p.dim() >= 2 else p.add_(0.3 * torch.randn_like(p))
    return model


def biased_model(**token_biases: float):
    """`sharpened_model` with an output bias (exported as CTranslate2's) that favours the named target tokens."""
    model = sharpened_model(generator_bias=True)
    with torch.no_grad():
        for name, value in token_biases.items():
            model.net.generator.bias[getattr(model, f"{name}_id")] = value
    return model


def trained_toy_model():
    """The toy recipe's model trained until it translates its three pairs (greedy and beam), in eval mode."""
    from datamodules import ToyTranslationDataModule
    from tasks import Seq2SeqTransformer

    L.seed_everything(0)
    dm = ToyTranslationDataModule(batch_size=3, repeats=16)
    model = Seq2SeqTransformer(tokenizers=dm.tokenizers, bleu_every_n_epochs=0, **TOY_MODEL)
    quiet_trainer(max_epochs=14, gradient_clip_val=1.0).fit(model, datamodule=dm)
    return model.eval()


def assert_close(got: dict, expected: dict) -> None:
    """Two {name: gradient} maps hold the same names and, within float32 rounding, the same values."""
    assert got.keys() == expected.keys()
    for name in expected:
        torch.testing.assert_close(got[name], expected[name], rtol=1e-5, atol=1e-6, msg=name)


def readme_options_missing(readme: str) -> list[str]:
    """What the README's table of research options ("## Research variants") lacks of the tables: each entry's name
    in its setting's rows, and the file that holds the table in their `where` column ("activation: `squared_relu`")."""
    from models import activations, norms, positional, relative

    section = readme[readme.index("## Research variants") :]
    rows = [line for line in section[: section.index("\n\n", section.index("| option |"))].splitlines() if line.startswith("| `")]
    missing = []
    for setting, module, table in (
        ("activation", activations, activations.ACTIVATIONS),
        ("norm", norms, norms.NORMS),
        ("positional", positional, positional.POSITIONALS),
        ("relative_bias", relative, relative.RELATIVE_BIASES),
    ):
        listed = " ".join(row for row in rows if row.startswith(f"| `{setting}` "))
        where = Path(module.__file__).relative_to(ROOT).as_posix()
        missing += [f"{setting}: `{name}`" for name in [*table, where] if f"`{name}`" not in listed]
    return missing
