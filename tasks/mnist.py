"""Training logic for `models.mnist_net.MnistNet`: loss, metrics, optimiser, test-set figures.

The network itself (tokens, encoder, heads) lives in models/mnist_net.py.
"""

from __future__ import annotations

import math

import lightning as L
import torch
import torch.nn.functional as F
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from torchmetrics.classification import MulticlassAccuracy, MulticlassConfusionMatrix

from inference.networks import MNIST, build_network
from models.checks import OPTIMISER, at_least, check_hparams, fraction
from models.config import MnistNetSettings

from .figures import save_and_log_figure
from .loading import LoadsAnyCheckpoint
from .schedules import adamw_with_warmup


class MnistSequenceClassifier(LoadsAnyCheckpoint, L.LightningModule):
    TASK = MNIST

    def __init__(
        self,
        net: MnistNetSettings = MnistNetSettings(),  # noqa: B008 (frozen: one shared default is safe)
        lr: float = 1e-3,  # peak learning rate, reached after warm-up
        weight_decay: float = 0.05,  # on weight matrices only, not on biases and LayerNorms
        warmup_fraction: float = 0.05,  # of all training steps; then cosine decay to zero
        label_smoothing: float = 0.0,
        mixup: float = 0.0,  # α of mixup (Zhang et al., 2018): blend image pairs by λ ~ Beta(α, α); 0 = off
        num_misclassified_shown: int = 64,  # test digits in the misclassified grid
    ):
        """`net`: the network's settings (models/config.py; a recipe's `model.init_args.net`), checked by themselves;
        the other arguments are training's."""
        super().__init__()
        settings = net if isinstance(net, MnistNetSettings) else MnistNetSettings(**net)  # a checkpoint's: a dict
        net = settings.as_dict()  # what save_hyperparameters stores: plain data, loadable with weights_only=True
        check_hparams(
            self,
            locals(),
            {**OPTIMISER, "warmup_fraction": fraction, "mixup": at_least(0), "num_misclassified_shown": at_least(0)},
        )
        self.save_hyperparameters()
        self.net = build_network(settings)
        # One metric object per stage: their running states must not mix.
        self.train_acc, self.val_acc, self.test_acc = (MulticlassAccuracy(num_classes=10, average="micro") for _ in range(3))
        self.test_confmat = MulticlassConfusionMatrix(num_classes=10)
        self._misclassified: list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]] = []

    def forward(self, images: torch.Tensor) -> torch.Tensor:  # (B, 1, 28, 28) → (B, 10) logits
        return self.net(images)

    # ---- steps -------------------------------------------------------------------------------

    def training_step(self, batch, batch_idx: int) -> torch.Tensor:
        images, labels = batch  # (B, 1, 28, 28), (B,)
        smoothing, mixup = self.hparams.label_smoothing, self.hparams.mixup
        if mixup > 0:  # each image blended with another of the batch; train/acc counts the first's label
            lam = float(torch.distributions.Beta(mixup, mixup).sample())
            partner = torch.randperm(images.size(0), device=images.device)  # (B,)
            images = lam * images + (1 - lam) * images[partner]
        logits = self(images)  # (B, 10)
        loss = F.cross_entropy(logits, labels, label_smoothing=smoothing)
        if mixup > 0:  # both labels, in the images' proportion
            loss = lam * loss + (1 - lam) * F.cross_entropy(logits, labels[partner], label_smoothing=smoothing)
        self.train_acc(logits.argmax(-1), labels)
        self.log("train/loss", loss, prog_bar=True)
        self.log("train/acc", self.train_acc, on_step=False, on_epoch=True)
        return loss

    def _evaluate(self, batch, stage: str, accuracy: MulticlassAccuracy) -> torch.Tensor:
        """Log the batch's loss and accuracy under `stage`; → (B,) the predicted digits."""
        images, labels = batch
        logits = self(images)
        preds = logits.argmax(-1)  # (B,)
        accuracy(preds, labels)
        self.log(f"{stage}/loss", F.cross_entropy(logits, labels), sync_dist=True)  # averaged over processes
        self.log(f"{stage}/acc", accuracy, prog_bar=stage == "val")
        return preds

    def validation_step(self, batch, batch_idx: int) -> None:
        self._evaluate(batch, "val", self.val_acc)

    def test_step(self, batch, batch_idx: int) -> None:
        images, labels = batch
        preds = self._evaluate(batch, "test", self.test_acc)
        self.test_confmat.update(preds, labels)
        # Keep the first few mistakes (on CPU) for the grid drawn at the end of the test.
        room = self.hparams.num_misclassified_shown - sum(len(m[0]) for m in self._misclassified)
        wrong = (preds != labels).nonzero().squeeze(1)[:room]
        if len(wrong):
            self._misclassified.append((images[wrong].cpu(), preds[wrong].cpu(), labels[wrong].cpu()))

    def predict_step(self, batch, batch_idx: int) -> torch.Tensor:
        return self(batch[0]).argmax(-1)  # (B,) predicted digits

    # ---- test-set figures --------------------------------------------------------------------

    def on_test_epoch_start(self) -> None:
        self._misclassified = []

    def on_test_epoch_end(self) -> None:
        confmat = self.test_confmat.compute().cpu()  # (10, 10), summed over every process
        self.test_confmat.reset()
        figures = {"test/confusion_matrix": plot_confusion_matrix(confmat)}
        if self._misclassified:
            images, preds, labels = (torch.cat(t) for t in zip(*self._misclassified))
            figures["test/misclassified"] = plot_misclassified(images, preds, labels)
        for key, fig in figures.items():  # every rank calls: finding the log dir is a collective
            save_and_log_figure(self, fig, key.replace("/", "_"), key=key)
        self._misclassified = []

    # ---- optimisation ------------------------------------------------------------------------

    def configure_optimizers(self):
        total = max(1, int(self.trainer.estimated_stepping_batches))
        warmup = int(self.hparams.warmup_fraction * total)
        return adamw_with_warmup(self, self.hparams.lr, self.hparams.weight_decay, "cosine", warmup, total)


def plot_confusion_matrix(confmat: torch.Tensor) -> Figure:
    """(10, 10) counts, rows = true digit, columns = predicted digit → a Figure (Agg canvas)."""
    fig = Figure(figsize=(6, 5.5))
    FigureCanvasAgg(fig)  # render with Agg without touching pyplot's global backend
    ax = fig.add_subplot()
    cm = confmat.numpy()
    im = ax.imshow(cm, cmap="Blues")
    fig.colorbar(im, ax=ax)
    for i in range(cm.shape[0]):
        for j in range(cm.shape[1]):
            color = "white" if cm[i, j] > cm.max() / 2 else "black"
            ax.text(j, i, str(cm[i, j]), ha="center", va="center", fontsize=7, color=color)
    ax.set(xticks=range(10), yticks=range(10), xlabel="predicted", ylabel="true")
    accuracy = cm.trace() / max(1, cm.sum())
    ax.set_title(f"MNIST test confusion matrix (accuracy {100 * accuracy:.2f} %)")
    fig.tight_layout()
    return fig


def plot_misclassified(images: torch.Tensor, preds: torch.Tensor, labels: torch.Tensor) -> Figure:
    """A grid of (N, 1, 28, 28) digits, each titled `true→predicted`."""
    n = len(images)
    cols = min(8, n)
    rows = math.ceil(n / cols)
    fig = Figure(figsize=(1.3 * cols, 1.5 * rows))
    FigureCanvasAgg(fig)
    for k in range(n):
        ax = fig.add_subplot(rows, cols, k + 1)
        ax.imshow(images[k, 0].float().numpy(), cmap="gray")  # imshow rescales, so normalised is fine
        ax.set_title(f"{labels[k].item()}→{preds[k].item()}", fontsize=9, color="red")
        ax.axis("off")
    fig.suptitle("Misclassified test digits (true→predicted)")
    fig.tight_layout()
    return fig
