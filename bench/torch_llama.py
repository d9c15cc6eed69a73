"""The Llama family's PyTorch baseline for bench_train_llama.sh: transformers' LlamaForCausalLM
from the same config.json, trained with torch.optim.AdamW on windows of the same token file
(bytes), fp32 on the CPU. Prints one line: 'torch: median N tokens/s over K steps'.

Usage: python torch_llama.py CONFIG TOKENS --context T --batch B --steps K [--threads N] [--eos ID]
"""
import argparse
import statistics
import time

import torch
import torch.nn.functional as F
from transformers import LlamaConfig, LlamaForCausalLM

p = argparse.ArgumentParser()
p.add_argument("config")
p.add_argument("tokens")
p.add_argument("--context", type=int, default=128)
p.add_argument("--batch", type=int, default=8)
p.add_argument("--steps", type=int, default=20)
p.add_argument("--warmup", type=int, default=3)
p.add_argument("--threads", type=int, default=2)
p.add_argument("--eos", type=int, default=-1, help="packed documents ended by this token: attention within each, "
               "positions restarting (a 4D mask and position_ids, as dscpp's --reset_attention_mask --reset_position_ids)")
a = p.parse_args()
torch.set_num_threads(a.threads)
torch.manual_seed(0)
model = LlamaForCausalLM(LlamaConfig.from_json_file(a.config))
opt = torch.optim.AdamW(model.parameters(), lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.01)
data = torch.frombuffer(bytearray(open(a.tokens, "rb").read()), dtype=torch.uint8).long()
windows = data[: len(data) // (a.context + 1) * (a.context + 1)].view(-1, a.context + 1)


def documents(x, eos):
    """The additive 4D mask (0 where a query sees a key of its own document at or before it) and
    the positions within documents; a document ends after each eos token."""
    doc = torch.cumsum(torch.cat([torch.zeros_like(x[:, :1]), (x[:, :-1] == eos).long()], 1), 1)
    t = torch.arange(x.shape[1])
    seen = (doc[:, :, None] == doc[:, None, :]) & (t[None, :, None] >= t[None, None, :])
    mask = torch.zeros(seen.shape, dtype=torch.float32).masked_fill(~seen, torch.finfo(torch.float32).min)
    start = torch.cummax(torch.where(torch.cat([torch.ones_like(x[:, :1], dtype=torch.bool), x[:, :-1] == eos], 1),
                                     t[None, :], torch.zeros_like(x)), 1).values
    return {"attention_mask": mask[:, None], "position_ids": t[None, :] - start}


rates = []
for step in range(a.warmup + a.steps):
    idx = torch.randint(0, len(windows), (a.batch,))
    x, y = windows[idx, :-1], windows[idx, 1:]
    extra = documents(x, a.eos) if a.eos >= 0 else {}
    t0 = time.perf_counter()
    logits = model(input_ids=x, **extra).logits
    loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1))
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    dt = time.perf_counter() - t0
    if step >= a.warmup:
        rates.append(a.batch * a.context / dt)
print(f"torch: median {statistics.median(rates):.0f} tokens/s over {a.steps} steps "
      f"(best {max(rates):.0f}; loss {loss.item():.4f}; attention {model.config._attn_implementation})")
