#!/usr/bin/env python3
"""models::read_seq2seq (through tests/tools/seq2seq_dump) against transformers, as Hugging Face's
run_translation.py and run_summarization.py tokenize their pairs:
  model_inputs = tokenizer([prefix + source], max_length=max_source_length, truncation=True)
  labels = tokenizer(text_target=[target], max_length=max_target_length, truncation=True)
A T5 tokenizer is trained here, offline: a SentencePiece Unigram model on Debian's fortunes,
converted by T5TokenizerFast (pad 0, </s> 1, <unk> 2, </s> appended to every sequence), and a
copy whose tokenizer_config.json says truncation_side "left". The pairs are fortunes as "en"
and the same text reversed and upper-cased as "de" (summaries: a third of it), with blank
lines, extra keys and, for summarization, the empty pairs run_summarization drops. Checked:
ids equal without truncation, with truncation (both sides, 1 and 3 threads, gzip and .json
input, the left-truncating copy), summarization, and the refusal of a long example without
--truncation, naming the first such line and its token count.

Usage: seq2seq_parity.py SEQ2SEQ_DUMP      exit 1 on a difference, 77 (skip) without the venv
"""
import glob
import gzip
import json
import os
import shutil
import subprocess
import sys
import tempfile
import warnings

SKIP = 77
FORTUNES = "/usr/share/games/fortunes"
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

try:
    import transformers
    import sentencepiece as spm
    import google.protobuf  # noqa: F401  (the SentencePiece converter reads the model with it)
    from transformers import AutoTokenizer, T5TokenizerFast
except ImportError as e:
    print(f"seq2seq_parity: {sys.executable} lacks transformers/sentencepiece ({e}): skipping")
    sys.exit(SKIP)
transformers.logging.set_verbosity_error()
warnings.filterwarnings("ignore")


def fortunes():
    files = sorted(f for f in glob.glob(FORTUNES + "/*") if os.path.isfile(f) and "." not in os.path.basename(f))
    if not files:
        print(f"seq2seq_parity: no {FORTUNES} (Debian's fortunes package): skipping")
        sys.exit(SKIP)
    entries = []
    for f in files:
        entries += [e.strip() for e in open(f, encoding="utf-8", errors="replace").read().split("\n%\n") if e.strip()]
    return entries


def train_t5(entries, work):
    lines = [ln for e in entries[::2] for ln in e.split("\n") if ln.strip()]
    spm.set_random_generator_seed(1234)
    spm.SentencePieceTrainer.train(sentence_iterator=iter(lines), model_prefix=os.path.join(work, "t5"), num_threads=2,
                                   minloglevel=2, model_type="unigram", vocab_size=800, pad_id=0, eos_id=1, unk_id=2,
                                   bos_id=-1, normalization_rule_name="nmt_nfkc", character_coverage=0.9995)
    model = os.path.join(work, "t5.model")
    converted = T5TokenizerFast(vocab_file=model)
    right, left = os.path.join(work, "t5"), os.path.join(work, "t5_left")
    T5TokenizerFast(vocab_file=model, tokenizer_object=converted.backend_tokenizer).save_pretrained(right)
    T5TokenizerFast(vocab_file=model, tokenizer_object=converted.backend_tokenizer,
                    truncation_side="left").save_pretrained(left)
    return right, left


def write_lines(path, rows):
    """JSON lines with a blank line after every seventh; returns each row's line number."""
    numbers, n = [], 0
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "wt", encoding="utf-8") as f:
        for i, row in enumerate(rows):
            n += 1
            numbers.append(n)
            f.write(json.dumps(row, ensure_ascii=i % 2 == 0) + "\n")
            if i % 7 == 6:
                f.write("\n")
                n += 1
    return numbers


def expected(tok, pairs, prefix, max_source, max_target):
    inputs = tok([prefix + s for s, _ in pairs], max_length=max_source, truncation=True)["input_ids"]
    labels = tok(text_target=[t for _, t in pairs], max_length=max_target, truncation=True)["input_ids"]
    return [{"input_ids": i, "labels": lab} for i, lab in zip(inputs, labels)]


def dump(tool, path, tokenizer, extra):
    r = subprocess.run([tool, "--tokenizer", tokenizer, *extra, path], capture_output=True, text=True)
    got = [json.loads(ln) for ln in r.stdout.splitlines()] if r.returncode == 0 else []
    return got, r.returncode, r.stderr.strip()


def compare(name, want, got, rc, err):
    if rc != 0:
        print(f"FAIL: {name}: seq2seq_dump exited {rc}: {err}")
        return False
    if len(want) != len(got):
        print(f"FAIL: {name}: {len(got)} examples, transformers has {len(want)}")
        return False
    for i, (w, g) in enumerate(zip(want, got)):
        if w != g:
            print(f"FAIL: {name}: example {i} differs\n  transformers {w}\n  dscpp        {g}")
            return False
    print(f"ok: {name}: {len(want)} examples equal ({err})")
    return True


def main(argv):
    if len(argv) != 2:
        print(__doc__)
        return 2
    tool = argv[1]
    entries = fortunes()
    work = tempfile.mkdtemp(prefix="dscpp_seq2seq_parity.")
    try:
        right, left = train_t5(entries, work)
        tok, tok_left = AutoTokenizer.from_pretrained(right), AutoTokenizer.from_pretrained(left)
        assert tok_left.truncation_side == "left"
        # 64 entries of every length, flattened to one line as translation corpora hold them.
        texts = [" ".join(e.split()) for e in entries[5::max(1, len(entries) // 64)][:64]]
        texts += ["Grüße aus Köln — ça va très bien, «merci»!", "x"]
        pairs = [(t, t[::-1].upper()) for t in texts]
        tr = os.path.join(work, "translation.jsonl")
        rows = [{"translation": {"en": s, "de": t}} for s, t in pairs]
        rows[3]["id"] = 3
        write_lines(tr, rows)
        write_lines(os.path.join(work, "translation.json.gz"), rows)
        prefix = "translate English to German: "
        common = ["--source_lang", "en", "--target_lang", "de", "--source_prefix", prefix]
        ok = True

        want = expected(tok, pairs, prefix, 100000, 100000)
        ok &= compare("translation, whole", want, *dump(tool, tr, right, common + ["--max_source_length", "100000",
                                                                                   "--max_target_length", "100000"]))
        cut = ["--max_source_length", "32", "--max_target_length", "24"]
        want = expected(tok, pairs, prefix, 32, 24)
        ok &= compare("translation, truncated", want, *dump(tool, tr, right, common + cut + ["--truncation"]))
        ok &= compare("translation, truncated, .json.gz, 3 threads", want,
                      *dump(tool, os.path.join(work, "translation.json.gz"), right,
                            common + cut + ["--truncation", "--threads", "3"]))
        want = expected(tok_left, pairs, prefix, 32, 24)
        ok &= compare("translation, truncation_side left", want, *dump(tool, tr, left, common + cut + ["--truncation"]))

        # Without --truncation the first example too long on either side is refused: the pairs
        # that fit come first, so that the line counted is past blank lines and another thread's.
        full = expected(tok, pairs, prefix, 100000, 100000)
        ms, mt = 64, 96
        fits = [len(e["input_ids"]) <= ms and len(e["labels"]) <= mt for e in full]
        order = sorted(range(len(pairs)), key=lambda i: not fits[i])
        ordered = os.path.join(work, "ordered.jsonl")
        numbers = write_lines(ordered, [rows[i] for i in order])
        first = fits.count(True)
        e = full[order[first]]
        side, n, flag, limit = (("source", len(e["input_ids"]), "max_source_length", ms) if len(e["input_ids"]) > ms
                                else ("target", len(e["labels"]), "max_target_length", mt))
        message = (f"{ordered}:{numbers[first]}: {side} has {n} tokens, more than --{flag} {limit} "
                   f"(add --truncation to cut it)")
        _, rc, err = dump(tool, ordered, right, common + ["--max_source_length", str(ms), "--max_target_length",
                                                          str(mt), "--threads", "3"])
        if rc == 1 and err == message:
            print(f"ok: without --truncation: {message}")
        else:
            print(f"FAIL: without --truncation: exit {rc}, {err!r}\n  expected {message!r}")
            ok = False

        # run_summarization drops a pair whose text or summary is empty or null.
        sm = os.path.join(work, "summarization.jsonl")
        srows = [{"article": s, "highlights": t[: len(t) // 3 + 1], "id": i} for i, (s, t) in enumerate(pairs)]
        srows[2]["highlights"], srows[9]["article"] = "", None
        write_lines(sm, srows)
        kept = [(r["article"], r["highlights"]) for r in srows if r["article"] and r["highlights"]]
        want = expected(tok, kept, "summarize: ", 48, 16)
        ok &= compare("summarization, truncated", want,
                      *dump(tool, sm, right, ["--text_column", "article", "--summary_column", "highlights",
                                              "--source_prefix", "summarize: ", "--max_source_length", "48",
                                              "--max_target_length", "16", "--truncation"]))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
