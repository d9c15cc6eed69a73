"""dscpp's decisions against DeepSpeed's own code, run here (no copied vectors):

1. fp16 dynamic loss scaling: the scale (and hysteresis) after every step of many overflow
   patterns, dscpp's LossScaler (through ds_rule_trace, from a config file) against
   DynamicLossScaler.update_scale (ZeRO stages 1-3, built as the ZeRO optimizers build it) and
   FP16_Optimizer / FP16_UnfusedOptimizer._update_scale (stage 0).
2. The precision mixes: fp32/fp16/bf16 x data_types.grad_accum_dtype x ZeRO stage, accepted or
   refused by dscpp's config check against DeepSpeedEngine._do_optimizer_sanity_check, and the
   gradient accumulation dtype of those accepted against DeepSpeedEngine.get_data_types.

Usage: ds_rules.py DS_RULE_TRACE  (in a venv with deepspeed; tests/system/ds_rules.sh)
"""
import json
import os
import socket
import subprocess
import sys
import tempfile
from types import SimpleNamespace

import torch
import deepspeed
import torch.distributed as tdist
from deepspeed.runtime.config import get_float16_config
from deepspeed.runtime.engine import DeepSpeedEngine
from deepspeed.runtime.fp16.fused_optimizer import FP16_Optimizer
from deepspeed.runtime.fp16.loss_scaler import CreateLossScaler, LossScaleConfig, LossScaleProfile
from deepspeed.runtime.fp16.unfused_optimizer import FP16_UnfusedOptimizer

TRACE = sys.argv[1]
WORK = tempfile.mkdtemp(prefix="dscpp_ds_rules.")
failures = []


def one_process_group():
    # DynamicLossScaler asks deepspeed.comm for the rank. Building DeepSpeed's shared-memory
    # op needs torch's C++ headers, which Debian's torch lacks and a one-rank group never uses.
    deepspeed.ops.__compatible_ops__["deepspeed_shm_comm"] = False
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    tdist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=0, world_size=1)
    deepspeed.init_distributed(dist_backend="gloo")


def trace(mode, config, *extra):
    path = os.path.join(WORK, "config.json")
    with open(path, "w") as f:
        json.dump(config, f)
    r = subprocess.run([TRACE, mode, path, *extra], capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"ds_rule_trace {mode} {json.dumps(config)} {' '.join(extra)}: {r.stderr}")
    return r.stdout.split("\n")[:-1]


# ---- 1. loss scaling --------------------------------------------------------------------


def deepspeed_zero_sequence(fp16, pattern):
    # What the engine hands Stage1And2ZeroOptimizer / DeepSpeedZeroOptimizer_Stage3.
    c = get_float16_config({"fp16": fp16})
    scaler = CreateLossScaler(dtype=torch.half, static_loss_scale=c.loss_scale,
                              dynamic_scaling=c.loss_scale == 0, dynamic_loss_args=c.dynamic_loss_scale_args())
    out = []
    for step in pattern:
        try:
            scaler.update_scale(step == "X")
        except Exception as e:
            if "minimum" not in str(e):
                raise
            out.append("raise")
            break
        out.append(f"{float(scaler.cur_scale)!r} {scaler.cur_hysteresis}")
    return out


def deepspeed_stage0_sequence(fp16, pattern, optimizer_class, profile):
    # What DeepSpeedEngine._configure_fp16_optimizer builds; _update_scale reads nothing else.
    c = get_float16_config({"fp16": fp16})
    config = LossScaleConfig(low_precision_dtype=torch.half, dynamic_loss_scale=c.loss_scale == 0,
                             static_loss_scale=c.loss_scale, dynamic_loss_args=c.dynamic_loss_scale_args(),
                             profile=profile, initial_dynamic_scale=c.initial_dynamic_scale())
    holder = SimpleNamespace(loss_scale_config=config, verbose=False)
    out = []
    for step in pattern:
        optimizer_class._update_scale(holder, step == "X")
        out.append(repr(float(config.cur_scale)))
    return out


PATTERNS = {
    "clean": "." * 40,
    "isolated": "...X........X.....X..........X....",
    "bursts": "..XXX..........XX.............XXXX..........",
    "overflow at step 0": "X..........X...........",
    "alternating": ".X.X.X.X........X.X........",
}
LOSS_CASES = []
for name, pattern in PATTERNS.items():
    for window in (1, 4, 5):
        LOSS_CASES.append((name, {"loss_scale_window": window, "hysteresis": 1}, pattern))
        for consecutive in (False, True):
            LOSS_CASES.append((name, {"loss_scale_window": window, "hysteresis": 2,
                                      "consecutive_hysteresis": consecutive}, pattern))
LOSS_CASES.append(("hysteresis 3 bursts", {"loss_scale_window": 3, "hysteresis": 3}, PATTERNS["bursts"]))
LOSS_CASES.append(("hysteresis 3 consecutive", {"loss_scale_window": 3, "hysteresis": 3,
                                                "consecutive_hysteresis": True}, "XX.XX.XXX...XXX....."))
for hysteresis in (1, 2):
    for consecutive in (False, True):
        reach_min = {"initial_scale_power": 3, "min_loss_scale": 1, "loss_scale_window": 3,
                     "hysteresis": hysteresis, "consecutive_hysteresis": consecutive}
        LOSS_CASES.append(("min scale reached", reach_min, "XX....X.XXXXXXXX"))
        LOSS_CASES.append(("min scale, off-grid", {**reach_min, "min_loss_scale": 3}, "X.X......XXX"))
LOSS_CASES.append(("min scale left again", {"initial_scale_power": 1, "min_loss_scale": 1, "loss_scale_window": 2,
                                            "hysteresis": 2}, "X.X.....X.X.......XXXX"))


def check_loss_scaling():
    compared = 0
    for name, keys, pattern in LOSS_CASES:
        fp16 = {"enabled": True, "initial_scale_power": 16, **keys}
        for stage in (0, 1, 2, 3):
            config = {"train_batch_size": 1, "fp16": fp16, "zero_optimization": {"stage": stage}}
            ours = trace("loss-scale", config, pattern)
            label = f"loss scale, stage {stage}, {name}, {json.dumps(keys)}, {pattern}"
            if stage > 0:
                theirs = deepspeed_zero_sequence(fp16, pattern)
                want = [("raise" if x == "raise" else f"{float(x.split()[0])!r} {x.split()[1]}") for x in ours]
            else:
                want = [("raise" if x == "raise" else repr(float(x.split()[0]))) for x in ours]
                theirs = deepspeed_stage0_sequence(fp16, pattern, FP16_Optimizer, LossScaleProfile.FUSED)
                unfused = deepspeed_stage0_sequence(fp16, pattern, FP16_UnfusedOptimizer, LossScaleProfile.UNFUSED)
                if unfused != theirs:
                    failures.append(f"{label}: DeepSpeed's fused and unfused rules differ: {theirs} / {unfused}")
            compared += 1
            if want != theirs:
                failures.append(f"{label}:\n    dscpp     {want}\n    DeepSpeed {theirs}")
    print(f"loss scaling: {compared} sequences compared")


# ---- 2. precision mixes -----------------------------------------------------------------


def deepspeed_precision(model, accum, stage, offload=False, compute_grad_norm=True):
    engine = SimpleNamespace(
        _config=SimpleNamespace(grad_accum_dtype=accum),
        fp16_enabled=lambda: model == "fp16",
        bfloat16_enabled=lambda: model == "bf16",
        zero_optimization=lambda: stage > 0,
        zero_optimization_stage=lambda: stage,
        zero_allow_untested_optimizer=lambda: False,
        zero_cpu_offload=lambda: offload,
        zero_compute_grad_norm=lambda: compute_grad_norm,
        pipeline_parallelism=False,
        global_rank=0,
    )
    engine.get_data_types = lambda: DeepSpeedEngine.get_data_types(engine)
    optimizer = torch.optim.Adam([torch.nn.Parameter(torch.zeros(1))])
    try:
        DeepSpeedEngine._do_optimizer_sanity_check(engine, optimizer)
    # DeepSpeed refuses a mix by raising one of these: the verdict the test compares, not a gap.
    except (NotImplementedError, ValueError):
        return "refused"
    names = {torch.float32: "fp32", torch.float16: "fp16", torch.bfloat16: "bf16"}
    return "accepted " + names[engine.get_data_types()[1]]


def check_precision():
    compared = 0
    for model in ("fp32", "fp16", "bf16"):
        for accum in (None, "fp32", "fp16", "bf16"):
            for stage in (0, 1, 2, 3):
                variants = [(False, True)]
                if model == "bf16" and accum == "fp32" and stage == 1:
                    variants = [(False, True), (False, False), (True, False)]
                for offload, compute_grad_norm in variants:
                    zero = {"stage": stage}
                    if offload:
                        zero["offload_optimizer"] = {"device": "cpu"}
                    if not compute_grad_norm:
                        zero["compute_grad_norm"] = False
                    config = {"train_batch_size": 1, "zero_optimization": zero}
                    if model != "fp32":
                        config[model] = {"enabled": True}
                    if accum is not None:
                        config["data_types"] = {"grad_accum_dtype": accum}
                    ours = trace("precision", config)
                    decision = ours[0] if ours[0].startswith("accepted") else "refused"
                    theirs = deepspeed_precision(model, accum, stage, offload, compute_grad_norm)
                    compared += 1
                    if decision != theirs:
                        failures.append(f"precision {json.dumps(config)}: dscpp {ours}, DeepSpeed {theirs}")
    print(f"precision mixes: {compared} configs compared")


one_process_group()
check_loss_scaling()
check_precision()
for f in failures:
    print("FAIL:", f)
print(f"ds_rules: {len(failures)} difference(s) from DeepSpeed {deepspeed.__version__}")
sys.exit(1 if failures else 0)
