#!/usr/bin/env python3
"""Generate Hugging Face parity reference data for dscpp.

Usage: python make_parity.py OUT_DIR
       python make_parity.py --load-export MODEL_NAME EXPORT_DIR [--expect initial|after3]

Writes OUT_DIR/{llama_gqa,llama3_tied,gpt2,qwen2,mistral_swa}/ with
  config.json, model.safetensors   (save_pretrained of a tiny random model)
  tokens.bin                       (llm.c token file: B windows of T+1 uint16 ids)
  reference.safetensors            (input_ids, labels, logits, loss, grad.*,
                                    loss_step.*, after3.*)
See README.md next to this file for the exact conventions.

--load-export checks that EXPORT_DIR (an HF-format directory exported by dscpp
for MODEL_NAME, one of llama_gqa, llama3_tied, gpt2, qwen2, mistral_swa) loads with
AutoModelForCausalLM.from_pretrained without missing or unexpected tensors and
reproduces the reference data committed next to this file:
  --expect initial (default): the export holds the initial weights; logits must
      match reference `logits` (max abs diff <= 1e-5) and the loss `loss` (<= 1e-6).
  --expect after3: the export holds the weights after 3 AdamW steps; its loss on
      the reference batch must match (<= 1e-5) the loss of the committed model
      with the `after3.*` tensors loaded.
Prints one verdict line and exits 1 on failure.

Pinned environment: Python 3.11, torch 1.13 (CPU), transformers 4.44.2.
Run through make.sh, which sets that environment up.
"""

import argparse
import json
import math
import os
import shutil
import struct
import sys

import numpy as np
import torch
import torch.nn.functional as F
import transformers
from safetensors import safe_open
from safetensors.torch import load_file, save_file
from transformers import (
    AutoModelForCausalLM,
    GPT2Config,
    GPT2LMHeadModel,
    LlamaConfig,
    LlamaForCausalLM,
    MistralConfig,
    MistralForCausalLM,
    Qwen2Config,
    Qwen2ForCausalLM,
)

DOCUMENT_MODELS = ("llama_gqa", "gpt2", "mistral_swa")  # with the docs.* reference (documents_reference)

B = 4  # sequences per batch
T = 16  # tokens per sequence
VOCAB = 96
STEPS = 3
LR = 1e-2
BETAS = (0.9, 0.999)
EPS = 1e-8
WEIGHT_DECAY = 0.1

MODEL_SEED = 1234  # + per-model offset: weight init
PERTURB_SEED = 5678  # + per-model offset: 0.1*randn added to 1-D params
DATA_SEED = 9012  # + per-model offset: token windows

LLM_C_MAGIC = 20240520
LLM_C_VERSION_U16 = 1

LOSS_DEFINITION = (
    "mean over all B*T positions of cross_entropy(logits[b,t,:], labels[b,t]); "
    "labels[b,t] = window_b[t+1], input_ids[b,t] = window_b[t]; no further shift"
)


def llama_base(**overrides):
    kw = dict(
        vocab_size=VOCAB,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=64,
        rope_theta=10000.0,
        rms_norm_eps=1e-5,
        tie_word_embeddings=False,
        attention_bias=False,
        attention_dropout=0.0,
        mlp_bias=False,
        initializer_range=0.1,
        hidden_act="silu",
        attn_implementation="eager",
    )
    kw.update(overrides)
    return LlamaConfig(**kw)


# original_max_position_embeddings=8192 already puts the four head_dim-8
# frequencies into all three llama3 branches (kept, smoothed, divided), see
# check_llama3_branches(); no adjustment was needed.
LLAMA3_ROPE_SCALING = {
    "rope_type": "llama3",
    "factor": 8.0,
    "low_freq_factor": 1.0,
    "high_freq_factor": 4.0,
    "original_max_position_embeddings": 8192,
}

MODELS = [
    # (name, seed offset, config factory, model class)
    ("llama_gqa", 0, lambda: llama_base(), LlamaForCausalLM),
    (
        "llama3_tied",
        1,
        lambda: llama_base(
            tie_word_embeddings=True,
            rope_theta=500000.0,
            rope_scaling=dict(LLAMA3_ROPE_SCALING),
            num_key_value_heads=1,
        ),
        LlamaForCausalLM,
    ),
    (
        "gpt2",
        2,
        lambda: GPT2Config(
            vocab_size=VOCAB,
            n_embd=32,
            n_layer=2,
            n_head=4,
            n_positions=32,
            activation_function="gelu_new",
            layer_norm_epsilon=1e-5,
            resid_pdrop=0.0,
            embd_pdrop=0.0,
            attn_pdrop=0.0,
            summary_first_dropout=0.0,
            initializer_range=0.1,
            attn_implementation="eager",
        ),
        GPT2LMHeadModel,
    ),
    # Appended last so the seed offsets of the models above stay the same.
    # Qwen2: Llama layout plus biases on q_proj/k_proj/v_proj (none on o_proj).
    (
        "qwen2",
        3,
        lambda: Qwen2Config(
            vocab_size=VOCAB,
            hidden_size=32,
            intermediate_size=64,
            num_hidden_layers=2,
            num_attention_heads=4,
            num_key_value_heads=2,
            max_position_embeddings=64,
            rope_theta=10000.0,
            rms_norm_eps=1e-6,
            tie_word_embeddings=False,
            use_sliding_window=False,
            initializer_range=0.1,
            hidden_act="silu",
            attention_dropout=0.0,
            attn_implementation="eager",
        ),
        Qwen2ForCausalLM,
    ),
    # Mistral: the Llama layout with attention over a sliding window of 6 tokens, shorter than
    # the 16-token context (and than a generated sequence).
    (
        "mistral_swa",
        4,
        lambda: MistralConfig(
            vocab_size=VOCAB,
            hidden_size=32,
            intermediate_size=64,
            num_hidden_layers=2,
            num_attention_heads=4,
            num_key_value_heads=2,
            max_position_embeddings=64,
            rope_theta=10000.0,
            rms_norm_eps=1e-5,
            tie_word_embeddings=False,
            sliding_window=6,
            initializer_range=0.1,
            hidden_act="silu",
            attention_dropout=0.0,
            attn_implementation="eager",
        ),
        MistralForCausalLM,
    ),
]


def canonicalize_safetensors(path):
    """Rewrite the header of a safetensors file so its bytes are reproducible.

    safetensors serialises the __metadata__ map from a Rust HashMap, so the key
    order differs from run to run.  Re-emit the same JSON with the metadata keys
    sorted (tensor entries keep their order, which fixes the data layout), padded
    with spaces to the original header length.  The file content is unchanged.
    """
    with open(path, "rb") as f:
        blob = f.read()
    (n,) = struct.unpack("<Q", blob[:8])
    header = json.loads(blob[8 : 8 + n].decode("utf-8"))
    out = {}
    if "__metadata__" in header:
        out["__metadata__"] = dict(sorted(header["__metadata__"].items()))
    for k, v in header.items():
        if k != "__metadata__":
            out[k] = v
    text = json.dumps(out, separators=(",", ":"), ensure_ascii=True).encode("utf-8")
    assert len(text) <= n, (path, len(text), n)
    text = text + b" " * (n - len(text))
    with open(path, "wb") as f:
        f.write(blob[:8] + text + blob[8 + n :])
    # sanity: still loads, same metadata
    with safe_open(path, framework="pt") as f:
        md = f.metadata()
    assert md == header.get("__metadata__"), path


def write_tokens_bin(path, windows):
    """llm.c token file: 256 x int32 header, then uint16 tokens."""
    flat = windows.reshape(-1).astype("<u2")
    assert int(windows.max()) < 65536
    header = np.zeros(256, dtype="<i4")
    header[0] = LLM_C_MAGIC
    header[1] = LLM_C_VERSION_U16
    header[2] = flat.size
    with open(path, "wb") as f:
        f.write(header.tobytes())
        f.write(flat.tobytes())


def rope_inv_freqs(model):
    """The distinct inv_freq buffers of the model (name -> tensor)."""
    out = {}
    for name, buf in model.named_buffers():
        if name.endswith("inv_freq"):
            out[name] = buf.detach().clone()
    return out


def check_llama3_branches(config, inv_freq):
    """Verify that the llama3 rescaling hits all three branches."""
    head_dim = config.hidden_size // config.num_attention_heads
    base = config.rope_theta
    plain = 1.0 / (base ** (torch.arange(0, head_dim, 2, dtype=torch.int64).float() / head_dim))
    rs = config.rope_scaling
    old = rs["original_max_position_embeddings"]
    low_wl = old / rs["low_freq_factor"]
    high_wl = old / rs["high_freq_factor"]
    branches = []
    for f in plain.tolist():
        wl = 2 * math.pi / f
        if wl < high_wl:
            branches.append("kept")
        elif wl > low_wl:
            branches.append("divided")
        else:
            branches.append("smoothed")
    print(f"  llama3 rope: unscaled inv_freq = {[float(x) for x in plain]}")
    print(f"  llama3 rope: wavelengths      = {[2 * math.pi / float(x) for x in plain]}")
    print(f"  llama3 rope: band thresholds  = high_freq_wavelen {high_wl}, low_freq_wavelen {low_wl}")
    print(f"  llama3 rope: branches         = {branches}")
    print(f"  llama3 rope: scaled inv_freq  = {[float(x) for x in inv_freq]}")
    changed = int((inv_freq != plain).sum())
    print(f"  llama3 rope: {changed} of {plain.numel()} frequencies changed by the rescaling")
    assert changed >= 1, "llama3 rescaling changed no frequency"
    assert set(branches) == {"kept", "smoothed", "divided"}, branches


def build_model(name, offset, make_config, cls):
    config = make_config()
    torch.manual_seed(MODEL_SEED + offset)
    model = cls(config).to(torch.float32)
    assert model.config._attn_implementation == "eager", model.config._attn_implementation
    # HF initialises norm weights to 1 and biases to 0; perturb every 1-D
    # parameter so that a swapped/ignored bias or norm weight shows up.
    g = torch.Generator().manual_seed(PERTURB_SEED + offset)
    perturbed = []
    with torch.no_grad():
        for pname, p in model.named_parameters():
            if p.dim() == 1:
                p.add_(0.1 * torch.randn(p.shape, generator=g, dtype=torch.float32))
                perturbed.append(pname)
    return model, perturbed


def documents_reference(model, params, input_ids, labels):
    """The windows as packed documents: each ends at an end-of-document token (the most frequent
    input token, ties to the smaller id), which belongs to it. Every document goes through the
    model on its own (positions from 0, attention within it), so the loss and gradients are what
    a model that masks attention at document boundaries and restarts positions must give on the
    packed windows."""
    counts = torch.bincount(input_ids.reshape(-1))
    eod = int(torch.argmax(counts))  # the first of the largest counts
    assert counts[eod] >= 2, "too few end-of-document tokens"
    V = model.config.vocab_size
    rows = []
    for b in range(B):
        start = 0
        for t in range(T):
            if int(input_ids[b, t]) == eod or t == T - 1:
                rows.append(model(input_ids=input_ids[b : b + 1, start : t + 1], use_cache=False).logits[0])
                start = t + 1
    logits = torch.cat(rows).reshape(B, T, V)
    loss = F.cross_entropy(logits.reshape(-1, V), labels.reshape(-1))
    model.zero_grad(set_to_none=True)
    loss.backward()
    out = {"docs.eod": torch.tensor([eod], dtype=torch.int32), "docs.loss": loss.detach().reshape(1).clone()}
    for pname, p in params:
        out[f"docs.grad.{pname}"] = p.grad.detach().clone()
    model.zero_grad(set_to_none=True)
    print(f"  documents (end token {eod}, {int(counts[eod])} in the inputs): loss {float(loss):.7f}")
    return out


def make_one(out_root, name, offset, make_config, cls):
    print(f"== {name}")
    d = os.path.join(out_root, name)
    if os.path.isdir(d):
        shutil.rmtree(d)
    os.makedirs(d)

    model, perturbed = build_model(name, offset, make_config, cls)
    cfg = model.config
    nparams = sum(p.numel() for p in model.parameters())
    print(f"  class {cls.__name__}, parameters (tied counted once): {nparams}")
    print(f"  perturbed 1-D params: {len(perturbed)}")

    if isinstance(model, (LlamaForCausalLM, Qwen2ForCausalLM, MistralForCausalLM)):
        attn = model.model.layers[0].self_attn
        print(
            f"  config.head_dim = {getattr(cfg, 'head_dim', '(absent in this transformers version)')}, "
            f"attention.head_dim = {attn.head_dim}, num_key_value_groups = {attn.num_key_value_groups}"
        )
        inv = rope_inv_freqs(model)
        uniq = {}
        for bname, t in inv.items():
            key = tuple(t.tolist())
            uniq.setdefault(key, []).append(bname)
        for key, names in uniq.items():
            print(f"  inv_freq {list(key)}  ({len(names)} buffers, e.g. {names[0]})")
        assert len(uniq) == 1, "rotary embeddings disagree"
        if getattr(cfg, "rope_scaling", None) is not None:
            check_llama3_branches(cfg, next(iter(inv.values())))

    # ---- save model (config.json + model.safetensors) -------------------
    model.save_pretrained(d, safe_serialization=True)
    gen_cfg = os.path.join(d, "generation_config.json")
    if os.path.exists(gen_cfg):
        os.remove(gen_cfg)
    canonicalize_safetensors(os.path.join(d, "model.safetensors"))
    with open(os.path.join(d, "config.json")) as f:
        cfg_text = f.read()
    for bad in (out_root, os.path.abspath(out_root), "/tmp", "/home", "/work"):
        assert bad not in cfg_text, f"config.json mentions {bad!r}"
    with safe_open(os.path.join(d, "model.safetensors"), framework="pt") as f:
        saved = list(f.keys())
        saved_md = f.metadata()
    print(f"  model.safetensors metadata {saved_md}, {len(saved)} tensors: {saved}")

    # ---- data ------------------------------------------------------------
    g = torch.Generator().manual_seed(DATA_SEED + offset)
    windows = torch.randint(0, cfg.vocab_size, (B, T + 1), generator=g, dtype=torch.int64)
    write_tokens_bin(os.path.join(d, "tokens.bin"), windows.numpy())
    input_ids = windows[:, :T].contiguous()
    labels = windows[:, 1:].contiguous()

    # ---- reference: logits, loss, grads, 3 AdamW steps -----------------------
    model.train()  # all dropout probabilities are 0 anyway
    params = list(model.named_parameters())
    opt = torch.optim.AdamW(
        [p for _, p in params],
        lr=LR,
        betas=BETAS,
        eps=EPS,
        weight_decay=WEIGHT_DECAY,
        amsgrad=False,
        foreach=False,
        maximize=False,
    )
    ref = {
        "input_ids": input_ids.to(torch.int32),
        "labels": labels.to(torch.int32),
    }
    V = cfg.vocab_size
    if name in DOCUMENT_MODELS:
        ref.update(documents_reference(model, params, input_ids, labels))
    for step in range(STEPS):
        opt.zero_grad(set_to_none=True)
        logits = model(input_ids=input_ids, use_cache=False).logits
        assert logits.dtype == torch.float32 and logits.shape == (B, T, V)
        loss = F.cross_entropy(logits.reshape(-1, V), labels.reshape(-1))
        loss.backward()
        ref[f"loss_step.{step}"] = loss.detach().reshape(1).clone()
        if step == 0:
            ref["logits"] = logits.detach().clone()
            ref["loss"] = loss.detach().reshape(1).clone()
            for pname, p in params:
                ref[f"grad.{pname}"] = p.grad.detach().clone()
        opt.step()
    for pname, p in params:
        ref[f"after3.{pname}"] = p.detach().clone()
    for k, v in ref.items():
        assert v.dtype in (torch.float32, torch.int32), (k, v.dtype)
    ref = {k: v.contiguous() for k, v in sorted(ref.items())}

    metadata = {
        "batch": str(B),
        "context": str(T),
        "lr": repr(LR),
        "beta1": repr(BETAS[0]),
        "beta2": repr(BETAS[1]),
        "eps": repr(EPS),
        "weight_decay": repr(WEIGHT_DECAY),
        "steps": str(STEPS),
        "loss_definition": LOSS_DEFINITION,
    }
    ref_path = os.path.join(d, "reference.safetensors")
    save_file(ref, ref_path, metadata=metadata)
    canonicalize_safetensors(ref_path)

    losses = [float(ref[f"loss_step.{k}"]) for k in range(STEPS)]
    print(f"  loss {float(ref['loss']):.7f}  (ln V = {math.log(V):.7f}); losses per step {losses}")
    for fn in sorted(os.listdir(d)):
        print(f"  {fn:24s} {os.path.getsize(os.path.join(d, fn)):8d} bytes")


# ---- --load-export: check an HF directory exported by dscpp ----------------

LOGITS_TOL_INITIAL = 1e-5  # max |logits - reference logits|, --expect initial
LOSS_TOL_INITIAL = 1e-6  # |loss - reference loss|, --expect initial
LOSS_TOL_AFTER3 = 1e-5  # |loss - loss of the reference model with after3.*|, --expect after3


def safetensors_header(path):
    """name -> (dtype, shape) from a safetensors file header."""
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(n).decode("utf-8"))
    return {k: (v["dtype"], tuple(v["shape"])) for k, v in header.items() if k != "__metadata__"}


def export_tensor_files(export_dir):
    """name -> (file, dtype, shape) for every tensor of the export (single or sharded safetensors)."""
    single = os.path.join(export_dir, "model.safetensors")
    index = os.path.join(export_dir, "model.safetensors.index.json")
    if os.path.isfile(single):
        files = [single]
    elif os.path.isfile(index):
        with open(index) as f:
            weight_map = json.load(f)["weight_map"]
        files = [os.path.join(export_dir, fn) for fn in sorted(set(weight_map.values()))]
    else:
        raise SystemExit(f"load-export: no model.safetensors or model.safetensors.index.json in {export_dir}")
    out = {}
    for path in files:
        for name, (dtype, shape) in safetensors_header(path).items():
            if name in out:
                raise SystemExit(f"load-export: tensor {name} stored twice ({out[name][0]}, {path})")
            out[name] = (path, dtype, shape)
    return out


def read_export_tensor(files, name):
    path = files[name][0]
    with safe_open(path, framework="pt") as f:
        return f.get_tensor(name)


def load_checked(path, what, problems):
    """from_pretrained in float32/eager; record any loading problem (None if it raised)."""
    try:
        model, info = AutoModelForCausalLM.from_pretrained(
            path, torch_dtype=torch.float32, attn_implementation="eager", output_loading_info=True
        )
    except Exception as e:  # e.g. a shape mismatch raises instead of filling mismatched_keys
        msg = " ".join(str(e).split())
        problems.append(f"{what}: from_pretrained raised {type(e).__name__}: {msg}")
        return None
    # The committed reference directories load with all four lists empty,
    # tied models included (transformers does not report the tied
    # lm_head.weight as missing), so nothing is tolerated here.
    for key in ("missing_keys", "unexpected_keys", "mismatched_keys", "error_msgs"):
        if info.get(key):
            problems.append(f"{what}: from_pretrained reports {key} {list(info[key])}")
    model.eval()
    return model


def batch_logits_loss(model, input_ids, labels):
    with torch.no_grad():
        logits = model(input_ids=input_ids, use_cache=False).logits
    V = logits.shape[-1]
    loss = F.cross_entropy(logits.reshape(-1, V), labels.reshape(-1))
    return logits, float(loss)


def reference_after3_model(ref_dir, ref, problems):
    """The committed model with the after3.* parameters from reference.safetensors."""
    model = load_checked(ref_dir, f"reference {ref_dir}", problems)
    if model is None:
        raise SystemExit("load-export: " + problems[-1])
    sd = {k[len("after3.") :]: v for k, v in ref.items() if k.startswith("after3.")}
    res = model.load_state_dict(sd, strict=False)
    if res.unexpected_keys:
        problems.append(f"reference: after3 tensors not in the model: {list(res.unexpected_keys)}")
    # A tied head is stored once (as the input embedding): the missing key must
    # share its storage with a loaded one.
    state = model.state_dict()
    loaded_ptrs = {state[k].data_ptr() for k in sd if k in state}
    untied_missing = [k for k in res.missing_keys if state[k].data_ptr() not in loaded_ptrs]
    if untied_missing:
        problems.append(f"reference: parameters without an after3 tensor: {untied_missing}")
    params = dict(model.named_parameters())
    if set(params) != set(sd):
        problems.append(f"reference: after3 names {sorted(sd)} != parameters {sorted(params)}")
    for k, p in params.items():
        if k in sd and not torch.equal(p.detach(), sd[k]):
            problems.append(f"reference: {k} was not set to after3.{k}")
    return model


def load_export(name, export_dir, expect):
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    torch.set_default_dtype(torch.float32)
    if transformers.__version__ != "4.44.2":
        print("WARNING: transformers is not 4.44.2", file=sys.stderr)
    models = {m[0]: m[3] for m in MODELS}
    if name not in models:
        raise SystemExit(f"load-export: unknown model {name!r} (one of {', '.join(models)})")
    ref_dir = os.path.join(os.path.dirname(os.path.abspath(__file__)), name)
    ref = load_file(os.path.join(ref_dir, "reference.safetensors"))
    input_ids = ref["input_ids"].long()
    labels = ref["labels"].long()
    problems = []

    files = export_tensor_files(export_dir)
    model = load_checked(export_dir, f"export {export_dir}", problems)
    if model is None:
        print(f"load-export {name}: loading {export_dir} failed: FAILED (expect {expect})")
        for p in problems:
            print(f"  {p}")
        return 1
    if type(model) is not models[name]:
        problems.append(f"export loads as {type(model).__name__}, expected {models[name].__name__}")

    # Independent of what transformers reports: every parameter of the loaded
    # model must come from a tensor of the export, and every tensor of the
    # export must be part of the model's state dict.
    state_names = set(model.state_dict())
    param_names = [k for k, _ in model.named_parameters()]  # tied counted once
    not_in_export = [k for k in param_names if k not in files]
    if not_in_export:
        problems.append(f"parameters not in the export: {not_in_export}")
    not_in_model = [k for k in files if k not in state_names]
    if not_in_model:
        problems.append(f"export tensors the model does not have: {not_in_model}")
    non_f32 = sorted({files[k][1] for k in files} - {"F32"})
    if non_f32:
        print(f"load-export {name}: note: export holds {non_f32} tensors (loaded as float32)")
    # A tied head that is also stored must equal the embedding: transformers
    # keeps only one of the two.
    if model.config.tie_word_embeddings:
        emb = model.get_input_embeddings().weight
        emb_name = next(k for k, p in model.named_parameters() if p is emb)
        for head in getattr(model, "_tied_weights_keys", None) or []:
            if head in files and emb_name in files:
                if not torch.equal(read_export_tensor(files, head), read_export_tensor(files, emb_name)):
                    problems.append(f"tied {head} is stored and differs from {emb_name}")

    logits, loss = batch_logits_loss(model, input_ids, labels)
    if expect == "initial":
        want_logits = ref["logits"]
        want_loss = float(ref["loss"])
        loss_tol = LOSS_TOL_INITIAL
    else:
        ref_model = reference_after3_model(ref_dir, ref, problems)
        want_logits, want_loss = batch_logits_loss(ref_model, input_ids, labels)
        loss_tol = LOSS_TOL_AFTER3
        # Informational: how far the exported parameters are from after3.*.
        exported = dict(model.named_parameters())
        worst = (float("nan"), "-")
        for k, v in ref.items():
            pname = k[len("after3.") :]
            if k.startswith("after3.") and pname in exported and exported[pname].shape == v.shape:
                d = float((exported[pname].detach() - v).abs().max())
                if not d <= worst[0]:
                    worst = (d, pname)
        print(f"load-export {name}: max |param - after3| {worst[0]:.3g} ({worst[1]})")

    if logits.shape != want_logits.shape:
        problems.append(f"logits shape {tuple(logits.shape)} != {tuple(want_logits.shape)}")
        dmax = float("inf")
    else:
        dmax = float((logits - want_logits).abs().max())
    if expect == "initial" and not dmax <= LOGITS_TOL_INITIAL:
        problems.append(f"max |logits diff| {dmax:.3g} > {LOGITS_TOL_INITIAL:g}")
    if not abs(loss - want_loss) <= loss_tol:
        problems.append(f"loss {loss:.8g} vs {want_loss:.8g}: |diff| {abs(loss - want_loss):.3g} > {loss_tol:g}")

    line = (
        f"load-export {name}: loaded {len(files)} tensors, max |logits diff| {dmax:.3g}, "
        f"loss {loss:.8g} vs {want_loss:.8g}"
    )
    if problems:
        print(f"{line}: FAILED (expect {expect})")
        for p in problems:
            print(f"  {p}")
        return 1
    print(f"{line}: ok")
    return 0


def main():
    if len(sys.argv) >= 2 and sys.argv[1] == "--load-export":
        ap = argparse.ArgumentParser(prog="make_parity.py --load-export")
        ap.add_argument("model", choices=[m[0] for m in MODELS])
        ap.add_argument("export_dir")
        ap.add_argument("--expect", choices=["initial", "after3"], default="initial")
        args = ap.parse_args(sys.argv[2:])
        sys.exit(load_export(args.model, args.export_dir, args.expect))
    if len(sys.argv) != 2 or sys.argv[1].startswith("-"):
        print(__doc__, file=sys.stderr)
        sys.exit(2)
    out_root = sys.argv[1]
    os.makedirs(out_root, exist_ok=True)

    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    torch.set_default_dtype(torch.float32)
    print(f"torch {torch.__version__}, transformers {transformers.__version__}, numpy {np.__version__}")
    if transformers.__version__ != "4.44.2":
        print("WARNING: transformers is not 4.44.2; output will not match the committed data", file=sys.stderr)

    for name, offset, make_config, cls in MODELS:
        make_one(out_root, name, offset, make_config, cls)


if __name__ == "__main__":
    main()
