"""Trains a small T5-style tokenizer on the translation pairs of make_data.py and saves it as
transformers saves a fast tokenizer (tokenizer.json, tokenizer_config.json,
special_tokens_map.json), for `dscpp ... --tokenizer DIR` and `AutoTokenizer.from_pretrained(DIR)`.

The pipeline is T5's (what T5TokenizerFast converts a SentencePiece model into), trained here with
HF tokenizers instead of SentencePiece:
  normalizer      NFKC, then runs of spaces → one (T5's SentencePiece map folds them likewise)
  pre-tokenizer   WhitespaceSplit, then Metaspace ("▁" before every word)
  model           Unigram with --vocab_size pieces, trained on the first --max_pairs pairs (the
                  sources with --source_prefix, as the model reads them, and the targets);
                  <pad> = 0, </s> = 1, <unk> = 2 as in T5
  post-processor  TemplateProcessing: "$A </s>" (a single sequence ends with </s>)
  decoder         Metaspace
With --dscpp PATH it then encodes every source (with --source_prefix) and target of --check
(JSON lines) with transformers and with `dscpp tokenize`, with and without special tokens, and
decodes the ids with both; any difference is printed and fails the script.

Usage: make_tokenizer.py TRAIN.jsonl OUT_DIR [--vocab_size N] [--max_pairs N] [--dscpp build/launcher/dscpp --check EVAL.jsonl]
Needs PyPI's tokenizers and transformers (e.g. the venv scripts/setup.sh makes).
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers
from transformers import AutoTokenizer, PreTrainedTokenizerFast

SPECIALS = ["<pad>", "</s>", "<unk>"]


def read_pairs(path, src="en", tgt="de"):
    with open(path, encoding="utf-8") as f:
        for line in f:
            if line.strip():
                t = json.loads(line)["translation"]
                yield t[src], t[tgt]


def train(train_path, vocab_size, max_pairs, prefix):
    tok = Tokenizer(models.Unigram())
    tok.normalizer = normalizers.Sequence([normalizers.NFKC(), normalizers.Replace(Regex(" {2,}"), " ")])
    tok.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.WhitespaceSplit(),
                                                 pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="always")])
    tok.decoder = decoders.Metaspace(replacement="▁", prepend_scheme="always")

    def texts():  # the first max_pairs pairs (make_data.py shuffled them), the sources as the model sees them
        for i, (en, de) in enumerate(read_pairs(train_path)):
            if max_pairs and i >= max_pairs:
                break
            yield prefix + en
            yield de

    trainer = trainers.UnigramTrainer(vocab_size=vocab_size, special_tokens=SPECIALS, unk_token="<unk>",
                                      max_piece_length=16, show_progress=False)
    tok.train_from_iterator(texts(), trainer)
    assert [tok.token_to_id(t) for t in SPECIALS] == [0, 1, 2], "special tokens must be <pad>=0 </s>=1 <unk>=2"
    tok.post_processor = processors.TemplateProcessing(single="$A </s>", pair="$A </s> $B </s>",
                                                       special_tokens=[("</s>", 1)])
    return tok


def dscpp_lines(dscpp, tok_dir, flag, path, extra):
    out = subprocess.run([dscpp, "tokenize", "--tokenizer", tok_dir, flag, path] + extra,
                         check=True, capture_output=True, text=True).stdout
    return [json.loads(line) for line in out.splitlines()]


def check(tok_dir, dscpp, check_path, prefix):
    hf = AutoTokenizer.from_pretrained(tok_dir)
    texts = []
    for en, de in read_pairs(check_path):
        texts += [prefix + en, de]
    # Corners: spaces runs, tabs, compatibility characters NFKC folds, characters the training never saw.
    texts += ["", "  leading and  double  spaces ", "tab\tseparated", "ﬁ ligature Ⅻ ①", "Straße Größe Äpfel",
              "emoji 🙂 and 漢字", "</s> inside <pad> text <unk>"]
    bad = 0
    with tempfile.TemporaryDirectory() as tmp:
        src = os.path.join(tmp, "texts.jsonl")
        with open(src, "w", encoding="utf-8") as f:
            for t in texts:
                f.write(json.dumps(t, ensure_ascii=False) + "\n")
        for special in (True, False):
            ours = dscpp_lines(dscpp, tok_dir, "--encode_lines", src, ["--add_special_tokens"] if special else [])
            theirs = [hf(t, add_special_tokens=special)["input_ids"] for t in texts]
            for t, a, b in zip(texts, ours, theirs):
                if a != b:
                    bad += 1
                    print(f"make_tokenizer.py: ids differ (special tokens {special}) for {t!r}:\n  dscpp        {a}\n"
                          f"  transformers {b}")
            if special:
                ids = os.path.join(tmp, "ids.jsonl")
                with open(ids, "w") as f:
                    for b in theirs:
                        f.write(json.dumps(b) + "\n")
                for skip in (True, False):
                    dec = dscpp_lines(dscpp, tok_dir, "--decode_lines", ids, ["--skip_special_tokens"] if skip else [])
                    ref = [hf.decode(b, skip_special_tokens=skip) for b in theirs]
                    for t, a, b in zip(texts, dec, ref):
                        if a != b:
                            bad += 1
                            print(f"make_tokenizer.py: decode differs (skip_special_tokens {skip}) for {t!r}: "
                                  f"dscpp {a!r}, transformers {b!r}")
    n = len(texts)
    print(f"make_tokenizer.py: dscpp tokenize against transformers on {n} texts (ids with and without special "
          f"tokens, decode with and without skip_special_tokens): {'all equal' if not bad else f'{bad} differences'}")
    return bad == 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("train")
    ap.add_argument("out_dir")
    ap.add_argument("--vocab_size", type=int, default=4000)
    ap.add_argument("--max_pairs", type=int, default=100000, help="train on the first N pairs (0: all)")
    ap.add_argument("--model_max_length", type=int, default=512)
    ap.add_argument("--dscpp", help="the dscpp launcher, to check its tokenizer against transformers'")
    ap.add_argument("--check", help="JSON lines whose pairs the check encodes")
    ap.add_argument("--source_prefix", default="translate English to German: ")
    a = ap.parse_args()

    tok = train(a.train, a.vocab_size, a.max_pairs, a.source_prefix)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="</s>", pad_token="<pad>", unk_token="<unk>",
                                   model_max_length=a.model_max_length, clean_up_tokenization_spaces=False,
                                   model_input_names=["input_ids", "attention_mask"])
    fast.save_pretrained(a.out_dir)
    lengths = [(len(tok.encode(a.source_prefix + en).ids), len(tok.encode(de).ids))
               for en, de in read_pairs(a.check or a.train)]
    mean = [sum(x[i] for x in lengths) / len(lengths) for i in (0, 1)]
    print(f"make_tokenizer.py: {a.out_dir}: a Unigram of {tok.get_vocab_size()} pieces; on "
          f"{a.check or a.train}: {mean[0]:.1f} source (prefix included) and {mean[1]:.1f} target tokens a pair "
          f"(longest {max(x[0] for x in lengths)} / {max(x[1] for x in lengths)}), </s> included")
    if a.dscpp and not check(a.out_dir, a.dscpp, a.check or a.train, a.source_prefix):
        sys.exit(1)


if __name__ == "__main__":
    main()
