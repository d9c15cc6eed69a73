"""Makes examples/tokenizers/fortunes-bpe: a GPT-2-style byte-level BPE with 2,048 tokens
(<|endoftext|> included) trained on Debian's fortunes, saved as transformers saves a fast
tokenizer (tokenizer.json, tokenizer_config.json, special_tokens_map.json). The main job uses
the committed copy, so running it needs no Python; this script shows how it was made.
Usage: make_fortunes_bpe.py OUT_DIR   (with PyPI's tokenizers and transformers)"""
import glob
import os
import sys

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import PreTrainedTokenizerFast

files = sorted(f for f in glob.glob("/usr/share/games/fortunes/*") if os.path.isfile(f) and "." not in os.path.basename(f))
texts = []
for f in files:
    texts += open(f, encoding="utf-8", errors="replace").read().split("\n%\n")
tok = Tokenizer(models.BPE())
tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
tok.decoder = decoders.ByteLevel()
tok.train_from_iterator(texts, trainers.BpeTrainer(vocab_size=2048, special_tokens=["<|endoftext|>"],
                                                   initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                                   show_progress=False))
fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<|endoftext|>", eos_token="<|endoftext|>",
                               clean_up_tokenization_spaces=False)
fast.save_pretrained(sys.argv[1])
print(f"{sys.argv[1]}: {tok.get_vocab_size()} tokens from {len(texts)} fortunes in {len(files)} files")
