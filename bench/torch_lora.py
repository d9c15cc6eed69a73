"""The LoRA fine-tuning benchmark's PyTorch baseline for bench_lora.sh: transformers'
LlamaForCausalLM from a config.json (random init, eager attention, fp32 on the CPU) wrapped by
PEFT's get_peft_model with a LoraConfig (r, lora_alpha, target_modules, lora_dropout 0, bias
"none", task_type CAUSAL_LM), trained with torch.optim.AdamW over the trainable parameters only on
random windows of a token file read as bytes, the loss the mean cross-entropy of the next token.

One process with --threads threads, or --ddp N gloo processes (torch.multiprocessing.spawn, no
torchrun) with one thread each as DistributedDataParallel (find_unused_parameters False), each
with its own micro-batch of --batch windows (the global batch is N x batch). Prints
'torch: median N tokens/s over K steps (...)', the median of the per-step rates after --warmup
steps, tokens counted on every rank (with --ddp, rank 0's steps: each waits for every rank's
gradients), then one memory line per process (rank 0's with --ddp, the peak RSS the largest
rank's):
'torch memory: params=B grads=B optimizer_state=B peak_rss=B total_params=N trainable_params=N'
where params are the bytes of every parameter (frozen base and adapter), grads those of the
trainable parameters' .grad after the last backward, optimizer_state those of AdamW's state
tensors after the last step, and peak_rss the process's resource.getrusage maxrss.

Usage: python torch_lora.py CONFIG TOKENS --context T --batch B --steps K [--warmup W]
                            [--threads N | --ddp N] [--r 16 --alpha 32 --target q_proj,v_proj]
"""
import argparse
import os
import resource
import socket
import statistics
import sys
import time

import torch_common  # before torch: OpenBLAS reads its thread count when loaded

torch_common.set_blas_threads(sys.argv)

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from peft import LoraConfig, get_peft_model  # noqa: E402
from transformers import LlamaConfig, LlamaForCausalLM  # noqa: E402
from transformers.utils import logging as hf_logging  # noqa: E402

hf_logging.set_verbosity_error()


def make(a):
    torch.manual_seed(0)
    config = LlamaConfig.from_json_file(a.config)
    config._attn_implementation = "eager"  # torch 1.13 has no scaled_dot_product_attention
    base = LlamaForCausalLM(config)
    lora = LoraConfig(r=a.r, lora_alpha=a.alpha, target_modules=a.target.split(","), lora_dropout=0.0,
                      bias="none", task_type="CAUSAL_LM")
    model = get_peft_model(base, lora)
    model.train()
    trainable = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(trainable, lr=1e-4, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.01)
    return model, opt, config


def nbytes(t):
    return t.numel() * t.element_size()


def train(a, rank=0, world=1, ddp=False):
    model, opt, config = make(a)
    params = list(model.parameters())
    trainable = [p for p in params if p.requires_grad]
    data = torch.frombuffer(bytearray(open(a.tokens, "rb").read()), dtype=torch.uint8).long()
    windows = data[: len(data) // (a.context + 1) * (a.context + 1)].view(-1, a.context + 1)
    net = torch.nn.parallel.DistributedDataParallel(model, find_unused_parameters=False) if ddp else model
    pick = torch.Generator().manual_seed(1000 + rank)
    rates = []
    loss = None
    for step in range(a.warmup + a.steps):
        idx = torch.randint(0, len(windows), (a.batch,), generator=pick)
        x, y = windows[idx, :-1], windows[idx, 1:]
        t0 = time.perf_counter()
        logits = net(input_ids=x).logits
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        dt = time.perf_counter() - t0
        if step >= a.warmup:
            rates.append(world * a.batch * a.context / dt)
    memory = {
        "params": sum(nbytes(p) for p in params),
        "grads": sum(nbytes(p.grad) for p in trainable if p.grad is not None),
        "optimizer_state": sum(nbytes(v) for s in opt.state.values() for v in s.values() if torch.is_tensor(v)),
        "peak_rss": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
        "total_params": sum(p.numel() for p in params),
        "trainable_params": sum(p.numel() for p in trainable),
    }
    return rates, loss.item(), memory, config


def report(a, rates, loss, memory, config, what):
    print(f"torch: median {statistics.median(rates):.0f} tokens/s over {a.steps} steps "
          f"(best {max(rates):.0f}; loss {loss:.4f}; attention {config._attn_implementation}; {what})", flush=True)
    print("torch memory: " + " ".join(f"{k}={v}" for k, v in memory.items()), flush=True)


def worker(rank, world, port, a):
    import torch.distributed as dist
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method="tcp://127.0.0.1:%d" % port, rank=rank, world_size=world)
    rates, loss, memory, config = train(a, rank, world, ddp=True)
    peak = torch.tensor([memory["peak_rss"]], dtype=torch.long)
    dist.all_reduce(peak, op=dist.ReduceOp.MAX)
    memory["peak_rss"] = int(peak.item())
    if rank == 0:
        report(a, rates, loss, memory, config, f"DDP on gloo, {world} processes x 1 thread")
    dist.destroy_process_group()


def main():
    p = argparse.ArgumentParser()
    p.add_argument("config")
    p.add_argument("tokens")
    p.add_argument("--context", type=int, default=128)
    p.add_argument("--batch", type=int, default=4, help="windows per process per step")
    p.add_argument("--steps", type=int, default=8)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--ddp", type=int, default=0)
    p.add_argument("--r", type=int, default=16)
    p.add_argument("--alpha", type=float, default=32)
    p.add_argument("--target", default="q_proj,k_proj,v_proj,o_proj,gate_proj,up_proj,down_proj")
    a = p.parse_args()
    if a.ddp > 1:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        torch.multiprocessing.spawn(worker, args=(a.ddp, port, a), nprocs=a.ddp, join=True)
    else:
        torch.set_num_threads(a.threads)
        rates, loss, memory, config = train(a)
        report(a, rates, loss, memory, config, f"1 process x {torch.get_num_threads()} threads")


if __name__ == "__main__":
    main()
