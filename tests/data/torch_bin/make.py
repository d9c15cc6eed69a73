#!/usr/bin/env python3
"""Writes the torch.save files of tests/unit/test_torch_file.cpp into this directory.

  /opt/dscpp-hf-venv/bin/python tests/data/torch_bin/make.py [OUT_DIR]

Needs torch (Debian's 1.13 here) and safetensors. What it writes:

  state_dict.bin         torch.save(sd) in the zip format (torch >= 1.6), sd = a module's
                         state_dict() (an OrderedDict with its _metadata attribute) plus views:
                         float32, float16, bfloat16, float64 and 0-dim tensors; a tied weight (two
                         names of one parameter); two slices of one storage; a view with a storage
                         offset; a transposed and a permuted (non-contiguous) view; an int64 and a
                         bool tensor (listed, not readable as weights)
  state_dict_zip64.bin   state_dict.bin with its directory in ZIP64's records (as torch writes
                         files over 4 GiB): every size and offset in the ZIP64 extra fields
  state_dict_legacy.bin  the same dict in the legacy format (_use_new_zipfile_serialization=False);
                         its storage keys are Python object ids, so it differs on every run
  expected.safetensors   every float tensor of sd as contiguous float32: what a reader must give
  sharded/               two shards of pytorch_model-0000K-of-00002.bin and the
                         pytorch_model.bin.index.json naming them, as save_pretrained writes them
  single/                pytorch_model.bin alone
  both/                  model.safetensors and pytorch_model.bin with other values (the
                         safetensors file is the one read)
  evil/                  pickles that must be refused: os.system (GLOBAL + REDUCE), builtins.eval
                         (STACK_GLOBAL, protocol 4), __builtin__.getattr (legacy format), a REDUCE
                         of torch.FloatStorage, NEWOBJ, a storage offset past its storage, a storage
                         the archive lacks
"""
import collections
import io
import json
import os
import pickle
import struct
import sys
import zipfile

import torch
from safetensors.torch import save_file

OUT = sys.argv[1] if len(sys.argv) > 1 else os.path.dirname(os.path.abspath(__file__))


class Tiny(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = torch.nn.Embedding(5, 3)
        self.lin = torch.nn.Linear(3, 4)
        self.head = torch.nn.Linear(3, 5, bias=False)
        self.head.weight = self.emb.weight  # tied: one parameter, two names


def state_dict():
    torch.manual_seed(7)
    sd = Tiny().state_dict()
    assert hasattr(sd, "_metadata")
    sd["half"] = torch.randn(6).half()
    sd["bf16"] = torch.randn(2, 3).bfloat16()
    sd["double"] = torch.randn(4, dtype=torch.float64)
    sd["scalar"] = torch.tensor(2.5)
    base = torch.randn(5, 4)
    sd["shared.first"] = base[:2]  # two slices of one storage
    sd["shared.second"] = base[2:]  # storage offset 8
    sd["view"] = torch.randn(10)[3:8]  # storage offset 3
    sd["transposed"] = torch.randn(3, 5).t()  # [5, 3], strides (1, 5)
    sd["permuted"] = torch.randn(4, 3, 2).half().permute(2, 0, 1)[:, 1:]  # [2, 3, 3], offset 6
    sd["steps"] = torch.arange(3, dtype=torch.int64)
    sd["mask"] = torch.tensor([True, False])
    return sd


def write_zip(path, pickle_bytes, storages):
    """An archive as torch.save lays it out, from a pickle and raw storages by key."""
    with zipfile.ZipFile(path, "w", zipfile.ZIP_STORED) as z:
        z.writestr("archive/data.pkl", pickle_bytes)
        for key, data in storages.items():
            z.writestr("archive/data/" + key, data)
        z.writestr("archive/version", "3\n")


def to_zip64(src, dst):
    """The archive again with its central directory in ZIP64's records."""
    data = open(src, "rb").read()
    end = data.rfind(b"PK\x05\x06")
    dir_offset = struct.unpack_from("<I", data, end + 16)[0]
    central = b""
    for i in zipfile.ZipFile(src).infolist():
        name = i.filename.encode()
        extra = struct.pack("<HHQQQ", 1, 24, i.file_size, i.compress_size, i.header_offset)
        central += struct.pack("<IHHHHHHIIIHHHHHII", 0x02014B50, 45, 45, i.flag_bits, i.compress_type, 0, 0x21,
                               i.CRC, 0xFFFFFFFF, 0xFFFFFFFF, len(name), len(extra), 0, 0, 0, 0, 0xFFFFFFFF)
        central += name + extra
    count = len(zipfile.ZipFile(src).infolist())
    zip64_end = dir_offset + len(central)
    with open(dst, "wb") as f:
        f.write(data[:dir_offset] + central)
        f.write(struct.pack("<IQHHIIQQQQ", 0x06064B50, 44, 45, 45, 0, 0, count, count, len(central), dir_offset))
        f.write(struct.pack("<IIQI", 0x07064B50, 0, zip64_end, 1))
        f.write(struct.pack("<IHHHHIIH", 0x06054B50, 0, 0, 0xFFFF, 0xFFFF, 0xFFFFFFFF, 0xFFFFFFFF, 0))


def legacy_prefix():
    out = io.BytesIO()
    for obj in (0x1950A86A20F9469CFC6C, 1001,
                {"protocol_version": 1001, "little_endian": True, "type_sizes": {"short": 2, "int": 4, "long": 4}}):
        pickle.dump(obj, out, protocol=2)
    return out.getvalue()


class FakeStorage:
    def __init__(self, key, numel):
        self.key, self.numel = key, numel


class FakeTensor:
    """Pickles as torch's _rebuild_tensor_v2 call, with any offset, size and stride."""

    def __init__(self, storage, offset, size, stride):
        self.args = (storage, offset, size, stride)

    def __reduce__(self):
        return (torch._utils._rebuild_tensor_v2, self.args + (False, collections.OrderedDict()))


def crafted(obj):
    out = io.BytesIO()
    p = pickle.Pickler(out, protocol=2)
    p.persistent_id = lambda o: (
        ("storage", torch.FloatStorage, o.key, "cpu", o.numel) if isinstance(o, FakeStorage) else None)
    p.dump(obj)
    return out.getvalue()


def evil(d):
    os.makedirs(d, exist_ok=True)
    four_floats = bytes(16)
    # GLOBAL os.system, REDUCE ('echo pwned',): what a malicious pytorch_model.bin does.
    write_zip(f"{d}/os_system.bin", b"\x80\x02cos\nsystem\nq\x00X\x0a\x00\x00\x00echo pwnedq\x01\x85q\x02Rq\x03.",
              {})
    # STACK_GLOBAL of builtins.eval (protocol 4, framed).
    code = b"__import__('os').system('echo pwned')"
    body = b"\x8c\x08builtins\x94\x8c\x04eval\x94\x93\x94\x8c" + bytes([len(code)]) + code + b"\x94\x85\x94R\x94."
    write_zip(f"{d}/builtins_eval.bin", b"\x80\x04\x95" + len(body).to_bytes(8, "little") + body, {})
    # The legacy format, its main pickle calling __builtin__.getattr (Python 2's name).
    with open(f"{d}/getattr_legacy.bin", "wb") as f:
        f.write(legacy_prefix() + b"\x80\x02c__builtin__\ngetattr\nq\x00N\x8c\x04evil\x86R.")
    # A REDUCE of a name the reader accepts, but as a value: torch.FloatStorage is never called.
    write_zip(f"{d}/reduce_storage.bin", b"\x80\x02ctorch\nFloatStorage\nK\x04\x85R.", {})
    # NEWOBJ builds an object of a class.
    write_zip(f"{d}/newobj.bin", b"\x80\x02ccollections\nOrderedDict\n)\x81.", {})
    # A tensor reaching past its storage: 4 floats, the view [3] at offset 2 needs 5.
    s = FakeStorage("0", 4)
    write_zip(f"{d}/offset_out_of_range.bin", crafted({"w": FakeTensor(s, 2, (3,), (1,))}), {"0": four_floats})
    # A stride past the storage: [2, 2] with stride (3, 1) reaches element 4.
    write_zip(f"{d}/stride_out_of_range.bin", crafted({"w": FakeTensor(s, 0, (2, 2), (3, 1))}), {"0": four_floats})
    # The pickle names storage "1", which the archive does not hold.
    write_zip(f"{d}/missing_storage.bin", crafted({"w": FakeTensor(FakeStorage("1", 4), 0, (4,), (1,))}),
              {"0": four_floats})


def main():
    os.makedirs(OUT, exist_ok=True)
    sd = state_dict()
    torch.save(sd, f"{OUT}/state_dict.bin")
    torch.save(sd, f"{OUT}/state_dict_legacy.bin", _use_new_zipfile_serialization=False)
    to_zip64(f"{OUT}/state_dict.bin", f"{OUT}/state_dict_zip64.bin")
    again = torch.load(f"{OUT}/state_dict_zip64.bin")
    assert all(torch.equal(again[k], v) for k, v in sd.items())
    save_file({k: v.float().clone().contiguous() for k, v in sd.items() if v.is_floating_point()},
              f"{OUT}/expected.safetensors")

    torch.manual_seed(11)
    shards = [{"a.weight": torch.randn(3, 2), "a.bias": torch.randn(3)},
              {"b.weight": torch.randn(2, 3).half()}]
    os.makedirs(f"{OUT}/sharded", exist_ok=True)
    weight_map = {}
    for i, shard in enumerate(shards):
        name = f"pytorch_model-{i + 1:05d}-of-{len(shards):05d}.bin"
        torch.save(shard, f"{OUT}/sharded/{name}")
        weight_map.update({k: name for k in shard})
    total = sum(t.numel() * t.element_size() for s in shards for t in s.values())
    with open(f"{OUT}/sharded/pytorch_model.bin.index.json", "w") as f:
        json.dump({"metadata": {"total_size": total}, "weight_map": weight_map}, f, indent=2)
        f.write("\n")
    save_file({k: v.float() for s in shards for k, v in s.items()}, f"{OUT}/sharded/expected.safetensors")

    os.makedirs(f"{OUT}/single", exist_ok=True)
    torch.save({"w": torch.arange(6.0).reshape(2, 3)}, f"{OUT}/single/pytorch_model.bin")
    os.makedirs(f"{OUT}/both", exist_ok=True)
    torch.save({"w": torch.zeros(2)}, f"{OUT}/both/pytorch_model.bin")
    save_file({"w": torch.ones(2)}, f"{OUT}/both/model.safetensors")
    evil(f"{OUT}/evil")


if __name__ == "__main__":
    main()
