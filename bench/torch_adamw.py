#!/usr/bin/env python3
"""torch.optim.AdamW on one flat fp32 parameter, for bench_optimizer's comparison.

Prints `seconds <best step time>` and `foreach <0|1>` (plus `torch <version>`), taking the
best of --reps steps after one warm-up step. Same hyperparameters as the C++ side.
"""
import argparse
import inspect
import time

import torch


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--params", type=int, default=50_000_000)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--reps", type=int, default=5)
    a = ap.parse_args()

    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    p = torch.nn.Parameter(torch.empty(a.params, dtype=torch.float32).uniform_(-1, 1))
    p.grad = torch.empty_like(p).uniform_(-1, 1)
    kwargs = dict(lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.01)
    foreach = "foreach" in inspect.signature(torch.optim.AdamW).parameters
    if foreach:
        kwargs["foreach"] = True
    opt = torch.optim.AdamW([p], **kwargs)
    opt.step()  # warm-up: allocates the state
    best = float("inf")
    for _ in range(a.reps):
        t0 = time.perf_counter()
        opt.step()
        best = min(best, time.perf_counter() - t0)
    print(f"torch {torch.__version__}")
    print(f"foreach {int(foreach)}")
    print(f"seconds {best:.6f}")


if __name__ == "__main__":
    main()
