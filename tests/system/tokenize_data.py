"""`dscpp tokenize --input` against the tokenizers library on real text: Debian's fortunes, one
document per line (and per file), through a byte-level BPE trained here. Checks that
  - every document's ids in the Megatron .bin/.idx (read with numpy by Megatron's
    MMIDIDX v1 layout) equal tokenizers' encode plus the eos token, in input order;
  - the output is byte-identical at 1 and 2 threads, and for a gzip copy of the input;
  - the llm.c file holds the same token stream behind its 256-int32 header;
  - bad input is refused naming the file (a line that is not JSON, a missing --eod).
Usage: tokenize_data.py DSCPP"""
import gzip
import json
import os
import shutil
import subprocess
import sys
import tempfile

import numpy as np
from transformers import PreTrainedTokenizerFast

import fortunes_bpe

DSCPP = sys.argv[1]


def run(*args, ok=True):
    r = subprocess.run([DSCPP, "tokenize", *args], capture_output=True, text=True)
    if ok and r.returncode != 0:
        sys.exit(f"FAIL: dscpp tokenize {' '.join(args)} exited {r.returncode}: {r.stderr.strip()}")
    return r


def read_megatron(prefix):
    idx = open(prefix + ".idx", "rb").read()
    assert idx[:9] == b"MMIDIDX\x00\x00", "no MMIDIDX header"
    version, = np.frombuffer(idx[9:17], np.uint64)
    code = idx[17]
    n, docs = np.frombuffer(idx[18:34], np.uint64)
    assert version == 1 and code in (4, 8), (version, code)
    at = 34
    lengths = np.frombuffer(idx[at:at + 4 * int(n)], np.int32); at += 4 * int(n)
    pointers = np.frombuffer(idx[at:at + 8 * int(n)], np.int64); at += 8 * int(n)
    starts = np.frombuffer(idx[at:at + 8 * int(docs)], np.int64)
    assert list(starts) == list(range(int(n) + 1)), "one document per sequence"
    dtype = np.uint16 if code == 8 else np.int32
    bin_ = np.fromfile(prefix + ".bin", dtype)
    width = np.dtype(dtype).itemsize
    return [bin_[p // width:p // width + l].tolist() for p, l in zip(pointers, lengths)]


def main():
    files = fortunes_bpe.fortune_files(6)
    if not files:
        print(f"tokenize_data: no fortunes under {fortunes_bpe.FORTUNES} (Debian's fortunes package): skipping")
        sys.exit(77)
    work = tempfile.mkdtemp(prefix="tokenize_data.")
    try:
        tok = fortunes_bpe.train(800, files)
        d = os.path.join(work, "tok")
        PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|endoftext|>").save_pretrained(d)
        eos = tok.token_to_id("<|endoftext|>")

        # One document per line, in file order; the reference encodes the same lines.
        lines = []
        for f in files:
            with open(f, "rb") as fh:
                for raw in fh.read().split(b"\n"):
                    if raw:
                        lines.append(raw.decode("utf-8"))
        want = [e.ids + [eos] for e in tok.encode_batch(lines, add_special_tokens=False)]
        out1, out2 = os.path.join(work, "t1"), os.path.join(work, "t2")
        run("--tokenizer", d, "--input", *files, "--output", out1, "--lines", "--threads", "1")
        r = run("--tokenizer", d, "--input", *files, "--output", out2, "--lines", "--threads", "2")
        got = read_megatron(out1)
        bad = [i for i, (g, w) in enumerate(zip(got, want)) if g != w]
        if len(got) != len(want) or bad:
            sys.exit(f"FAIL: {len(got)} documents (want {len(want)}); {len(bad)} differ, first {bad[:3]}")
        for ext in (".bin", ".idx"):
            if open(out1 + ext, "rb").read() != open(out2 + ext, "rb").read():
                sys.exit(f"FAIL: the {ext} at 1 and 2 threads differ")
        tokens = sum(len(w) for w in want)
        print(f"ok: {len(want)} documents from {len(files)} fortunes files, {tokens} tokens equal tokenizers' "
              f"encode + eos; 1 and 2 threads byte-identical ({r.stderr.strip().splitlines()[-1]})")

        # gzip input, whole files as documents, JSON lines.
        gz = []
        for f in files:
            g = os.path.join(work, os.path.basename(f) + ".gz")
            with open(f, "rb") as src, gzip.open(g, "wb") as dst:
                dst.write(src.read())
            gz.append(g)
        out3 = os.path.join(work, "t3")
        run("--tokenizer", d, "--input", *gz, "--output", out3, "--lines")
        if open(out1 + ".bin", "rb").read() != open(out3 + ".bin", "rb").read():
            sys.exit("FAIL: the gzip copy gives other tokens")
        whole = [open(f, "rb").read().decode("utf-8") for f in files]
        whole = [w[:-1] if w.endswith("\n") else w for w in whole]  # the reader drops a final newline
        out4 = os.path.join(work, "t4")
        run("--tokenizer", d, "--input", *files, "--output", out4)
        if read_megatron(out4) != [e.ids + [eos] for e in tok.encode_batch(whole, add_special_tokens=False)]:
            sys.exit("FAIL: one document per file differs from tokenizers' encode")
        jl = os.path.join(work, "docs.jsonl")
        with open(jl, "w") as fh:
            for t in lines[:300]:
                fh.write(json.dumps({"id": 1, "text": t}) + "\n")
        out5 = os.path.join(work, "t5")
        run("--tokenizer", d, "--input", jl, "--output", out5, "--json_key", "text")
        if read_megatron(out5) != want[:300]:
            sys.exit("FAIL: --json_key text differs from the same lines as text")
        print("ok: gzip input equal; one document per file and JSON lines (--json_key) equal tokenizers' encode")

        # llm.c: the same stream behind its header.
        out6 = os.path.join(work, "t6")
        run("--tokenizer", d, "--input", *files, "--output", out6, "--lines", "--format", "llmc")
        raw = open(out6 + ".bin", "rb").read()
        header = np.frombuffer(raw[:1024], np.int32)
        stream = np.frombuffer(raw[1024:], np.uint16).tolist()
        if header[0] != 20240520 or header[1] != 1 or header[2] != tokens or stream != sum(want, []):
            sys.exit(f"FAIL: llm.c file: header {header[:3].tolist()}, {len(stream)} tokens (want {tokens})")
        print(f"ok: llm.c file: magic 20240520, version 1, {tokens} tokens, the same stream")

        # Bad input.
        with open(jl, "a") as fh:
            fh.write("not json\n")
        r = run("--tokenizer", d, "--input", jl, "--output", out5, "--json_key", "text", ok=False)
        if r.returncode == 0 or "docs.jsonl:301: expected a JSON object" not in r.stderr:
            sys.exit(f"FAIL: a line that is not JSON: exit {r.returncode}, {r.stderr.strip()}")
        if os.path.exists(out5 + ".bin.partial") is False and not os.path.exists(out5 + ".bin"):
            sys.exit("FAIL: the earlier output went missing")
        os.remove(os.path.join(d, "tokenizer_config.json"))
        os.remove(os.path.join(d, "special_tokens_map.json"))
        r = run("--tokenizer", d, "--input", files[0], "--output", out5, ok=False)
        if r.returncode == 0 or "give the end-of-document token with --eod" not in r.stderr:
            sys.exit(f"FAIL: no eos_token: exit {r.returncode}, {r.stderr.strip()}")
        print("ok: a line that is not JSON is named by file:line; a tokenizer without eos_token asks for --eod")
    finally:
        shutil.rmtree(work, ignore_errors=True)


main()
