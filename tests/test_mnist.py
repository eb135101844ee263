"""MNIST: the data module on real IDX files, the network's layouts and heads, the Lightning task."""

from __future__ import annotations

import math
import re
import urllib.error
from pathlib import Path
from types import SimpleNamespace

import lightning as L
import pytest
import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader

from common.errors import DataNotFoundError, HyperparameterError
from datamodules.mnist import BACKGROUND, MEAN, RAW_FILES, STD, MNISTDataModule, random_affine, smooth_noise
from models.config import MnistNetConfig, MnistNetSettings
from models.mnist_net import MnistNet
from tasks.mnist import MnistSequenceClassifier
from tests.helpers import SHARED_DATA, fake_mnist, quiet_trainer, random_digits

SHARED_MNIST = SHARED_DATA / "mnist"
# A small MNIST recipe's network: pre-norm, GELU, learned positions (configs/mnist*.yaml), narrower.
TINY = dict(
    d_model=32, nhead=2, num_encoder_layers=1, num_decoder_layers=1, dim_feedforward=64, dropout=0.0,
    activation="gelu", norm_first=True, positional="learned",
)  # fmt: skip


# ---- data module on real IDX files -------------------------------------------------------------


def test_datamodule_reads_idx_files_and_splits(tmp_path):
    test_x, test_y = fake_mnist(tmp_path)
    dm = MNISTDataModule(str(tmp_path), batch_size=16, val_size=12, download=False)
    dm.prepare_data()  # gunzips the training files; must not try the network
    dm.setup("fit")
    dm.setup("test")
    assert (len(dm.train_set), len(dm.val_set), len(dm.test_set)) == (48, 12, 20)
    assert not set(dm.train_set.indices) & set(dm.val_set.indices)

    images, labels = next(iter(dm.train_dataloader()))
    assert images.shape == (16, 1, 28, 28) and images.dtype == torch.float32
    assert labels.shape == (16,) and labels.dtype == torch.int64

    # The test set is the plain file, normalised with MNIST's mean and std, in file order.
    images, labels = next(iter(dm.test_dataloader()))
    torch.testing.assert_close(images[:, 0], (test_x[:16].float() / 255 - MEAN) / STD)
    assert labels.tolist() == test_y[:16].tolist()


def test_split_is_fixed_by_seed_and_val_size_may_be_a_fraction(tmp_path):
    fake_mnist(tmp_path, n_train=50)
    splits = []
    for _ in range(2):
        dm = MNISTDataModule(str(tmp_path), val_size=0.2, download=False)
        dm.prepare_data()
        dm.setup("fit")
        splits.append(dm.val_set.indices)
    assert len(splits[0]) == 10 and splits[0] == splits[1]
    other = MNISTDataModule(str(tmp_path), val_size=0.2, split_seed=7, download=False)
    other.setup("fit")
    assert sorted(other.val_set.indices) != sorted(splits[0])
    with pytest.raises(ValueError, match="val_size"):
        bad = MNISTDataModule(str(tmp_path), val_size=50, download=False)
        bad.setup("fit")


def test_augmentation_only_touches_training_batches(tmp_path):
    fake_mnist(tmp_path)
    dm = MNISTDataModule(str(tmp_path), batch_size=8, val_size=10, augment=True, download=False)
    dm.setup("fit")
    images, labels = next(iter(dm.train_dataloader()))
    dm.trainer = SimpleNamespace(training=False)  # validating, testing, predicting: untouched
    out_images, out_labels = dm.on_after_batch_transfer((images, labels), 0)
    assert torch.equal(out_images, images) and torch.equal(out_labels, labels)
    dm.trainer = SimpleNamespace(training=True)
    out_images, out_labels = dm.on_after_batch_transfer((images, labels), 0)
    assert out_images.shape == images.shape and torch.equal(out_labels, labels)
    assert all(not torch.equal(a, b) for a, b in zip(out_images, images))  # a transform of its own per image


def test_random_affine_identity_background_and_ranges():
    images = (torch.rand(16, 1, 28, 28) - MEAN) / STD
    identity = random_affine(images, degrees=0, translate=0, scale=(1, 1))
    torch.testing.assert_close(identity, images)  # grid points fall on pixel centres
    blank = torch.full((4, 1, 28, 28), BACKGROUND)
    torch.testing.assert_close(random_affine(blank), blank)  # what comes in from outside is black
    # A shift of at most 10 % (2.8 px) moves a centred dot's centre of mass by at most that much.
    dot = torch.full((256, 1, 28, 28), BACKGROUND)
    dot[:, :, 13:15, 13:15] = (1 - MEAN) / STD
    moved = random_affine(dot, degrees=0, scale=(1, 1)) - BACKGROUND  # (N, 1, 28, 28) ink
    coords = torch.arange(28.0)
    centre_x = (moved.sum(2).squeeze(1) * coords).sum(1) / moved.sum((1, 2, 3))
    assert (centre_x - 13.5).abs().max() <= 2.8 + 1e-4
    assert (centre_x - 13.5).abs().max() > 1.5  # and it does move them


def test_elastic_distortion_is_smooth_small_and_keeps_the_background():
    torch.manual_seed(0)
    field = smooth_noise(32, 28, 28, sigma=4.0, device="cpu")  # (B, H, W, 2)
    assert field.shape == (32, 28, 28, 2)
    torch.testing.assert_close(field.pow(2).mean(), torch.tensor(1.0))
    # Smooth: neighbouring pixels move almost together (white noise would give a correlation near 0).
    x = field[..., 0]
    corr = torch.corrcoef(torch.stack([x[:, :, :-1].flatten(), x[:, :, 1:].flatten()]))[0, 1]
    assert corr > 0.9
    blank = torch.full((4, 1, 28, 28), BACKGROUND)
    torch.testing.assert_close(random_affine(blank, elastic=2.0), blank)
    # With the affine part off, a centred dot moves about as far as the field's rms, no further than
    # a few times it, and the strength is what sets how far.
    dot = torch.full((256, 1, 28, 28), BACKGROUND)
    dot[:, :, 13:15, 13:15] = (1 - MEAN) / STD

    def dot_shift(elastic: float) -> torch.Tensor:
        ink = random_affine(dot, degrees=0, translate=0, scale=(1, 1), elastic=elastic) - BACKGROUND
        coords = torch.arange(28.0)
        centre_x = (ink.sum(2).squeeze(1) * coords).sum(1) / ink.sum((1, 2, 3))
        return (centre_x - 13.5).abs()  # (N,) pixels

    small, large = dot_shift(0.5), dot_shift(2.0)
    assert 0.1 < small.mean() < 0.6 < large.mean() < 2.5 and large.max() < 8


def test_elastic_needs_a_sensible_strength(tmp_path):
    for bad in ({"elastic": -1.0, "augment": True}, {"elastic_sigma": 0.0}, {"elastic": 1.0}):  # the last: no augment
        with pytest.raises(HyperparameterError, match="elastic"):
            MNISTDataModule(str(tmp_path), **bad)
    assert MNISTDataModule(str(tmp_path), augment=True, elastic=1.0).elastic == 1.0


def test_ddp_shards_are_disjoint_and_shuffled(tmp_path):
    fake_mnist(tmp_path, n_train=60)
    shards = []
    for rank in range(2):
        dm = MNISTDataModule(str(tmp_path), batch_size=5, val_size=10, download=False)
        dm.trainer = SimpleNamespace(world_size=2, global_rank=rank)
        dm.setup("fit")
        loader = dm.train_dataloader()
        loader.sampler.set_epoch(1)
        shards.append([i for i in loader.sampler])
    assert len(shards[0]) == len(shards[1]) == 25 and not set(shards[0]) & set(shards[1])
    assert sorted(shards[0] + shards[1]) == list(range(50))
    assert shards[0] != sorted(shards[0])


def test_missing_files_raise_one_clear_error(tmp_path):
    dm = MNISTDataModule(str(tmp_path / "nowhere"), download=False)
    with pytest.raises(DataNotFoundError) as info:
        dm.prepare_data()
    message = str(info.value)
    assert str((tmp_path / "nowhere" / "MNIST" / "raw").resolve()) in message
    assert all(name in message for name in RAW_FILES)
    assert isinstance(info.value, FileNotFoundError)


def test_failed_download_gives_the_same_error_without_urllib_traceback(tmp_path, monkeypatch):
    def offline(self):
        raise urllib.error.URLError("no network")

    monkeypatch.setattr("torchvision.datasets.MNIST.download", offline)
    dm = MNISTDataModule(str(tmp_path), download=True)
    with pytest.raises(DataNotFoundError, match="downloading them failed") as info:
        dm.prepare_data()
    assert info.value.__cause__ is None and info.value.__suppress_context__
    assert all(name in str(info.value) for name in RAW_FILES)


# ---- network -----------------------------------------------------------------------------------


@pytest.mark.parametrize("tokens, patch_size, num_tokens", [("rows", 7, 28), ("patches", 4, 49), ("patches", 7, 16)])
@pytest.mark.parametrize("head", ["decoder", "cls", "mean"])
def test_every_layout_and_head_gives_logits(tokens, patch_size, num_tokens, head):
    net = MnistNet(MnistNetConfig(tokens=tokens, patch_size=patch_size, head=head, **TINY))
    assert net.num_tokens == num_tokens
    logits = net(torch.randn(3, 1, 28, 28))
    assert logits.shape == (3, 10) and torch.isfinite(logits).all()
    assert (len(net.core.decoder_layers) > 0) == (head == "decoder")  # pooling heads build no decoder


def test_decoder_head_with_several_queries():
    net = MnistNet(MnistNetConfig(head="decoder", num_queries=4, **TINY))
    assert net(torch.randn(2, 1, 28, 28)).shape == (2, 10)


def test_tokens_are_rows_or_patches_in_reading_order():
    image = torch.arange(28 * 28.0).reshape(1, 1, 28, 28)
    rows = MnistNet(MnistNetConfig(tokens="rows", **TINY)).tokenize(image)  # (1, 28, 28)
    torch.testing.assert_close(rows[0], image[0, 0])
    patches = MnistNet(MnistNetConfig(tokens="patches", patch_size=7, **TINY)).tokenize(image)  # (1, 16, 49)
    torch.testing.assert_close(patches[0, 0], image[0, 0, :7, :7].flatten())
    torch.testing.assert_close(patches[0, 1], image[0, 0, :7, 7:14].flatten())  # left to right first
    torch.testing.assert_close(patches[0, 4], image[0, 0, 7:14, :7].flatten())


def tokens_changed_by(net: MnistNet, pixel: tuple[int, int]) -> torch.Tensor:
    """(N,) bool: which of the net's embedded tokens move when one pixel of a random image moves."""
    image = torch.rand(1, 1, 28, 28, dtype=torch.float64)
    moved = image.clone()
    moved[0, 0, pixel[0], pixel[1]] += 1.0
    with torch.no_grad():
        return (net.embed_tokens(moved) - net.embed_tokens(image)).abs().amax(-1)[0] > 1e-12


@pytest.mark.parametrize("tokens, patch_size", [("patches", 7), ("patches", 4), ("rows", 7)])
@pytest.mark.parametrize("stem_layers", [1, 2])
@pytest.mark.parametrize("pixel", [(0, 0), (6, 7), (13, 20), (27, 27)])
def test_a_stem_token_sees_its_patch_and_only_a_stem_deep_border_around_it(tokens, patch_size, stem_layers, pixel):
    # Oracle: with L 3×3 convolutions before patching, token (i, j) reads the pixels of its patch widened by
    # L on each side, and nothing else. A wrong layout in `tokenize` would move the changed tokens.
    net = (
        MnistNet(MnistNetConfig(tokens=tokens, patch_size=patch_size, stem_channels=3, stem_layers=stem_layers, **TINY))
        .double()
        .eval()
    )
    changed = tokens_changed_by(net, pixel)  # (N,)
    ph, pw = net.patch
    grid_w = 28 // pw
    expected = torch.tensor(
        [
            pixel[0] - stem_layers < (t // grid_w + 1) * ph
            and pixel[0] + stem_layers >= (t // grid_w) * ph
            and pixel[1] - stem_layers < (t % grid_w + 1) * pw
            and pixel[1] + stem_layers >= (t % grid_w) * pw
            for t in range(net.num_tokens)
        ]
    )
    assert torch.equal(changed, expected)


@pytest.mark.parametrize("patch_size", [4, 7, 14])
@pytest.mark.parametrize("stem_layers", [1, 2])
@pytest.mark.parametrize("stem_norm", [False, True])
def test_a_strided_stem_token_sees_exactly_its_receptive_field(patch_size, stem_layers, stem_norm):
    # Oracle, from the convolutions' strides alone: a 3×3 convolution of stride s and padding 1 reads input
    # rows [s·a - 1, s·b + 1] for output rows [a, b]; walking back from a token's position through every
    # convolution, then undoing the zero padding, gives the pixels it sees. Brute force over pixels checks it.
    # In eval mode a BatchNorm is a per-channel affine map: it must not widen what a token sees.
    config = MnistNetConfig(
        patch_size=patch_size, stem_channels=2, stem_layers=stem_layers, strided_stem=True, stem_norm=stem_norm, **TINY
    )
    net = MnistNet(config)
    net = net.double().eval()
    norms = [m for m in net.stem if isinstance(m, torch.nn.BatchNorm2d)]
    assert len(norms) == (stem_layers * math.ceil(math.log2(patch_size)) if stem_norm else 0)
    for norm in norms:  # statistics as after training, not the identity a fresh BatchNorm starts as
        norm.running_mean.uniform_(-1, 1), norm.running_var.uniform_(0.5, 2), norm.bias.data.uniform_(-1, 1)
    grid = 28 // patch_size
    assert net.num_tokens == grid**2
    convs = [m for m in net.stem if isinstance(m, torch.nn.Conv2d)]
    assert [c.out_channels for c in convs][::stem_layers] == [2 * 2**i for i in range(len(convs) // stem_layers)]
    pad = net.stem[0].padding[0]
    assert 28 + 2 * pad == grid * 2 ** (len(convs) // stem_layers)

    def seen(i: int) -> range:  # pixel rows (or columns) that token row (column) i reads
        first = last = i
        for conv in reversed(convs):
            first, last = conv.stride[0] * first - 1, conv.stride[0] * last + 1
        return range(first - pad, last - pad + 1)

    for pixel in [(0, 0), (3, 4), (6, 7), (13, 20), (14, 14), (27, 27), (20, 3)]:
        changed = tokens_changed_by(net, pixel)  # (N,)
        expected = torch.tensor([pixel[0] in seen(t // grid) and pixel[1] in seen(t % grid) for t in range(grid**2)])
        assert torch.equal(changed, expected), pixel


def test_without_a_stem_there_is_none_and_seeded_weights_are_unchanged():
    torch.manual_seed(0)
    plain = MnistNet(MnistNetConfig(**TINY)).state_dict()
    torch.manual_seed(0)
    explicit = MnistNet(MnistNetConfig(stem_channels=0, stem_layers=3, **TINY)).state_dict()
    assert plain.keys() == explicit.keys() and not any(key.startswith("stem.") for key in plain)
    assert all(torch.equal(plain[key], explicit[key]) for key in plain)


def test_bad_settings_are_refused_by_the_config():
    """The network's config checks its own values, in one line naming it, before any module is built."""
    bad = [
        (dict(stem_channels=-1), "stem_channels=-1"),
        (dict(stem_channels=8, stem_layers=0), "stem_layers=0"),
        (dict(patch_size=5), "patch_size=5 must divide the image side"),
        (dict(stem_norm=True), "stem_norm needs a stem"),  # no stem to normalise
        (dict(head="max"), "head='max'"),
        (dict(head="decoder", num_decoder_layers=0), "needs num_decoder_layers of at least 1"),
    ]
    bad += [(dict(strided_stem=True, **other), "strided_stem needs") for other in
            (dict(stem_channels=0), dict(stem_channels=8, tokens="rows"), dict(stem_channels=8, patch_size=1))]  # fmt: skip
    for options, words in bad:
        with pytest.raises(HyperparameterError, match=f"^MnistNetConfig: .*{re.escape(words)}"):
            MnistNetConfig(**options)
    assert len(MnistNet(MnistNetConfig(head="mean", num_decoder_layers=0)).core.decoder_layers) == 0  # pooling: no decoder


# ---- Lightning task ----------------------------------------------------------------------------


@pytest.mark.parametrize("tokens, head", [("patches", "decoder"), ("rows", "cls")])
def test_overfits_a_small_batch(tmp_path, tokens, head):
    L.seed_everything(0)
    model = MnistSequenceClassifier(net=MnistNetSettings(tokens=tokens, head=head, **TINY), lr=3e-3, weight_decay=0.0)
    data = random_digits(32)  # random labels: only memorising gets them right
    trainer = quiet_trainer(tmp_path, max_epochs=150, log_every_n_steps=50)
    trainer.fit(model, DataLoader(data, batch_size=32))  # one batch, 150 steps of warm-up + cosine
    images, labels = data.tensors
    model.eval()
    assert trainer.callback_metrics["train/loss"] < 0.05
    assert (model(images).argmax(-1) == labels).all()


def test_mixup_loss_is_the_blend_of_both_labels_losses():
    L.seed_everything(0)
    model = MnistSequenceClassifier(net=MnistNetSettings(tokens="patches", head="mean", **TINY), mixup=0.4, label_smoothing=0.1)
    model.log = lambda *args, **kwargs: None  # no trainer to log to
    images, labels = random_digits(8).tensors
    torch.manual_seed(3)
    loss = model.training_step((images, labels), 0)
    torch.manual_seed(3)  # the same draws, by hand
    lam = float(torch.distributions.Beta(0.4, 0.4).sample())
    partner = torch.randperm(8)
    logits = model(lam * images + (1 - lam) * images[partner])
    expected = lam * F.cross_entropy(logits, labels, label_smoothing=0.1) + (1 - lam) * F.cross_entropy(
        logits, labels[partner], label_smoothing=0.1
    )
    assert 0 < lam < 1 and not torch.equal(partner, torch.arange(8))
    torch.testing.assert_close(loss, expected)
    with pytest.raises(HyperparameterError, match="mixup"):
        MnistSequenceClassifier(mixup=-0.1)


def test_checkpoint_round_trip_without_datamodule(tmp_path):
    L.seed_everything(0)
    model = MnistSequenceClassifier(net=MnistNetSettings(tokens="rows", head="decoder", num_queries=2, **TINY))
    trainer = quiet_trainer(tmp_path, max_steps=2)
    trainer.fit(model, DataLoader(random_digits(16), batch_size=8))
    path = tmp_path / "model.ckpt"
    trainer.save_checkpoint(path)

    assert torch.load(path, weights_only=True)["hyper_parameters"]["net"]["tokens"] == "rows"  # plain data only
    loaded = MnistSequenceClassifier.load_from_checkpoint(path, map_location="cpu").eval()
    assert loaded.hparams.net["num_queries"] == 2
    images = random_digits(4, seed=1).tensors[0]
    model.eval()
    torch.testing.assert_close(loaded(images), model(images), rtol=0, atol=0)


def test_test_end_saves_and_logs_confusion_matrix_and_misclassified_digits(tmp_path):
    class ImageLogger(L.pytorch.loggers.CSVLogger):  # stands in for WandbLogger's log_image
        logged = []

        def log_image(self, key, images, **kwargs):
            self.logged.append(key)
            assert Path(images[0]).is_file()

    logger = ImageLogger(tmp_path)
    model = MnistSequenceClassifier(net=MnistNetSettings(**TINY), num_misclassified_shown=5)
    trainer = quiet_trainer(tmp_path, logger=logger)
    digits = random_digits(40)
    (metrics,) = trainer.test(model, DataLoader(digits, batch_size=16), verbose=False)
    images, labels = digits.tensors
    with torch.no_grad():
        right = model.eval()(images).argmax(-1).eq(labels).sum().item()
    assert 0 < right < 40  # an untrained model: some right, some wrong (drawn in test_misclassified.png)
    assert metrics["test/acc"] == pytest.approx(right / 40)  # over all 40 digits, not a mean of the 3 batches' means
    out = Path(trainer.log_dir)
    assert (out / "test_confusion_matrix.png").stat().st_size > 1000
    assert (out / "test_misclassified.png").stat().st_size > 1000
    assert logger.logged == ["test/confusion_matrix", "test/misclassified"]


@pytest.mark.slow
@pytest.mark.skipif(not (SHARED_MNIST / "MNIST" / "raw").is_dir(), reason=f"real MNIST (5k subset) not found at {SHARED_MNIST}")
def test_trains_on_real_mnist_subset_far_above_chance(tmp_path):
    L.seed_everything(0)
    dm = MNISTDataModule(str(SHARED_MNIST), batch_size=32, val_size=500, download=False)
    model = MnistSequenceClassifier(
        net=MnistNetSettings(tokens="patches", patch_size=7, head="cls", d_model=64, nhead=4, num_encoder_layers=2,
                             dim_feedforward=128, dropout=0.0),
        lr=2e-3,
    )  # fmt: skip
    trainer = quiet_trainer(tmp_path, max_epochs=3, limit_val_batches=0)  # ~420 steps, ~30 s on one core
    trainer.fit(model, dm)
    (metrics,) = trainer.test(model, dm, verbose=False)
    assert len(dm.test_set) == 10_000
    assert metrics["test/acc"] > 0.8, metrics  # chance is 0.1


def test_evaluate_mnist_script_says_which_weights_and_precision_and_prints_progress(tmp_path, script_here):
    """fit.py tests a bf16-mixed recipe under autocast, evaluate_mnist.py in float32 unless told: each output
    says which, and which weights; `--precision bf16-mixed` gives what autocast gives. Standard error is not a
    terminal here (nohup, SLURM): a progress line every 2,500 images. A missing folder names its flag, --data-dir."""
    script = script_here
    test_x, test_y = fake_mnist(tmp_path / "data", n_train=60, n_test=2500)
    L.seed_everything(0)
    model = MnistSequenceClassifier(net=MnistNetSettings(tokens="patches", patch_size=7, head="mean", **TINY))
    trainer = quiet_trainer(tmp_path, max_steps=2)
    trainer.fit(model, DataLoader(random_digits(16), batch_size=8))
    ckpt = tmp_path / "model.ckpt"
    trainer.save_checkpoint(ckpt)
    images = ((test_x.unsqueeze(1).float() / 255 - MEAN) / STD).float()  # (N, 1, 28, 28), as the data module reads them
    model.eval()
    for precision, label in (("32", "float32"), ("bf16-mixed", "bf16-mixed")):
        with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16, enabled=precision == "bf16-mixed"):
            expected = 100 * float(model(images).argmax(-1).eq(test_y).float().mean())
        result = script("evaluate_mnist", "--ckpt", str(ckpt), "--data-dir", str(tmp_path / "data"), "--val-size", "10",
                        "--precision", precision)  # fmt: skip
        assert result.returncode == 0, result.stderr[-2000:]
        assert f"weights: its only weights (no EMA), {label}  " in result.stdout
        assert f"test accuracy: {expected:.2f} % (2500 images)" in result.stdout
        progress = [ln.split(" | ")[0] for ln in result.stderr.splitlines() if ln.startswith("test: ")]
        assert progress == ["test: 2,500/2,500 images"]
    missing = script("evaluate_mnist", "--ckpt", str(ckpt), "--data-dir", str(tmp_path / "nowhere"))
    assert missing.returncode == 2 and missing.stderr.count("\n") == 1
    assert "Point --data-dir at the folder" in missing.stderr and "--data.data_dir" not in missing.stderr
    assert "never downloads" in missing.stderr and "download=" not in missing.stderr  # it has no flag for it
