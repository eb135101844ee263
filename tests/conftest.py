import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the project's packages, and tests.helpers

# Tiny models are faster on one thread, and tests must not fight each other for 2 cores.
torch.set_num_threads(1)


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


@pytest.fixture(scope="module")
def ckpts(tmp_path_factory) -> dict[str, Path]:
    """A good toy checkpoint (the recipe's sizes, one step), its truncated and corrupt copies, an
    MNIST one, and a toy one of another size."""
    from dataclasses import replace

    from datamodules import ToyTranslationDataModule
    from models import MnistNetSettings
    from tasks import MnistSequenceClassifier, Seq2SeqTransformer
    from tests.helpers import TOY_MODEL, quiet_trainer

    root = tmp_path_factory.mktemp("ckpts")
    torch.manual_seed(0)
    dm = ToyTranslationDataModule()

    def save(model, name):
        trainer = quiet_trainer(max_steps=1, limit_val_batches=0)
        trainer.fit(model, train_dataloaders=dm.train_dataloader())
        trainer.save_checkpoint(root / name)
        return root / name

    out = {"good": save(Seq2SeqTransformer(tokenizers=dm.tokenizers, **TOY_MODEL), "good.ckpt")}
    data = out["good"].read_bytes()
    (root / "truncated.ckpt").write_bytes(data[: len(data) // 2])
    (root / "corrupt.ckpt").write_bytes(b"not a checkpoint at all\n" * 100)
    out["truncated"], out["corrupt"] = root / "truncated.ckpt", root / "corrupt.ckpt"
    out["bigger"] = save(
        Seq2SeqTransformer(tokenizers=dm.tokenizers, **{**TOY_MODEL, "net": replace(TOY_MODEL["net"], d_model=32)}), "bigger.ckpt"
    )
    mnist = MnistSequenceClassifier(
        net=MnistNetSettings(d_model=16, nhead=2, num_encoder_layers=1, num_decoder_layers=1, dim_feedforward=32)
    )
    torch.save(
        {
            "state_dict": mnist.state_dict(),
            "loops": {},
            "epoch": 0,
            "global_step": 0,
            "hyper_parameters": {**mnist.hparams, "_class_path": "tasks.MnistSequenceClassifier"},
        },
        root / "mnist.ckpt",
    )
    out["mnist"] = root / "mnist.ckpt"
    return out


@pytest.fixture(scope="module")
def trained_toy():
    """The toy model that translates its three pairs (tests.helpers.trained_toy_model), once per module."""
    from tests.helpers import trained_toy_model

    return trained_toy_model()


@pytest.fixture
def script_here(capsys):
    """scripts/<name>.py run in this process (`run_script`), its result named as `subprocess.run`'s: for tests of
    what a script does, not of how it starts (tests/test_imports.py) or of its process (signals)."""
    from tests.helpers import Ran, run_script

    def run(*args: str) -> Ran:
        capsys.readouterr()  # what the test printed before is not the script's
        return Ran(*run_script(capsys, *args))

    return run
