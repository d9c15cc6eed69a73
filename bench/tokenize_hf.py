"""HF tokenizers' encode_batch over the corpus lines (its Rust thread pool, RAYON_NUM_THREADS
threads), as `dscpp tokenize --lines` encodes them; prints MB/s of text and the token count.
Usage: tokenize_hf.py TOKENIZER_DIR CORPUS"""
import sys
import time

from tokenizers import Tokenizer

tok = Tokenizer.from_file(sys.argv[1] + "/tokenizer.json")
lines = [l for l in open(sys.argv[2], encoding="utf-8", newline="").read().split("\n") if l]  # \r kept, as dscpp reads lines
nbytes = sum(len(l.encode()) for l in lines)
t0 = time.perf_counter()
tokens = 0
for i in range(0, len(lines), 8192):  # batches, as a data-preparation script streams them
    tokens += sum(len(e.ids) + 1 for e in tok.encode_batch(lines[i:i + 8192], add_special_tokens=False))
s = time.perf_counter() - t0
print(f"{nbytes / 1e6 / s:.2f} MB/s {tokens} tokens {s:.2f} s")
