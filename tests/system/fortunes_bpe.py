"""A GPT-2-style byte-level BPE trained on Debian's fortunes, for the tests that need a real
tokenizer made on the spot (tokenize_data.py, generate_text.py)."""
import glob
import os

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

FORTUNES = "/usr/share/games/fortunes"


def fortune_files(count=None):
    """The fortunes' text files (not their .dat indexes or .u8 links), sorted; the first `count`."""
    files = sorted(f for f in glob.glob(FORTUNES + "/*") if os.path.isfile(f) and "." not in os.path.basename(f))
    return files[:count] if count else files


def train(vocab_size, files):
    """The BPE (ByteLevel pre-tokenizer and decoder, <|endoftext|> special) over the fortunes in `files`."""
    texts = []
    for f in files:
        texts += open(f, encoding="utf-8", errors="replace").read().split("\n%\n")
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator(texts, trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=["<|endoftext|>"],
                                                       initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                                       show_progress=False))
    return tok
