"""Our translation model against the libraries a user would pick instead, on the same work.

Training step (forward, label-smoothed cross-entropy, backward, AdamW), whole models from token ids:
  - ours: `models.Seq2SeqNet` (post-norm, sinusoidal positions, three-way tied embeddings);
  - `torch.nn.Transformer` with the same embeddings, positions and tied generator around it;
  - Hugging Face `MarianMTModel` built from a `MarianConfig` of the same size (random weights);
  - `x-transformers`' `XTransformer` of the same size.
Decoding (batch of sources, exactly `--out-len` tokens: end-of-sentence is never chosen), greedy
and beam search with the length penalty 1:
  - ours, with the key/value cache; HF `generate` (its cache); CTranslate2 running *our* weights
    (scripts/export.py's conversion) in float32 and in int8.

Every contender gets the same token ids, padding, sizes, dropout, loss and optimizer; runs are
interleaved (order rotating each repeat) and each ratio is peer time / our time of the same repeat
(> 1: ours is faster). What differs in each peer's architecture is printed under the tables.

    .venv/bin/python benchmarks/peers.py --size small                # d256, 4 heads, 3+3, ff 1024
    .venv/bin/python benchmarks/peers.py --size base --repeats 5     # d512, 8 heads, 6+6, ff 2048
    .venv/bin/python benchmarks/peers.py --tiny                      # seconds; what CI runs
    .venv/bin/python benchmarks/peers.py --corpus ../shared/data/multi30k --max-tokens 4096   # real batches, real padding
    .venv/bin/python benchmarks/peers.py --device cuda --dtype bf16 --size big --task train   # MFU on a GPU
    .venv/bin/python benchmarks/peers.py --device cuda --dtype bf16 --size base --decode-batches 1 64 --static-cache cuda-graph

On a GPU (`--device cuda`) with `--dtype bf16` every PyTorch contender runs under bf16 autocast and
CTranslate2 in bfloat16 (and int8 weights with bfloat16 activations). MFU = 6 · N · tokens/s / peak, N the
model's parameters counted once (tied tables once), tokens the source plus target tokens of the batch that
are not padding; the peak is the GPU's dense bf16 rate (H100 SXM: 989 TFLOPS, NVIDIA H100 Tensor Core GPU
datasheet; H100 PCIe 756) or --peak-tflops.
The peers are optional (pip install -e ".[bench]", or docs/guide/gpu-suite.md's offline wheels): a missing one is named in one
line on stderr and its rows are left out; torch.nn.Transformer is always there.
"""

from __future__ import annotations

import argparse
import functools
import importlib.util
import math
import sys
import tempfile

import torch
import torch.nn.functional as F
from _common import (
    add_size_arguments,
    device_or_exit,
    environment,
    padded_ids,
    peak_cpu_bytes,
    print_table,
    ratio_summary,
    sized_settings,
    summary,
    timed,
    write_json,
)
from torch import nn

from datamodules.vocab import Vocab
from models.beam import beam_search
from models.decoding import greedy_decode
from models.positional import SinusoidalPositionalEncoding

SIZES = {
    "small": dict(d_model=256, nhead=4, layers=3, ff=1024),
    "base": dict(d_model=512, nhead=8, layers=6, ff=2048),
    "big": dict(d_model=1024, nhead=16, layers=6, ff=4096),
}
# Dense bf16 tensor-core peaks (TFLOPS, without sparsity) from NVIDIA's datasheets, matched on the device name.
PEAK_BF16_TFLOPS = {"H100 PCIe": 756.0, "H100": 989.4, "H200": 989.4, "A100": 312.0}
TINY = dict(d_model=32, nhead=4, layers=1, ff=64, vocab=60, batch=2, src_len=6, tgt_len=6, out_len=4, repeats=2, warmup=1)
PAD, BOS, EOS = 0, 1, 2
EOS_NEVER = -1  # an id argmax never returns: our searches then run exactly out_len steps

# The optional peers by import name: (pip name, the contenders they provide).
OPTIONAL_PEERS = {
    "transformers": ("transformers", "HF Marian"),
    "x_transformers": ("x-transformers", "x-transformers"),
    "ctranslate2": ("ctranslate2", "CTranslate2"),
}
DIFFERENCES = {
    "torch.nn.Transformer": "our architecture exactly (post-norm, final norms, biases), with our embeddings and generator",
    "HF Marian": "no final norm after either stack; a final-logits bias; sinusoids laid out as [sin | cos] halves",
    "x-transformers": "pre-norm; learned positions; GELU; norms without gain or bias; no attention biases; no residual dropout",
    "CTranslate2": "our own weights, converted by scripts/export.py (identical outputs in float32); C++ engine, no autograd",
}


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--size", default="small", choices=sorted(SIZES))
    p.add_argument("--vocab", type=int, default=8000, help="one joint vocabulary, as configs/multi30k.yaml")
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--src-len", type=int, default=24)
    p.add_argument("--tgt-len", type=int, default=24, help="training target length (padded like the source)")
    p.add_argument("--out-len", type=int, default=32, help="decoded tokens per sentence")
    p.add_argument("--pad-frac", type=float, default=0.25)
    p.add_argument(
        "--corpus",
        default=None,
        help="a folder of Multi30k's aligned files: real batches as the token-budget sampler builds them (realistic "
        "padding) instead of random ids; the recipe's joint BPE sets the vocabulary",
    )
    p.add_argument("--max-tokens", type=int, default=4096, help="with --corpus: the sampler's token budget per batch")
    add_size_arguments(p, "dropout", sizes=False)
    p.add_argument("--label-smoothing", type=float, default=0.1)
    p.add_argument("--task", default="both", choices=["train", "decode", "both"])
    p.add_argument("--compile", action="store_true", help="add a row: ours under torch.compile (training)")
    p.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    p.add_argument("--dtype", default="fp32", choices=["fp32", "bf16"], help="bf16: autocast (CTranslate2: bfloat16)")
    p.add_argument("--decode-batches", type=int, nargs="+", default=None, help="decoding batch sizes (default: --batch)")
    p.add_argument("--static-cache", default=None, choices=["eager", "compile", "cuda-graph"],
                   help="add a decoding row: ours with models/static_cache.py in this mode")  # fmt: skip
    p.add_argument("--peak-tflops", type=float, default=None, help="the device's peak for MFU (default: from the GPU name)")
    p.add_argument("--repeats", type=int, default=7)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", default=None)
    p.add_argument("--tiny", action="store_true", help="a few seconds at a toy size (CI smoke test)")
    args = p.parse_args(argv)
    for k, v in SIZES[args.size].items():
        setattr(args, k, v)
    if args.tiny:
        for k, v in TINY.items():
            setattr(args, k, v)
    if args.decode_batches is None:
        args.decode_batches = [args.batch]
    return args


def autocast(args):
    return torch.autocast(args.device, dtype=torch.bfloat16, enabled=args.dtype == "bf16")


def missing_peers() -> list[str]:
    """The import names of the optional peers that are not installed."""
    return [module for module in OPTIONAL_PEERS if not installed(module)]


def installed(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except ImportError:  # a parent package that fails to import, or a module hidden from this interpreter
        return False


def peak_tflops(args) -> float | None:
    if args.peak_tflops or args.device != "cuda":
        return args.peak_tflops
    name = torch.cuda.get_device_name()
    return next((tflops for key, tflops in PEAK_BF16_TFLOPS.items() if key in name), None)


def peak_bytes(fn, device: str) -> int:
    """Peak bytes allocated during one call of `fn` above what was live before it (the CUDA allocator's
    count on a GPU, the profiler's on a CPU)."""
    if device != "cuda":
        return peak_cpu_bytes(fn)
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    before = torch.cuda.memory_allocated()
    fn()
    torch.cuda.synchronize()
    return torch.cuda.max_memory_allocated() - before


def parameters(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())  # a tied table is one parameter: counted once


# ------------------------------------------------------------------------------------------
# The contenders


def our_module(args):
    """A `Seq2SeqTransformer` of the benchmark's size (its `net` is what trains and decodes; the
    module is what exports to CTranslate2), with a word vocabulary of `--vocab` tokens."""
    from tasks import Seq2SeqTransformer

    words = Vocab([f"w{i}" for i in range(args.vocab - 4)], "word").to_dict()
    return Seq2SeqTransformer(
        tokenizers={"src": words, "tgt": words},
        net=sized_settings(args, max_len=256, tie_embeddings=True, share_embeddings=True),
    )


class TorchTransformerSeq2Seq(nn.Module):
    """`torch.nn.Transformer` with what Seq2SeqNet puts around its core: a shared scaled embedding,
    sinusoidal positions, embedding dropout and a tied generator."""

    def __init__(self, args):
        super().__init__()
        self.embed = nn.Embedding(args.vocab, args.d_model, padding_idx=PAD)
        self.pos = SinusoidalPositionalEncoding(args.d_model, 256)
        self.drop = nn.Dropout(args.dropout)
        self.core = nn.Transformer(
            args.d_model, args.nhead, args.layers, args.layers, args.ff, args.dropout, batch_first=True
        )  # fmt: skip
        self.scale = math.sqrt(args.d_model)

    def forward(self, src, tgt):
        src_pad = src.eq(PAD)
        causal = nn.Transformer.generate_square_subsequent_mask(tgt.size(1), device=tgt.device)
        x = self.drop(self.pos(self.embed(src) * self.scale))
        y = self.drop(self.pos(self.embed(tgt) * self.scale))
        out = self.core(
            x, y, tgt_mask=causal, src_key_padding_mask=src_pad, memory_key_padding_mask=src_pad, tgt_is_causal=True
        )  # fmt: skip
        return out @ self.embed.weight.t()  # (B, T, V)


def marian(args):
    from transformers import MarianConfig, MarianMTModel

    config = MarianConfig(
        vocab_size=args.vocab,
        d_model=args.d_model,
        encoder_layers=args.layers,
        decoder_layers=args.layers,
        encoder_attention_heads=args.nhead,
        decoder_attention_heads=args.nhead,
        encoder_ffn_dim=args.ff,
        decoder_ffn_dim=args.ff,
        activation_function="relu",
        dropout=args.dropout,
        attention_dropout=args.dropout,
        activation_dropout=args.dropout,
        max_position_embeddings=256,
        scale_embedding=True,
        pad_token_id=PAD,
        bos_token_id=BOS,
        eos_token_id=EOS,
        decoder_start_token_id=BOS,
        forced_eos_token_id=None,
    )
    return MarianMTModel(config)


def x_transformer(args):
    from x_transformers import XTransformer

    common = dict(depth=args.layers, heads=args.nhead, max_seq_len=256, attn_dim_head=args.d_model // args.nhead)
    drop = dict(attn_dropout=args.dropout, ff_dropout=args.dropout, emb_dropout=args.dropout, ff_mult=args.ff // args.d_model)
    kwargs = {f"enc_{k}": v for k, v in {**common, **drop, "num_tokens": args.vocab}.items()}
    kwargs |= {f"dec_{k}": v for k, v in {**common, **drop, "num_tokens": args.vocab}.items()}
    model = XTransformer(dim=args.d_model, tie_token_emb=True, **kwargs)
    decoder = model.decoder.net
    decoder.to_logits.weight = decoder.token_emb.emb.weight  # the generator tied too, as ours and Marian's
    return model


class TrainContender:
    """`logits_fn(src, tgt_in)` gives (B, T, V) logits, scored with ignore_index as peers are used;
    or, with `packed`, `logits_fn(src, tgt_in, tgt_out)` gives the real positions' (N, V) logits and
    labels, as our task trains (Seq2SeqNet.forward). The loss is the same either way."""

    def __init__(self, name, model, logits_fn, args, batch, packed: bool = False):
        self.name, self.model, self.logits_fn, self.packed = name, model, logits_fn, packed
        self.args, self.params = args, parameters(model)
        self.src, self.tgt = batch
        self.opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
        self.smoothing = args.label_smoothing
        self.times: list[float] = []
        self.peak_bytes = None
        model.train()

    def step(self):
        self.opt.zero_grad(set_to_none=True)
        tgt_in, tgt_out = self.tgt[:, :-1], self.tgt[:, 1:]
        with autocast(self.args):
            if self.packed:
                logits, labels = self.logits_fn(self.src, tgt_in, tgt_out)  # (N, V), (N,)
            else:
                logits, labels = self.logits_fn(self.src, tgt_in).flatten(0, 1), tgt_out.flatten()  # (B*T, V)
            loss = F.cross_entropy(logits.float(), labels, ignore_index=PAD, label_smoothing=self.smoothing)
        loss.backward()
        self.opt.step()
        return loss


def train_contenders(args, ours, batch, missing: list[str]):
    torch_model = TorchTransformerSeq2Seq(args).to(args.device)
    contenders = [
        TrainContender("ours", ours.net, ours.net, args, batch, packed=True),
        TrainContender("torch.nn.Transformer", torch_model, torch_model, args, batch),
    ]
    if "transformers" not in missing:
        hf = marian(args).to(args.device)
        hf_logits = lambda s, t: hf(input_ids=s, attention_mask=s.ne(PAD), decoder_input_ids=t).logits
        contenders.append(TrainContender("HF Marian", hf, hf_logits, args, batch))
    if "x_transformers" not in missing:
        xt = x_transformer(args).to(args.device)
        xt_logits = lambda s, t: xt.decoder.net(
            t, context=xt.encoder(s, mask=s.ne(PAD), return_embeddings=True), context_mask=s.ne(PAD)
        )  # fmt: skip
        contenders.append(TrainContender("x-transformers", xt, xt_logits, args, batch))
    if args.compile:
        compiled = torch.compile(ours.net, dynamic=False)
        contenders.append(TrainContender("ours, torch.compile", ours.net, compiled, args, batch, packed=True))
    return contenders


# ------------------------------------------------------------------------------------------
# Measurement


def interleaved(contenders, run_one, args):
    """Warm up, then time `run_one(c)` for every contender in each repeat, the order rotating."""
    for _ in range(args.warmup):
        for c in contenders:
            run_one(c)
    n = len(contenders)
    for r in range(args.repeats):
        order = [contenders[(r + i) % n] for i in range(n)]
        for c in order if r % 2 == 0 else order[::-1]:
            c.times.append(timed(lambda c=c: run_one(c), args.device))
        print(f"repeat {r + 1}/{args.repeats}", file=sys.stderr, flush=True)


def rows_against_ours(contenders, units: float, unit_name: str, peak: float | None = None) -> tuple[list[list], list[dict]]:
    """Table rows and results; with `peak` (FLOP/s), each training contender's MFU = 6 · N · tokens/s / peak."""
    ours = contenders[0]
    rows, results = [], []
    for c in contenders:
        s = summary(c.times)
        ratio = ratio_summary(c.times, ours.times)  # peer time / our time: > 1 means ours is faster
        mem = "n/a" if c.peak_bytes is None else f"{c.peak_bytes / 2**20:.1f}"
        rate = units / s["median_s"]
        rows.append(
            [
                c.name,
                f"{s['median_s'] * 1e3:.1f}",
                f"{s['min_s'] * 1e3:.1f}–{s['max_s'] * 1e3:.1f}",
                f"{rate:,.1f}",
                "1 (reference)" if c is ours else f"{ratio['median']:.2f} ({ratio['min']:.2f}–{ratio['max']:.2f})",
                mem,
            ]
        )
        result = {"name": c.name, "time": s, unit_name: rate, "peer_over_ours": ratio, "peak_bytes": c.peak_bytes}
        if hasattr(c, "params"):
            result["parameters"] = c.params
            result["mfu"] = 6 * c.params * rate / peak if peak else None
            rows[-1].append(f"{result['mfu']:.1%}" if peak else "n/a")
        results.append(result)
    return rows, results


def model_size(args) -> str:
    return f"d_model {args.d_model}, {args.nhead} heads, {args.layers}+{args.layers} layers, ff {args.ff}, vocab {args.vocab}"


def run_train(args, ours, src, tgt, missing: list[str]) -> dict:
    contenders = train_contenders(args, ours, (src, tgt), missing)
    if args.compile:
        start = timed(contenders[-1].step, "cpu")
        print(f"torch.compile: first step {start:.1f} s (compilation included)", file=sys.stderr)
    interleaved(contenders, lambda c: c.step(), args)
    for c in contenders:
        c.peak_bytes = peak_bytes(c.step, args.device)
    tokens = int(src.ne(PAD).sum() + tgt[:, 1:].ne(PAD).sum())
    peak = peak_tflops(args)
    rows, results = rows_against_ours(contenders, tokens, "tokens_per_s", peak * 1e12 if peak else None)
    title = (
        f"Training step, {args.device} {args.dtype}: {model_size(args)}, dropout {args.dropout}, batch {args.batch}, "
        f"src/tgt {args.src_len}/{args.tgt_len} "
        f"tokens ({args.pad_frac:.0%} padding), label smoothing {args.label_smoothing}, AdamW; {args.repeats} interleaved "
        f"repeats, torch {torch.__version__}, {torch.get_num_threads()} threads"
    )
    if peak:
        title += f"; MFU = 6 · parameters · tokens/s / {peak:g} TFLOPS (dense bf16 peak)"
    headers = ["model", "step ms (median)", "step ms (min–max)", "tokens/s", "peer time / ours (median, min–max)", "peak MiB"]
    headers.append("MFU")
    table = print_table(headers, rows, title)
    return {"table": table, "results": results, "tokens_per_step": tokens, "peak_tflops": peak}


class DecodeContender:
    def __init__(self, name, fn):
        self.name, self.fn = name, fn
        self.times: list[float] = []
        self.peak_bytes = None


def decode_contenders(args, ours, src, ct2_dir: str | None, missing: list[str]):
    """For beam sizes 1 and 4, the decoders (ours, with the static cache, HF generate, CTranslate2 in two
    compute types; those of a missing peer left out), each a function of the beam size; the models and
    CTranslate2 translators are built once for both. `ct2_dir`: our weights converted (None without CTranslate2)."""
    from models.static_cache import StaticDecoder

    net = ours.net.eval()
    n = args.out_len
    static = StaticDecoder(net, args.static_cache) if args.static_cache else None

    def run_ours(beam, decoder=None):
        with autocast(args):
            if decoder is not None:
                if beam == 1:
                    return decoder.greedy(src, BOS, EOS_NEVER, n)
                return decoder.beam(src, BOS, EOS_NEVER, n, beam_size=beam, length_penalty=1.0)
            if beam == 1:
                return greedy_decode(net, src, BOS, EOS_NEVER, n)
            return beam_search(net, src, BOS, EOS_NEVER, n, beam_size=beam, length_penalty=1.0)

    hf = None if "transformers" in missing else marian(args).to(args.device).eval()

    def run_hf(beam):
        with torch.no_grad(), autocast(args):
            return hf.generate(
                input_ids=src, attention_mask=src.ne(PAD), max_new_tokens=n, min_new_tokens=n, num_beams=beam,
                do_sample=False, length_penalty=1.0,
            )  # fmt: skip

    decoders = {"ours": run_ours}
    if static is not None:
        decoders[f"ours, static cache ({args.static_cache})"] = functools.partial(run_ours, decoder=static)
    if hf is not None:
        decoders["HF Marian generate"] = run_hf
    if ct2_dir is not None:
        decoders |= ct2_decoders(args, ours, src, ct2_dir)
    return decoders


def ct2_decoders(args, ours, src, ct2_dir: str) -> dict:
    """CTranslate2 running our converted weights in two compute types, each a function of the beam size."""
    import ctranslate2

    from deploy.ctranslate2 import vocabulary

    words = vocabulary(ours.src_tokenizer)
    tokens = [[words[i] for i in row if i != PAD] for row in src.tolist()]  # each ends with <eos>, as ours
    n, threads = args.out_len, torch.get_num_threads()
    if args.device == "cpu":
        kinds = ("float32", "int8")
    else:
        kinds = ("bfloat16", "int8_bfloat16") if args.dtype == "bf16" else ("float32", "int8_float32")

    def run_ct2(kind):
        translator = ctranslate2.Translator(
            ct2_dir, device=args.device, compute_type=kind, inter_threads=1, intra_threads=threads
        )  # fmt: skip
        return lambda beam: translator.translate_batch(
            tokens, beam_size=beam, max_decoding_length=n, min_decoding_length=n, length_penalty=1.0 if beam > 1 else 0.0
        )  # fmt: skip

    return {f"CTranslate2 {kind} (our weights)": run_ct2(kind) for kind in kinds}


def ct2_cannot_run(ct2_dir: str, device: str) -> str | None:
    """Why CTranslate2 cannot translate on `device` (a wheel built for another CUDA than the machine's: its
    libraries load at the first translation, not at import), or None when it can."""
    import ctranslate2

    try:
        ctranslate2.Translator(ct2_dir, device=device).translate_batch([["a"]], max_decoding_length=1)
    except (RuntimeError, OSError, ValueError) as e:
        return str(e).splitlines()[0] if str(e) else type(e).__name__
    return None


def run_decode(args, ours, sources: dict[int, torch.Tensor], missing: list[str]) -> dict:
    """Greedy and beam 4 at every batch size of `sources` ({batch: (batch, S) ids}); results per beam, each row
    with its batch."""
    tables, results = [], {}
    with tempfile.TemporaryDirectory() as tmp:
        ct2_dir = None
        if "ctranslate2" not in missing:
            from deploy.ctranslate2 import export_ctranslate2

            ct2_dir = str(export_ctranslate2(ours.cpu().eval(), f"{tmp}/ct2"))
            ours.to(args.device)
            reason = ct2_cannot_run(ct2_dir, args.device)
            if reason:
                print(f"peers: CTranslate2 cannot run on {args.device} here ({reason}): its rows left out", file=sys.stderr)
                missing.append("ctranslate2")
                ct2_dir = None
        for src in sources.values():
            decoders = decode_contenders(args, ours, src, ct2_dir, missing)
            for beam in (1, 4):
                tables.append(decode_table(args, decoders, beam, src, results))
    return {"tables": tables, "results": results}


def decode_table(args, decoders: dict, beam: int, src: torch.Tensor, results: dict) -> str:
    batch = src.size(0)
    contenders = [DecodeContender(name, functools.partial(fn, beam)) for name, fn in decoders.items()]
    with torch.inference_mode():
        interleaved(contenders, lambda c: c.fn(), args)
        for c in contenders:  # CTranslate2 allocates outside torch: not seen by its profiler
            if not c.name.startswith("CTranslate2"):
                c.peak_bytes = peak_bytes(c.fn, args.device)
    rows, res = rows_against_ours(contenders, batch, "sentences_per_s")
    for r in res:
        r["batch"] = batch
    title = (
        f"{'Greedy decoding' if beam == 1 else f'Beam search ({beam} beams)'}, {args.device} {args.dtype}: "
        f"{model_size(args)}, batch {batch}, "
        f"{src.size(1)}-token sources ({src.eq(PAD).float().mean():.0%} padding), exactly {args.out_len} output tokens; "
        f"{args.repeats} interleaved repeats, {torch.get_num_threads()} threads"
    )
    headers = ["decoder", "ms (median)", "ms (min–max)", "sentences/s", "peer time / ours (median, min–max)", "peak MiB"]
    results.setdefault(f"beam{beam}", []).extend(res)
    return print_table(headers, rows, title)


def sources(args, batch: int, g: torch.Generator) -> torch.Tensor:
    src = padded_ids(batch, args.src_len, args.vocab, args.pad_frac, PAD, g)
    src[torch.arange(batch), src.ne(PAD).sum(1) - 1] = EOS  # sources end with <eos>, as ours are framed
    return src.to(args.device)


def pad_rows(rows: list[torch.Tensor]) -> torch.Tensor:
    return nn.utils.rnn.pad_sequence(rows, batch_first=True, padding_value=PAD)


def corpus_batches(args) -> tuple[torch.Tensor, torch.Tensor, list[torch.Tensor]]:
    """The training batch of median padded size among the token-budget batches of `--corpus`'s training split
    (configs/multi30k.yaml's data settings), and the split's sources sorted by length (for decoding). Sets
    args.vocab, args.batch, args.src_len, args.tgt_len and args.pad_frac to that batch's, for the tables."""
    from datamodules import ParallelCorpusDataModule

    dm = ParallelCorpusDataModule(
        data_dir=args.corpus, format="aligned", src_lang="de", tgt_lang="en", src_tokenizer="bpe", tgt_tokenizer="bpe",
        shared_vocab=True, max_tokens=args.max_tokens, download=False,
    )  # fmt: skip
    dm.setup("fit")
    batches = sorted(dm.train_dataloader(), key=lambda b: b.src.numel() + b.tgt.numel())
    src, tgt = batches[len(batches) // 2]
    args.vocab = len(dm.src_vocab)
    args.batch, args.src_len, args.tgt_len = src.size(0), src.size(1), tgt.size(1) - 1
    args.pad_frac = float((src.eq(PAD).sum() + tgt.eq(PAD).sum()) / (src.numel() + tgt.numel()))
    rows = [row[row.ne(PAD)] for b in batches for row in b.src]
    return src, tgt, sorted(rows, key=len)


def run(args) -> dict:
    device_or_exit(args.device)
    g = torch.Generator().manual_seed(args.seed)
    if args.corpus:  # first: it sets the vocabulary and the batch's sizes
        src, tgt, by_length = corpus_batches(args)
    torch.manual_seed(args.seed)
    ours = our_module(args).to(args.device)
    if not args.corpus:
        src = sources(args, args.batch, g)
        tgt = padded_ids(args.batch, args.tgt_len + 1, args.vocab, args.pad_frac, PAD, g)
        tgt[:, 0] = BOS
    src, tgt = src.to(args.device), tgt.to(args.device)
    missing = missing_peers()
    payload = {"benchmark": "peers", "config": vars(args), "environment": environment(args.device), "missing_peers": missing}
    if args.task in ("train", "both"):
        payload["train"] = run_train(args, ours, src, tgt, missing)
    if args.task in ("decode", "both"):
        if args.corpus:  # b sentences in length order from the middle of the split, as translate_many groups them
            middle = len(by_length) // 2
            batches = {b: pad_rows(by_length[middle : middle + b]).to(args.device) for b in args.decode_batches}
        else:
            batches = {b: src if b == args.batch else sources(args, b, g) for b in args.decode_batches}
        payload["decode"] = run_decode(args, ours, batches, missing)
    ran = [r["name"] for r in payload.get("train", {}).get("results", [])]
    ran += [r["name"] for rows in payload.get("decode", {}).get("results", {}).values() for r in rows]
    differences = {name: text for name, text in DIFFERENCES.items() if any(r.startswith(name) for r in ran)}
    print("\nWhat differs from ours:")
    for name, text in differences.items():
        print(f"  - {name}: {text}")
    payload["differences"] = differences
    return payload


def main(argv=None) -> dict:
    args = parse_args(argv)
    for module in missing_peers():
        pip_name, contender = OPTIONAL_PEERS[module]
        print(f"peers: {pip_name} is not installed: {contender} left out (pip install {pip_name})", file=sys.stderr)
    payload = run(args)
    write_json(args.json, payload)
    return payload


if __name__ == "__main__":
    main()
