"""Each training fast path of tasks/fast_paths.py against the plain path: the same loss and gradients, to a stated
tolerance. fp32 paths that only reorder sums: 1e-5 relative; bf16 autocast against fp32: 2e-2 on the loss and 1e-1
on the gradients' relative error (bf16 keeps 8 bits of mantissa, ~4e-3 per rounding)."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch

from common.errors import HyperparameterError
from datamodules import ToyTranslationDataModule
from datamodules.batching import bucket_batch
from tasks import Seq2SeqTransformer
from tasks.fast_paths import compiled_graphs
from tasks.schedules import adamw_with_warmup
from tests.helpers import ROOT, TOY_MODEL

PAD = 0


def make_model(**kwargs) -> Seq2SeqTransformer:
    torch.manual_seed(0)
    return Seq2SeqTransformer(
        tokenizers=ToyTranslationDataModule().tokenizers, **{**TOY_MODEL, "net": replace(TOY_MODEL["net"], dropout=0.0), **kwargs}
    )


def batch(rows: int, src_len: int, tgt_len: int, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """Random right-padded (rows, src_len) sources and (rows, tgt_len) targets starting with <bos>, one row full."""
    g = torch.Generator().manual_seed(seed)
    src = torch.randint(3, 11, (rows, src_len), generator=g)
    tgt = torch.randint(3, 11, (rows, tgt_len), generator=g)
    tgt[:, 0] = 1
    for i in range(1, rows):  # row 0 full, the others shorter
        src[i, max(1, src_len - i) :] = PAD
        tgt[i, max(2, tgt_len - i) :] = PAD
    return src, tgt


def loss_and_grads(model: Seq2SeqTransformer, data) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    model.zero_grad(set_to_none=True)
    loss = model.training_step(data, 0)
    loss.backward()
    return loss.detach(), {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}


def assert_same(a, b, rtol=1e-5, atol=1e-6):
    (loss_a, grads_a), (loss_b, grads_b) = a, b
    torch.testing.assert_close(loss_a, loss_b, rtol=rtol, atol=atol)
    assert grads_a.keys() == grads_b.keys() and grads_a
    for name in grads_a:
        torch.testing.assert_close(grads_a[name], grads_b[name], rtol=rtol, atol=atol, msg=name)


@pytest.mark.filterwarnings("ignore:.*self.log.*")
def test_length_buckets_give_the_same_loss_and_gradients():
    data = batch(4, 9, 7)
    src, tgt = bucket_batch(*data, 8, PAD)
    assert src.shape == (4, 16) and tgt.shape == (4, 9)  # the model sees tgt[:, :-1]: 8 positions, one bucket
    assert torch.equal(src[:, :9], data[0]) and src[:, 9:].eq(PAD).all() and tgt[:, 7:].eq(PAD).all()
    assert_same(loss_and_grads(make_model(), (src, tgt)), loss_and_grads(make_model(), data))


@pytest.mark.filterwarnings("ignore:.*self.log.*")
@pytest.mark.parametrize("multiple", [3, 8])
def test_the_data_module_collates_length_buckets_with_the_loss_of_the_unpadded_batch(multiple):
    """The toy module's batches with `pad_to_multiple`: source and target-input lengths are multiples, the
    ids are the unpadded module's batch with padding after, and the loss and gradients are that batch's."""
    plain = list(ToyTranslationDataModule(repeats=2).train_dataloader())  # the same shuffle: the run's seed and epoch
    bucketed = list(ToyTranslationDataModule(repeats=2, pad_to_multiple=multiple).train_dataloader())
    val = next(iter(ToyTranslationDataModule(pad_to_multiple=multiple).val_dataloader()))
    assert len(bucketed) == len(plain) == 2
    for (src, tgt), (src0, tgt0) in zip([*bucketed, val], [*plain, *ToyTranslationDataModule().val_dataloader()]):
        assert src.size(1) % multiple == 0 and (tgt.size(1) - 1) % multiple == 0, (src.shape, tgt.shape)
        assert src.size(1) - src0.size(1) < multiple and tgt.size(1) - tgt0.size(1) < multiple
        assert torch.equal(src[:, : src0.size(1)], src0) and src[:, src0.size(1) :].eq(PAD).all()
        assert torch.equal(tgt[:, : tgt0.size(1)], tgt0) and tgt[:, tgt0.size(1) :].eq(PAD).all()
        assert_same(loss_and_grads(make_model(), (src, tgt)), loss_and_grads(make_model(), (src0, tgt0)))


@pytest.mark.filterwarnings("ignore:LightningCLI's args parameter")
def test_the_cli_gives_the_model_the_data_modules_multiple(capsys):
    """scripts/fit.py links the data module's `pad_to_multiple` to the model's (which compiles one graph per
    bucket); a data module without one (MNIST's) leaves its model as it is."""
    from training.cli import TransformerCLI

    quiet = ["--trainer.logger", "false", "--trainer.enable_progress_bar", "false"]
    toy = ["--config", str(ROOT / "configs" / "toy_translation.yaml"), *quiet]
    cli = TransformerCLI(args=[*toy, "--data.init_args.pad_to_multiple", "8"])
    assert cli.datamodule.pad_to_multiple == 8 and cli.model.hparams.pad_to_multiple == 8
    cli = TransformerCLI(args=toy)
    assert cli.datamodule.pad_to_multiple == 1 and cli.model.hparams.pad_to_multiple == 1
    # The model's own flag would be replaced by the data's without a word: refused, naming the data's.
    with pytest.raises(SystemExit) as exit_:
        TransformerCLI(args=[*toy, "--model.init_args.pad_to_multiple", "8"])
    assert exit_.value.code == 2 and "pass --data.init_args.pad_to_multiple 8" in capsys.readouterr().err
    cli = TransformerCLI(args=["--config", str(ROOT / "configs" / "mnist_subset.yaml"), *quiet])
    assert not hasattr(cli.datamodule, "pad_to_multiple") and "pad_to_multiple" not in cli.model.hparams


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore:.*self.log.*")
def test_compiled_over_buckets_gives_the_same_loss_and_gradients_and_stops_compiling_within_a_bucket():
    # aot_eager: Dynamo's capture, guards and the compiled backward in seconds; the inductor compiles the same graphs.
    torch._dynamo.reset()
    eager, compiled = make_model(pad_to_multiple=8), make_model(pad_to_multiple=8, compile=True, compile_backend="aot_eager")
    graphs = []
    for seed, shape in enumerate([(4, 9, 7), (6, 12, 9), (3, 16, 5)]):  # rows and lengths change, the buckets (16, 8) do not
        data = bucket_batch(*batch(*shape, seed=seed), 8, PAD)  # as the data module's collate function pads them
        assert_same(loss_and_grads(compiled, data), loss_and_grads(eager, data))
        graphs.append(compiled_graphs())
    # The second batch may recompile once (its batch size becomes symbolic); after that a bucket compiles nothing.
    assert graphs[0] >= 1 and graphs[2] == graphs[1], graphs


def test_fused_adamw_steps_as_the_plain_one():
    plain, fused = make_model(), make_model()
    opt_plain = adamw_with_warmup(plain, 1e-2, 0.01, "constant", 0)["optimizer"]
    opt_fused = adamw_with_warmup(fused, 1e-2, 0.01, "constant", 0, fused=True)["optimizer"]
    assert opt_fused.defaults["fused"] and not opt_plain.defaults["fused"]
    for step in range(3):
        # The same gradients for both: a key bias's gradient is rounding noise (softmax ignores it), which Adam would
        # turn into ±lr steps that differ as soon as the weights differ in their last bit.
        with pytest.warns(UserWarning, match="self.log"):
            _, grads = loss_and_grads(plain, batch(4, 9, 7, seed=step))
        for name, p in fused.named_parameters():
            p.grad = grads[name].clone() if name in grads else None
        opt_plain.step()
        opt_fused.step()
    for (name, a), b in zip(plain.named_parameters(), fused.parameters()):
        torch.testing.assert_close(b, a, rtol=1e-5, atol=1e-6, msg=lambda m, name=name: f"{name}: {m}")


def test_fused_adamw_is_refused_in_one_line_where_torch_has_none():
    model = torch.nn.Linear(3, 3, device="meta")
    with pytest.raises(HyperparameterError, match="fused_adamw=True: torch has no fused AdamW on meta"):
        adamw_with_warmup(model, 1e-3, 0.01, "constant", 0, fused=True)


@pytest.mark.filterwarnings("ignore:.*self.log.*")
def test_bf16_autocast_is_close_to_fp32():
    data = batch(4, 9, 7)
    full = loss_and_grads(make_model(), data)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        half = loss_and_grads(make_model(), data)
    torch.testing.assert_close(half[0].float(), full[0], rtol=2e-2, atol=0)
    for name, g in full[1].items():
        err = (half[1][name].float() - g).norm() / g.norm().clamp(min=1e-12)
        assert err < 1e-1, (name, err.item())


@pytest.mark.filterwarnings("ignore:.*self.log.*")
def test_fused_adamw_clips_gradients_under_bf16_autocast_as_the_plain_one():
    # The GPU recipe's combination (configs/multi30k_gpu.yaml): gradient clipping, fused AdamW, bf16-mixed.
    from tests.helpers import quiet_trainer

    trained = []
    for fused in (False, True):
        model = make_model(fused_adamw=fused)
        trainer = quiet_trainer(precision="bf16-mixed", gradient_clip_val=0.05, max_steps=3, limit_val_batches=0)
        trainer.fit(model, train_dataloaders=ToyTranslationDataModule().train_dataloader())
        trained.append(model)
    for (name, a), b in zip(trained[0].named_parameters(), trained[1].parameters()):
        torch.testing.assert_close(b, a, rtol=1e-4, atol=1e-5, msg=lambda m, name=name: f"{name}: {m}")
