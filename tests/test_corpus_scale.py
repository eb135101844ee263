"""The corpus pipeline at scale: prepared once into a memory-mapped cache (keyed, locked, never half-used),
Hugging Face `datasets` sources, the token-budget sampler on millions of lengths, bad input far into a file."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch

import datamodules.preparation as preparation
from common.errors import CorpusFormatError, DataCacheError, DataNotFoundError
from datamodules.corpus import ParallelCorpusDataModule
from datamodules.samplers import TokenBudgetBatchSampler, pack_sorted, padding_waste
from datamodules.sources import AlignedFiles
from tests.helpers import ENV, HANG_TIMEOUT, ROOT, fit, script

GERMAN = ["Ein Hund rennt.", "Zwei Männer spielen Fußball.", "Eine Frau liest ein Buch im Park.", "Kinder lachen laut."]
ENGLISH = ["A dog runs.", "Two men play soccer.", "A woman reads a book in the park.", "Children laugh loudly."]


def aligned_corpus(folder: Path, n: int = 300, seed: int = 0) -> Path:
    """train/val/test .de/.en line-aligned files of `n` (+ 20 + 20) sentence pairs."""
    rng = np.random.default_rng(seed)
    folder.mkdir(parents=True, exist_ok=True)
    for split, size in (("train", n), ("val", 20), ("test", 20)):
        picks = rng.integers(0, len(GERMAN), size=(size, 2))
        (folder / f"{split}.de").write_text("".join(f"{GERMAN[i]} {GERMAN[j]}\n" for i, j in picks))
        (folder / f"{split}.en").write_text("".join(f"{ENGLISH[i]} {ENGLISH[j]}\n" for i, j in picks))
    return folder


def module(folder: Path, **kw) -> ParallelCorpusDataModule:
    args = dict(format="aligned", src_lang="de", tgt_lang="en", src_tokenizer="bpe", tgt_tokenizer="bpe", shared_vocab=True)
    args |= dict(src_vocab_size=150, tgt_vocab_size=150, max_tokens=512, max_len=64, val_prefix="val", test_prefix="test")
    return ParallelCorpusDataModule(str(folder), download=False, **(args | kw))


def batches_of(dm: ParallelCorpusDataModule, split: str = "train") -> list[tuple[list, list]]:
    loader = getattr(dm, f"{split}_dataloader")()
    return [(b.src.tolist(), b.tgt.tolist()) for b in loader]


def folders(root: Path, kind: str) -> list[Path]:
    return sorted(p for p in root.glob(f"{kind}-*") if p.is_dir())


# ---------------------------------------------------------------------------------------------- the cache


def test_second_module_memory_maps_the_cache_without_training_or_encoding(tmp_path, monkeypatch) -> None:
    data = aligned_corpus(tmp_path / "d")
    first = module(data)
    first.setup("fit")
    expected = batches_of(first)
    assert [p.name for p in (data / ".cache").iterdir() if p.is_dir()] != []

    def refuse(*args, **kwargs):
        raise AssertionError("a prepared corpus must not be re-read, re-trained or re-encoded")

    monkeypatch.setattr(preparation, "train_tokenizer", refuse)
    monkeypatch.setattr(preparation.PreparedCorpus, "_encode_split", refuse)
    monkeypatch.setattr(AlignedFiles, "pairs", refuse)
    second = module(data)
    second.setup("fit")
    assert second.tokenizers == first.tokenizers
    assert batches_of(second) == expected
    assert isinstance(second._datasets["train"].src.ids.base, np.memmap)  # a view of the map, not a copy


def test_cached_ids_equal_a_direct_encoding_of_the_files(tmp_path) -> None:
    """Oracle: the tokenizer applied line by line to the raw files, framed as batching.frame_* does."""
    from datamodules.batching import collate_pairs, frame_source, frame_target

    dm = module(aligned_corpus(tmp_path / "d"), max_len=12)
    dm.setup("fit")
    tok = dm.src_vocab
    for split in ("val", "test"):
        data = dm._datasets[split]
        for i, (s, t) in enumerate(getattr(dm, f"{split}_pairs")()):
            assert data[i] == (frame_source(tok.encode(s), 12), frame_target(tok.encode(t), 12))
    rows = [5, 0, 17, 3]  # a batch straight from the maps equals padding the sentences one by one
    got, expected = dm._datasets["val"].__getitems__(rows), collate_pairs([dm._datasets["val"][i] for i in rows])
    assert all(torch.equal(a, b) for a, b in zip(got, expected))


@pytest.mark.parametrize("change", ["setting", "source file"])
def test_a_changed_setting_or_file_gets_a_new_cache_never_the_stale_one(tmp_path, change) -> None:
    data = aligned_corpus(tmp_path / "d")
    old = module(data)
    old.setup("fit")
    if change == "setting":
        new = module(data, max_len=24)
    else:
        time.sleep(0.01)  # a new modification time even on coarse clocks
        with open(data / "train.en", "a") as f, open(data / "train.de", "a") as g:
            f.write("A cat sleeps.\n")
            g.write("Eine Katze schläft.\n")
        new = module(data)
    new.setup("fit")
    assert len(folders(data / ".cache", "ids")) == 2
    n_old, n_new = len(old._datasets["train"]), len(new._datasets["train"])
    assert n_new == n_old + 1 if change == "source file" else n_new <= n_old


@pytest.mark.parametrize("damage", ["no meta", "truncated ids", "dead build"])
def test_a_damaged_or_half_written_cache_is_rebuilt_not_used(tmp_path, damage) -> None:
    data = aligned_corpus(tmp_path / "d")
    dm = module(data)
    dm.setup("fit")
    expected = batches_of(dm)
    ids = folders(data / ".cache", "ids")[0]
    if damage == "no meta":  # e.g. copied without its last file
        (ids / "meta.json").unlink()
    elif damage == "truncated ids":
        with open(ids / "train.tgt.bin", "r+b") as f:
            f.truncate(f.seek(0, os.SEEK_END) - 2)
    else:  # a build killed mid-write left its temporary folder, and nothing else
        dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
        (ids.parent / f".{ids.name}.tmp-{dead.stdout.strip()}").mkdir()
        (ids / "meta.json").unlink()
    again = module(data)
    again.setup("fit")
    assert batches_of(again) == expected
    assert json.loads((ids / "meta.json").read_text())["splits"]["train"]["pairs"] == len(again._datasets["train"])
    assert not [p for p in ids.parent.iterdir() if ".tmp-" in p.name]


def test_tokenizers_cut_short_are_prepared_anew(tmp_path) -> None:
    data = aligned_corpus(tmp_path / "d")
    expected = module(data).tokenizers
    (tokenizers,) = folders(data / ".cache", "tokenizers")
    text = (tokenizers / "tokenizers.json").read_text()
    (tokenizers / "tokenizers.json").write_text(text[: len(text) // 2])
    again = module(data)
    assert again.tokenizers == expected
    assert (tokenizers / "tokenizers.json").read_text() == text


@pytest.mark.parametrize("damage", ["tokenizers", "ids", "offsets"])
def test_a_cache_changed_in_place_is_one_line_naming_the_file(tmp_path, damage) -> None:
    # Same sizes, other bytes (a copy gone wrong, a disk error, a user's edit): the meta cannot tell, and ids
    # outside the vocabulary would reach the embedding as an IndexError deep in a traceback.
    data = aligned_corpus(tmp_path / "d")
    module(data).setup("fit")
    (tokenizers,) = folders(data / ".cache", "tokenizers")
    (ids,) = folders(data / ".cache", "ids")
    path = {"tokenizers": tokenizers / "tokenizers.json", "ids": ids / "train.src.bin", "offsets": ids / "train.tgt.idx"}[damage]
    size = path.stat().st_size
    path.write_bytes(b"{" * size if damage == "tokenizers" else b"\xff" * size)
    with pytest.raises(DataCacheError) as err:
        module(data).setup("fit")
    message = str(err.value)
    assert "\n" not in message and str(path) in message and "damaged" in message, message
    folder = tokenizers if damage == "tokenizers" else ids
    assert f"delete {folder} and run again" in message, message


@pytest.mark.slow
def test_fit_on_a_cache_changed_in_place_is_one_line(tmp_path) -> None:
    data = aligned_corpus(tmp_path / "d")
    module(data).setup("fit")
    (ids,) = folders(data / ".cache", "ids")
    path = ids / "train.tgt.bin"
    path.write_bytes(b"\xff" * path.stat().st_size)
    result = fit(
        tmp_path / "run", "--config", "configs/multi30k.yaml", "--data.data_dir", str(data), "--data.download", "false",
        "--data.val_prefix", "val", "--data.test_prefix", "test", "--data.src_vocab_size", "150",
        "--data.tgt_vocab_size", "150", "--data.max_len", "64",
    )  # fmt: skip
    assert result.returncode == 1 and "Traceback" not in result.stderr, result.stderr[-3000:]
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and str(path) in errors[0] and "damaged" in errors[0], result.stderr[-3000:]


def kill_when(cmd: list[str], ready, timeout: float = HANG_TIMEOUT) -> int:
    """Start `cmd`, and SIGKILL it as soon as `ready(pid)` holds; its pid. Fails unless it was killed
    then, still running: a process that ended first (or never got there) interrupted nothing."""
    proc = subprocess.Popen(cmd, cwd=ROOT, env=ENV, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + timeout
    try:
        while not ready(proc.pid) and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.005)
        proc.send_signal(signal.SIGKILL)
    finally:
        proc.kill()
        proc.wait()
    assert proc.returncode == -signal.SIGKILL, f"{cmd[1]} ended with {proc.returncode} before the moment to kill it"
    return proc.pid


@pytest.mark.slow
def test_prepare_killed_while_training_or_encoding_never_leaves_a_cache_that_is_used(tmp_path) -> None:
    data = aligned_corpus(tmp_path / "d", n=20_000)
    cmd = [*_prepare_args(data)]
    reference = module(data, cache_dir=str(tmp_path / "reference"))
    reference.setup("fit")
    expected = batches_of(reference, "val")
    cache = data / ".cache"
    # Killed while its tokenizers are trained, then (the next run) while it writes the token ids.
    training = kill_when(cmd, lambda pid: any(cache.glob(f".tokenizers-*.tmp-{pid}")))
    assert any(cache.glob(f".tokenizers-*.tmp-{training}")) and folders(cache, "tokenizers") == []
    encoding = kill_when(cmd, lambda pid: any(cache.glob(f".ids-*.tmp-{pid}")))
    assert not any(cache.glob(f".tokenizers-*.tmp-{training}"))  # the dead run's leftover was cleared
    assert any(cache.glob(f".ids-*.tmp-{encoding}")) and folders(cache, "ids") == []  # nothing half-built named
    done = script("prepare", *cmd[2:])
    assert done.returncode == 0, done.stderr
    assert "token ids:" in done.stdout
    dm = module(data)
    dm.setup("fit")
    assert batches_of(dm, "val") == expected and len(dm._datasets["train"]) == len(reference._datasets["train"])
    assert not [p for p in cache.iterdir() if ".tmp-" in p.name]


def _prepare_args(data: Path) -> list[str]:
    return [
        sys.executable, str(ROOT / "scripts" / "prepare.py"), "--config", str(ROOT / "configs" / "multi30k.yaml"),
        "--data.data_dir", str(data), "--data.val_prefix", "val", "--data.test_prefix", "test",
        "--data.src_vocab_size", "150", "--data.tgt_vocab_size", "150", "--data.download", "false",
    ]  # fmt: skip


@pytest.mark.slow
def test_prepare_shows_bars_on_a_terminal_and_one_line_a_stage_in_a_file(tmp_path) -> None:
    import fcntl
    import pty
    import struct
    import termios

    data = aligned_corpus(tmp_path / "d", n=2_000)
    in_file = subprocess.run(_prepare_args(data), cwd=ROOT, env=ENV, capture_output=True, text=True, timeout=HANG_TIMEOUT)
    assert in_file.returncode == 0, in_file.stderr
    assert "encoding train" not in in_file.stderr and "\r" not in in_file.stderr
    stages = [line for line in in_file.stderr.splitlines() if line.startswith(("Tokenizers trained", "Corpus encoded"))]
    assert len(stages) == 2, in_file.stderr
    cache = data / ".cache"
    assert in_file.stdout.startswith("prepared in ") and f" s, in {cache}:" in in_file.stdout.splitlines()[0]
    again = subprocess.run(_prepare_args(data), cwd=ROOT, env=ENV, capture_output=True, text=True, timeout=HANG_TIMEOUT)
    assert again.returncode == 0 and again.stdout.startswith(f"already prepared, in {cache} (nothing to do):\n"), again.stdout

    # On a terminal (another cache folder, so that it prepares again): the encoding's bar, with a known total.
    leader, follower = pty.openpty()
    fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 120, 0, 0))  # a terminal 120 columns wide
    args = [*_prepare_args(data), "--data.cache_dir", str(tmp_path / "cache-2")]
    proc = subprocess.Popen(args, cwd=ROOT, env=ENV, stdin=follower, stdout=follower, stderr=follower)
    os.close(follower)
    output = b""
    while True:
        try:
            chunk = os.read(leader, 1 << 16)
        except OSError:  # the terminal's other end closed: the process is done
            break
        if not chunk:
            break
        output += chunk
    os.close(leader)
    assert proc.wait(timeout=HANG_TIMEOUT) == 0, output.decode(errors="replace")[-3000:]
    text = output.decode(errors="replace")
    assert "encoding train" in text and "2.00k/2.00k" in text and "pairs/s" in text, text[-3000:]


@pytest.mark.slow
def test_two_processes_preparing_at_once_encode_the_corpus_once(tmp_path) -> None:
    data = aligned_corpus(tmp_path / "d", n=5_000)
    procs = [subprocess.Popen(_prepare_args(data), cwd=ROOT, env=ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)]
    procs.append(
        subprocess.Popen(_prepare_args(data), cwd=ROOT, env=ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    )
    outputs = [p.communicate(timeout=HANG_TIMEOUT) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outputs
    logs = "".join(out + err for out, err in outputs)
    assert logs.count("Tokenizers trained") == 1 and logs.count("Corpus encoded") == 1
    assert len(folders(data / ".cache", "ids")) == 1


@pytest.mark.slow
def test_ddp_processes_share_one_preparation(tmp_path) -> None:
    data = aligned_corpus(tmp_path / "d", n=400)
    result = fit(
        tmp_path / "run", "--config", "configs/multi30k.yaml", "--data.data_dir", str(data), "--data.val_prefix", "val",
        "--data.test_prefix", "test", "--data.src_vocab_size", "150", "--data.tgt_vocab_size", "150", "--data.download", "false",
        "--model.init_args.net.d_model", "16", "--model.init_args.net.nhead", "2", "--model.init_args.net.dim_feedforward", "32",
        "--model.init_args.net.num_encoder_layers", "1", "--model.init_args.net.num_decoder_layers", "1",
        "--trainer.max_steps", "2", "--trainer.limit_val_batches", "0", "--trainer.accelerator", "cpu",
        "--trainer.devices", "2", "--trainer.strategy", "ddp", "--trainer.logger", "false", "--test", "false",
        "--ema_decay", "null",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    logs = result.stdout + result.stderr
    assert logs.count("Corpus encoded") == 1 and logs.count("Tokenizers trained") == 1
    assert len(folders(data / ".cache", "ids")) == 1 and len(folders(data / ".cache", "tokenizers")) == 1


@pytest.mark.parametrize("read_only", ["the data folder", "its .cache"])
def test_a_read_only_cache_folder_puts_the_cache_under_xdg_cache_home_and_says_so(tmp_path, monkeypatch, caplog, read_only):
    data = aligned_corpus(tmp_path / "d")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "home-cache"))
    # The mode bits are what says read-only (root could write anyway: datamodules/cache.default_root reads them).
    folder = data if read_only == "the data folder" else data / ".cache"
    folder.mkdir(exist_ok=True)
    folder.chmod(0o555)
    try:
        with caplog.at_level("INFO"):
            module(data).setup("fit")
    finally:
        folder.chmod(0o755)
    assert not folders(data / ".cache", "ids") and not folders(data / ".cache", "tokenizers")
    (root,) = (tmp_path / "home-cache" / "transformer-lightning").iterdir()
    assert folders(root, "ids") and folders(root, "tokenizers")
    said = [message for message in caplog.messages if "not writable" in message]
    assert said == [f"{folder} is not writable: the prepared data goes to {root} (--data.cache_dir to choose another)"]


def test_unwritable_cache_dir_is_one_line_naming_it(tmp_path) -> None:
    data = aligned_corpus(tmp_path / "d")
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    with pytest.raises(DataCacheError) as err:
        module(data, cache_dir=str(blocker / "cache")).setup("fit")
    message = str(err.value)
    assert "\n" not in message and str(blocker) in message and "--data.cache_dir" in message


def test_fit_with_an_unwritable_cache_dir_exits_with_one_line(tmp_path) -> None:
    data = aligned_corpus(tmp_path / "d")
    (tmp_path / "a-file").write_text("")
    result = fit(
        tmp_path / "run", "--config", "configs/multi30k.yaml", "--data.data_dir", str(data),
        "--data.cache_dir", str(tmp_path / "a-file" / "cache"), "--data.download", "false", "--data.val_prefix", "val",
        "--data.test_prefix", "test",
    )  # fmt: skip
    assert result.returncode != 0
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "a-file" in errors[0] and "Traceback" not in result.stderr


# ---------------------------------------------------------------------------------------------- bad input at scale


def test_an_invalid_byte_three_million_lines_in_names_its_line(tmp_path) -> None:
    n = 3_000_000
    (tmp_path / "train.de").write_bytes(b"ja\n" * n + b"gut \xff\n")
    (tmp_path / "train.en").write_bytes(b"yes\n" * (n + 1))
    for split in ("val", "test"):
        for lang in ("de", "en"):
            (tmp_path / f"{split}.{lang}").write_text("ok\n")
    with pytest.raises(CorpusFormatError, match=rf"train\.de, line {n + 1} \(byte offset {3 * n + 4}\): not UTF-8"):
        module(tmp_path, src_tokenizer="word", tgt_tokenizer="word", shared_vocab=False).setup("fit")


def test_sides_of_different_length_are_one_error_with_both_counts(tmp_path) -> None:
    data = aligned_corpus(tmp_path / "d")
    with open(data / "train.en", "a") as f:
        f.write("One line too many.\n")
    with pytest.raises(CorpusFormatError, match=r"train\.de has 300 lines, .*train\.en has 301"):
        module(data).setup("fit")
    assert not list((data / ".cache").glob("ids-*"))


# ---------------------------------------------------------------------------------------------- Hugging Face datasets


def write_translation_rows(folder: Path, kind: str, src: str = "de", tgt: str = "en") -> Path:
    """train/validation/test splits in the hub's translation layout, as local files of `kind`."""
    rows = {
        split: [{"translation": {src: f"{g} {i}", tgt: f"{e} {i}"}} for i, (g, e) in enumerate(zip(GERMAN * n, ENGLISH * n))]
        for split, n in (("train", 50), ("validation", 3), ("test", 2))
    }
    folder.mkdir(parents=True, exist_ok=True)
    if kind == "jsonl":
        for split, data in rows.items():
            (folder / f"{split}.jsonl").write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in data))
    else:
        import datasets

        dd = datasets.DatasetDict({split: datasets.Dataset.from_list(data) for split, data in rows.items()})
        if kind == "parquet":
            for split, ds in dd.items():
                ds.to_parquet(str(folder / f"{split}.parquet"))
        else:
            dd.save_to_disk(str(folder))
    return folder


@pytest.mark.parametrize("kind", ["jsonl", "parquet", "save_to_disk"])
def test_hugging_face_translation_layout_from_local_files(tmp_path, kind) -> None:
    folder = write_translation_rows(tmp_path / "wmt", kind)
    dm = module(folder, format="hf", val_prefix="validation", test_prefix="test", src_lang="en", tgt_lang="de")
    dm.setup("fit")
    assert dm.test_pairs() == [(f"{e} {i}", f"{g} {i}") for i, (g, e) in enumerate(zip(GERMAN * 2, ENGLISH * 2))]
    assert len(dm.val_pairs()) == 12 and len(dm._datasets["train"]) == 200
    assert sum(len(b[0]) for b in batches_of(dm)) == 200


def test_hugging_face_source_errors_are_one_line(tmp_path) -> None:
    with pytest.raises(DataNotFoundError, match=r"validation\.jsonl.*not found in"):
        module(write_translation_rows(tmp_path / "a", "jsonl").parent / "b", format="hf", val_prefix="validation").setup()
    folder = write_translation_rows(tmp_path / "c", "jsonl", src="fr")
    with pytest.raises(
        CorpusFormatError, match=r"train\.jsonl, row 1: needs translation\.de and \.en strings, found \['en', 'fr'\]"
    ):
        module(folder, format="hf", val_prefix="validation").setup()


@pytest.mark.slow
def test_wmt14_recipe_runs_a_few_steps_on_a_local_slice(tmp_path) -> None:
    """configs/wmt14_en_de.yaml as shipped (Transformer-base, shared BPE, beam 4 with penalty 0.6) on a tiny
    slice in the hub's layout, on one CPU process in fp32 instead of 8 GPUs."""
    folder = write_translation_rows(tmp_path / "wmt14", "jsonl")
    result = fit(
        tmp_path / "run", "--config", "configs/wmt14_en_de.yaml", "--data.dataset", "null", "--data.data_dir", str(folder),
        "--trainer.accelerator", "cpu", "--trainer.devices", "1", "--trainer.strategy", "auto", "--trainer.precision", "32",
        "--trainer.max_steps", "4", "--trainer.val_check_interval", "2", "--trainer.logger", "false",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    summary = json.loads(next((tmp_path / "run").rglob("summary.json")).read_text())
    assert summary["steps"] == 4 and summary["parameters"] > 40_000_000
    # Oracle: the best checkpoint's own beam-4 translations of the test split, scored by SacreBLEU.
    from common.checkpoints import load_checkpoint
    from tasks import Seq2SeqTransformer
    from tasks.metrics import corpus_scores

    model = load_checkpoint(Seq2SeqTransformer, summary["best_checkpoint"])
    assert (model.hparams.eval_beam_size, model.hparams.length_penalty) == (4, 0.6)
    pairs = [(f"{e} {i}", f"{g} {i}") for i, (g, e) in enumerate(zip(GERMAN * 2, ENGLISH * 2))]  # en → de
    expected = corpus_scores(model.translate_many([s for s, _ in pairs], beam_size=4), [r for _, r in pairs])
    assert summary["test"]["test/bleu"] == pytest.approx(expected["bleu"], abs=1e-4)
    assert summary["test"]["test/chrf"] == pytest.approx(expected["chrf"], abs=1e-4)
    assert summary["test_bleu_signature"] == expected["bleu_signature"]


# ---------------------------------------------------------------------------------------------- the sampler at scale


def test_greedy_packing_by_runs_equals_the_example_by_example_oracle() -> None:
    rng = np.random.default_rng(0)

    def oracle(lengths, budget):
        cuts, size = [], 0
        for i, n in enumerate(lengths):
            if size and n * (size + 1) > budget:
                cuts.append(i)
                size = 0
            size += 1
        return cuts

    for _ in range(500):
        budget = int(rng.integers(4, 90))
        lengths = np.sort(rng.integers(1, budget + 1, size=int(rng.integers(0, 80))))
        assert pack_sorted(lengths, budget).tolist() == oracle(lengths.tolist(), budget)


def test_sampler_on_wmt_sized_arrays_covers_every_example_once_in_equal_shards() -> None:
    lengths = np.random.default_rng(1).integers(3, 200, size=4_500_000)
    world = 4
    shards = [TokenBudgetBatchSampler(lengths, 4096, shuffle=True, seed=5, num_replicas=world, rank=r) for r in range(world)]
    for s in shards:
        s.set_epoch(3)
    batches = [s.batches() for s in shards]
    assert len({len(b) for b in batches}) == 1
    seen = np.concatenate([np.concatenate(b) for b in batches])
    assert len(np.unique(seen)) == len(seen) and len(seen) > 0.99 * len(lengths)  # the remainder batches wait for another epoch
    assert all(len(b) * lengths[b].max() <= 4096 for b in batches[0][:2000])
    shards[0].skip = 7  # a resumed epoch leaves out what it already trained on
    assert [b.tolist() for b in list(shards[0])[:3]] == [b.tolist() for b in batches[0][7:10]]


def test_padding_waste_equals_counting_every_position() -> None:
    rng = np.random.default_rng(2)
    src, tgt = rng.integers(1, 40, size=500), rng.integers(1, 40, size=500)
    batches = TokenBudgetBatchSampler(np.maximum(src, tgt), 160, shuffle=True, seed=0).batches()
    real = sum(int(src[i] + tgt[i]) for b in batches for i in b)
    padded = sum(len(b) * (max(src[i] for i in b) + max(tgt[i] for i in b)) for b in batches)
    assert padding_waste(batches, src, tgt) == pytest.approx(1 - real / padded, abs=1e-12)


def test_loader_workers_map_the_cache_themselves_and_give_the_same_batches(tmp_path) -> None:
    data = aligned_corpus(tmp_path / "d")
    alone, workers = module(data), module(data, num_workers=2)
    alone.setup("fit")
    workers.setup("fit")
    assert batches_of(workers) == batches_of(alone)
    import pickle

    shipped = pickle.dumps(workers._datasets["train"])  # what a worker process receives
    assert len(shipped) < 2_000, "a worker must get the paths, not a copy of the arrays"
