"""Bad input gets one clear line and a non-zero exit, never a traceback, and loses nothing:
checkpoints (missing, truncated, corrupt, of the other task), data (missing folder, malformed
corpus line, empty or binary corpus, truncated IDX file), model sizes that do not fit, sentences
(empty, too long, unknown characters), a NaN loss, an interrupted save. The data files and
hyperparameters themselves are tried in-process, over generated bad inputs, in test_bad_files.py."""

import codecs
import os
import random
import signal
import sys
import warnings

import pytest
import torch
from lightning.pytorch.callbacks import Callback

from common.checkpoints import load_checkpoint
from common.errors import CheckpointError
from datamodules import UNK, ToyTranslationDataModule
from tasks import Seq2SeqTransformer
from tests.helpers import FIT, ROOT, TOY_MODEL, assert_one_line_error, fake_mnist, run
from training.resume import check_resume_checkpoint

SCRIPTS = ROOT / "scripts"


# ---------------------------------------------------------------------------------------------- checkpoints


@pytest.mark.parametrize(
    "kind, words",
    [
        ("missing", ["not found"]),
        ("truncated", ["truncated or corrupt"]),
        ("corrupt", ["truncated or corrupt"]),
        ("mnist", ["MnistSequenceClassifier", "not a Seq2SeqTransformer"]),
    ],
)
def test_load_checkpoint_says_what_is_wrong(ckpts, kind, words):
    path = ckpts.get(kind, ckpts["good"].parent / "missing.ckpt")
    with pytest.raises(CheckpointError) as err:
        load_checkpoint(Seq2SeqTransformer, path)
    assert all(w in str(err.value) for w in words) and "\n" not in str(err.value)
    assert str(path) in str(err.value)


def test_good_checkpoint_is_plain_data_and_loads(ckpts):
    saved = torch.load(ckpts["good"], weights_only=True)["state_dict"]  # plain data: no pickled classes
    model = load_checkpoint(Seq2SeqTransformer, ckpts["good"])
    assert isinstance(model, Seq2SeqTransformer) and model.state_dict().keys() == saved.keys()
    assert all(torch.equal(value, saved[name]) for name, value in model.state_dict().items())  # the trained weights
    state = check_resume_checkpoint(str(ckpts["good"]), model)
    assert state["global_step"] == 1 and "loops" in state  # resumable: one step trained


@pytest.mark.parametrize(
    "kind, words",
    [
        ("missing", ["no such checkpoint"]),
        ("truncated", ["truncated or corrupt"]),
        ("corrupt", ["truncated or corrupt"]),
        ("mnist", ["MnistSequenceClassifier", "Seq2SeqTransformer"]),
        ("bigger", ["does not fit this model's sizes"]),
    ],
)
def test_resume_checkpoint_is_checked_before_training(ckpts, kind, words):
    model = Seq2SeqTransformer(tokenizers=ToyTranslationDataModule().tokenizers, **TOY_MODEL)
    path = ckpts.get(kind, ckpts["good"].parent / "missing.ckpt")
    with pytest.raises(CheckpointError) as err:
        check_resume_checkpoint(str(path), model)
    assert all(w in str(err.value) for w in words) and "\n" not in str(err.value)


@pytest.mark.parametrize("kind", ["truncated", "mnist"])
def test_fit_with_a_bad_ckpt_path_is_one_line(ckpts, tmp_path, kind):
    result = run(
        [*FIT, "--trainer.default_root_dir", str(tmp_path), "--trainer.logger", "false", "--ckpt_path", str(ckpts[kind])]
    )
    assert_one_line_error(result, str(ckpts[kind]))
    assert not list(tmp_path.rglob("*.ckpt"))  # nothing trained, nothing written


def test_fit_resume_last_without_a_checkpoint(tmp_path):
    result = run([*FIT, "--trainer.default_root_dir", str(tmp_path), "--trainer.logger", "false", "--ckpt_path", "last"])
    assert_one_line_error(result, "no last.ckpt")


def test_fit_config_typos_are_short(tmp_path):
    for extra in (["--config", str(tmp_path / "nope.yaml")], ["--trainer.max_epochz", "3"]):
        result = run([*FIT, *extra])
        assert result.returncode == 2 and "Traceback" not in result.stderr
        assert len(result.stderr.strip().splitlines()) <= 3, result.stderr  # the error and a --help tip, no usage dump


# ---------------------------------------------------------------------------------------------- data


@pytest.mark.parametrize("recipe", ["cmn_eng", "mnist"])
def test_fit_with_a_missing_data_folder(tmp_path, recipe):
    missing = tmp_path / "no-such-folder"
    result = run(
        [
            *FIT,
            "--config",
            f"configs/{recipe}.yaml",
            "--data.init_args.data_dir",
            str(missing),
            "--data.init_args.download",
            "false",
            "--trainer.default_root_dir",
            str(tmp_path),
            "--trainer.logger",
            "false",
        ]
    )
    line = assert_one_line_error(result, str(missing))
    assert "--data.download true" in line and "download=" not in line  # the flag that downloads


def test_fit_with_a_malformed_corpus_line(tmp_path):
    data = tmp_path / "cmn-eng"
    data.mkdir()
    lines = [f"Sentence {i}.\t句子{i}。\tCC-BY" for i in range(40)]
    lines[17] = "No tab on this line"
    (data / "cmn.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
    result = run(
        [
            *FIT,
            "--config",
            "configs/cmn_eng.yaml",
            "--data.init_args.data_dir",
            str(data),
            "--data.init_args.download",
            "false",
            "--trainer.default_root_dir",
            str(tmp_path / "run"),
            "--trainer.logger",
            "false",
        ]
    )
    assert_one_line_error(result, "cmn.txt", "line 18")


@pytest.mark.parametrize("kind", ["bom-only", "random-bytes"])
def test_fit_with_an_empty_or_binary_corpus(tmp_path, kind):
    data = tmp_path / "cmn-eng"
    data.mkdir()
    (data / "cmn.txt").write_bytes(codecs.BOM_UTF8 if kind == "bom-only" else b"\xff" + random.Random(0).randbytes(4000))
    result = run(
        [
            *FIT,
            "--config",
            "configs/cmn_eng.yaml",
            "--data.init_args.data_dir",
            str(data),
            "--data.init_args.download",
            "false",
            "--trainer.default_root_dir",
            str(tmp_path / "run"),
            "--trainer.logger",
            "false",
        ]
    )
    assert_one_line_error(result, str(data / "cmn.txt"), "no text" if kind == "bom-only" else "line 1 (byte offset 0)")
    assert result.returncode == 2


def test_fit_with_a_truncated_mnist_test_file_stops_before_training(tmp_path):
    fake_mnist(tmp_path / "mnist")
    images = tmp_path / "mnist" / "MNIST" / "raw" / "t10k-images-idx3-ubyte"  # 20 images: 16 + 15,680 bytes
    images.write_bytes(images.read_bytes()[:5000])
    result = run(
        [
            *FIT,
            "--config",
            "configs/mnist_subset.yaml",
            "--data.init_args.data_dir",
            str(tmp_path / "mnist"),
            "--data.init_args.download",
            "false",
            "--data.init_args.val_size",
            "10",
            "--trainer.default_root_dir",
            str(tmp_path / "run"),
            "--trainer.logger",
            "false",
        ]
    )
    assert_one_line_error(result, str(images), "promises 20 images, 15696 bytes", "has 5000 bytes")
    assert result.returncode == 2 and not list((tmp_path / "run").rglob("*.ckpt"))


def test_fit_with_model_sizes_that_do_not_fit_is_one_short_line(tmp_path):
    result = run(
        [
            *FIT,
            "--model.init_args.net.d_model",
            "30",
            "--model.init_args.net.nhead",
            "4",
            "--trainer.default_root_dir",
            str(tmp_path),
            "--trainer.logger",
            "false",
        ]
    )
    line = assert_one_line_error(result, "Seq2SeqSettings: d_model=30 must be divisible by nhead=4")
    assert result.returncode == 2 and len(line) < 100  # not the namespace and its vocabulary


# ---------------------------------------------------------------------------------------------- sentences


@pytest.fixture(scope="module")
def toy_model(ckpts):
    return load_checkpoint(Seq2SeqTransformer, ckpts["good"])


def test_empty_sentence_is_refused(toy_model):
    for empty in ("", "   "):
        with pytest.raises(ValueError, match="empty"):
            toy_model.translate([empty])


def test_overlong_sentence_is_truncated_with_a_warning(toy_model):
    long = " ".join("我是学生" * 20)  # 80 characters > max_len=32 positions
    with pytest.warns(UserWarning, match="truncated to the model's max_len=32"):
        src, out = toy_model.translator.encode_sources([long]), toy_model.translate([long])
    short = " ".join(("我是学生" * 20)[:31])
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # its first 31 characters and <eos> fill the 32 positions: no warning
        assert torch.equal(src, toy_model.translator.encode_sources([short])) and out == toy_model.translate([short])


def test_unknown_characters_become_unk(toy_model):
    assert toy_model.src_tokenizer.encode("我 是 猫")[-1] == UNK
    assert toy_model.src_tokenizer.encode("猪 狼 虎") == toy_model.src_tokenizer.encode("猫 狗 鱼") == [UNK] * 3
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no warning either: <unk> is ordinary input
        assert toy_model.translate(["猫 狗 鱼"]) == toy_model.translate(["猪 狼 虎"])  # both are three <unk>s


def test_translate_script_bad_input(ckpts, tmp_path):
    translate = [sys.executable, str(SCRIPTS / "translate.py")]
    assert_one_line_error(run([*translate, "--ckpt", str(tmp_path / "none.ckpt"), "我 是"]), "none.ckpt")
    assert_one_line_error(run([*translate, "--ckpt", str(ckpts["mnist"]), "我 是"]), "MnistSequenceClassifier")
    assert_one_line_error(run([*translate, "--ckpt", str(ckpts["good"]), "  "]), "empty")
    long = run([*translate, "--ckpt", str(ckpts["good"]), " ".join("我是学生" * 20)])  # 80 tokens > max_len=32
    assert long.returncode == 0 and long.stdout.count("\n") == 1, long.stderr
    assert long.stderr == "warning: sentence 0 has 80 tokens; truncated to the model's max_len=32\n"  # no source line


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a CUDA device")
def test_translate_on_cuda_without_a_gpu_says_there_is_none(ckpts):
    result = run([sys.executable, str(SCRIPTS / "translate.py"), "--ckpt", str(ckpts["good"]), "--device", "cuda", "我 是"])
    line = assert_one_line_error(result, "--device cuda: this machine has no CUDA device")
    assert "does not fit" not in line and "map_location" not in line


def test_evaluate_script_bad_input(ckpts, tmp_path):
    evaluate = [sys.executable, str(SCRIPTS / "evaluate.py")]
    src = tmp_path / "src.txt"
    src.write_text("我 是 学 生\n", encoding="utf-8")
    result = run([*evaluate, "--ckpt", str(ckpts["truncated"]), "--src", str(src), "--ref", str(src)])
    assert_one_line_error(result, "truncated or corrupt")
    result = run([*evaluate, "--ckpt", str(ckpts["good"]), "--src", str(src), "--ref", str(tmp_path / "no-ref.txt")])
    assert_one_line_error(result, str(tmp_path / "no-ref.txt"), "not found")
    assert result.returncode == 2


# ---------------------------------------------------------------------------------------------- training


class PoisonWeightsAt(Callback):
    """Test helper, loaded by scripts/fit.py through --trainer.callbacks: NaN weights from step `step`."""

    def __init__(self, step: int):
        self.step = step

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        if trainer.global_step == self.step:
            with torch.no_grad():
                next(pl_module.parameters()).fill_(float("nan"))


@pytest.mark.slow
def test_nan_loss_stops_with_the_step(tmp_path):
    poison = '{"class_path": "tests.test_bad_input.PoisonWeightsAt", "init_args": {"step": 5}}'
    result = run(
        [
            *FIT,
            "--trainer.default_root_dir",
            str(tmp_path),
            "--trainer.logger",
            "false",
            "--trainer.enable_progress_bar",
            "false",
            f"--trainer.callbacks+={poison}",
        ]
    )
    line = assert_one_line_error(result, "loss became nan at step 5 (epoch 0)")
    assert result.returncode == 1, line
    assert not list(tmp_path.rglob("*.ckpt"))  # no checkpoint of a diverged model


class KillDuringSave(Callback):
    """Test helper: the `n`-th checkpoint save writes half a file and the process dies by SIGKILL."""

    def __init__(self, n: int):
        self.n = n

    def setup(self, trainer, pl_module, stage):
        real_save, calls = torch.save, [0]

        def dying_save(obj, f, *args, **kwargs):
            calls[0] += 1
            if calls[0] < self.n:
                return real_save(obj, f, *args, **kwargs)
            import io

            buffer = io.BytesIO()
            real_save(obj, buffer)
            f.write(buffer.getvalue()[: buffer.tell() // 2])
            f.flush()
            os.kill(os.getpid(), signal.SIGKILL)

        torch.save = dying_save


@pytest.mark.slow
def test_killed_while_saving_keeps_the_previous_checkpoint(tmp_path):
    # Epoch 0 writes the best checkpoint and last.ckpt (saves 1 and 2); epoch 1 dies by SIGKILL halfway
    # through its first save (a new best, or last.ckpt when the loss did not improve).
    kill = '{"class_path": "tests.test_bad_input.KillDuringSave", "init_args": {"n": 3}}'
    common = [
        "--trainer.default_root_dir",
        str(tmp_path),
        "--trainer.logger",
        "false",
        "--trainer.enable_progress_bar",
        "false",
        "--trainer.limit_train_batches",
        "2",
        "--test",
        "false",
    ]
    result = run([*FIT, *common, "--trainer.max_epochs", "3", f"--trainer.callbacks+={kill}"])
    assert result.returncode == -signal.SIGKILL, result.stderr[-3000:]
    ckpts = {p.name: p for p in tmp_path.rglob("*.ckpt")}
    assert set(ckpts) == {"epoch000-step2.ckpt", "last.ckpt"}, ckpts  # no half-written file under a real name
    for path in ckpts.values():
        assert torch.load(path, weights_only=True)["global_step"] == 2  # whole, readable
    resumed = run([*FIT, *common, "--trainer.max_epochs", "2", "--ckpt_path", "last"])
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    newest = max(tmp_path.rglob("last.ckpt"), key=lambda p: p.stat().st_mtime)  # the resumed run's, in a folder of its own
    assert torch.load(newest, weights_only=True)["global_step"] == 4
    assert torch.load(ckpts["last.ckpt"], weights_only=True)["global_step"] == 2  # the first run's, as it was
