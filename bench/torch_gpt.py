#!/usr/bin/python3
"""PyTorch twin of the dscpp gpt example plugin (examples/gpt/gpt.cpp).

Same text, vocabulary, windows, layer/parameter names and shapes as the plugin, so a run of
dscpp and a run of this script can be compared step by step:

  # identical initial weights, identical batches (windows in order, no shuffling):
  /usr/bin/python3 bench/torch_gpt.py --weights init.safetensors --steps 50 --batch 16 \
      --lr 1e-3 --betas 0.9,0.999 --eps 1e-8 --weight_decay 0.01
  # → one line per step: "step <k> loss <float>"

  # training throughput (tokens/s), one process or 2-process gloo DDP with 1 thread each:
  /usr/bin/python3 bench/torch_gpt.py --throughput --threads 2 --batch 16
  /usr/bin/python3 bench/torch_gpt.py --throughput --ddp 2 --batch 16

  # on a GPU (torch 2.x): bf16 autocast and scaled_dot_product_attention, as a user runs it;
  # prints the peak of torch.cuda.max_memory_allocated as well:
  python3 bench/torch_gpt.py --throughput --device cuda --dtype bf16 --attention sdpa \
      --layers 12 --d_model 768 --heads 12 --context 1024 --batch 8

Model (see the plugin's header comment): "embed" (wte [V,C], wpe [T,C]), "blocks.i" (pre-LN:
ln_1, attn.c_attn [3C,C] + bias, causal softmax attention, attn.c_proj [C,C] + bias, ln_2,
mlp.c_fc [4C,C] + bias, tanh-GELU, mlp.c_proj [C,4C] + bias), "head" (ln_f, lm_head [V,C], no
bias). Linear weights are [out, in] in both (torch.nn.Linear layout), so safetensors written
by dscpp load without transposition. Layer-norm eps 1e-5. Loss: mean cross-entropy (nats)
over all B·T positions. AdamW decays every parameter (no parameter groups).

Default text: every regular file (not a symlink) directly in /usr/share/games/fortunes whose
name does not end in .dat or .u8, concatenated in sorted name order. Vocabulary: sorted set of
distinct bytes. Windows of context+1 bytes, n = len // (context+1), train = first n*9//10.
"""
import argparse
import json
import math
import os
import socket
import struct
import sys
import time


def _blas_threads_from_argv(argv):
    """OpenBLAS reads its thread count when it is loaded (with torch), so set it first:
    --threads T for one process, 1 per process under --ddp."""
    def value(flag):
        for i, a in enumerate(argv):
            if a == flag and i + 1 < len(argv):
                return argv[i + 1]
            if a.startswith(flag + "="):
                return a.split("=", 1)[1]
        return None
    threads = "1" if (value("--ddp") or "0") not in ("0", "1") else (value("--threads") or "1")
    for var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS"):
        os.environ.setdefault(var, threads)


_blas_threads_from_argv(sys.argv)

import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402

FORTUNES = "/usr/share/games/fortunes"


# ---- data -------------------------------------------------------------------------------
def fortune_files():
    names = []
    for name in sorted(os.listdir(FORTUNES)):
        path = os.path.join(FORTUNES, name)
        if name.endswith(".dat") or name.endswith(".u8"):
            continue
        if os.path.islink(path) or not os.path.isfile(path):
            continue
        names.append(name)
    return names


def read_text(path):
    if path:
        with open(path, "rb") as f:
            return f.read(), path
    names = fortune_files()
    data = b"".join(open(os.path.join(FORTUNES, n), "rb").read() for n in names)
    return data, "%s (%d files: %s)" % (FORTUNES, len(names), " ".join(names))


class Corpus:
    def __init__(self, path, context):
        self.text, self.source = read_text(path)
        raw = np.frombuffer(self.text, dtype=np.uint8)
        counts = np.bincount(raw, minlength=256)
        self.vocab = np.nonzero(counts)[0].astype(np.uint8)
        lut = np.full(256, -1, dtype=np.int64)
        lut[self.vocab] = np.arange(len(self.vocab))
        self.ids = lut[raw]
        self.T = context
        self.windows = len(raw) // (context + 1)
        self.train_windows = self.windows * 9 // 10
        p = counts[counts > 0] / len(raw)
        self.entropy_bits = float(-(p * np.log2(p)).sum())

    def batch(self, first, count):
        """Train windows first … first+count−1 (wrapping around the train split)."""
        W = self.T + 1
        idx = [(first + i) % self.train_windows for i in range(count)]
        win = np.stack([self.ids[w * W:(w + 1) * W] for w in idx])
        return torch.from_numpy(win[:, :-1].copy()), torch.from_numpy(win[:, 1:].copy())


# ---- model ------------------------------------------------------------------------------
class Embed(nn.Module):
    def __init__(self, V, T, C):
        super().__init__()
        self.wte = nn.Embedding(V, C)
        self.wpe = nn.Embedding(T, C)

    def forward(self, ids):
        return self.wte(ids) + self.wpe.weight[: ids.shape[1]].unsqueeze(0)


class Attention(nn.Module):
    # "math": the T×T scores written out (what the plugin's ABI 2 op computed); "sdpa":
    # F.scaled_dot_product_attention(is_causal=True), torch's fused kernels (flash / memory
    # efficient), which never hold the scores.
    kind = "math"

    def __init__(self, C, H):
        super().__init__()
        self.H = H
        self.c_attn = nn.Linear(C, 3 * C)
        self.c_proj = nn.Linear(C, C)

    def forward(self, x):
        B, T, C = x.shape
        hd = C // self.H
        q, k, v = self.c_attn(x).split(C, dim=2)
        q, k, v = (t.view(B, T, self.H, hd).transpose(1, 2) for t in (q, k, v))
        if Attention.kind == "sdpa":
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:
            scores = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(hd))
            mask = torch.ones(T, T, dtype=torch.bool, device=x.device).tril()
            probs = scores.masked_fill(~mask, float("-inf")).softmax(dim=-1)
            y = probs @ v
        return self.c_proj(y.transpose(1, 2).reshape(B, T, C))


class Mlp(nn.Module):
    def __init__(self, C):
        super().__init__()
        self.c_fc = nn.Linear(C, 4 * C)
        self.c_proj = nn.Linear(4 * C, C)

    def forward(self, x):
        return self.c_proj(F.gelu(self.c_fc(x), approximate="tanh"))


class Block(nn.Module):
    def __init__(self, C, H):
        super().__init__()
        self.ln_1 = nn.LayerNorm(C, eps=1e-5)
        self.attn = Attention(C, H)
        self.ln_2 = nn.LayerNorm(C, eps=1e-5)
        self.mlp = Mlp(C)

    def forward(self, x):
        h = x + self.attn(self.ln_1(x))
        return h + self.mlp(self.ln_2(h))


class Head(nn.Module):
    def __init__(self, C, V):
        super().__init__()
        self.ln_f = nn.LayerNorm(C, eps=1e-5)
        self.lm_head = nn.Linear(C, V, bias=False)

    def forward(self, x):
        return self.lm_head(self.ln_f(x))


class Gpt(nn.Module):
    def __init__(self, V, T, C, H, L):
        super().__init__()
        self.embed = Embed(V, T, C)
        self.blocks = nn.ModuleList(Block(C, H) for _ in range(L))
        self.head = Head(C, V)
        # GPT-2 init, as the plugin declares it.
        for name, p in self.named_parameters():
            if name.endswith("c_proj.weight"):
                nn.init.normal_(p, 0.0, 0.02 / math.sqrt(2 * L))
            elif p.dim() == 2:
                nn.init.normal_(p, 0.0, 0.02)
            elif "ln_" in name and name.endswith(".weight"):
                nn.init.ones_(p)
            else:
                nn.init.zeros_(p)

    def forward(self, ids, targets):
        x = self.embed(ids)
        for b in self.blocks:
            x = b(x)
        logits = self.head(x)
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))


# ---- safetensors (a minimal reader; the format is an 8-byte header length + JSON + data) ----
def load_safetensors(path):
    with open(path, "rb") as f:
        blob = f.read()
    (n,) = struct.unpack("<Q", blob[:8])
    header = json.loads(blob[8:8 + n])
    base = 8 + n
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        start, end = info["data_offsets"]
        raw = np.frombuffer(blob[base + start:base + end], dtype={"F32": "<f4", "F16": "<f2", "BF16": "<u2",
                                                                    "F64": "<f8"}[info["dtype"]])
        if info["dtype"] == "BF16":
            raw = (raw.astype(np.uint32) << 16).view(np.float32)
        out[name] = torch.from_numpy(raw.astype(np.float32).reshape(info["shape"]))
    return out


def load_weights(model, path):
    tensors = load_safetensors(path)
    own = dict(model.named_parameters())
    missing = sorted(set(own) - set(tensors))
    extra = sorted(set(tensors) - set(own))
    if missing or extra:
        sys.exit("torch_gpt: %s does not match the model: missing %s, unexpected %s" % (path, missing, extra))
    with torch.no_grad():
        for name, p in own.items():
            t = tensors[name]
            if tuple(t.shape) != tuple(p.shape):
                sys.exit("torch_gpt: %s: %s has shape %s, the model wants %s" % (path, name, tuple(t.shape),
                                                                                 tuple(p.shape)))
            p.copy_(t)


# ---- modes --------------------------------------------------------------------------------
def loaded_blas():
    """The BLAS/LAPACK shared objects actually mapped (Debian's torch uses the libblas.so.3
    alternative, which may be OpenBLAS, BLIS or the reference BLAS)."""
    torch.ones(64, 64) @ torch.ones(64, 64)  # make sure the GEMM path has been touched
    libs = set()
    try:
        with open("/proc/self/maps") as f:
            for line in f:
                path = line.split()[-1] if len(line.split()) >= 6 else ""
                base = os.path.basename(path).lower()
                if "blas" in base or "mkl" in base or "lapack" in base:
                    libs.add("%s -> %s" % (path, os.path.realpath(path)) if os.path.islink(path) else path)
    except OSError:
        pass
    return sorted(libs)


def describe_torch(threads):
    """torch version, threads, the BLAS line of torch.__config__.show() and the library loaded."""
    config = torch.__config__.show()
    blas = [p.strip() for line in config.splitlines() for p in line.split(",")
            if "BLAS_INFO" in p or "LAPACK_INFO" in p or "CPU capability" in p]
    blas = [b.replace("- Build settings: ", "").lstrip("- ") for b in blas]
    print("torch %s, %d threads, %s" % (torch.__version__, threads, ", ".join(blas)))
    for lib in loaded_blas():
        print("  loaded:", lib)
    sys.stdout.flush()


def make_model(args, corpus):
    model = Gpt(len(corpus.vocab), args.context, args.d_model, args.heads, args.layers)
    if args.weights:
        load_weights(model, args.weights)
    return model


def make_optimizer(args, model):
    betas = tuple(float(b) for b in args.betas.split(","))
    return torch.optim.AdamW(model.parameters(), lr=args.lr, betas=betas, eps=args.eps,
                             weight_decay=args.weight_decay)


def train_steps(args, corpus):
    model = make_model(args, corpus)
    opt = make_optimizer(args, model)
    for k in range(1, args.steps + 1):
        ids, tgt = corpus.batch((k - 1) * args.batch, args.batch)
        loss = model(ids, tgt)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        print("step %d loss %.6f" % (k, loss.item()))
        sys.stdout.flush()


def timed_steps(args, corpus, model, opt, rank=0, world=1):
    device = torch.device(args.device)
    autocast = args.dtype == "bf16"

    def one(k):
        ids, tgt = corpus.batch((k * world + rank) * args.batch, args.batch)
        ids, tgt = ids.to(device, non_blocking=True), tgt.to(device, non_blocking=True)
        if autocast:
            with torch.autocast(device_type=device.type, dtype=torch.bfloat16):
                loss = model(ids, tgt)
        else:
            loss = model(ids, tgt)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        return loss.item()  # waits for the step: the timing covers the GPU's work

    for k in range(args.warmup):
        one(k)
    start = time.perf_counter()
    step_times = []
    for k in range(args.steps):
        t0 = time.perf_counter()
        one(args.warmup + k)
        step_times.append(time.perf_counter() - t0)
    return time.perf_counter() - start, step_times


def throughput(args, corpus):
    torch.set_num_threads(args.threads)
    describe_torch(torch.get_num_threads())
    model = make_model(args, corpus).to(args.device)
    opt = make_optimizer(args, model)
    cuda = args.device.startswith("cuda")
    if cuda:
        # Exact fp32 unless autocast: no TF32, as dscpp's default fp32 GEMMs.
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
        print("device %s, %s, attention %s" % (torch.cuda.get_device_name(), args.dtype, args.attention))
        torch.cuda.reset_peak_memory_stats()
    seconds, step_times = timed_steps(args, corpus, model, opt)
    tokens = args.steps * args.batch * args.context
    where = "1 process, %s" % (args.device if cuda else "%d threads" % torch.get_num_threads())
    print("throughput: %d steps × batch %d × context %d in %.3f s = %.1f tokens/s (%s)" %
          (args.steps, args.batch, args.context, seconds, tokens / seconds, where))
    if cuda:
        print("peak memory: %.3f GiB (torch.cuda.max_memory_allocated)" %
              (torch.cuda.max_memory_allocated() / 2**30))
    # The fastest single step: on a shared machine, the least disturbed measurement.
    print("best step: %.4f s = %.1f tokens/s" % (min(step_times), args.batch * args.context / min(step_times)))


def ddp_worker(rank, world, port, args):
    import torch.distributed as dist
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method="tcp://127.0.0.1:%d" % port, rank=rank, world_size=world)
    corpus = Corpus(args.data, args.context)
    torch.manual_seed(args.seed)
    model = torch.nn.parallel.DistributedDataParallel(make_model(args, corpus))
    opt = make_optimizer(args, model)
    seconds, step_times = timed_steps(args, corpus, model, opt, rank, world)
    t = torch.tensor([seconds], dtype=torch.float64)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    if rank == 0:
        tokens = args.steps * args.batch * args.context * world
        print("throughput: %d steps × batch %d/rank × context %d × %d ranks in %.3f s = %.1f tokens/s "
              "(gloo DDP, %d processes × 1 thread)" % (args.steps, args.batch, args.context, world, t.item(),
                                                       tokens / t.item(), world))
        # Rank 0's fastest step (it waits for every rank's gradients within the step).
        print("best step: %.4f s = %.1f tokens/s" % (min(step_times), args.batch * args.context * world /
                                                     min(step_times)))
    dist.destroy_process_group()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data", default="", help="text file (default: the fortunes text)")
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--d_model", type=int, default=256)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--context", type=int, default=128)
    ap.add_argument("--weights", default="", help="initial weights (.safetensors, plugin parameter names)")
    ap.add_argument("--seed", type=int, default=0, help="torch seed for the init when --weights is not given")
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=2, help="untimed steps before --throughput timing")
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--betas", default="0.9,0.999")
    ap.add_argument("--eps", type=float, default=1e-8)
    ap.add_argument("--weight_decay", type=float, default=0.01)
    ap.add_argument("--throughput", action="store_true", help="time training steps, print tokens/s")
    ap.add_argument("--threads", type=int, default=1, help="torch threads (single-process --throughput)")
    ap.add_argument("--ddp", type=int, default=0, help="with --throughput: N gloo DDP processes, 1 thread each")
    ap.add_argument("--device", default="cpu", help="cpu or cuda (with --throughput)")
    ap.add_argument("--dtype", choices=["fp32", "bf16"], default="fp32",
                    help="bf16: torch.autocast(bfloat16) around the forward (with --throughput)")
    ap.add_argument("--attention", choices=["math", "sdpa"], default="math",
                    help="math: scores written out; sdpa: F.scaled_dot_product_attention (torch 2.x)")
    ap.add_argument("--info", action="store_true", help="print the corpus (files, sizes, unigram entropy) and exit")
    args = ap.parse_args()
    if args.attention == "sdpa" and not hasattr(F, "scaled_dot_product_attention"):
        sys.exit("torch_gpt: --attention sdpa needs torch 2.0 or later (this is %s)" % torch.__version__)
    Attention.kind = args.attention
    if args.d_model % args.heads != 0:
        sys.exit("torch_gpt: --d_model must be a multiple of --heads")

    torch.manual_seed(args.seed)
    corpus = Corpus(args.data, args.context)
    if args.info:
        print("text %s\n%d bytes, vocabulary %d, %d train / %d eval windows of %d+1\n"
              "unigram entropy %.4f bits/char = %.4f nats/char" %
              (corpus.source, len(corpus.text), len(corpus.vocab), corpus.train_windows,
               corpus.windows - corpus.train_windows, args.context, corpus.entropy_bits,
               corpus.entropy_bits * math.log(2)))
        return
    if args.throughput and args.ddp > 1:
        describe_torch(1)
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        torch.multiprocessing.spawn(ddp_worker, args=(args.ddp, port, args), nprocs=args.ddp, join=True)
    elif args.throughput:
        throughput(args, corpus)
    else:
        torch.set_num_threads(args.threads)
        describe_torch(torch.get_num_threads())
        train_steps(args, corpus)


if __name__ == "__main__":
    main()
