"""The loss counts tokens, not batches: a step's gradient is the mean over every target token of the step,
whichever process or accumulated micro-batch holds it (fairseq's normalisation). Oracle: one process
training on one batch that is the union of the pieces."""

from __future__ import annotations

import sys

import pytest
import torch

from tests.helpers import HANG_TIMEOUT, ROOT, assert_close, run
from tests.token_loss_ddp import loader, model, trainer, uneven_batches


def union_gradients(pieces) -> dict[str, torch.Tensor]:
    net = model()
    trainer().fit(net, train_dataloaders=loader([[row for piece in pieces for row in piece]]))
    return net.captured


@pytest.mark.parametrize("sizes", [(1, 5, 3), (4, 1)])
def test_accumulated_micro_batches_equal_one_batch_of_their_union(sizes) -> None:
    pieces = uneven_batches(sizes=sizes)
    net = model()
    trainer(accumulate_grad_batches=len(pieces)).fit(net, train_dataloaders=loader(pieces))
    assert_close(net.captured, union_gradients(pieces))


def test_the_oracle_tells_token_means_from_batch_means() -> None:
    """The pieces hold different numbers of tokens, so the mean of batch means is another gradient."""
    pieces = uneven_batches(sizes=(1, 5, 3))
    per_piece = []
    for p in pieces:
        net = model()
        trainer().fit(net, train_dataloaders=loader([p]))
        per_piece.append(net.captured)
    mean_of_means = {n: sum(g[n] for g in per_piece) / len(per_piece) for n in per_piece[0]}
    with pytest.raises(AssertionError):
        assert_close(mean_of_means, union_gradients(pieces))


def test_two_ddp_processes_equal_one_process_on_the_union_of_their_batches(tmp_path) -> None:
    out = tmp_path / "grads.pt"
    result = run([sys.executable, str(ROOT / "tests" / "token_loss_ddp.py"), str(out)], timeout=HANG_TIMEOUT)
    assert result.returncode == 0, result.stderr[-3000:]
    assert_close(torch.load(out), union_gradients(uneven_batches(sizes=(1, 6))))


def test_validation_loss_is_the_mean_over_every_token_of_the_split() -> None:
    import torch.nn.functional as F

    pieces = uneven_batches(sizes=(1, 5, 3))
    net = model()
    metrics = trainer(limit_val_batches=None).validate(net, dataloaders=loader(pieces), verbose=False)[0]
    total = count = 0.0
    with torch.no_grad():
        for batch in loader(pieces):
            logits, labels = net.eval().net(batch.src, batch.tgt[:, :-1], batch.tgt[:, 1:])
            total += F.cross_entropy(logits, labels, label_smoothing=0.1, reduction="sum").item()
            count += labels.numel()
    assert metrics["val/loss"] == pytest.approx(total / count, rel=1e-5)
