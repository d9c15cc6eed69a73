#!/usr/bin/python3
"""English→German pairs from the FreeDict English-German dictionary (Debian's dict-freedict-eng-deu),
written as run_translation.py's JSON lines: {"translation": {"en": "...", "de": "..."}}.

The dictionary is in dictd's format: DIR/freedict-eng-deu.index holds one line per headword,
"key<TAB>offset<TAB>length" with offset and length in dictd's base-64 digits, pointing into the
decompressed DIR/freedict-eng-deu.dict.dz (dictzip, which gzip reads). Each entry, derived from the
Ding dictionary's TEI, is one sense:

    bank /bˈaŋk/ <v>                                 the headword, its pronunciation, grammar
    auf die Bank bringen [Geld] , einzahlen <v, trans>    the German translations, comma-separated
             Note: ...                                notes, synonyms, cross-references
          "the presenting bank"  - die vorlegende Bank      usage examples with their translation
     see: {banking}, {banked}

A pair is (the English headword, its first German translation) and, unless --no_examples, each
usage example (English, German). Both sides are cleaned: pronunciations, grammar tags (<fem>,
<v, trans>), labels ([fig.], [Br.]) and parenthesised notes go; a translation with an abbreviation
run into it, a fragment (…) or alternatives written with "/" is skipped for the next one. A headword
with several entries (senses) keeps the entry with the most usage examples, the dictionary's own
sign of a common sense (the first such entry on a tie): "house" gives "Haus", not its first
entry's "Geschlecht". Each English text appears once. The pairs are shuffled with --seed and split
into OUT/train.jsonl and OUT/eval.jsonl.

Usage: make_data.py OUT_DIR [--max_words N] [--eval_fraction F] [--max_eval N] [--seed S]
                            [--no_examples] [--dict DIR]
Needs only Python 3's standard library.
"""
import argparse
import collections
import gzip
import json
import os
import random
import re
import sys

B64 = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
B64_VALUE = {c: i for i, c in enumerate(B64)}


def b64_number(text):
    """dictd's base-64 numbers: big-endian digits of B64, no padding."""
    n = 0
    for c in text:
        n = n * 64 + B64_VALUE[c]
    return n


# The pronunciation after a headword: " /.../" followed by whitespace or the line's end. A "/"
# inside a headword ("great/Eastern white pelican") has no space before it.
PRONUNCIATION = re.compile(r"\s/[^/]+/(?=\s|$)")
PRONUNCIATION_ONLY = re.compile(r"^\s*/[^/]+/\s*$")
TAG = re.compile(r"<[^<>]*>|\[[^\[\]]*\]|\{[^{}]*\}")
PARENS = re.compile(r"\([^()]*\)")
SPACES = re.compile(r"\s+")
SENTENCE_END = (".", "?", "!")
# Alternative sentences: "Halt's Maul!, Halt die Goschen!" (a sentence's end, ", ", a capital).
NEXT_SENTENCE = re.compile(r"(?<=[.?!]), (?=[A-ZÄÖÜ])")
# "jemand, der Rechtsurkunden aufsetzt" describes; its comma is no list of translations.
PRONOUNS = {"jemand", "jd.", "etwas", "etw.", "einer", "eine", "eines", "derjenige", "diejenige", "dasjenige"}
RELATIVE = {"der", "die", "das", "dem", "den", "dessen", "deren", "welcher", "welche", "welches", "was", "wer", "wo"}


def split_top_level(text):
    """Splits at ", " outside (), [], <>, {} ("3,4-Methylendioxyamphetamin" stays whole)."""
    items, depth, start = [], 0, 0
    for i, c in enumerate(text):
        if c in "([<{":
            depth += 1
        elif c in ")]>}":
            depth = max(0, depth - 1)
        elif c == "," and depth == 0 and (i + 1 == len(text) or text[i + 1].isspace()):
            items.append(text[start:i])
            start = i + 1
    items.append(text[start:])
    return items


def clean(text):
    """Removes tags, labels and parenthesised notes; returns (text, None) or (None, why)."""
    previous = None
    while previous != text:  # nested parentheses, innermost first
        previous = text
        text = PARENS.sub(" ", text)
    text = TAG.sub(" ", text)
    text = SPACES.sub(" ", text).strip().strip(",;:").strip()
    if not text:
        return None, "empty after cleaning"
    if "…" in text or "..." in text:
        return None, "a fragment (…)"
    if "/" in text:
        return None, "alternatives written with /"
    if any(c in text for c in "()[]<>{}\""):
        return None, "unbalanced brackets or quotes"
    return text, None


def headword(line):
    """The English headword of an entry's first line, without pronunciation or grammar."""
    m = PRONUNCIATION.search(line)
    if m:
        line = line[:m.start()]
    return clean(line)


def first_translation(line):
    """The first comma-separated German translation of a sense line that survives cleaning."""
    items = split_top_level(line)
    why_first = None
    for i, item in enumerate(items):
        if PRONUNCIATION_ONLY.match(item):
            continue
        if i + 1 < len(items) and PRONUNCIATION_ONLY.match(items[i + 1]):
            # An abbreviation and its pronunciation follow: "Spalte <fem> [comp.] Sp., /ˌɛspˈiː/".
            # After a tag it can be cut off; run into the word ("KirchenÖRK") it cannot.
            last = max(item.rfind(">"), item.rfind("]"))
            if last < 0:
                why_first = why_first or "abbreviation run into the translation"
                continue
            item = item[:last + 1]
        text, why = clean(item)
        if text and text in PRONOUNS and i + 1 < len(items) and items[i + 1].split()[:1] and \
                items[i + 1].split()[0] in RELATIVE:
            return None, "a description (jemand, der …), not a translation"
        if text:
            return text, None
        why_first = why_first or why
    return None, why_first or "no translation"


def parse_example(line):
    """'      "English"  - German' → (English, German) raw, or None."""
    s = line.strip()
    sep = s.rfind('"  - ')
    if not s.startswith('"') or sep <= 0:
        return None
    return s[1:sep], s[sep + 5:]


def example_pair(en_raw, de_raw):
    en, why = clean(en_raw)
    if not en:
        return None, None, why
    # A sentence keeps its commas (its alternatives end a sentence before theirs); a phrase lists
    # alternatives like a sense line.
    if en[:1].isupper() and en.endswith(SENTENCE_END):
        de, why = clean(NEXT_SENTENCE.split(de_raw)[0])
    else:
        de, why = first_translation(de_raw)
    return en, de, why


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out_dir")
    ap.add_argument("--dict", default="/usr/share/dictd", help="where freedict-eng-deu.{index,dict.dz} are")
    ap.add_argument("--max_words", type=int, default=0, help="keep pairs with at most N words on each side (0: all)")
    ap.add_argument("--eval_fraction", type=float, default=0.02)
    ap.add_argument("--max_eval", type=int, default=400, help="at most this many eval pairs")
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--no_examples", action="store_true", help="headwords only, no usage examples")
    a = ap.parse_args()

    index_path = os.path.join(a.dict, "freedict-eng-deu.index")
    dict_path = os.path.join(a.dict, "freedict-eng-deu.dict.dz")
    for p in (index_path, dict_path):
        if not os.path.exists(p):
            sys.exit(f"make_data.py: {p} is missing (Debian package dict-freedict-eng-deu)")
    with gzip.open(dict_path, "rb") as f:  # dictzip is gzip with a random-access table
        data = f.read()

    drops = collections.Counter()
    seen_entries = set()
    entries = 0
    # English text → (rank, order, German): the headword's entry with most examples wins.
    best = {}
    order = 0

    def offer(en, de, rank):
        nonlocal order
        order += 1
        old = best.get(en)
        if old is not None:
            drops["the same English again (another sense or example; one kept)"] += 1
            if rank <= old[0]:
                return
        best[en] = (rank, order, de)

    with open(index_path, encoding="utf-8") as f:
        for line in f:
            fields = line.rstrip("\n").split("\t")
            if len(fields) != 3:
                drops["malformed index line"] += 1
                continue
            key, off, length = fields
            if key.startswith("00database") or key.startswith("00-database"):
                continue  # the database's own information entries
            span = (b64_number(off), b64_number(length))
            if span in seen_entries:
                continue  # another index key (a spelling variant) of an entry already read
            seen_entries.add(span)
            entries += 1
            lines = data[span[0]:span[0] + span[1]].decode("utf-8").split("\n")
            sense = next((s for s in lines[1:] if s.strip() and (not s.startswith(" ") or s.startswith(" ["))), None)
            examples = [e for e in (parse_example(s) for s in lines[1:] if s.startswith('      "')) if e]
            en, why = headword(lines[0])
            if en and sense is None:
                en, why = None, "no translation"
            if en:
                de, why = first_translation(sense)
            if en and de:
                offer(en, de, len(examples))
            else:
                drops["headword: " + why] += 1
            if a.no_examples:
                continue
            for en_raw, de_raw in examples:
                xen, xde, why = example_pair(en_raw, de_raw)
                if xen and xde:
                    offer(xen, xde, 1e9)  # an example outranks a headword of the same text
                else:
                    drops["example: " + why] += 1

    pairs = []
    for en, (_, _, de) in sorted(best.items(), key=lambda kv: kv[1][1]):
        if a.max_words and (len(en.split()) > a.max_words or len(de.split()) > a.max_words):
            drops[f"longer than {a.max_words} words"] += 1
            continue
        pairs.append((en, de))
    random.Random(a.seed).shuffle(pairs)
    n_eval = min(a.max_eval, max(1, int(len(pairs) * a.eval_fraction)))
    split = {"eval": pairs[:n_eval], "train": pairs[n_eval:]}
    os.makedirs(a.out_dir, exist_ok=True)
    for name, rows in split.items():
        with open(os.path.join(a.out_dir, name + ".jsonl"), "w", encoding="utf-8") as f:
            for en, de in rows:
                f.write(json.dumps({"translation": {"en": en, "de": de}}, ensure_ascii=False) + "\n")

    print(f"make_data.py: {entries} dictionary entries read from {index_path}"
          + ("" if a.no_examples else " (headwords and usage examples)"))
    print(f"make_data.py: {len(pairs)} pairs kept: {len(split['train'])} in {a.out_dir}/train.jsonl, "
          f"{len(split['eval'])} in {a.out_dir}/eval.jsonl")
    print("make_data.py: dropped:")
    for why, n in drops.most_common():
        print(f"  {n:8d}  {why}")


if __name__ == "__main__":
    main()
