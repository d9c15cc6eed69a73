"""dscpp's DeepSpeed config from Accelerate config files and flags, against Accelerate's own.

Writes config files with Accelerate's own writers (ClusterConfig.to_yaml_file, write_basic_config)
for single-machine and hostfile multi-machine launches, every ZeRO stage with and without
offload, with and without a deepspeed_config_file, each with and without launch flags; for each,
compares the dictionary `dscpp config check --config_file` prints with the one Accelerate's
DeepSpeedPlugin builds (accelerate_oracle.py), and where Accelerate refuses, checks that dscpp
refuses naming the same variables. Prints a line per case; exits 1 on any difference.

    python accelerate_cases.py DSCPP WORKDIR
"""
import json
import os
import re
import subprocess
import sys

from accelerate_oracle import accelerate_config

from accelerate.commands.config.config_args import ClusterConfig
from accelerate.commands.config.default import write_basic_config

DSCPP, WORK = sys.argv[1], sys.argv[2]
failed = 0


def write_cluster(name, **fields):
    path = os.path.join(WORK, name + ".yaml")
    base = dict(compute_environment="LOCAL_MACHINE", distributed_type="DEEPSPEED", mixed_precision="no",
                use_cpu=True, debug=False, num_processes=2, machine_rank=0, num_machines=1,
                main_training_function="main", rdzv_backend="static", same_network=True, tpu_env=[],
                tpu_use_cluster=False, tpu_use_sudo=False, downcast_bf16="no", enable_cpu_affinity=False)
    base.update(fields)  # mixed_precision None: left out of the file, as `accelerate config` does beside a JSON
    ClusterConfig(**base).to_yaml_file(path)
    return path


def dscpp_config(config_file, flags):
    r = subprocess.run([DSCPP, "config", "check", "-q", "--config_file", config_file] + flags,
                       capture_output=True, text=True)
    line = next((l for l in r.stdout.splitlines() if l.startswith("effective deepspeed config: ")), None)
    if line is None:
        return "error", r.stderr.strip().splitlines()[-1] if r.stderr.strip() else f"exit {r.returncode}"
    if r.returncode != 0:  # derived, then refused by DeepSpeed's own rules (as DeepSpeed would refuse it)
        print(f"   (dscpp then refuses it as a DeepSpeed config: {r.stderr.strip().splitlines()[0]})")
    return "config", json.loads(line[len("effective deepspeed config: "):])


def check(name, config_file, flags=()):
    global failed
    want_kind, want = accelerate_config(config_file, list(flags))
    got_kind, got = dscpp_config(config_file, list(flags))
    if want_kind == "config" and got_kind == "config" and want == got:
        print(f"ok: {name}: {json.dumps(got)}")
        return
    if want_kind == "error" and got_kind == "error":
        # Accelerate names the variables it ignores beside a deepspeed_config_file, as a list.
        names = re.search(r"ignored: \[([^]]*)\]", want)
        expect = ", ".join(n.strip(" '") for n in names.group(1).split(",")) if names else ""
        if expect in got:
            print(f"ok: {name}: both refuse: {got}")
            return
        print(f"FAIL: {name}: Accelerate refuses naming [{expect}]; dscpp says: {got}")
    else:
        print(f"FAIL: {name}:\n  accelerate: {want_kind}: {json.dumps(want)}\n  dscpp:      {got_kind}: {json.dumps(got)}")
    failed = 1


ds_json = os.path.join(WORK, "ds_auto.json")
with open(ds_json, "w") as f:
    json.dump({"train_micro_batch_size_per_gpu": "auto", "gradient_accumulation_steps": "auto",
               "gradient_clipping": "auto",
               "zero_optimization": {"stage": "auto", "offload_optimizer": {"device": "auto", "nvme_path": "auto"},
                                     "offload_param": {"device": "auto", "nvme_path": "auto"},
                                     "stage3_gather_16bit_weights_on_model_save": "auto"},
               "bf16": {"enabled": "auto"}, "fp16": {"enabled": "auto"}}, f)
ds_fixed = os.path.join(WORK, "ds_fixed.json")
with open(ds_fixed, "w") as f:
    json.dump({"train_micro_batch_size_per_gpu": 4, "zero_optimization": {"stage": 1}, "fp16": {"enabled": True},
               "optimizer": {"type": "AdamW", "params": {"lr": 1e-4}}}, f)

for stage in range(4):
    for offload in ["none", "cpu", "nvme"]:
        if offload != "none" and stage < 2:
            continue
        ds = dict(zero_stage=stage, gradient_accumulation_steps=2, zero3_init_flag=stage == 3,
                  offload_optimizer_device=offload)
        if offload == "nvme":
            ds["offload_optimizer_nvme_path"] = "/nvme/opt"
        if stage == 3:
            ds.update(offload_param_device=offload, zero3_save_16bit_model=True)
            if offload == "nvme":
                ds["offload_param_nvme_path"] = "/nvme/param"
        for mp in ["no", "bf16"]:
            cfg = write_cluster(f"z{stage}_{offload}_{mp}", mixed_precision=mp, deepspeed_config=ds)
            check(f"stage {stage}, offload {offload}, {mp}", cfg)
        check(f"stage {stage}, offload {offload}, flags", cfg,
              ["--zero_stage", str(3 - stage), "--mixed_precision", "fp16", "--gradient_clipping", "0.5"])

multi = write_cluster("multi", num_machines=2, num_processes=4, main_process_ip="10.0.0.1", main_process_port=29600,
                      deepspeed_config=dict(zero_stage=2, deepspeed_hostfile=os.path.join(WORK, "hostfile"),
                                            deepspeed_multinode_launcher="pdsh", gradient_clipping=1.0))
check("two machines from a hostfile", multi)
check("two machines, flags", multi, ["--zero3_save_16bit_model", "true", "--gradient_accumulation_steps", "8"])

with_json = write_cluster("with_json", mixed_precision=None, deepspeed_config=dict(deepspeed_config_file=ds_json))
check("deepspeed_config_file, Accelerate's defaults fill auto", with_json)
check("deepspeed_config_file, flags fill auto", with_json,
      ["--zero_stage", "3", "--offload_param_device", "cpu", "--mixed_precision", "bf16",
       "--gradient_accumulation_steps", "4", "--gradient_clipping", "1.5", "--zero3_save_16bit_model", "true",
       "--offload_optimizer_device", "nvme", "--offload_optimizer_nvme_path", "/nvme/o"])
fixed = write_cluster("fixed_json", mixed_precision=None, deepspeed_config=dict(deepspeed_config_file=ds_fixed))
check("deepspeed_config_file, stated values stay", fixed, ["--zero_stage", "3", "--mixed_precision", "fp16"])
check("deepspeed_config_file, mixed precision against the JSON", fixed, ["--mixed_precision", "bf16"])
check("deepspeed_config_file beside zero_stage in the file",
      write_cluster("conflict", mixed_precision=None,
                    deepspeed_config=dict(deepspeed_config_file=ds_json, zero_stage=2)))
check("deepspeed_config_file beside mixed_precision in the file",
      write_cluster("conflict_mp", mixed_precision="bf16", deepspeed_config=dict(deepspeed_config_file=ds_json)))

basic = os.path.join(WORK, "basic.yaml")
write_basic_config("bf16", basic)
check("write_basic_config, --use_deepspeed", basic, ["--use_deepspeed", "--zero_stage", "1"])

sys.exit(failed)
