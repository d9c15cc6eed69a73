#!/usr/bin/env python3
"""Generate Hugging Face PEFT LoRA reference data for dscpp.

Usage: python make_lora.py OUT_DIR [BASE_DIR]

For each case of CASES, takes the tiny model BASE_DIR/<model>/ written by
make_parity.py (config.json, model.safetensors, tokens.bin; BASE_DIR defaults
to OUT_DIR), wraps it with PEFT's LoRA, sets every lora_A/lora_B to seeded
random non-zero values and writes OUT_DIR/lora/<case>/ with
  case.json                          (base model, dscpp LoRA spec, hyperparameters)
  adapter/adapter_config.json        (PeftModel.save_pretrained)
  adapter/adapter_model.safetensors  (PeftModel.save_pretrained)
  reference.safetensors              (input_ids, labels, loss, grad.*, sgd1.*,
                                      loss_sgd1, merged.*)
See the LoRA section of README.md next to this file for the exact conventions.

Pinned environment: Python 3.11, torch 1.13 (CPU), transformers 4.44.2,
peft 0.12.0 (installed --no-deps: its metadata asks for torch>=1.13.0, which
Debian's 1.13.0a0 does not satisfy). Run through make.sh, which sets that up.
"""

import json
import math
import os
import shutil
import sys

import numpy as np
import torch
import torch.nn.functional as F
import transformers
from safetensors import safe_open
from safetensors.torch import load_file, save_file
from transformers import AutoModelForCausalLM

import peft
from peft import LoraConfig, PeftModel, get_peft_model

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_parity import B, LLM_C_MAGIC, LLM_C_VERSION_U16, LOSS_DEFINITION, T, canonicalize_safetensors  # noqa: E402

PEFT_VERSION = "0.12.0"
LORA_SEED = 2468  # + case index: the lora_A/lora_B values
INIT_RANGE = 0.1  # lora_A, lora_B ~ U(-INIT_RANGE, INIT_RANGE)
SGD_LR = 1.0  # sgd1.* = adapter - SGD_LR * grad
BASE_DIR_IN_REPO = "tests/data/hf"  # where the base models live, relative to the repository root

LLAMA_ALL = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]

# (case, base model directory, LoraConfig arguments, dscpp --lora spelling)
CASES = [
    (
        "llama_qv",
        "llama_gqa",
        dict(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"]),
        "r=4,alpha=8,target=q_proj,v_proj",
    ),
    (
        "llama_all",
        "llama_gqa",
        dict(r=2, lora_alpha=16, use_rslora=True, target_modules=list(LLAMA_ALL)),
        "r=2,alpha=16,target=" + ",".join(LLAMA_ALL) + ",rslora",
    ),
    (
        # GPT-2's Conv1D layers store [in, out]: fan_in_fan_out=True. "c_proj" names both
        # attn.c_proj and mlp.c_proj, and PEFT adapts both.
        "gpt2_attn",
        "gpt2",
        dict(r=4, lora_alpha=8, target_modules=["c_attn", "c_proj"], fan_in_fan_out=True),
        "r=4,alpha=8,target=c_attn,c_proj",
    ),
    (
        # A string target_modules is a regex that must match the whole module name (re.fullmatch).
        "qwen2_regex",
        "qwen2",
        dict(r=4, lora_alpha=4, target_modules=r".*\.(q_proj|o_proj)"),
        r"r=4,alpha=4,target_regex=.*\.(q_proj|o_proj)",
    ),
]


def read_tokens_bin(path):
    """The B windows of T+1 ids of an llm.c token file written by make_parity.py."""
    with open(path, "rb") as f:
        blob = f.read()
    header = np.frombuffer(blob[: 256 * 4], dtype="<i4")
    assert header[0] == LLM_C_MAGIC and header[1] == LLM_C_VERSION_U16, header[:3]
    n = int(header[2])
    assert n == B * (T + 1), n
    toks = np.frombuffer(blob[256 * 4 :], dtype="<u2")
    assert toks.size == n, (toks.size, n)
    return torch.from_numpy(toks.astype(np.int64)).reshape(B, T + 1)


def load_base(model_dir):
    model = AutoModelForCausalLM.from_pretrained(
        model_dir, torch_dtype=torch.float32, attn_implementation="eager"
    )
    assert model.config._attn_implementation == "eager"
    model.train()  # every dropout probability is 0 (lora_dropout too)
    return model


def batch_loss(model, input_ids, labels):
    logits = model(input_ids=input_ids, use_cache=False).logits
    assert logits.dtype == torch.float32 and logits.shape[:2] == (B, T)
    V = logits.shape[-1]
    return F.cross_entropy(logits.reshape(-1, V), labels.reshape(-1))


def adapter_name(param_name):
    """PEFT parameter name -> the name in adapter_model.safetensors (adapter name dropped)."""
    for part in ("lora_A", "lora_B"):
        param_name = param_name.replace(f".{part}.default.", f".{part}.")
    return param_name


def make_case(out_root, base_root, index, case, base, lora_kwargs, spec):
    print(f"== lora/{case} (on {base})")
    d = os.path.join(out_root, "lora", case)
    if os.path.isdir(d):
        shutil.rmtree(d)
    os.makedirs(d)
    base_dir = os.path.join(base_root, base)

    windows = read_tokens_bin(os.path.join(base_dir, "tokens.bin"))
    input_ids = windows[:, :T].contiguous()
    labels = windows[:, 1:].contiguous()
    base_ref = load_file(os.path.join(base_dir, "reference.safetensors"))
    assert torch.equal(base_ref["input_ids"].long(), input_ids) and torch.equal(base_ref["labels"].long(), labels)
    with safe_open(os.path.join(base_dir, "model.safetensors"), framework="pt") as f:
        base_names = sorted(f.keys())

    # ---- the PEFT model ----------------------------------------------------
    config = LoraConfig(task_type="CAUSAL_LM", lora_dropout=0.0, bias="none", **lora_kwargs)
    torch.manual_seed(LORA_SEED + index)  # PEFT's own init (overwritten below)
    model = get_peft_model(load_base(base_dir), config)
    # The adapter config names the base model by its place in the repository, not by the
    # (temporary) directory it was loaded from.
    model.peft_config["default"].base_model_name_or_path = f"{BASE_DIR_IN_REPO}/{base}"
    lora_cfg = model.peft_config["default"]
    scaling = lora_cfg.lora_alpha / (math.sqrt(lora_cfg.r) if lora_cfg.use_rslora else lora_cfg.r)

    # With PEFT's init (lora_B = 0) the model is the base model: its loss must be the reference's.
    with torch.no_grad():
        loss0 = float(batch_loss(model, input_ids, labels))
    assert abs(loss0 - float(base_ref["loss"])) <= 1e-6, (loss0, float(base_ref["loss"]))

    lora_params = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
    assert lora_params and all(".lora_A.default." in n or ".lora_B.default." in n for n, _ in lora_params), [
        n for n, _ in lora_params
    ]
    g = torch.Generator().manual_seed(LORA_SEED + index)
    with torch.no_grad():
        for _, p in lora_params:
            p.copy_((torch.rand(p.shape, generator=g, dtype=torch.float32) * 2 - 1) * INIT_RANGE)
    adapted = [n for n, m in model.base_model.model.named_modules() if isinstance(m, peft.tuners.lora.LoraLayer)]
    for n in adapted:
        m = model.base_model.model.get_submodule(n)
        assert math.isclose(m.scaling["default"], scaling), (n, m.scaling, scaling)
    print(f"  adapted modules ({len(adapted)}): {adapted}")
    print(f"  scaling {scaling!r}, {sum(p.numel() for _, p in lora_params)} LoRA parameters")

    # ---- adapter/ ------------------------------------------------------------
    adir = os.path.join(d, "adapter")
    model.save_pretrained(adir, safe_serialization=True)
    readme = os.path.join(adir, "README.md")  # PEFT's model card template: not needed
    if os.path.exists(readme):
        os.remove(readme)
    # adapter_config.json holds target_modules as list(set): sort it, the order is the hash's.
    cpath = os.path.join(adir, "adapter_config.json")
    with open(cpath) as f:
        cfg_json = json.load(f)
    if isinstance(cfg_json.get("target_modules"), list):
        cfg_json["target_modules"] = sorted(cfg_json["target_modules"])
    with open(cpath, "w") as f:
        f.write(json.dumps(cfg_json, indent=2, sort_keys=True))
    with open(cpath) as f:
        cfg_text = f.read()
    for bad in (os.path.abspath(out_root), os.path.abspath(base_root), "/tmp", "/home", "/work"):
        assert bad not in cfg_text, f"adapter_config.json mentions {bad!r}"
    apath = os.path.join(adir, "adapter_model.safetensors")
    canonicalize_safetensors(apath)
    assert sorted(os.listdir(adir)) == ["adapter_config.json", "adapter_model.safetensors"], os.listdir(adir)
    adapter = load_file(apath)
    want = {adapter_name(n): p.detach() for n, p in lora_params}
    assert sorted(adapter) == sorted(want), (sorted(adapter), sorted(want))
    for k, v in adapter.items():
        assert torch.equal(v, want[k]), k

    # ---- loss and gradients ------------------------------------------------------
    model.zero_grad(set_to_none=True)
    loss = batch_loss(model, input_ids, labels)
    loss.backward()
    ref = {
        "input_ids": input_ids.to(torch.int32),
        "labels": labels.to(torch.int32),
        "loss": loss.detach().reshape(1).clone(),
    }
    for n, p in lora_params:
        name = adapter_name(n)
        assert p.grad is not None and bool((p.grad != 0).any()), f"zero gradient for {name}"
        ref[f"grad.{name}"] = p.grad.detach().clone()
        ref[f"sgd1.{name}"] = (p.detach() - SGD_LR * p.grad.detach()).clone()
    model.zero_grad(set_to_none=True)

    # The adapter as saved reproduces the loss when loaded into a fresh base model.
    with torch.no_grad():
        reloaded = PeftModel.from_pretrained(load_base(base_dir), adir)
        loss_reloaded = float(batch_loss(reloaded, input_ids, labels))
        assert loss_reloaded == float(loss), (loss_reloaded, float(loss))
        # The loss after one SGD step of lr 1 (the adapter replaced by sgd1.*).
        params = dict(reloaded.named_parameters())
        for n, _ in lora_params:
            params[n].copy_(ref[f"sgd1.{adapter_name(n)}"])
        ref["loss_sgd1"] = batch_loss(reloaded, input_ids, labels).detach().reshape(1).clone()
    del reloaded

    # ---- merge_and_unload ------------------------------------------------------------
    merged = model.merge_and_unload()
    assert not any(isinstance(m, peft.tuners.lora.LoraLayer) for m in merged.modules())
    state = merged.state_dict()
    tied = set(merged._tied_weights_keys or []) if merged.config.tie_word_embeddings else set()
    names = sorted(k for k in state if k not in tied)
    assert names == base_names, (names, base_names)
    for k in names:
        ref[f"merged.{k}"] = state[k].detach().clone()
    with torch.no_grad():
        loss_merged = float(batch_loss(merged, input_ids, labels))
    assert abs(loss_merged - float(loss)) <= 1e-5, (loss_merged, float(loss))
    base_sd = load_file(os.path.join(base_dir, "model.safetensors"))
    changed = sorted(k for k in names if not torch.equal(state[k], base_sd[k]))
    assert len(changed) == len(adapted), (changed, adapted)
    print(f"  merged: {len(names)} tensors, {len(changed)} changed; loss of the merged model {loss_merged:.7f}")

    for k, v in ref.items():
        assert v.dtype in (torch.float32, torch.int32), (k, v.dtype)
    ref = {k: v.contiguous() for k, v in sorted(ref.items())}
    metadata = {
        "batch": str(B),
        "context": str(T),
        "sgd_lr": repr(SGD_LR),
        "loss_definition": LOSS_DEFINITION,
    }
    ref_path = os.path.join(d, "reference.safetensors")
    save_file(ref, ref_path, metadata=metadata)
    canonicalize_safetensors(ref_path)

    # ---- case.json -------------------------------------------------------------------
    case_json = {
        "case": case,
        "base_model": base,
        "base_dir": f"{BASE_DIR_IN_REPO}/{base}",
        "lora_spec": spec,
        "r": lora_cfg.r,
        "lora_alpha": lora_cfg.lora_alpha,
        "use_rslora": bool(lora_cfg.use_rslora),
        "scaling": scaling,
        "target_modules": lora_kwargs["target_modules"],
        "target_modules_is_regex": isinstance(lora_kwargs["target_modules"], str),
        "fan_in_fan_out": bool(lora_cfg.fan_in_fan_out),
        "lora_dropout": lora_cfg.lora_dropout,
        "bias": lora_cfg.bias,
        "adapted_modules": adapted,
        "init": f"every lora_A and lora_B ~ U(-{INIT_RANGE}, {INIT_RANGE}): "
        f"(torch.rand(shape, generator) * 2 - 1) * {INIT_RANGE}, one torch.Generator seeded "
        f"{LORA_SEED + index}, parameters in model order",
        "batch": B,
        "context": T,
        "sgd_lr": SGD_LR,
        "peft_version": peft.__version__,
        "transformers_version": transformers.__version__,
    }
    with open(os.path.join(d, "case.json"), "w") as f:
        f.write(json.dumps(case_json, indent=2) + "\n")

    print(f"  loss {float(loss):.7f} (base model {float(base_ref['loss']):.7f}); "
          f"after one SGD step of lr {SGD_LR}: {float(ref['loss_sgd1']):.7f}")
    for root, _, files in sorted(os.walk(d)):
        for fn in sorted(files):
            p = os.path.join(root, fn)
            print(f"  {os.path.relpath(p, d):36s} {os.path.getsize(p):8d} bytes")


def main():
    if len(sys.argv) not in (2, 3) or sys.argv[1].startswith("-"):
        print(__doc__, file=sys.stderr)
        sys.exit(2)
    out_root = sys.argv[1]
    base_root = sys.argv[2] if len(sys.argv) == 3 else out_root
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    torch.set_default_dtype(torch.float32)
    print(f"torch {torch.__version__}, transformers {transformers.__version__}, peft {peft.__version__}")
    if transformers.__version__ != "4.44.2" or peft.__version__ != PEFT_VERSION:
        print("WARNING: not transformers 4.44.2 and peft 0.12.0; output will not match the committed data",
              file=sys.stderr)
    for index, (case, base, lora_kwargs, spec) in enumerate(CASES):
        make_case(out_root, base_root, index, case, base, lora_kwargs, spec)


if __name__ == "__main__":
    main()
