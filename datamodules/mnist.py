"""MNIST as (B, 1, 28, 28) normalised images and (B,) labels, on `torchvision.datasets.MNIST`.

Files live in torchvision's layout, `<data_dir>/MNIST/raw/` (the four IDX files, plain or
.gz). Any number of training images works: `../shared/data/mnist` holds a 5,000-image training
subset with the full 10,000-image test set.
"""

from __future__ import annotations

import gzip
import shutil
from pathlib import Path

import lightning as L
import torch
from torch.utils.data import DataLoader, Subset
from torchvision import datasets
from torchvision.transforms import v2

from .errors import DataNotFoundError

MEAN, STD = 0.1307, 0.3081  # of the 60,000 training images' pixels, scaled to [0, 1]
RAW_FILES = (
    "train-images-idx3-ubyte",
    "train-labels-idx1-ubyte",
    "t10k-images-idx3-ubyte",
    "t10k-labels-idx1-ubyte",
)


class MNISTDataModule(L.LightningDataModule):
    def __init__(
        self,
        data_dir: str = "data/",
        batch_size: int = 128,
        num_workers: int = 0,
        val_size: int | float = 0.1,  # int: number of training images held out; float: fraction of them
        augment: bool = False,  # small random affine on training images only
        seed: int = 42,  # fixes the train/val split, independent of the global seed
        download: bool = True,  # try the internet in prepare_data when the files are absent
    ):
        super().__init__()
        self.save_hyperparameters()
        self.data_dir = Path(data_dir)
        self.raw_dir = self.data_dir / "MNIST" / "raw"  # where torchvision.datasets.MNIST reads
        self.batch_size, self.num_workers = batch_size, num_workers
        self.val_size, self.augment, self.seed, self.download = val_size, augment, seed, download
        self.train_set = self.val_set = self.test_set = None

    # ---- files -------------------------------------------------------------------------------

    def _missing(self) -> list[str]:
        """Gunzip any `<name>.gz` lying there without `<name>`; return the names still absent."""
        missing = []
        for name in RAW_FILES:
            path, gz = self.raw_dir / name, self.raw_dir / f"{name}.gz"
            if not path.exists() and gz.exists():
                # torchvision only unpacks .gz files whose md5 matches the official ones; doing it
                # here also accepts other (e.g. subset) files in the same format.
                with gzip.open(gz, "rb") as f_in, open(path, "wb") as f_out:
                    shutil.copyfileobj(f_in, f_out)
            if not path.exists():
                missing.append(name)
        return missing

    def prepare_data(self) -> None:
        """Runs once per machine: make sure the four raw files exist, downloading if allowed."""
        if self._missing() and self.download:
            try:
                for train in (True, False):
                    datasets.MNIST(self.data_dir, train=train, download=True)
            except Exception:  # URLError, HTTPError, RuntimeError("Error downloading ..."), ...
                pass  # the clear error below says what is needed; a network traceback would not
        self._require_files(tried_download=self.download)

    def _require_files(self, tried_download: bool) -> None:
        missing = self._missing()
        if missing:
            how = "downloading them failed (offline?)" if tried_download else "download=False"
            raise DataNotFoundError(
                f"MNIST files not found in {self.raw_dir.resolve()} and {how}. Expected the four "
                f"raw IDX files there (each may also be .gz): {', '.join(RAW_FILES)}. Missing: "
                f"{', '.join(missing)}. Point --data.data_dir at the folder that contains MNIST/raw/."
            ) from None

    # ---- datasets ----------------------------------------------------------------------------

    def _transform(self, train: bool) -> v2.Compose:
        steps = []
        if train and self.augment:
            # Digits stay legible under a few degrees of rotation, a couple of pixels of shift and
            # ±10 % zoom; flips would turn some digits into others, so none.
            steps.append(v2.RandomAffine(degrees=10, translate=(0.1, 0.1), scale=(0.9, 1.1)))
        steps += [v2.ToImage(), v2.ToDtype(torch.float32, scale=True), v2.Normalize([MEAN], [STD])]
        return v2.Compose(steps)

    def _dataset(self, train: bool, augment: bool) -> datasets.MNIST:
        self._require_files(tried_download=self.download)  # the clear error, not torchvision's
        return datasets.MNIST(self.data_dir, train=train, transform=self._transform(augment), download=False)

    def _split(self, n: int) -> tuple[list[int], list[int]]:
        """Fixed-seed (train, val) index split of the n training images."""
        n_val = round(self.val_size * n) if isinstance(self.val_size, float) else int(self.val_size)
        if not 0 < n_val < n:
            raise ValueError(f"val_size={self.val_size!r} leaves {n - n_val} of {n} images for training")
        perm = torch.randperm(n, generator=torch.Generator().manual_seed(self.seed)).tolist()
        return perm[n_val:], perm[:n_val]

    def setup(self, stage: str | None = None) -> None:
        if stage in ("fit", "validate", None) and self.train_set is None:
            # Two views of the same files: augmented for training, plain for validation.
            train_view, val_view = self._dataset(True, augment=True), self._dataset(True, augment=False)
            train_idx, val_idx = self._split(len(train_view))
            self.train_set, self.val_set = Subset(train_view, train_idx), Subset(val_view, val_idx)
        if stage in ("test", "predict", None) and self.test_set is None:
            self.test_set = self._dataset(False, augment=False)

    # ---- loaders -----------------------------------------------------------------------------

    def _loader(self, dataset, shuffle: bool) -> DataLoader:
        return DataLoader(
            dataset,
            batch_size=self.batch_size,
            shuffle=shuffle,
            num_workers=self.num_workers,
            persistent_workers=self.num_workers > 0,
            pin_memory=torch.cuda.is_available(),
        )

    def train_dataloader(self) -> DataLoader:
        return self._loader(self.train_set, shuffle=True)

    def val_dataloader(self) -> DataLoader:
        return self._loader(self.val_set, shuffle=False)

    def test_dataloader(self) -> DataLoader:
        return self._loader(self.test_set, shuffle=False)

    def predict_dataloader(self) -> DataLoader:
        return self._loader(self.test_set, shuffle=False)
