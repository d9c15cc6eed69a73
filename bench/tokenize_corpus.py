"""The tokenize benchmark's corpus and tokenizer, made from text Debian installs: the
fortunes, then the packages' copyright files and changelogs under /usr/share/doc (English
prose, names, versions, dates), one document per line, until TARGET_MB; and a GPT-2-style
byte-level BPE with a 32,000-token vocabulary trained on it (the size of Llama 2's).
Usage: tokenize_corpus.py OUT_DIR TARGET_MB"""
import glob
import gzip
import os
import sys

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import PreTrainedTokenizerFast

out, target = sys.argv[1], int(float(sys.argv[2]) * 1e6)
os.makedirs(out, exist_ok=True)
sources = sorted(f for f in glob.glob("/usr/share/games/fortunes/*") if os.path.isfile(f) and "." not in os.path.basename(f))
sources += sorted(glob.glob("/usr/share/doc/*/copyright")) + sorted(glob.glob("/usr/share/doc/*/changelog*.gz"))
size = 0
with open(os.path.join(out, "corpus.txt"), "w", encoding="utf-8") as corpus:
    for f in sources:
        try:
            data = gzip.open(f).read() if f.endswith(".gz") else open(f, "rb").read()
            text = data.decode("utf-8")
        except (OSError, UnicodeDecodeError):
            continue
        for line in text.split("\n"):
            if line.strip():
                corpus.write(line + "\n")
                size += len(line.encode()) + 1
        if size >= target:
            break
print(f"corpus: {size / 1e6:.1f} MB from {len(sources)} candidate files", file=sys.stderr)
tok = Tokenizer(models.BPE())
tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
tok.decoder = decoders.ByteLevel()
lines = open(os.path.join(out, "corpus.txt"), encoding="utf-8").read().split("\n")
tok.train_from_iterator(lines[: len(lines) // 4], trainers.BpeTrainer(
    vocab_size=32000, special_tokens=["<|endoftext|>"], initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    show_progress=False))
PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|endoftext|>").save_pretrained(os.path.join(out, "tok"))
