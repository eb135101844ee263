"""Score an MNIST checkpoint on the held-out validation images and the test set.

    .venv/bin/python scripts/evaluate_mnist.py --ckpt CKPT --data-dir ../shared/data/mnist [--weights training] \
        [--precision bf16-mixed]

docs/guide/training.md ("Before and after a run") says which split, weights and precision are scored.
"""

from __future__ import annotations

if __name__ == "__main__":  # run as a file, not imported as scripts.NAME (the tests)
    import _checkout  # noqa: F401  (first: the repository's packages importable, and this Python the project's)

import torch  # noqa: E402

from common.checkpoints import add_weights_argument, load_checkpoint, read_checkpoint, weights_label  # noqa: E402
from common.commands import script_parser  # noqa: E402
from common.exits import exit_on_user_error  # noqa: E402
from common.progress import StageBar  # noqa: E402

BATCH_SIZE = 500
PRECISIONS = ("32", "bf16-mixed")


def accuracy(model, loader, description: str, precision: str = "32") -> float:
    correct = total = 0
    autocast = torch.autocast("cpu", dtype=torch.bfloat16, enabled=precision == "bf16-mixed")
    with torch.no_grad(), autocast, StageBar(description, len(loader.dataset), unit="images", every=5 * BATCH_SIZE) as bar:
        for images, labels in loader:
            correct += int(model(images).argmax(-1).eq(labels).sum())
            total += labels.numel()
            bar.update(labels.numel())
    return 100 * correct / total


@exit_on_user_error
def main(argv: list[str] | None = None) -> dict[str, float]:
    parser = script_parser(__doc__)
    parser.add_argument("--ckpt", required=True, help="a MnistSequenceClassifier checkpoint (.ckpt)")
    parser.add_argument("--data-dir", default="data/mnist", help="torchvision's layout: <dir>/MNIST/raw (default: data/mnist)")
    parser.add_argument("--val-size", type=int, default=500, help="training images held out for validation (default: 500)")
    parser.add_argument("--split-seed", type=int, default=42, help="which images are held out (default: 42)")
    parser.add_argument(
        "--precision", default="32", choices=PRECISIONS, help="32 (float32) or bf16-mixed (bfloat16 autocast) (default: 32)"
    )
    add_weights_argument(parser, "score")
    args = parser.parse_args(argv)

    from datamodules import MNISTDataModule
    from tasks import MnistSequenceClassifier

    model = load_checkpoint(MnistSequenceClassifier, args.ckpt, weights=args.weights).eval()
    dm = MNISTDataModule(args.data_dir, batch_size=BATCH_SIZE, val_size=args.val_size, split_seed=args.split_seed, download=False)
    dm.data_dir_flag, dm.download_flag = "--data-dir", None
    dm.prepare_data()
    dm.setup("fit")
    dm.setup("test")
    scores = {
        "val": accuracy(model, dm.val_dataloader(), "validation", args.precision),
        "test": accuracy(model, dm.test_dataloader(), "test", args.precision),
    }
    precision = "float32" if args.precision == "32" else "bf16-mixed"
    print(
        f"weights: {weights_label(read_checkpoint(args.ckpt), args.weights)}, {precision}  "
        f"val accuracy: {scores['val']:.2f} % ({len(dm.val_set)} images)  "
        f"test accuracy: {scores['test']:.2f} % ({len(dm.test_set)} images)"
    )
    return scores


if __name__ == "__main__":
    main()
