"""The Llama family's PyTorch baseline for bench_train_llama.sh: transformers' LlamaForCausalLM
from the same config.json, trained with torch.optim.AdamW on windows of the same token file
(bytes), fp32 on the CPU. Prints one line: 'torch: median N tokens/s over K steps'.

Usage: python torch_llama.py CONFIG TOKENS --context T --batch B --steps K [--threads N]
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
a = p.parse_args()
torch.set_num_threads(a.threads)
torch.manual_seed(0)
model = LlamaForCausalLM(LlamaConfig.from_json_file(a.config))
opt = torch.optim.AdamW(model.parameters(), lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.01)
data = torch.frombuffer(bytearray(open(a.tokens, "rb").read()), dtype=torch.uint8).long()
windows = data[: len(data) // (a.context + 1) * (a.context + 1)].view(-1, a.context + 1)
rates = []
for step in range(a.warmup + a.steps):
    idx = torch.randint(0, len(windows), (a.batch,))
    x, y = windows[idx, :-1], windows[idx, 1:]
    t0 = time.perf_counter()
    logits = model(input_ids=x).logits
    loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1))
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    dt = time.perf_counter() - t0
    if step >= a.warmup:
        rates.append(a.batch * a.context / dt)
print(f"torch: median {statistics.median(rates):.0f} tokens/s over {a.steps} steps "
      f"(best {max(rates):.0f}; loss {loss.item():.4f}; attention {model.config._attn_implementation})")
