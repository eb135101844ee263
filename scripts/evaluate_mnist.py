"""Score an MNIST checkpoint on the held-out validation images and the test set.

    python scripts/evaluate_mnist.py --ckpt CKPT --data-dir ../shared/data/mnist [--weights training]

The validation split is the recipe's (the checkpoint's data settings: `val_size` and `split_seed`
as given here, defaults as in configs/mnist_subset.yaml), so the two numbers are the ones a run
selects on and reports. A checkpoint of a run with `--ema_decay` holds the averaged weights and the
training weights: the averaged ones are scored unless `--weights training`.
A missing file or a bad checkpoint: one line on stderr, exit status 2.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # run from a checkout without `pip install -e .` too

from training.faults import exit_on_user_error  # noqa: E402
from training.loading import add_weights_argument, load_checkpoint, load_training_weights  # noqa: E402


def accuracy(model, loader) -> float:
    correct = total = 0
    with torch.no_grad():
        for images, labels in loader:
            correct += int(model(images).argmax(-1).eq(labels).sum())
            total += labels.numel()
    return 100 * correct / total


@exit_on_user_error
def main(argv: list[str] | None = None) -> dict[str, float]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ckpt", required=True, help="a MnistSequenceClassifier checkpoint (.ckpt)")
    parser.add_argument("--data-dir", default="data/mnist", help="torchvision's layout: <dir>/MNIST/raw (default: data/mnist)")
    parser.add_argument("--val-size", type=int, default=500, help="training images held out for validation (default: 500)")
    parser.add_argument("--split-seed", type=int, default=42, help="which images are held out (default: 42)")
    add_weights_argument(parser, "score")
    args = parser.parse_args(argv)

    from datamodules import MNISTDataModule
    from tasks import MnistSequenceClassifier

    model = load_checkpoint(MnistSequenceClassifier, args.ckpt).eval()
    if args.weights == "training":
        load_training_weights(model, args.ckpt)
    dm = MNISTDataModule(args.data_dir, batch_size=500, val_size=args.val_size, split_seed=args.split_seed, download=False)
    dm.prepare_data()
    dm.setup("fit")
    dm.setup("test")
    scores = {"val": accuracy(model, dm.val_dataloader()), "test": accuracy(model, dm.test_dataloader())}
    print(
        f"weights: {args.weights}  val accuracy: {scores['val']:.2f} % ({len(dm.val_set)} images)  "
        f"test accuracy: {scores['test']:.2f} % ({len(dm.test_set)} images)"
    )
    return scores


if __name__ == "__main__":
    main()
