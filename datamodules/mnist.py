"""MNIST as (B, 1, 28, 28) normalised images and (B,) labels, on `torchvision.datasets.MNIST`'s files, normalised once
into one tensor and augmented a whole batch at a time on the device, ten times faster than per image (where the
files go, and the numbers: docs/guide/data.md, "MNIST")."""

from __future__ import annotations

import gzip
import math
import shutil
import struct
import zlib
from pathlib import Path

import lightning as L
import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, Subset, TensorDataset
from torchvision import datasets

from common.errors import DataFormatError, DataNotFoundError, HyperparameterError
from common.files import new_folders_removed_if_empty
from models.checks import at_least, check_hparams

from .resumable import ResumableDataLoader, ShuffleSampler, shard_of

MEAN, STD = 0.1307, 0.3081  # of the 60,000 training images' pixels, scaled to [0, 1]
BACKGROUND = (0.0 - MEAN) / STD  # a black pixel, normalised
RAW_FILES = ("train-images-idx3-ubyte", "train-labels-idx1-ubyte", "t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte")
SIDE = 28  # pixels per image side
UBYTE = 0x08  # the IDX type code of unsigned bytes, the only one MNIST files use


def check_idx_file(path: Path, shown: str | None = None) -> int:
    """The number of items in an MNIST IDX file, after checking what torchvision does not: the magic
    number (0, 0, unsigned bytes, 3 dimensions for images or 1 for labels, as the name says), 28×28
    images, at least one item, and a size of exactly what the header promises. Otherwise one
    `DataFormatError` naming the file (`shown`, when the bytes come from another one, e.g. a .gz)."""
    shown = shown or str(path)
    images = "-images-" in path.name  # train-images-idx3-ubyte, t10k-labels-idx1-ubyte, ...
    what, ndim, item = ("images", 3, (SIDE, SIDE)) if images else ("labels", 1, ())
    size, header_size, magic = path.stat().st_size, 4 + 4 * ndim, bytes((0, 0, UBYTE, ndim))
    with open(path, "rb") as f:
        header = f.read(header_size)
    if len(header) < header_size:
        raise DataFormatError(f"{shown}: {size} bytes, too short for the {header_size}-byte IDX header of MNIST {what}")
    if header[:4] != magic:
        raise DataFormatError(
            f"{shown}: not an IDX file of MNIST {what} (magic number 0x{header[:4].hex()}, expected 0x{magic.hex()})"
        )
    n, *shape = struct.unpack(f">{ndim}I", header[4:])
    if tuple(shape) != item:
        shape_text = "×".join(map(str, shape))
        raise DataFormatError(f"{shown}: its header says {what} of {shape_text} pixels, expected {SIDE}×{SIDE}")
    if n == 0:
        raise DataFormatError(f"{shown}: its header says it holds no {what}")
    expected = header_size + n * math.prod(item)
    if size != expected:
        hint = "truncated, or a header that overcounts" if size < expected else "extra bytes, or a header that undercounts"
        raise DataFormatError(
            f"{shown}: its header promises {n} {what}, {expected} bytes, but the file has {size} bytes ({hint})"
        )
    return n


def _val_size(value) -> str | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return "must be a number of images or a fraction"
    if isinstance(value, float) and not 0 < value < 1:
        return "must lie in (0, 1) as a fraction of the training images"
    if isinstance(value, int) and value < 1:
        return "must be at least 1 as a number of images"
    return None


class MNISTDataModule(L.LightningDataModule):
    def __init__(
        self,
        data_dir: str = "data/mnist",  # relative to the working directory (the project's root)
        batch_size: int = 128,
        num_workers: int = 0,
        val_size: int | float = 0.1,  # int: number of training images held out; float: fraction of them
        augment: bool = False,  # small random affine on training batches only (see random_affine)
        elastic: float = 0.0,  # with augment: rms pixels of an added elastic distortion; 0 = none
        elastic_sigma: float = 4.0,  # smoothness of that distortion, in pixels (Simard et al. use 4)
        split_seed: int = 42,  # fixes which training images are held out, whatever the run's seed
        download: bool = True,  # try the internet in prepare_data when the files are absent
    ):
        super().__init__()
        check_hparams(
            self,
            locals(),
            {
                "batch_size": at_least(1),
                "num_workers": at_least(0),
                "val_size": _val_size,
                "elastic": at_least(0),
                "elastic_sigma": at_least(0.5),
            },
            lambda h: not h["elastic"] or h["augment"] or "elastic distorts training batches only with augment=True",
        )
        self.save_hyperparameters(logger=False)  # as ParallelCorpusDataModule's: the run's config.yaml records them
        self.data_dir = Path(data_dir)
        self.raw_dir = self.data_dir / "MNIST" / "raw"  # where torchvision.datasets.MNIST reads
        self.batch_size, self.num_workers = batch_size, num_workers
        self.val_size, self.augment, self.split_seed, self.download = val_size, augment, split_seed, download
        self.elastic, self.elastic_sigma = elastic, elastic_sigma
        self.train_set = self.val_set = self.test_set = None
        self.data_dir_flag = "--data.data_dir"  # how errors name data_dir: fit.py's flag (evaluate_mnist.py: --data-dir)
        self.download_flag: str | None = "--data.download true"  # and downloading (None: the script never downloads)

    # ---- files -------------------------------------------------------------------------------

    def _missing(self) -> list[str]:
        """Gunzip any `<name>.gz` lying there without `<name>`; return the names still absent."""
        missing = []
        for name in RAW_FILES:
            path, gz = self.raw_dir / name, self.raw_dir / f"{name}.gz"
            if not path.exists() and gz.exists():
                # torchvision only unpacks .gz files whose md5 matches the official ones; doing it
                # here also accepts other (e.g. subset) files in the same format. Through a temporary
                # name, checked before it takes the real one: a bad .gz leaves no bad file behind.
                part = path.with_name(path.name + ".part")
                try:
                    try:
                        with gzip.open(gz, "rb") as f_in, open(part, "wb") as f_out:
                            shutil.copyfileobj(f_in, f_out)
                    except (OSError, EOFError, zlib.error) as err:  # BadGzipFile is an OSError
                        raise DataFormatError(f"{gz}: cannot be gunzipped, truncated or not gzip ({err})") from None
                    check_idx_file(part, shown=f"{gz} (gunzipped)")
                    part.replace(path)
                finally:
                    part.unlink(missing_ok=True)
            if not path.exists():
                missing.append(name)
        return missing

    def prepare_data(self) -> None:
        """Runs once per machine: make sure the four raw files exist (downloading if allowed) and are
        whole, so that a bad test file stops the run before training rather than after it."""
        if self._missing() and self.download:
            with new_folders_removed_if_empty(self.raw_dir):  # an offline attempt leaves no empty MNIST/raw
                try:
                    for train in (True, False):
                        datasets.MNIST(self.data_dir, train=train, download=True)
                except Exception:  # URLError, HTTPError, RuntimeError("Error downloading ..."), ...
                    pass  # the clear error below says what is needed; a network traceback would not
        self._require_files(tried_download=self.download)
        for train in (True, False):
            self._check_files(train)

    def _require_files(self, tried_download: bool) -> None:
        missing = self._missing()
        if missing:
            if tried_download:
                how = "downloading them failed (offline?)"
            elif self.download_flag:
                how = f"downloading is off (on a machine that is online, {self.download_flag} fetches them)"
            else:
                how = "this script reads them and never downloads (scripts/fit.py does, when online)"
            raise DataNotFoundError(
                f"MNIST files not found in {self.raw_dir.resolve()} and {how}. Expected the four "
                f"raw IDX files there (each may also be .gz): {', '.join(RAW_FILES)}. Missing: "
                f"{', '.join(missing)}. Point {self.data_dir_flag} at the folder that contains MNIST/raw/."
            ) from None

    def _check_files(self, train: bool) -> None:
        """One `DataFormatError` naming the file unless the split's images and labels are whole IDX
        files (`check_idx_file`) of as many images as labels, each label a digit."""
        images_path, labels_path = (self.raw_dir / name for name in (RAW_FILES[:2] if train else RAW_FILES[2:]))
        n_images, n_labels = check_idx_file(images_path), check_idx_file(labels_path)
        if n_images != n_labels:
            raise DataFormatError(f"{labels_path}: {n_labels} labels for the {n_images} images of {images_path.name}")
        labels = labels_path.read_bytes()[8:]  # one byte each, after the 8-byte header
        if max(labels) > 9:
            i = next(i for i, label in enumerate(labels) if label > 9)
            raise DataFormatError(f"{labels_path}: label {labels[i]} at index {i}; MNIST labels are 0 to 9")

    # ---- datasets ----------------------------------------------------------------------------

    def _dataset(self, train: bool) -> TensorDataset:
        """The training or test file as ((N, 1, 28, 28) normalised float images, (N,) int64 labels)."""
        self._require_files(tried_download=self.download)  # the clear errors, not torchvision's
        self._check_files(train)
        mnist = datasets.MNIST(self.data_dir, train=train, download=False)
        images = (mnist.data.unsqueeze(1).float() / 255 - MEAN) / STD  # (N, 1, 28, 28)
        return TensorDataset(images, mnist.targets.long())

    def _split(self, n: int) -> tuple[list[int], list[int]]:
        """Fixed-seed (train, val) index split of the n training images."""
        n_val = round(self.val_size * n) if isinstance(self.val_size, float) else int(self.val_size)
        if not 0 < n_val < n:
            raise HyperparameterError(
                f"MNISTDataModule: val_size={self.val_size!r} leaves {n - n_val} of the {n} training images for training"
            )
        perm = torch.randperm(n, generator=torch.Generator().manual_seed(self.split_seed)).tolist()
        return perm[n_val:], perm[:n_val]

    def setup(self, stage: str | None = None) -> None:
        if stage in ("fit", "validate", None) and self.train_set is None:
            images = self._dataset(train=True)
            train_idx, val_idx = self._split(len(images))
            self.train_set, self.val_set = Subset(images, train_idx), Subset(images, val_idx)
        if stage in ("test", "predict", None) and self.test_set is None:
            self.test_set = self._dataset(train=False)

    def on_after_batch_transfer(self, batch, dataloader_idx: int):
        """Lightning calls this on each batch once it is on the device: augment training batches there."""
        images, labels = batch
        if self.augment and self.trainer is not None and self.trainer.training:
            images = random_affine(images, elastic=self.elastic, elastic_sigma=self.elastic_sigma)
        return images, labels

    # ---- loaders -----------------------------------------------------------------------------

    def _loader(self, dataset, loader_class: type[DataLoader] = DataLoader, **kwargs) -> DataLoader:
        return loader_class(
            dataset,
            batch_size=self.batch_size,
            num_workers=self.num_workers,
            persistent_workers=self.num_workers > 0,
            pin_memory=torch.cuda.is_available(),
            **kwargs,
        )

    def train_dataloader(self) -> DataLoader:
        # Shuffled from (global seed, epoch) alone and resumable mid-epoch: see resumable.py.
        sampler = ShuffleSampler(self.train_set, None, *shard_of(self))
        return self._loader(self.train_set, ResumableDataLoader, sampler=sampler)

    def val_dataloader(self) -> DataLoader:
        return self._loader(self.val_set)

    def test_dataloader(self) -> DataLoader:
        return self._loader(self.test_set)

    def predict_dataloader(self) -> DataLoader:
        return self._loader(self.test_set)


def random_affine(
    images: torch.Tensor,  # (B, 1, H, W) normalised
    degrees: float = 10.0,  # rotation in [-degrees, degrees]
    translate: float = 0.1,  # shift in [-translate, translate] of the image side, each axis
    scale: tuple[float, float] = (0.9, 1.1),  # zoom factor range
    elastic: float = 0.0,  # rms displacement in pixels of an elastic distortion on top; 0 = none
    elastic_sigma: float = 4.0,  # its smoothness: the Gaussian's standard deviation in pixels
) -> torch.Tensor:
    """A random rotation, shift and zoom per image (torchvision's RandomAffine(10, (0.1, 0.1), (0.9, 1.1))'s ranges; no
    flips), plus with `elastic` Simard et al.'s elastic distortion of that many pixels rms, for a whole batch at once,
    on its device; pixels from outside the image are black (docs/guide/data.md, "MNIST")."""
    B = images.size(0)
    u = torch.rand(B, 4, device=images.device) * 2 - 1  # (B, 4) in [-1, 1)
    angle = u[:, 0] * math.radians(degrees)
    zoom = scale[0] + (u[:, 1] + 1) / 2 * (scale[1] - scale[0])
    shift = u[:, 2:] * 2 * translate  # grid coordinates span [-1, 1]: the side is 2 long
    cos, sin = torch.cos(angle) / zoom, torch.sin(angle) / zoom
    # affine_grid maps each output pixel to where it samples the input: the inverse transform.
    theta = torch.stack([torch.stack([cos, -sin, shift[:, 0]], 1), torch.stack([sin, cos, shift[:, 1]], 1)], 1)
    grid = F.affine_grid(theta.to(images.dtype), list(images.shape), align_corners=False)  # (B, H, W, 2)
    if elastic > 0:
        H, W = images.shape[-2:]
        field = smooth_noise(B, H, W, elastic_sigma, images.device).to(images.dtype)  # (B, H, W, 2) unit rms
        grid = grid + field * elastic * (2 / torch.tensor([W, H], device=images.device, dtype=images.dtype))
    # grid_sample fills with zeros; shift so that zero is the black background.
    return F.grid_sample(images - BACKGROUND, grid, align_corners=False) + BACKGROUND


def smooth_noise(batch: int, height: int, width: int, sigma: float, device) -> torch.Tensor:
    """(B, H, W, 2) random displacements: uniform noise blurred by a Gaussian of `sigma` pixels, scaled to
    an rms of 1 over the batch. The noise is drawn with a margin and blurred without padding, so the
    edges are as smooth as the middle."""
    radius = math.ceil(3 * sigma)
    taps = torch.arange(-radius, radius + 1, dtype=torch.float32, device=device)
    kernel = torch.exp(-0.5 * (taps / sigma) ** 2)
    kernel = kernel / kernel.sum()  # (K,)
    noise = torch.rand(batch * 2, 1, height + 2 * radius, width + 2 * radius, device=device) * 2 - 1
    field = F.conv2d(noise, kernel.view(1, 1, -1, 1))  # blur the rows' direction: (2B, 1, H, W + 2r)
    field = F.conv2d(field, kernel.view(1, 1, 1, -1))  # then the columns': (2B, 1, H, W)
    field = field.view(batch, 2, height, width).permute(0, 2, 3, 1)  # (B, H, W, 2): x and y displacements
    return field / field.pow(2).mean().sqrt().clamp_min(1e-12)
