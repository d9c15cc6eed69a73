#!/usr/bin/env python3
"""The adapter_config.json files PEFT 0.12's PeftModel.save_pretrained writes for three small
random models, which tests/unit/test_lora_models.cpp compares with the ones dscpp's families
declare for the same settings (all but base_model_name_or_path). PEFT keeps a target_modules list
as a set, which it writes in the set's (hash-dependent) order: the list is sorted here, as dscpp
writes it; the file is otherwise PEFT's, byte for byte.

Usage: python make_configs.py [OUT_DIR]   (default: this directory)
Pinned environment: torch 1.13 (CPU), transformers 4.44.2, peft 0.12.0 (installed --no-deps).
"""

import json
import os
import sys
import tempfile

import torch
from peft import LoraConfig, get_peft_model
from transformers import GPT2Config, GPT2LMHeadModel, LlamaConfig, LlamaForCausalLM, T5Config
from transformers import T5ForConditionalGeneration

HERE = os.path.dirname(os.path.abspath(__file__))
TINY_LLAMA = dict(vocab_size=256, hidden_size=256, intermediate_size=688, num_hidden_layers=4,
                  num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256)

CASES = [
    # dscpp: --lora r=16,alpha=32,target=q_proj,v_proj
    ("llama", lambda: LlamaForCausalLM(LlamaConfig(**TINY_LLAMA)),
     LoraConfig(task_type="CAUSAL_LM", r=16, lora_alpha=32, target_modules=["q_proj", "v_proj"])),
    # dscpp: --lora r=4,target=c_attn (Conv1D: fan_in_fan_out)
    ("gpt2", lambda: GPT2LMHeadModel(GPT2Config(n_layer=2, n_embd=64, n_head=4, vocab_size=100, n_positions=32)),
     LoraConfig(task_type="CAUSAL_LM", r=4, target_modules=["c_attn"], fan_in_fan_out=True)),
    # dscpp: --lora r=4,target_regex=.*\.(q|v),rslora
    ("t5", lambda: T5ForConditionalGeneration(T5Config(d_model=32, d_kv=8, d_ff=64, num_layers=2, num_heads=4,
                                                       vocab_size=100)),
     LoraConfig(task_type="SEQ_2_SEQ_LM", r=4, target_modules=r".*\.(q|v)", use_rslora=True)),
]


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else HERE
    for name, model, config in CASES:
        torch.manual_seed(0)
        with tempfile.TemporaryDirectory() as tmp:
            get_peft_model(model(), config).save_pretrained(tmp)
            with open(os.path.join(tmp, "adapter_config.json")) as f:
                config = json.load(f)
        if isinstance(config["target_modules"], list):
            config["target_modules"] = sorted(config["target_modules"])
        os.makedirs(os.path.join(out, name), exist_ok=True)
        with open(os.path.join(out, name, "adapter_config.json"), "w") as f:
            f.write(json.dumps(config, indent=2, sort_keys=True))  # save_pretrained's formatting
        print("wrote", os.path.join(out, name, "adapter_config.json"))


if __name__ == "__main__":
    main()
