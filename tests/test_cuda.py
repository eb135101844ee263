"""The core's invariants again on a CUDA device, where other kernels run (SDPA picks flash or memory-efficient
attention there, cuBLAS the matrix products), and the round trip a user makes: train on a GPU, load and translate on
a CPU. Skipped where no GPU is present, as in CI; docs/results/benchmarks-gpu.md says when and where they last ran."""

from __future__ import annotations

import lightning as L
import pytest
import torch
from torch.utils.data import DataLoader

from datamodules.toy import TOY_PAIRS
from models import Transformer
from models.attention import MultiHeadAttention
from models.beam import beam_search
from models.config import MnistNetSettings
from models.decoding import greedy_decode
from models.masks import padding_mask
from tasks import MnistSequenceClassifier, Seq2SeqTransformer
from tests.helpers import (
    D,
    H,
    fit,
    padded_inputs,
    padded_source_ids,
    quiet_trainer,
    random_digits,
    small_core,
    small_net,
    torch_reference,
)

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
CUDA = torch.device("cuda")
GPU_BF16 = ("--trainer.accelerator", "gpu", "--trainer.devices", "1", "--trainer.precision", "bf16-mixed")


@pytest.fixture(autouse=True)
def _exact_matmuls():
    """fp32 products and convolutions in full fp32 (no TF32), so that the comparisons below hold to 1e-3 or closer."""
    before = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    yield
    torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = before


@pytest.mark.parametrize("norm_first", [False, True])
@pytest.mark.parametrize("train", [True, False])  # eval: torch's own fused fast path; train (dropout 0): its plain layers
def test_from_torch_matches_torch_transformer_on_cuda(norm_first, train):
    ref = torch_reference(norm_first, "gelu").to(CUDA).train(train)
    ours = Transformer.from_torch(ref).train(train)
    src, tgt, src_pad, tgt_pad = (t.to(CUDA) for t in padded_inputs())
    causal = torch.nn.Transformer.generate_square_subsequent_mask(tgt.size(1), device=CUDA)
    with torch.no_grad():
        expected = ref(src, tgt, tgt_mask=causal, tgt_is_causal=True, src_key_padding_mask=src_pad,
                       tgt_key_padding_mask=tgt_pad, memory_key_padding_mask=src_pad)  # fmt: skip
        got = ours(src, tgt, src_pad, tgt_pad)
    assert got.is_cuda
    # Other kernels sum in another order: 3e-4 apart at most in fp32 (seen on an H100); a wrong mask or weight is O(1).
    torch.testing.assert_close(got[~tgt_pad], expected[~tgt_pad], atol=1e-3, rtol=0)


def test_cuda_forward_equals_cpu_forward():
    model = small_core(2, 2)
    src, tgt, src_pad, tgt_pad = padded_inputs()
    on_cpu = model(src, tgt, src_pad, tgt_pad)
    on_gpu = model.to(CUDA)(src.to(CUDA), tgt.to(CUDA), src_pad.to(CUDA), tgt_pad.to(CUDA))
    torch.testing.assert_close(on_gpu.cpu()[~tgt_pad], on_cpu[~tgt_pad], atol=1e-4, rtol=0)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_padded_keys_change_nothing_and_all_padded_queries_stay_finite_on_cuda(dtype):
    attn = MultiHeadAttention(D, H).to(CUDA, dtype).eval()
    x = torch.randn(2, 5, D, device=CUDA, dtype=dtype)
    keys_padded = torch.tensor([[True] * 5, [False] * 2 + [True] * 3], device=CUDA)  # row 0: every key is padding
    with torch.no_grad():
        out, _ = attn(x, attn_mask=padding_mask(keys_padded))  # (2, 5, D)
        alone, _ = attn(x[1:, :2])  # row 1's two real tokens without their padding
    assert torch.isfinite(out).all()
    tol = 1e-5 if dtype == torch.float32 else 3e-2
    torch.testing.assert_close(out[1:, :2], alone, atol=tol, rtol=tol)


@pytest.mark.parametrize("use_cache", [True, False])
def test_greedy_on_cuda_equals_uncached_and_cpu(use_cache):
    net = small_net().eval()
    src = padded_source_ids()
    on_cpu = greedy_decode(net, src, bos_id=1, eos_id=2, max_len=25, use_cache=False)
    net.to(CUDA)
    got = greedy_decode(net, src.to(CUDA), bos_id=1, eos_id=2, max_len=25, use_cache=use_cache)
    assert got.is_cuda and torch.equal(got.cpu(), on_cpu)
    assert on_cpu.size(1) > 5  # an untrained net decodes long sequences: many cached steps


@pytest.mark.parametrize("num_kv_heads", [None, 2])
def test_beam_search_on_cuda_cached_equals_uncached(num_kv_heads):
    net = small_net(num_kv_heads=num_kv_heads).to(CUDA).eval()
    src = padded_source_ids().to(CUDA)
    kwargs = dict(bos_id=1, eos_id=2, max_len=20, beam_size=4, length_penalty=1.0)
    assert torch.equal(beam_search(net, src, use_cache=True, **kwargs), beam_search(net, src, use_cache=False, **kwargs))


def test_bf16_autocast_training_step_on_cuda_is_finite():
    net = small_net().train().to(CUDA)
    src = padded_source_ids().to(CUDA)
    src[:, 1:] = 0  # heavy padding: most keys masked
    tgt = torch.randint(4, 30, (4, 12), device=CUDA)
    tgt[:, 3:] = 0
    with torch.autocast("cuda", dtype=torch.bfloat16):
        logits = net(src, tgt)
    logits.float().logsumexp(-1).mean().backward()
    assert torch.isfinite(logits).all()
    assert all(torch.isfinite(p.grad).all() for p in net.parameters() if p.grad is not None)


def test_toy_recipe_trains_on_a_gpu_in_bf16_and_translates_on_a_cpu(tmp_path):
    """`scripts/fit.py` on the GPU under bf16 autocast; its weights-only checkpoint loads on a CPU and translates the
    three pairs there exactly as on the GPU."""
    result = fit(tmp_path, *GPU_BF16, "--trainer.logger", "CSVLogger")
    assert result.returncode == 0, result.stderr[-3000:]
    ckpt = sorted(tmp_path.rglob("epoch*.ckpt"))[-1]
    assert torch.load(ckpt, weights_only=True)["state_dict"]  # plain data, readable without the GPU
    sources, targets = [s for s, _ in TOY_PAIRS], [t for _, t in TOY_PAIRS]
    on_cpu = Seq2SeqTransformer.load_from_checkpoint(ckpt, map_location="cpu")
    on_gpu = Seq2SeqTransformer.load_from_checkpoint(ckpt, map_location=CUDA)
    assert on_cpu.device.type == "cpu" and on_gpu.device.type == "cuda"
    assert on_cpu.translate(sources) == targets
    assert on_gpu.translate(sources) == on_cpu.translate(sources) == on_gpu.translate(sources, beam_size=3)


def test_mnist_with_a_stem_trains_on_a_gpu_in_bf16_and_loads_on_a_cpu(tmp_path):
    L.seed_everything(0)
    tiny = dict(
        d_model=32,
        nhead=2,
        num_encoder_layers=1,
        dim_feedforward=64,
        dropout=0.0,
        activation="gelu",
        norm_first=True,
        positional="learned",
    )
    model = MnistSequenceClassifier(
        net=MnistNetSettings(tokens="patches", patch_size=7, stem_channels=4, head="mean", **tiny), lr=3e-3
    )
    data = random_digits(32)
    trainer = quiet_trainer(tmp_path, accelerator="gpu", devices=1, precision="bf16-mixed", max_epochs=150)
    trainer.fit(model, DataLoader(data, batch_size=32))
    images = data.tensors[0]
    assert trainer.callback_metrics["train/loss"] < 0.2  # random labels: only memorising brings the loss down
    path = tmp_path / "model.ckpt"
    trainer.save_checkpoint(path)
    on_cpu = MnistSequenceClassifier.load_from_checkpoint(path, map_location="cpu").eval()
    with torch.no_grad():
        on_gpu = model.to(CUDA).eval()(images.to(CUDA)).cpu()
        torch.testing.assert_close(on_cpu(images), on_gpu, atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("mode", ["eager", "cuda-graph", "compile"])
def test_static_cache_on_cuda_equals_the_growing_cache(mode):
    """models.static_cache's captured steps (CUDA graphs replayed; torch.compile in mode reduce-overhead) give the
    growing cache's tokens, greedy and beam, over two batch shapes and a reused decoder."""
    from models.static_cache import StaticDecoder

    net = small_net(num_kv_heads=2).to(CUDA).eval()
    decoder = StaticDecoder(net, mode=mode, length_multiple=16)
    for src in (padded_source_ids().to(CUDA), padded_source_ids()[:2, :5].to(CUDA)):
        for _ in range(2):  # the second run replays what the first captured
            assert torch.equal(decoder.greedy(src, 1, 2, 25), greedy_decode(net, src, 1, 2, 25))
            kwargs = dict(beam_size=4, length_penalty=1.0)
            assert torch.equal(decoder.beam(src, 1, 2, 20, **kwargs), beam_search(net, src, 1, 2, 20, **kwargs))
