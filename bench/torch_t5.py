"""The T5 family's PyTorch baseline for bench_train_t5.sh: transformers' T5ForConditionalGeneration
from the same config.json, trained with torch.optim.AdamW on the same pre-tokenized JSON lines
({"input_ids": [...], "labels": [...]}, every source and every target of one length), fp32 on the
CPU, the loss T5 computes from labels (decoder inputs shifted right, mean cross-entropy).

One process with --threads threads, or --ddp N gloo processes with one thread each, either as
DistributedDataParallel (--engine ddp) or under DeepSpeed's ZeRO-2 (--engine deepspeed: the same
torch AdamW handed to deepspeed.initialize as a client optimizer). Rank r of N trains on batches
(k * N + r) of the file in order. Prints 'torch: median N tokens/s over K steps (...)' where the
tokens are source + target tokens of every sample on every rank and the median is over the
per-step rates after the warm-up steps; with --ddp, rank 0's steps (each waits for every rank's
gradients). --probe_deepspeed tries DeepSpeed's initialization on N processes and prints
'deepspeed: ok' or 'deepspeed: unavailable: REASON' (exit 3).

Usage: python torch_t5.py CONFIG DATA --batch B --steps K [--warmup W] [--threads N]
                          [--ddp N [--engine ddp|deepspeed]] [--probe_deepspeed N]
"""
import argparse
import json
import os
import socket
import statistics
import sys
import time

import torch_common  # before torch: OpenBLAS reads its thread count when loaded

torch_common.set_blas_threads(sys.argv, ("--ddp", "--probe_deepspeed"))

import torch  # noqa: E402
from transformers import T5Config, T5ForConditionalGeneration  # noqa: E402
from transformers.utils import logging as hf_logging  # noqa: E402

hf_logging.set_verbosity_error()


def read_data(path):
    ids, labels = [], []
    with open(path) as f:
        for line in f:
            if line.strip():
                e = json.loads(line)
                ids.append(e["input_ids"])
                labels.append(e["labels"])
    return torch.tensor(ids, dtype=torch.long), torch.tensor(labels, dtype=torch.long)


def make(a):
    torch.manual_seed(0)
    model = T5ForConditionalGeneration(T5Config.from_json_file(a.config))
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.01)
    return model, opt


def deepspeed_engine(model, opt, a, world):
    """DeepSpeed ZeRO-2 around the model and the client AdamW, on gloo. Debian's torch ships no C++
    extension headers, so DeepSpeed's shared-memory allreduce op (a JIT-built extension) is turned
    off there and its collectives go through torch.distributed."""
    import deepspeed
    import deepspeed.ops
    from torch.utils import cpp_extension
    if not any(os.path.exists(os.path.join(p, "torch", "extension.h")) for p in cpp_extension.include_paths()):
        deepspeed.ops.__compatible_ops__["deepspeed_shm_comm"] = False
    deepspeed.init_distributed(dist_backend="gloo")
    cfg = {"train_micro_batch_size_per_gpu": a.batch, "gradient_accumulation_steps": 1, "gradient_clipping": 0,
           "zero_optimization": {"stage": 2}, "zero_allow_untested_optimizer": True, "steps_per_print": 10 ** 9,
           "wall_clock_breakdown": False}
    engine, _, _, _ = deepspeed.initialize(model=model, optimizer=opt, config=cfg)
    return engine


def train(a, rank=0, world=1, engine_kind="single"):
    model, opt = make(a)
    ids, labels = read_data(a.data)
    n = ids.shape[0] // a.batch
    per_sample = ids.shape[1] + labels.shape[1]
    engine = None
    if engine_kind == "ddp":
        model = torch.nn.parallel.DistributedDataParallel(model)
    elif engine_kind == "deepspeed":
        engine = deepspeed_engine(model, opt, a, world)
    rates = []
    loss = None
    for k in range(a.warmup + a.steps):
        b = (k * world + rank) % n
        x, y = ids[b * a.batch:(b + 1) * a.batch], labels[b * a.batch:(b + 1) * a.batch]
        t0 = time.perf_counter()
        if engine is not None:
            loss = engine(input_ids=x, labels=y).loss
            engine.backward(loss)
            engine.step()
        else:
            loss = model(input_ids=x, labels=y).loss
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
        dt = time.perf_counter() - t0
        if k >= a.warmup:
            rates.append(world * a.batch * per_sample / dt)
    return rates, loss.item()


def report(a, rates, loss, what):
    print(f"torch: median {statistics.median(rates):.0f} tokens/s over {a.steps} steps "
          f"(best {max(rates):.0f}; loss {loss:.4f}; {what})", flush=True)


def worker(rank, world, port, a, engine_kind):
    import torch.distributed as dist
    torch.set_num_threads(1)
    os.environ.update(RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE=str(world), LOCAL_WORLD_SIZE=str(world),
                      MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    if engine_kind == "probe":
        try:
            model, opt = make(a)
            deepspeed_engine(model, opt, a, world)
            ok = torch.tensor([1])
        except Exception as e:  # noqa: BLE001 - the reason is the result
            ok = torch.tensor([0])
            if rank == 0:
                print(f"deepspeed: unavailable: {type(e).__name__}: {e}".splitlines()[0], flush=True)
        if dist.is_initialized():
            dist.all_reduce(ok, op=dist.ReduceOp.MIN)
            if rank == 0 and ok.item() == 1:
                print("deepspeed: ok", flush=True)
        if ok.item() == 0:
            sys.exit(3)
        return
    if engine_kind == "ddp":
        dist.init_process_group("gloo", init_method="tcp://127.0.0.1:%d" % port, rank=rank, world_size=world)
    rates, loss = train(a, rank, world, engine_kind)
    if rank == 0:
        name = "DeepSpeed ZeRO-2" if engine_kind == "deepspeed" else "DDP"
        report(a, rates, loss, f"{name} on gloo, {world} processes x 1 thread")


def spawn(a, world, engine_kind):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    torch.multiprocessing.spawn(worker, args=(world, port, a, engine_kind), nprocs=world, join=True)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("config")
    p.add_argument("data")
    p.add_argument("--batch", type=int, default=8, help="samples per process per step")
    p.add_argument("--steps", type=int, default=5)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--ddp", type=int, default=0)
    p.add_argument("--engine", choices=["ddp", "deepspeed"], default="ddp")
    p.add_argument("--probe_deepspeed", type=int, default=0)
    a = p.parse_args()
    if a.probe_deepspeed:
        try:
            spawn(a, a.probe_deepspeed, "probe")
        except Exception:  # noqa: BLE001 - rank 0 printed the reason
            sys.exit(3)
    elif a.ddp > 1:
        spawn(a, a.ddp, a.engine)
    else:
        torch.set_num_threads(a.threads)
        rates, loss = train(a)
        report(a, rates, loss, f"1 process x {torch.get_num_threads()} threads")


if __name__ == "__main__":
    main()
