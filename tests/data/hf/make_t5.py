#!/usr/bin/env python3
"""Generate the T5 parity reference data for dscpp (run through make.sh, which pins the environment).

Usage: python make_t5.py OUT_DIR
       python make_t5.py --load-export MODEL_NAME EXPORT_DIR

Writes OUT_DIR/{t5_v10,t5_v11}/ with
  config.json, model.safetensors   save_pretrained of a tiny random T5ForConditionalGeneration:
                                   t5_v10: T5 v1.0 (ReLU, tied head with the d_model^-0.5 rescale);
                                   t5_v11: T5 v1.1 (gated-gelu, untied lm_head, 3 decoder layers
                                   over 2 encoder layers, d_kv·heads != d_model)
  train.jsonl                      4 pre-tokenized pairs {"input_ids", "labels"} of different lengths
  pair0.jsonl                      the first pair alone
  reference.safetensors            loss (the 4 pairs padded into one batch, transformers' mean over
                                   the target tokens), loss_pair0; grad.* of that loss; grad_ranks.*
                                   of the loss two data-parallel ranks optimise (the mean of each
                                   rank's batch mean, the pairs as torch's DistributedSampler
                                   deals them unshuffled: rank r gets pairs r and r + 2); loss_step.* and
                                   after3.* of 3 AdamW steps on that two-rank loss; greedy.i and
                                   beam3.i, transformers' generate(max_new_tokens=8) for each source
                                   (ids as float32); bleu_greedy and gen_len_greedy: sacreBLEU's corpus
                                   BLEU of the greedy outputs against the labels, ids as words, and their
                                   mean length (run_translation's compute_metrics with predict_with_generate)
Relative-position buckets: 8 buckets, max_distance 12, sources up to 20 tokens, so the log buckets
saturate within the test lengths.

--load-export checks that EXPORT_DIR (exported by dscpp from a step-0 checkpoint) loads in
transformers without missing or unexpected tensors and gives the reference loss (|diff| <= 1e-6).
"""

import json
import os
import shutil
import sys

import sacrebleu
import torch
import transformers
from torch.utils.data import DistributedSampler
from safetensors.torch import load_file, save_file
from transformers import T5Config, T5ForConditionalGeneration

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_parity import BETAS, EPS, LR, WEIGHT_DECAY, canonicalize_safetensors  # noqa: E402

STEPS = 3
VOCAB = 64
NEW_TOKENS = 8

MODELS = {
    "t5_v10": dict(d_model=32, d_kv=8, d_ff=64, num_layers=2, num_heads=4, feed_forward_proj="relu",
                   tie_word_embeddings=True),
    "t5_v11": dict(d_model=32, d_kv=16, d_ff=48, num_layers=2, num_decoder_layers=3, num_heads=4,
                   feed_forward_proj="gated-gelu", tie_word_embeddings=False),
}
SOURCE_LENGTHS = (20, 7, 13, 3)
TARGET_LENGTHS = (6, 14, 9, 11)


def config_of(name):
    return T5Config(vocab_size=VOCAB, relative_attention_num_buckets=8, relative_attention_max_distance=12,
                    dropout_rate=0.0, layer_norm_epsilon=1e-6, initializer_factor=1.0, pad_token_id=0,
                    eos_token_id=1, decoder_start_token_id=0, **MODELS[name])


def pairs(seed):
    """Sources and labels of real tokens (ids 3…63, then </s> = 1), as a tokenizer makes them."""
    g = torch.Generator().manual_seed(seed)
    out = []
    for s, t in zip(SOURCE_LENGTHS, TARGET_LENGTHS):
        src = torch.randint(3, VOCAB, (s - 1,), generator=g).tolist() + [1]
        tgt = torch.randint(3, VOCAB, (t - 1,), generator=g).tolist() + [1]
        out.append((src, tgt))
    return out


def batch(examples):
    """DataCollatorForSeq2Seq's padding: ids with pad 0 and an attention mask, labels with -100."""
    S = max(len(s) for s, _ in examples)
    T = max(len(t) for _, t in examples)
    ids = torch.tensor([s + [0] * (S - len(s)) for s, _ in examples])
    mask = torch.tensor([[1] * len(s) + [0] * (S - len(s)) for s, _ in examples])
    labels = torch.tensor([t + [-100] * (T - len(t)) for _, t in examples])
    return ids, mask, labels


def loss_of(model, examples):
    ids, mask, labels = batch(examples)
    return model(input_ids=ids, attention_mask=mask, labels=labels, use_cache=False).loss


def ranks_loss(model, examples, epoch):
    """Two data-parallel ranks each averaging their batch, averaged; each rank's pairs are those torch's
    DistributedSampler gives it without shuffling (dscpp's --no_shuffle)."""
    losses = []
    for rank in range(2):
        sampler = DistributedSampler(range(len(examples)), num_replicas=2, rank=rank, shuffle=False)
        sampler.set_epoch(epoch)
        losses.append(loss_of(model, [examples[i] for i in sampler]))
    return 0.5 * (losses[0] + losses[1])


def make_one(out_root, name, seed):
    d = os.path.join(out_root, name)
    if os.path.isdir(d):
        shutil.rmtree(d)
    os.makedirs(d)
    torch.manual_seed(seed)
    model = T5ForConditionalGeneration(config_of(name))
    if name == "t5_v11":
        # The eos row of the head a little above row 63's, so that greedy and beam outputs end inside the
        # test's lengths (random weights otherwise rarely pick it) without exact ties.
        with torch.no_grad():
            model.lm_head.weight[1] = 1.005 * model.lm_head.weight[63]
    model.save_pretrained(d, safe_serialization=True)
    for extra in ("generation_config.json",):
        if os.path.exists(os.path.join(d, extra)):
            os.remove(os.path.join(d, extra))
    canonicalize_safetensors(os.path.join(d, "model.safetensors"))
    examples = pairs(seed + 1)
    with open(os.path.join(d, "train.jsonl"), "w") as f:
        for s, t in examples:
            f.write(json.dumps({"input_ids": s, "labels": t}) + "\n")
    with open(os.path.join(d, "pair0.jsonl"), "w") as f:
        f.write(json.dumps({"input_ids": examples[0][0], "labels": examples[0][1]}) + "\n")

    model.train()  # dropout is 0
    params = list(model.named_parameters())
    ref = {}
    loss = loss_of(model, examples)
    loss.backward()
    ref["loss"] = loss.detach().reshape(1).clone()
    for pname, p in params:
        ref[f"grad.{pname}"] = p.grad.detach().clone()
        p.grad = None
    ref["loss_pair0"] = loss_of(model, examples[:1]).detach().reshape(1).clone()
    loss = ranks_loss(model, examples, 0)
    loss.backward()
    for pname, p in params:
        ref[f"grad_ranks.{pname}"] = p.grad.detach().clone()
        p.grad = None

    model.eval()
    for i, (s, _) in enumerate(examples):
        src = torch.tensor([s])
        greedy = model.generate(src, max_new_tokens=NEW_TOKENS, do_sample=False, num_beams=1)
        beam = model.generate(src, max_new_tokens=NEW_TOKENS, do_sample=False, num_beams=3)
        ref[f"greedy.{i}"] = greedy[0].to(torch.float32)
        ref[f"beam3.{i}"] = beam[0].to(torch.float32)
    preds = [ref[f"greedy.{i}"][1:].int().tolist() for i in range(len(examples))]
    words = lambda ids: " ".join(map(str, ids))  # noqa: E731
    bleu = sacrebleu.corpus_bleu([words(p) for p in preds], [[words(t) for _, t in examples]])
    ref["bleu_greedy"] = torch.tensor([bleu.score], dtype=torch.float32)
    ref["gen_len_greedy"] = torch.tensor([sum(sum(1 for x in p if x != 0) for p in preds) / len(preds)])

    model.train()
    opt = torch.optim.AdamW([p for _, p in params], lr=LR, betas=BETAS, eps=EPS, weight_decay=WEIGHT_DECAY,
                            amsgrad=False, foreach=False, maximize=False)
    for step in range(STEPS):
        opt.zero_grad(set_to_none=True)
        loss = ranks_loss(model, examples, step)
        loss.backward()
        ref[f"loss_step.{step}"] = loss.detach().reshape(1).clone()
        opt.step()
    for pname, p in params:
        ref[f"after3.{pname}"] = p.detach().clone()
    ref = {k: v.contiguous() for k, v in sorted(ref.items())}
    path = os.path.join(d, "reference.safetensors")
    save_file(ref, path, metadata={"transformers": transformers.__version__, "steps": str(STEPS)})
    canonicalize_safetensors(path)
    print(f"{name}: loss {float(ref['loss']):.7f}, greedy {[ref[f'greedy.{i}'].int().tolist() for i in range(4)]}")


def load_export(name, export_dir):
    ref_dir = os.path.join(os.path.dirname(os.path.abspath(__file__)), name)
    ref = load_file(os.path.join(ref_dir, "reference.safetensors"))
    model, info = T5ForConditionalGeneration.from_pretrained(export_dir, output_loading_info=True)
    problems = [f"{k}: {v}" for k, v in info.items() if v]
    examples = []
    with open(os.path.join(ref_dir, "train.jsonl")) as f:
        for line in f:
            e = json.loads(line)
            examples.append((e["input_ids"], e["labels"]))
    model.eval()
    with torch.no_grad():
        loss = float(loss_of(model, examples))
    if abs(loss - float(ref["loss"])) > 1e-6:
        problems.append(f"loss {loss:.7f}, reference {float(ref['loss']):.7f}")
    print(f"{name} export: " + ("; ".join(problems) if problems else f"loads in transformers, loss {loss:.7f}"))
    return 1 if problems else 0


def main():
    if len(sys.argv) == 4 and sys.argv[1] == "--load-export":
        sys.exit(load_export(sys.argv[2], sys.argv[3]))
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    torch.set_num_threads(1)
    for i, name in enumerate(MODELS):
        make_one(sys.argv[1], name, 1000 + 10 * i)


if __name__ == "__main__":
    main()
