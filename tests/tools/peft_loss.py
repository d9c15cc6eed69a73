"""The loss PEFT gives a base model with an adapter, on a reference batch.

Usage: peft_loss.py BASE_DIR ADAPTER_DIR REFERENCE.safetensors
Loads BASE_DIR with transformers (fp32, eager attention) and ADAPTER_DIR with
PeftModel.from_pretrained, runs the reference's input_ids and prints the mean cross entropy
against its labels (the last line), as the LoRA parity test's oracle for an adapter dscpp wrote.
"""
import sys

import torch
import torch.nn.functional as F
from peft import PeftModel
from safetensors.torch import load_file
from transformers import AutoModelForCausalLM


def main():
    base_dir, adapter_dir, reference = sys.argv[1:4]
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_pretrained(base_dir, torch_dtype=torch.float32, attn_implementation="eager")
    model = PeftModel.from_pretrained(model, adapter_dir)
    model.eval()
    ref = load_file(reference)
    input_ids, labels = ref["input_ids"].long(), ref["labels"].long()
    with torch.no_grad():
        logits = model(input_ids=input_ids, use_cache=False).logits
    loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), labels.reshape(-1))
    print(f"{float(loss):.6f}")


if __name__ == "__main__":
    main()
