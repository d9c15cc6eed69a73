"""The PyTorch side of bench_generate.sh: transformers' greedy generate (do_sample=False,
num_beams=1) on the CPU in fp32, and the random-weight Hugging Face directories both sides load.

  make-t5 DIR             T5ForConditionalGeneration on t5-small's shape with random weights
                          (torch.manual_seed(0)). The tied embedding is scaled by 0.02: at T5's
                          initial std of 1 it dominates the residual stream of the random layers
                          and greedy search repeats the decoder start token forever; scaled, the
                          outputs vary. Its eos row (id 1) is zeroed: that logit is then 0 at every
                          step, far below the largest of 32,128 random logits, so greedy search
                          never picks it and every prompt runs exactly max_new_tokens on both sides
  make-llama CONFIG DIR   LlamaForCausalLM from CONFIG with random weights
  run DIR PROMPTS --max_new_tokens N --batch B [--threads T]
                          PROMPTS holds one prompt a line, comma-separated ids. After one warm-up
                          call, generates for the prompts B at a time (a batch padded to its longest
                          prompt with an attention mask: right for an encoder-decoder's sources,
                          left for a decoder) and times generate() alone. A decoder runs with
                          eos_token_id None, as dscpp generate runs a model without a tokenizer.
                          Prints 'ids: ...' per prompt (the new tokens) and one line
                          'torch: N tokens/s (K tokens for P prompt(s) in S s, batch B)'.
"""
import argparse
import os
import sys


def _blas_threads_from_argv(argv):
    """OpenBLAS reads its thread count when it is loaded (with torch)."""
    threads = argv[argv.index("--threads") + 1] if "--threads" in argv else "2"
    for var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS"):
        os.environ.setdefault(var, threads)


_blas_threads_from_argv(sys.argv)

import copy  # noqa: E402
import time  # noqa: E402

import torch  # noqa: E402
from transformers import (AutoConfig, AutoModelForCausalLM, AutoModelForSeq2SeqLM, LlamaConfig,  # noqa: E402
                          LlamaForCausalLM, T5Config, T5ForConditionalGeneration)
from transformers.utils import logging  # noqa: E402

logging.set_verbosity_error()


def make_t5(out):
    config = T5Config(d_model=512, d_kv=64, d_ff=2048, num_layers=6, num_decoder_layers=6, num_heads=8,
                      vocab_size=32128, relative_attention_num_buckets=32, relative_attention_max_distance=128,
                      feed_forward_proj="relu", tie_word_embeddings=True, dropout_rate=0.0,
                      layer_norm_epsilon=1e-6, initializer_factor=1.0, pad_token_id=0, eos_token_id=1,
                      decoder_start_token_id=0)
    torch.manual_seed(0)
    model = T5ForConditionalGeneration(config)
    with torch.no_grad():
        model.shared.weight.mul_(0.02)
        model.shared.weight[1].zero_()
    model.save_pretrained(out)


def make_llama(config_file, out):
    torch.manual_seed(0)
    LlamaForCausalLM(LlamaConfig.from_json_file(config_file)).save_pretrained(out)


def run(a):
    torch.set_num_threads(a.threads)
    prompts = [[int(t) for t in line.split(",")] for line in open(a.prompts) if line.strip()]
    auto = AutoModelForSeq2SeqLM if AutoConfig.from_pretrained(a.dir).is_encoder_decoder else AutoModelForCausalLM
    model = auto.from_pretrained(a.dir, torch_dtype=torch.float32).eval()
    seq2seq = model.config.is_encoder_decoder
    eos = model.generation_config.eos_token_id
    if not seq2seq:
        # generate() takes special tokens a passed config leaves unset from the model's own
        model.generation_config.eos_token_id = eos = None
    gen = copy.deepcopy(model.generation_config)
    gen.do_sample, gen.num_beams, gen.max_new_tokens, gen.min_new_tokens = False, 1, a.max_new_tokens, None
    gen.max_length = None
    pad = model.config.pad_token_id if model.config.pad_token_id is not None else 0
    gen.pad_token_id = pad

    def batch(chunk):
        n = max(len(p) for p in chunk)
        ids = torch.full((len(chunk), n), pad, dtype=torch.long)
        mask = torch.zeros((len(chunk), n), dtype=torch.long)
        for i, p in enumerate(chunk):
            at = slice(0, len(p)) if seq2seq else slice(n - len(p), n)
            ids[i, at] = torch.tensor(p)
            mask[i, at] = 1
        return ids, mask

    def generate(chunk):
        ids, mask = batch(chunk)
        out = model.generate(input_ids=ids, attention_mask=mask, generation_config=gen)
        # seq2seq: the decoder start, then the new tokens; a decoder: the prompt, then the new tokens
        return out[:, 1:] if seq2seq else out[:, ids.shape[1]:]

    with torch.no_grad():
        generate(prompts[:a.batch])  # warm-up
        made, secs, outputs = 0, 0.0, []
        for first in range(0, len(prompts), a.batch):
            chunk = prompts[first:first + a.batch]
            t0 = time.perf_counter()
            out = generate(chunk)
            secs += time.perf_counter() - t0
            for row in out.tolist():
                # a finished row is padded after its eos; the tokens it generated end there
                if eos is not None and eos in row:
                    row = row[:row.index(eos) + 1]
                outputs.append(row)
                made += len(row)
    for row in outputs:
        print("ids: " + ",".join(map(str, row)))
    print(f"torch: {made / secs:.1f} tokens/s ({made} tokens for {len(prompts)} prompt(s) in {secs:.3f} s, "
          f"batch {a.batch})")


p = argparse.ArgumentParser()
sub = p.add_subparsers(dest="what", required=True)
s = sub.add_parser("make-t5")
s.add_argument("dir")
s = sub.add_parser("make-llama")
s.add_argument("config")
s.add_argument("dir")
s = sub.add_parser("run")
s.add_argument("dir")
s.add_argument("prompts")
s.add_argument("--max_new_tokens", type=int, default=32)
s.add_argument("--batch", type=int, default=1)
s.add_argument("--threads", type=int, default=2)
a = p.parse_args()
if a.what == "make-t5":
    make_t5(a.dir)
elif a.what == "make-llama":
    make_llama(a.config, a.dir)
else:
    run(a)
