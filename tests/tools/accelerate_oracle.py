"""The DeepSpeed config Accelerate itself derives from a config file and `accelerate launch` flags.

Runs Accelerate's own code path: its launch parser, `_validate_launch_command` (file and flags
merged), `prepare_deepspeed_cmd_env` (the ACCELERATE_* variables the program receives), then, in
that environment, `DeepSpeedPlugin()` and `set_mixed_precision` as `AcceleratorState` calls it.
Prints one line: `config: {JSON}` (the plugin's deepspeed_config), or `error: MESSAGE` when
Accelerate refuses.

Two documented differences are applied, and only these: the plugin's `steps_per_print: inf`
(how Accelerate silences DeepSpeed's logging in Python) is left out, and the NVMe paths of the
config file or flags reach the plugin (Accelerate's launcher exports the offload devices but not
the paths, so the plugin would swap into a directory named "none").

    python accelerate_oracle.py CONFIG_FILE|- [accelerate launch flags ...]
"""
import json
import os
import sys
import types

import torch
import torch.amp

# accelerate 1.x imports torch.amp.GradScaler (torch >= 2.3) and asks torch.accelerator (torch
# >= 2.6) which device the machine has; the launch and plugin code used here needs nothing else of
# them, so Debian's torch 1.13 stands in with these two names: the scaler it has, and the answer a
# current torch gives on a machine without an accelerator.
if not hasattr(torch.amp, "GradScaler"):
    torch.amp.GradScaler = torch.cuda.amp.GradScaler
if not hasattr(torch, "accelerator"):
    torch.accelerator = types.SimpleNamespace(current_accelerator=lambda *a, **k: None, is_available=lambda: False)

from accelerate.commands.launch import _validate_launch_command, launch_command_parser  # noqa: E402
from accelerate.utils import DeepSpeedPlugin  # noqa: E402
from accelerate.utils.launch import prepare_deepspeed_cmd_env  # noqa: E402


def accelerate_config(config_file, flags):
    """("config", dict) as Accelerate derives it, or ("error", message) where it refuses."""
    argv = ([] if config_file is None else ["--config_file", config_file]) + flags + ["prog.py"]
    for key in [k for k in os.environ if k.startswith("ACCELERATE_")]:
        del os.environ[key]
    try:
        args = launch_command_parser().parse_args(argv)
        args, defaults, mp_from_config_flag = _validate_launch_command(args)
        if not args.use_deepspeed:
            return "error", "not a DeepSpeed launch"
        fields = list(defaults.deepspeed_config.keys()) if defaults else []
        if mp_from_config_flag:
            fields.append("mixed_precision")
        args.deepspeed_fields_from_accelerate_config = ",".join(fields)
        _, env = prepare_deepspeed_cmd_env(args)
        for name, var in [("offload_optimizer_nvme_path", "ACCELERATE_DEEPSPEED_OFFLOAD_OPTIMIZER_NVME_PATH"),
                          ("offload_param_nvme_path", "ACCELERATE_DEEPSPEED_OFFLOAD_PARAM_NVME_PATH")]:
            if getattr(args, name, None) is not None:
                env[var] = str(getattr(args, name))
        os.environ.update({k: v for k, v in env.items() if k.startswith("ACCELERATE_")})
        plugin = DeepSpeedPlugin()
        plugin.set_mixed_precision(os.environ.get("ACCELERATE_MIXED_PRECISION", "no"))
    except (ValueError, SystemExit) as e:
        return "error", str(e).replace("\n", " ")
    config = dict(plugin.deepspeed_config)
    config.pop("steps_per_print", None)
    return "config", config


def main():
    kind, value = accelerate_config(None if sys.argv[1] == "-" else sys.argv[1], sys.argv[2:])
    print(f"{kind}:", json.dumps(value) if kind == "config" else value)


if __name__ == "__main__":
    main()
