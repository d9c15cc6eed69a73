"""`dscpp generate --prompt TEXT` through a model directory's tokenizer against transformers:
a random tiny LlamaForCausalLM (vocabulary 512) saved with a byte-level BPE tokenizer trained
here on the fortunes; for each prompt, transformers' greedy `generate(**tokenizer(prompt))`
and dscpp's must give the same new ids and the same decoded text; a prompt file runs every
prompt in one process; a model without its tokenizer still takes bytes.
Usage: generate_text.py DSCPP LLAMA_SO"""
import os
import re
import shutil
import subprocess
import sys
import tempfile

import torch
from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

import fortunes_bpe

dscpp, llama = sys.argv[1], sys.argv[2]
PROMPTS = ["The computer", "Never trust a", "Q: Why did the chicken cross the road?\tA:", "Ünïcödé and 日本 text"]
NEW = 12


def main():
    work = tempfile.mkdtemp(prefix="generate_text.")
    try:
        tok = fortunes_bpe.train(511, fortunes_bpe.fortune_files(8))
        d = os.path.join(work, "model")
        hf_tok = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<|endoftext|>", eos_token="<|endoftext|>")
        torch.manual_seed(0)
        cfg = LlamaConfig(vocab_size=512, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                          num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
                          initializer_range=0.2, eos_token_id=hf_tok.eos_token_id, bos_token_id=hf_tok.bos_token_id)
        model = LlamaForCausalLM(cfg).eval()
        model.save_pretrained(d, safe_serialization=True)
        hf_tok.save_pretrained(d)
        hf_tok = AutoTokenizer.from_pretrained(d)
        expected = []
        for p in PROMPTS:
            enc = hf_tok(p, return_tensors="pt", return_token_type_ids=False)
            with torch.no_grad():
                out = model.generate(**enc, max_new_tokens=NEW, do_sample=False, pad_token_id=hf_tok.eos_token_id)
            new = out[0, enc["input_ids"].shape[1]:].tolist()
            expected.append((new, hf_tok.decode(new, skip_special_tokens=True)))

        def gen(*args):
            r = subprocess.run([dscpp, "generate", llama, "--max_new_tokens", str(NEW), *args, "--", "--from_hf", d,
                                "--context", "64"], capture_output=True, text=True)
            if r.returncode != 0:
                sys.exit(f"FAIL: dscpp generate {' '.join(args)}: exit {r.returncode}: {r.stderr.strip()[-400:]}")
            return r.stdout

        for p, (ids, text) in zip(PROMPTS, expected):
            out = gen("--prompt", p)
            got = [int(x) for x in re.search(r"^ids: (.*)$", out, re.M).group(1).split(",")]
            cont = re.search(r"^continuation: (.*?)\ngenerated ", out, re.S | re.M).group(1)
            if got != ids[:len(got)] or (len(got) < len(ids) and got[-1] != hf_tok.eos_token_id):
                sys.exit(f"FAIL: {p!r}: dscpp ids {got}, transformers {ids}")
            if cont != text:
                sys.exit(f"FAIL: {p!r}: dscpp text {cont!r}, transformers {text!r}")
        print(f"ok: {len(PROMPTS)} prompts (ASCII, a tab, accents, CJK): dscpp generate's ids and streamed text equal "
              f"transformers' greedy generate through the directory's tokenizer")
        pf = os.path.join(work, "prompts.txt")
        open(pf, "w").write("\n".join(PROMPTS) + "\n")
        out = gen("--prompts", pf)
        runs = re.findall(r"^ids: (.*)$", out, re.M)
        if [[int(x) for x in r.split(",")] for r in runs] != [e[0] for e in expected]:
            sys.exit(f"FAIL: --prompts gave {runs}")
        print(f"ok: --prompts runs the {len(PROMPTS)} prompts in one process, each as alone")
        for f in ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"):
            os.remove(os.path.join(d, f))
        out = gen("--prompt", "The computer")
        if "continuation:" in out or "text: " not in out:
            sys.exit(f"FAIL: without a tokenizer the prompt should be bytes: {out[-300:]}")
        print("ok: without tokenizer.json the prompt is bytes, as before")
    finally:
        shutil.rmtree(work, ignore_errors=True)


main()
