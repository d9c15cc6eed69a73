#!/usr/bin/env python3
"""`dscpp tokenize` against transformers' fast tokenizers (AutoTokenizer), in four styles.

Four small tokenizers are trained here, offline and in seconds, on Debian's `fortunes` text
(plus a few multilingual lines and the GPL), each in the layout a real model ships:
  gpt2_bpe        byte-level BPE as GPT-2 (ByteLevel pre-tokenizer and decoder, <|endoftext|>)
  llama3_bpe      Llama 3's BPE (its Split regex, ByteLevel without regex, ignore_merges,
                  <|begin_of_text|> added by a TemplateProcessing)
  t5_unigram      a SentencePiece Unigram model converted by T5TokenizerFast (Precompiled
                  normalizer, Metaspace, </s> appended, <extra_id_N> tokens)
  llama2_spm_bpe  a SentencePiece BPE model with byte_fallback converted by LlamaTokenizerFast
  llama2_spm_first  the same converted with legacy=False (Metaspace prepend_scheme "first")
  bert_wordpiece  a WordPiece with BertNormalizer (lowercase, accents stripped), BertPreTokenizer and [CLS]/[SEP]
                  (transformers 4.44.2's default legacy=True; the dummy prefix as Llama 2's
                  tokenizer.json has it: Prepend normalizer, Strip decoder)
Every text of a list meant to break tokenizers (whitespace runs, combining marks, CJK, ZWJ
emoji, a 10,000-character word, each special token written literally, ...) is encoded with and
without special tokens, and the ids with special tokens (plus a few arbitrary id lists, whose
bytes need not form UTF-8) are decoded with and without skip_special_tokens. transformers'
answers are the expectation; dscpp runs once per tokenizer and mode over a whole file:
  dscpp tokenize --tokenizer DIR --encode_lines FILE [--add_special_tokens]   (a JSON string a line
                                                                              in, a JSON array out)
  dscpp tokenize --tokenizer DIR --decode_lines FILE [--skip_special_tokens]  (a JSON array a line
                                                                              in, a JSON string out)

Usage:
  tokenize_parity.py DSCPP            compare; exit 1 on any difference, 77 (skip) when the
                                      Python side is incomplete or dscpp has no `tokenize` yet
  tokenize_parity.py --write-only DIR the tokenizer directories, cases.jsonl and the per-mode
                                      input/expected files (DIR/lines/), without dscpp
TOKENIZE_PARITY_KEEP=DIR keeps what a comparison generated in DIR.
"""
import json
import os
import random
import re
import shutil
import subprocess
import sys
import tempfile
import time
import warnings

SKIP = 77
FORTUNES = "/usr/share/games/fortunes"
GPL = "/usr/share/common-licenses/GPL-3"

os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
# Vocabularies this small train in seconds on one thread, and tokenizers with threads started
# would warn at each fork of the dscpp runs.
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("OMP_NUM_THREADS", "1")


def skip(why):
    print(f"tokenize_parity: {why}: skipping")
    sys.exit(SKIP)


try:
    import transformers
    from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers
    from transformers import (AutoTokenizer, BertTokenizerFast, GPT2TokenizerFast, LlamaTokenizerFast,
                              PreTrainedTokenizerFast, T5TokenizerFast)
except ImportError as e:
    skip(f"{sys.executable} lacks transformers/tokenizers ({e}; scripts/setup.sh test installs them)")
try:
    import google.protobuf  # noqa: F401  (transformers' SentencePiece converter reads the model with it)
    import sentencepiece as spm
except ImportError as e:
    skip(f"{sys.executable} lacks sentencepiece/protobuf ({e}; scripts/setup.sh test installs them)")
if transformers.__version__ != "4.44.2":
    # Other releases convert SentencePiece models differently (legacy, Metaspace's prepend_scheme).
    print(f"tokenize_parity: note: transformers {transformers.__version__}, the reference is 4.44.2")
transformers.logging.set_verbosity_error()
warnings.filterwarnings("ignore")

# The Llama 3 pre-tokenizer regex, as Meta's tokenizer.json has it.
LLAMA3_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
                  r"|\s*[\r\n]+|\s+(?!\S)|\s+")
LLAMA3_SPECIALS = ["<|begin_of_text|>", "<|end_of_text|>", "<|reserved_special_token_0|>",
                   "<|reserved_special_token_1|>", "<|reserved_special_token_2|>", "<|reserved_special_token_3|>",
                   "<|start_header_id|>", "<|end_header_id|>", "<|reserved_special_token_4|>", "<|eot_id|>"]

# Sentences in other scripts, so the vocabularies hold multi-byte pieces and merges of them (the
# fortunes are ASCII). Repeated in the corpus; characters rarer than this stay byte fallback / unk.
MULTILINGUAL = [
    "Le cœur a ses raisons que la raison ne connaît point. Ça va très bien, merci à vous.",
    "El niño pequeño comió piña en la montaña; ¿dónde está el señor Muñoz? ¡Olé!",
    "Über den Wolken muß die Freiheit wohl grenzenlos sein. Grüße aus Köln und Düsseldorf.",
    "Árvíztűrő tükörfúrógép. Příliš žluťoučký kůň úpěl ďábelské ódy. Zażółć gęślą jaźń.",
    "日本語の文章です。東京は大きな都市で、多くの人が住んでいます。",
    "中文文本测试：你好，世界！我们今天学习分词器。",
    "한국어 문장입니다. 서울은 대한민국의 수도입니다.",
    "Привет, мир! Съешь же ещё этих мягких французских булок да выпей чаю.",
    "Γειά σου Κόσμε. Ξεσκεπάζω την ψυχοφθόρα βδελυγμία.",
    "مرحبا بالعالم. هذه جملة باللغة العربية.",
    "नमस्ते दुनिया। यह हिन्दी में एक वाक्य है।",
    "Emoji: 😀 😂 👍 🎉 ❤️ 🍕 🚀 — and “quotes”, ‘single’, «guillemets», … ellipsis.",
]


# --------------------------------------------------------------------------------------------
# The corpus


def read_fortunes():
    """Every fortune entry of the installed `fortunes` files, overstriking removed, in file order."""
    if not os.path.isdir(FORTUNES):
        skip(f"no {FORTUNES} (Debian's fortunes package; scripts/setup.sh installs it)")
    entries = []
    for name in sorted(os.listdir(FORTUNES)):
        path = os.path.join(FORTUNES, name)
        if name.endswith(".dat") or os.path.islink(path) or not os.path.isfile(path):
            continue
        raw = open(path, "rb").read()
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError:
            text = raw.decode("latin-1")
        # Bold and underline are written as "X\bX" and "_\bX" for terminals.
        text = re.sub(r".\x08", "", text)
        for entry in re.split(r"^%\n", text, flags=re.M):
            entry = entry.strip("\n")
            if entry.strip():
                entries.append(entry)
    if len(entries) < 1000:
        skip(f"only {len(entries)} fortunes under {FORTUNES}")
    return entries


def build_corpus(entries):
    """(documents for `tokenizers`' trainers, one-line sentences for SentencePiece)."""
    # A third of the entries (~0.8 MB) trains vocabularies this small as well as all of them would.
    docs = entries[::3] + MULTILINGUAL * 20
    if os.path.isfile(GPL):
        gpl = open(GPL, encoding="utf-8", errors="replace").read().split("\n")[:400]
        docs += ["\n".join(gpl[i:i + 20]) for i in range(0, len(gpl), 20)]
    lines = [ln for d in docs for ln in d.split("\n") if ln.strip()]
    return docs, lines


# --------------------------------------------------------------------------------------------
# The tokenizers


def train_gpt2(docs, out):
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    tok.train_from_iterator(docs, trainers.BpeTrainer(vocab_size=1000, show_progress=False,
                                                      initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    # As in GPT-2, the one special token comes after the merges (id 50256 there).
    tok.add_special_tokens(["<|endoftext|>"])
    GPT2TokenizerFast(tokenizer_object=tok, unk_token="<|endoftext|>", bos_token="<|endoftext|>",
                      eos_token="<|endoftext|>").save_pretrained(out)


def train_bert(docs, out):
    tok = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    tok.normalizer = normalizers.BertNormalizer(lowercase=True)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tok.decoder = decoders.WordPiece(prefix="##")
    specials = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    tok.train_from_iterator(docs, trainers.WordPieceTrainer(vocab_size=1500, special_tokens=specials,
                                                            show_progress=False))
    cls, sep = tok.token_to_id("[CLS]"), tok.token_to_id("[SEP]")
    tok.post_processor = processors.TemplateProcessing(single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B:1 [SEP]:1",
                                                       special_tokens=[("[CLS]", cls), ("[SEP]", sep)])
    BertTokenizerFast(tokenizer_object=tok).save_pretrained(out)


def train_llama3(docs, out):
    tok = Tokenizer(models.BPE(ignore_merges=True))
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(LLAMA3_PATTERN), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=False),
    ])
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator(docs, trainers.BpeTrainer(vocab_size=1500, show_progress=False,
                                                      initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    tok.add_special_tokens(LLAMA3_SPECIALS)
    bos = "<|begin_of_text|>"
    tok.post_processor = processors.Sequence([
        processors.ByteLevel(trim_offsets=False),
        processors.TemplateProcessing(single=f"{bos} $A", pair=f"{bos} $A {bos}:1 $B:1",
                                      special_tokens=[(bos, tok.token_to_id(bos))]),
    ])
    PreTrainedTokenizerFast(tokenizer_object=tok, bos_token=bos, eos_token="<|end_of_text|>",
                            clean_up_tokenization_spaces=True,
                            model_input_names=["input_ids", "attention_mask"]).save_pretrained(out)


def train_spm(lines, prefix, **options):
    spm.set_random_generator_seed(1234)
    spm.SentencePieceTrainer.train(sentence_iterator=iter(lines), model_prefix=prefix, num_threads=2,
                                   minloglevel=2, **options)
    return prefix + ".model"


def save_converted(cls, model, out, **options):
    """Converts a SentencePiece model with transformers' converter for `cls` and saves it with a
    tokenizer_config.json that leaves add_prefix_space unset, as published T5 and Llama 2 models
    do: a set add_prefix_space makes from_pretrained convert the .model file again instead of
    reading tokenizer.json."""
    converted = cls(vocab_file=model, **options)
    cls(vocab_file=model, tokenizer_object=converted.backend_tokenizer).save_pretrained(out)


def train_t5(lines, work, out):
    model = train_spm(lines, os.path.join(work, "t5"), model_type="unigram", vocab_size=1000,
                      pad_id=0, eos_id=1, unk_id=2, bos_id=-1, normalization_rule_name="nmt_nfkc",
                      character_coverage=0.9995)
    save_converted(T5TokenizerFast, model, out)


def train_llama2(lines, work, out, legacy=True):
    model = train_spm(lines, os.path.join(work, "llama2" if legacy else "llama2_first"), model_type="bpe", vocab_size=1500,
                      unk_id=0, bos_id=1, eos_id=2, pad_id=-1, byte_fallback=True, split_digits=True,
                      allow_whitespace_only_pieces=True, normalization_rule_name="identity",
                      add_dummy_prefix=True, remove_extra_whitespaces=False, character_coverage=0.9995)
    # Converted with transformers' default legacy=True. Left at None, add_prefix_space reaches the
    # converter as None and drops the dummy prefix (no Prepend normalizer, no Strip decoder),
    # unlike the model itself and Llama 2's published tokenizer.json; True converts as those.
    # legacy=False converts the dummy prefix as Metaspace(prepend_scheme="first"): a space only
    # before the text's first piece, not after special tokens (Mistral's and later Llama 2 files).
    save_converted(LlamaTokenizerFast, model, out, add_prefix_space=True, legacy=legacy)


STYLES = ["gpt2_bpe", "llama3_bpe", "t5_unigram", "llama2_spm_bpe", "llama2_spm_first", "bert_wordpiece"]


def make_tokenizers(root, work, docs, lines):
    timings = {}
    for name in STYLES:
        t0 = time.time()
        out = os.path.join(root, name)
        if name == "gpt2_bpe":
            train_gpt2(docs, out)
        elif name == "llama3_bpe":
            train_llama3(docs, out)
        elif name == "t5_unigram":
            train_t5(lines, work, out)
        elif name == "llama2_spm_bpe":
            train_llama2(lines, work, out)
        elif name == "bert_wordpiece":
            train_bert(docs, out)
        else:
            train_llama2(lines, work, out, legacy=False)
        timings[name] = time.time() - t0
    return timings


# --------------------------------------------------------------------------------------------
# The texts


def common_texts(entries):
    long_word = ("pneumonoultramicroscopicsilicovolcanoconiosis" * 223)[:10000]
    texts = [
        "Hello world",
        " Hello world",
        "The quick brown fox jumps over the lazy dog.",
        "",
        " ",
        "   leading spaces",
        "trailing spaces   ",
        "  both sides  ",
        "multiple    spaces   between  words",
        "tabs\tand\t\ttabs\t",
        "line one\nline two\n\nline four\n",
        "\n\n\n",
        " \n \n",
        "windows\r\nline endings\r\n\r\n",
        "café naïve résumé über señor façade",
        "Cafe\u0301 (decomposed) vs Café (composed); n\u0303 vs ñ; A\u030a vs Å",
        "ﬁne ﬂour, ①②③, ＡＢＣ１２３, ㍻, Ⅻ, x²",
        "日本語のテキストです。東京タワー",
        "中文测试，你好世界！分词器",
        "한국어 텍스트 처리",
        "I love 🍕 and 🎉!",
        "👩‍👩‍👧 family, 👨🏽‍💻 coder, ❤️ heart",
        "flags: 🇫🇷🇯🇵🇺🇸 🏴‍☠️",
        "👍🏽👍🏿 😀😃😄",
        "1234567890",
        "3.14159265358979323846",
        "Call 555-0123 at 10:30am, 2024-01-31.",
        "123456789012345678901234567890123456789012345678901234567890",
        "don't won't can't shouldn't it's",
        "I'LL WE'VE SHE'S THEY'D YOU'RE I'M",
        "Wait... what?!?! -- (yes) [no] {maybe} <tag/> ;;; :::",
        # What clean_up_tokenization_spaces rewrites when decoding (" ." to ".", " n't" to "n't", ...).
        "Hello , world ! Is it ? No . I do n't think it 's so , we 've seen ; I 'm sure they 're right .",
        "!!!???...,,,",
        "@#$%^&*()_+-=~`|\\/",
        "def f(x):\n    return x ** 2  # square\n",
        '{"key": [1, 2, 3], "nested": {"a": null}}',
        "https://www.debian.org/doc/?q=fortune&x=1#top",
        "non\u00a0breaking\u2003em\u3000ideographic spaces",
        "line\u2028separator\u2029paragraph\u0085next line",
        "zero\u200bwidth\u200cnon-joiner\u200djoiner\ufeffbom",
        "bell\x07 escape\x1b[0m delete\x7f",
        "Привет мир! Γειά σου Κόσμε! مرحبا بالعالم שלום עולם",
        "हिन्दी नमस्ते ไทย ภาษา",
        "already▁has▁metaspace ▁ ▁▁",
        "ĠHello Ċ byte-level symbols",
        "<s>hello</s> <pad> <unk> <|endoftext|> <|begin_of_text|> <extra_id_0>",
        long_word,
        "word " * 300,
    ]
    # A few real entries, chosen reproducibly from the installed package.
    rng = random.Random(1234)
    texts += rng.sample(entries, 6)
    return texts


def added_token_texts(tok):
    """Each added token written literally, alone and inside text (at most 8 tokens of a tokenizer)."""
    added = [t.content for _, t in sorted(tok.added_tokens_decoder.items())]
    if len(added) > 8:
        added = added[:5] + added[-3:]
    texts = []
    for s in added:
        texts += [s, f"Hello{s}world", f" {s} next", f"{s}\n{s}", f"x {s}{s} y", s[:-1]]
    texts.append(" ".join(added))
    return texts


def arbitrary_id_lists(tok, name):
    """Id lists no text encodes to: their bytes need not be UTF-8, special tokens anywhere."""
    rng = random.Random(f"tokenize_parity:{name}")
    n = len(tok)
    lists = [[], sorted(tok.added_tokens_decoder)]
    lists += [[rng.randrange(n) for _ in range(16)] for _ in range(4)]
    return lists


# --------------------------------------------------------------------------------------------
# Expectations


def dump(value):
    return json.dumps(value, ensure_ascii=False)


def expectations(root, entries):
    """{name: {"texts", "ids", "ids_special", "decode_ids", "decode", "decode_skip"}}, plus notes
    on where transformers' answer is not `tokenizers`' own."""
    base = common_texts(entries)
    result, notes = {}, []
    for name in STYLES:
        d = os.path.join(root, name)
        tok = AutoTokenizer.from_pretrained(d)
        if not tok.is_fast:
            raise SystemExit(f"tokenize_parity: AutoTokenizer loaded a slow tokenizer from {d}")
        texts = base + added_token_texts(tok)
        ids = [tok.encode(t, add_special_tokens=False) for t in texts]
        ids_special = [tok.encode(t, add_special_tokens=True) for t in texts]
        decode_ids = ids_special + arbitrary_id_lists(tok, name)
        decode = [tok.decode(x) for x in decode_ids]
        decode_skip = [tok.decode(x, skip_special_tokens=True) for x in decode_ids]
        result[name] = dict(texts=texts, ids=ids, ids_special=ids_special, decode_ids=decode_ids,
                            decode=decode, decode_skip=decode_skip)
        # What tokenizer.json alone gives, for whoever implements it: transformers adds
        # clean_up_tokenization_spaces (tokenizer_config.json) on top of the decoders.
        raw = Tokenizer.from_file(os.path.join(d, "tokenizer.json"))
        if json.loads(tok.backend_tokenizer.to_str()) != json.loads(raw.to_str()):
            notes.append(f"{name}: warning: AutoTokenizer's tokenizer is not the one tokenizer.json describes")
        enc_diff = sum(raw.encode(t, add_special_tokens=s).ids != (b if s else a)
                       for t, a, b in zip(texts, ids, ids_special) for s in (False, True))
        dec_diff = sum((raw.decode(x, skip_special_tokens=False) != y) + (raw.decode(x, skip_special_tokens=True) != z)
                       for x, y, z in zip(decode_ids, decode, decode_skip))
        cleanup = tok.clean_up_tokenization_spaces
        notes.append(f"{name}: {type(tok).__name__}, clean_up_tokenization_spaces={cleanup}; tokenizer.json "
                     f"alone: encode differs for {enc_diff} of {2 * len(texts)}, decode for {dec_diff} of "
                     f"{2 * len(decode_ids)}")
    return result, notes


def write_cases(root, exp):
    lines_dir = os.path.join(root, "lines")
    os.makedirs(lines_dir, exist_ok=True)
    with open(os.path.join(root, "cases.jsonl"), "w", encoding="utf-8") as f:
        for name, e in exp.items():
            for t, a, b in zip(e["texts"], e["ids"], e["ids_special"]):
                f.write(dump({"tokenizer": name, "text": t, "ids": a, "ids_with_special_tokens": b}) + "\n")
            for x, y, z in zip(e["decode_ids"], e["decode"], e["decode_skip"]):
                f.write(dump({"tokenizer": name, "decode_ids": x, "decode": y, "decode_skip_special_tokens": z})
                        + "\n")
    for name, e in exp.items():
        files = {"encode.in": e["texts"], "encode.out": e["ids"], "encode_special.out": e["ids_special"],
                 "decode.in": e["decode_ids"], "decode.out": e["decode"], "decode_skip.out": e["decode_skip"]}
        for suffix, values in files.items():
            with open(os.path.join(lines_dir, f"{name}.{suffix}"), "w", encoding="utf-8") as f:
                f.writelines(dump(v) + "\n" for v in values)


def generate(root):
    t0 = time.time()
    entries = read_fortunes()
    docs, lines = build_corpus(entries)
    with tempfile.TemporaryDirectory(prefix="dscpp_tok_spm.") as work:
        timings = make_tokenizers(root, work, docs, lines)
    exp, notes = expectations(root, entries)
    write_cases(root, exp)
    train = ", ".join(f"{k} {v:.1f} s" for k, v in timings.items())
    print(f"tokenize_parity: {len(entries)} fortunes; trained {train}; all in {time.time() - t0:.1f} s")
    for n in notes:
        print(f"  {n}")
    return exp


# --------------------------------------------------------------------------------------------
# dscpp


def has_tokenize(dscpp):
    try:
        p = subprocess.run([dscpp, "tokenize", "--help"], capture_output=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as e:
        return False, str(e)
    out = (p.stdout + p.stderr).decode("utf-8", "replace")
    if p.returncode == 0 and "--encode_lines" in out and "--decode_lines" in out:
        return True, ""
    if p.returncode == 0 and "--tokenizer" in out:
        # The subcommand is there without the line modes this test drives: a failure, not a skip.
        raise SystemExit(f"FAIL: `dscpp tokenize --help` lists no --encode_lines/--decode_lines:\n{out}")
    last = out.strip().splitlines()[-2:] if out.strip() else [f"exit {p.returncode}"]
    return False, " / ".join(last)


def run_lines(dscpp, tok_dir, flag, path, extra):
    cmd = [dscpp, "tokenize", "--tokenizer", tok_dir, flag, path] + extra
    p = subprocess.run(cmd, capture_output=True, timeout=300)
    if p.returncode != 0:
        err = p.stderr.decode("utf-8", "replace").strip()[-2000:]
        return None, f"`{' '.join(cmd)}` exited {p.returncode}: {err}"
    # Split on "\n" only: the texts hold U+2028 and U+0085, which str.splitlines() would cut at.
    out = p.stdout.decode("utf-8", "replace").split("\n")
    if out and out[-1] == "":
        out.pop()
    got = []
    for line in out:
        try:
            got.append(json.loads(line))
        except ValueError:
            got.append(("unparsable line", line[:200]))
    return got, None


def short(value, limit=100):
    r = repr(value)
    return r if len(r) <= limit else r[:limit] + f"... ({len(value)} long)"


def show_ids(ids, at, width=24):
    """The ids around position `at`, so the first difference is in view."""
    if not isinstance(ids, list):
        return short(ids)
    lo = max(0, at - width // 2)
    head = "... " if lo else ""
    tail = f" ... ({len(ids)} ids)" if lo + width < len(ids) else ""
    return head + str(ids[lo:lo + width]) + tail


def first_diff(a, b):
    if not (isinstance(a, list) and isinstance(b, list)):
        return 0
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i
    return min(len(a), len(b))


def compare(name, what, inputs, expected, got, is_decode):
    """Prints the first 5 differences; True when all lines are equal."""
    if len(got) != len(expected):
        print(f"FAIL: {name}: {what}: {len(got)} lines out for {len(expected)} in")
    bad = [i for i in range(len(expected)) if i >= len(got) or got[i] != expected[i]]
    if not bad and len(got) == len(expected):
        return True
    if bad:
        print(f"FAIL: {name}: {what}: {len(bad)} of {len(expected)} differ; the first {min(5, len(bad))}:")
    for i in bad[:5]:
        g = got[i] if i < len(got) else "(no line)"
        if is_decode:
            print(f"  ids {show_ids(inputs[i], 0)}")
            print(f"    expected {short(expected[i])}")
            print(f"    got      {short(g)}")
        else:
            at = first_diff(expected[i], g)
            print(f"  text {short(inputs[i], 80)} (first difference at id {at})")
            print(f"    expected {show_ids(expected[i], at)}")
            print(f"    got      {show_ids(g, at)}")
    return False


def check(dscpp, root, exp):
    lines_dir = os.path.join(root, "lines")
    failed = False
    for name, e in exp.items():
        tok_dir = os.path.join(root, name)
        enc_in = os.path.join(lines_dir, f"{name}.encode.in")
        dec_in = os.path.join(lines_dir, f"{name}.decode.in")
        runs = [("encode without special tokens", "--encode_lines", enc_in, [], e["ids"], e["texts"], False),
                ("encode with special tokens", "--encode_lines", enc_in, ["--add_special_tokens"], e["ids_special"],
                 e["texts"], False),
                ("decode", "--decode_lines", dec_in, [], e["decode"], e["decode_ids"], True),
                ("decode with skip_special_tokens", "--decode_lines", dec_in, ["--skip_special_tokens"],
                 e["decode_skip"], e["decode_ids"], True)]
        ok = True
        for what, flag, path, extra, expected, inputs, is_decode in runs:
            got, err = run_lines(dscpp, tok_dir, flag, path, extra)
            if err:
                print(f"FAIL: {name}: {what}: {err}")
                ok = False
            elif not compare(name, what, inputs, expected, got, is_decode):
                ok = False
        if ok:
            print(f"ok: {name}: {len(e['texts'])} texts, ids equal with and without special tokens; decode equal")
        failed |= not ok
    return not failed


def main(argv):
    if len(argv) == 3 and argv[1] == "--write-only":
        root = os.path.abspath(argv[2])
        os.makedirs(root, exist_ok=True)
        generate(root)
        print(f"tokenize_parity: wrote {', '.join(STYLES)}, cases.jsonl and lines/ to {root}")
        return 0
    if len(argv) != 2 or argv[1].startswith("-"):
        print(__doc__)
        return 2
    dscpp = argv[1]
    if not (os.path.isfile(dscpp) and os.access(dscpp, os.X_OK)):
        print(f"FAIL: no dscpp executable at {dscpp}")
        return 1
    present, why = has_tokenize(dscpp)
    if not present:
        skip(f"`dscpp tokenize --help` does not offer the subcommand with --encode_lines yet ({why})")
    keep = os.environ.get("TOKENIZE_PARITY_KEEP")
    root = os.path.abspath(keep) if keep else tempfile.mkdtemp(prefix="dscpp_tokenize_parity.")
    os.makedirs(root, exist_ok=True)
    try:
        exp = generate(root)
        ok = check(dscpp, root, exp)
    finally:
        if keep:
            print(f"tokenize_parity: tokenizers and cases kept in {root}")
        else:
            shutil.rmtree(root, ignore_errors=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
