#!/usr/bin/env python3
"""`dscpp bleu` against PyPI sacreBLEU (the version scripts/setup.sh pins) on real text.

The references are fortunes from Debian's `fortunes` files (one fortune a segment, its lines
joined), plus hand-made segments aimed at the 13a tokenizer and at Python's lowercasing and
whitespace (numbers with commas and periods, dashes, HTML entities, <skipped>, accents, Greek
final sigma, the dotted capital I, NBSP and other Unicode spaces, form feeds, a BOM, empty lines).
The hypotheses perturb each reference: words dropped, swapped, repeated, recased, punctuation
changed or removed, numbers and entities inserted; a second reference perturbs it otherwise.

Each configuration (1 and 2 references x each smoothing method x lowercase on and off x the 13a
and none tokenizers, floor's and add-k's values, chrF and chrF++) runs `dscpp bleu --json` on
the files, which sacreBLEU reads as its command does (split at "\\n", each line rstripped):
the printed line must equal str() of sacreBLEU's score, the n-gram counts and lengths must be
equal, and the score, precisions, BP and ratio must agree to 1e-9. Sentence-level scores are
compared line by line for four of them, and sacrebleu's own command is run on two.

Usage: bleu_parity.py DSCPP   (exit 1 on any difference; 77 when sacrebleu or the fortunes are
missing). BLEU_PARITY_KEEP=DIR keeps the text files in DIR.
"""
import json
import os
import random
import re
import subprocess
import sys
import tempfile

FORTUNES = "/usr/share/games/fortunes"
SEGMENTS = 3000
TOL = 1e-9

# Segments for the tokenizer's and the lowercasing's corners, each also perturbed like the rest.
EDGE = [
    "It costs $1,000.50 today, or 2,5 euros; 3.14 and .5 or 5. too.",
    "pages 3-4, e-mail, --flag, 2--3 and 10-20-30; well-known - dash",
    "&quot;Hi&quot; &amp; &lt;b&gt; &amp;lt; &apos;quoted&apos; AT&T",
    "before<skipped>after and <b>bold</b> [brackets] {braces} a/b_c~d^e`f|g@h#i%j*k+l=m",
    "Don't stop... no, really!!! (ok?) \"yes\" 'no'",
    "Ünïcödé «quotes» — dash… ellipsis 日本語の文。中文，标点！",
    "ΟΔΟΣ ΣΟΦΟΣ ΣΑ Σ. Ἀθῆναι ΑΘΗΝΑΙ",
    "İstanbul IRMAK ıi STRASSE Straße ǅemal ǈubljana ﬁne",
    "tab\there\u00a0nbsp\u2003em\u3000ideo\u0085nel\u200bzwsp\u2028ls\u2029ps end",
    "form\x0cfeed\x0bvtab\x1cfs\x1dgs\x1ers\x1fus\rcr mid",
    "\ufeffBOM first and trailing NBSP\u00a0",
    "",
    "   ",
    "1.2.3 1,2,3 a.b,c .,;: ,. 4.- 5,- -6 7-.",
    "x-",
    "O'Neill's rock-'n'-roll -- 1990s' 80%s $5.00/hr",
    "café. naïve, 1.ü ü.1 ü,2 ü-3 3-ü",
    "ǅ ǈ ǋ ǲ Ω K Å",
]


def fortunes(rng):
    """Fortunes as segments: each fortune's lines joined by single spaces."""
    out = []
    for name in sorted(os.listdir(FORTUNES)):
        path = os.path.join(FORTUNES, name)
        if "." in name or not os.path.isfile(path):
            continue
        try:
            text = open(path, encoding="utf-8").read()
        except UnicodeDecodeError:
            continue
        for fortune in text.split("\n%\n"):
            seg = " ".join(line.strip() for line in fortune.splitlines() if line.strip())
            if seg and len(seg) < 400:
                out.append(seg)
    rng.shuffle(out)
    return out[:SEGMENTS]


def perturb(seg, rng, strength):
    words = seg.split(" ")
    ops = rng.randint(0, strength)
    for _ in range(ops):
        if not words:
            break
        i = rng.randrange(len(words))
        op = rng.randrange(12)
        if op == 0 and len(words) > 1:
            del words[i]
        elif op == 1 and i + 1 < len(words):
            words[i], words[i + 1] = words[i + 1], words[i]
        elif op == 2:
            words.insert(i, words[i])
        elif op == 3:
            words[i] = words[i].upper()
        elif op == 4:
            words[i] = words[i].lower()
        elif op == 5:
            words[i] = words[i].capitalize()
        elif op == 6:
            words[i] = re.sub(r"[.,!?;:]", "", words[i]) or words[i]
        elif op == 7:
            words[i] += rng.choice([".", ",", "!", "?", "...", ";", " -", "-", "'s"])
        elif op == 8:
            words.insert(i, rng.choice(["1,000", "3.5", "2-3", "1990s", "$10.00", "4,5", "x-1", "-7"]))
        elif op == 9:
            words.insert(i, rng.choice(["&amp;", "&quot;", "&lt;", "&gt;", "&amp;quot;", "<skipped>", "a-b"]))
        elif op == 10:
            words.insert(i, rng.choice(["Σοφός", "ΣΟΦΟΣ", "İyi", "Straße", "naïve", "日本", "\u00a0", "\u3000"]))
        else:
            words[i] = words[i][::-1]
    out = " ".join(words)
    if rng.random() < 0.05:
        out = out.upper()
    if rng.random() < 0.05:
        out += rng.choice(["  ", "\t", "\u00a0", "\u3000"])
    return out


def write_lines(path, lines):
    with open(path, "w", encoding="utf-8", newline="\n") as f:
        for line in lines:
            f.write(line + "\n")


def read_lines(path):
    # As the sacrebleu command reads a file.
    with open(path, encoding="utf-8", newline="\n") as f:
        return [line.rstrip() for line in f]


def close(a, b):
    return abs(a - b) <= TOL


def run_dscpp(dscpp, args):
    p = subprocess.run([dscpp, "bleu", *args], capture_output=True, text=True, encoding="utf-8")
    if p.returncode != 0:
        raise RuntimeError(f"dscpp bleu {' '.join(args)}: exit {p.returncode}: {p.stderr.strip()}")
    return [json.loads(line) for line in p.stdout.splitlines()]


def compare_bleu(label, got, metric, score, stats):
    problems = []
    if got["line"] != str(score):
        problems.append(f"line {got['line']!r}, sacrebleu {str(score)!r}")
    for key, want in [("score", score.score), ("bp", score.bp), ("ratio", score.ratio)]:
        if not close(got[key], want):
            problems.append(f"{key} {got[key]!r}, sacrebleu {want!r}")
    for n, (g, w) in enumerate(zip(got["precisions"], score.precisions)):
        if not close(g, w):
            problems.append(f"{n + 1}-gram precision {g!r}, sacrebleu {w!r}")
    order = metric.max_ngram_order
    want = {"hyp_len": stats[0], "ref_len": stats[1], "counts": list(stats[2:2 + order]),
            "totals": list(stats[2 + order:])}
    for key, w in want.items():
        if got[key] != w:
            problems.append(f"{key} {got[key]}, sacrebleu {w}")
    return [f"{label}: {p}" for p in problems]


def main(argv):
    if len(argv) != 2:
        print(__doc__)
        return 2
    dscpp = argv[1]
    try:
        import sacrebleu
        from sacrebleu.metrics import BLEU, CHRF
        from sacrebleu.utils import sum_of_lists
    except ImportError as e:
        print(f"bleu_parity: no sacrebleu ({e}): skipping")
        return 77
    if not os.path.isdir(FORTUNES):
        print(f"bleu_parity: no {FORTUNES} (Debian's fortunes package): skipping")
        return 77
    rng = random.Random(20240611)
    refs = fortunes(rng)
    if len(refs) < 1000:
        print(f"bleu_parity: only {len(refs)} fortunes in {FORTUNES}: skipping")
        return 77
    refs = EDGE + refs + EDGE
    refs2 = [perturb(r, rng, 3) for r in refs]
    mild = [perturb(r, rng, 6) for r in refs]
    # A few hypotheses that match nothing, are empty, or equal their reference.
    for i in range(0, len(mild), 97):
        mild[i] = ["", "zzz qqq", refs[i], refs[i].upper()][(i // 97) % 4]
    # Shorter than the references (a brevity penalty below 1), and a handful of two- to
    # four-word scrambles, where some orders match nothing and the smoothing methods part.
    cut = [perturb(" ".join(r.split(" ")[:max(1, len(r.split(" ")) * 2 // 3)]), rng, 10) for r in refs]
    tiny_at = list(range(len(EDGE), len(EDGE) + 12))
    tiny = [" ".join(rng.sample(refs[i].split(" "), min(len(refs[i].split(" ")), rng.randint(2, 4)))) for i in tiny_at]
    corpora = {"mild": (mild, refs, refs2), "cut": (cut, refs, refs2),
               "tiny": (tiny, [refs[i] for i in tiny_at], [refs2[i] for i in tiny_at])}

    keep = os.environ.get("BLEU_PARITY_KEEP")
    tmp = keep or tempfile.mkdtemp(prefix="bleu_parity_")
    os.makedirs(tmp, exist_ok=True)
    files, read = {}, {}
    for corpus, (hyps, r1, r2) in corpora.items():
        names = {k: os.path.join(tmp, f"{corpus}.{k}.txt") for k in ("hyp", "ref1", "ref2")}
        for k, lines in zip(("hyp", "ref1", "ref2"), (hyps, r1, r2)):
            write_lines(names[k], lines)
        files[corpus] = names
        # As the sacrebleu command reads them.
        read[corpus] = (read_lines(names["hyp"]), {1: [read_lines(names["ref1"])],
                                                   2: [read_lines(names["ref1"]), read_lines(names["ref2"])]})

    failures = []
    lines_compared = 0
    configs = []
    for nrefs in (1, 2):
        for smooth in ("exp", "none", "floor", "add-k"):
            for lowercase in (False, True):
                for tok in ("13a", "none"):
                    configs.append((nrefs, smooth, None, lowercase, tok))
    configs += [(1, "floor", 0.2, False, "13a"), (2, "add-k", 0.5, True, "13a"), (2, "add-k", 2.0, False, "none")]
    scores_seen = []
    segment_stats = {}
    for corpus, f in files.items():
        hyps_read, streams = read[corpus]
        for nrefs, smooth, value, lowercase, tok in configs:
            args = [f["ref1"]] + ([f["ref2"]] if nrefs == 2 else []) + [
                "-i", f["hyp"], "--json", "--smooth-method", smooth, "--tokenize", tok]
            if value is not None:
                args += ["--smooth-value", str(value)]
            if lowercase:
                args.append("--lowercase")
            label = f"{corpus}, {nrefs} ref, smooth {smooth}{'' if value is None else f'[{value}]'}, " \
                    f"{'lowercase' if lowercase else 'cased'}, tokenize {tok}"
            metric = BLEU(lowercase=lowercase, tokenize=tok, smooth_method=smooth, smooth_value=value)
            # What corpus_score does, in two steps: the statistics (which the smoothing does not
            # change, so they are extracted once) and the score from them.
            key = (corpus, nrefs, lowercase, tok)
            if key not in segment_stats:
                segment_stats[key] = metric._extract_corpus_statistics(hyps_read, streams[nrefs])
            stats = sum_of_lists(segment_stats[key])[:]
            score = metric._aggregate_and_compute(segment_stats[key])
            try:
                (got,) = run_dscpp(dscpp, args)
            except RuntimeError as e:
                failures.append(str(e))
                continue
            failures += compare_bleu(label, got, metric, score, stats)
            scores_seen.append(f"  {label}: {got['line']}")
            lines_compared += 1

    hyps_read, streams = read["mild"]
    for word_order, lowercase in ((0, False), (0, True), (2, False)):
        metric = CHRF(word_order=word_order, lowercase=lowercase)
        score = metric.corpus_score(hyps_read, streams[2])
        args = [files["mild"]["ref1"], files["mild"]["ref2"], "-i", files["mild"]["hyp"], "--json", "-m", "chrf",
                "--chrf-word-order", str(word_order)] + (["--chrf-lowercase"] if lowercase else [])
        (got,) = run_dscpp(dscpp, args)
        label = f"mild, {score.name}, 2 refs, {'lowercase' if lowercase else 'cased'}"
        if got["line"] != str(score) or not close(got["score"], score.score):
            failures.append(f"{label}: {got['line']} ({got['score']!r}), sacrebleu {score} ({score.score!r})")
        scores_seen.append(f"  {label}: {got['line']}")
        lines_compared += 1

    # Sentence level: every segment's score (BLEU over the orders each reaches, as sacrebleu's -sl).
    f = files["cut"]
    hyps_read, streams = read["cut"]
    for nrefs, smooth, lowercase, tok in ((1, "exp", False, "13a"), (2, "floor", True, "13a"),
                                          (1, "add-k", False, "none"), (2, "none", False, "13a")):
        metric = BLEU(lowercase=lowercase, tokenize=tok, smooth_method=smooth, effective_order=True)
        args = [f["ref1"]] + ([f["ref2"]] if nrefs == 2 else []) + [
            "-i", f["hyp"], "--json", "--sentence-level", "--smooth-method", smooth, "--tokenize", tok]
        if lowercase:
            args.append("--lowercase")
        got = run_dscpp(dscpp, args)
        label = f"cut, sentence level, {nrefs} ref, smooth {smooth}, {'lowercase' if lowercase else 'cased'}, " \
                f"tokenize {tok}"
        if len(got) != len(hyps_read):
            failures.append(f"{label}: {len(got)} lines, expected {len(hyps_read)}")
            continue
        bad = 0
        for i, stats in enumerate(segment_stats[("cut", nrefs, lowercase, tok)]):
            # What sentence_score does with this segment's statistics.
            problems = compare_bleu(f"{label}, segment {i + 1}", got[i], metric,
                                    metric._aggregate_and_compute([stats[:]]), stats)
            if problems:
                bad += 1
                failures += problems[:3] if bad <= 5 else []
            lines_compared += 1
        if bad:
            failures.append(f"{label}: {bad} of {len(hyps_read)} segments differ")

    # sacrebleu's own command on the same files: the same numbers after its signature.
    f = files["cut"]
    for extra in ([], ["--lowercase"]):
        cmd = [sys.executable, "-m", "sacrebleu", f["ref1"], f["ref2"], "-i", f["hyp"], "-f", "text",
               "-w", "2", "-q"] + (["-lc"] if extra else [])
        p = subprocess.run(cmd, capture_output=True, text=True, encoding="utf-8")
        theirs = p.stdout.strip().split(" = ", 1)[-1]
        ours = subprocess.run([dscpp, "bleu", f["ref1"], f["ref2"], "-i", f["hyp"], *extra],
                              capture_output=True, text=True, encoding="utf-8").stdout.strip().split(" = ", 1)[-1]
        if p.returncode != 0 or theirs != ours:
            failures.append(f"sacrebleu command{' -lc' if extra else ''}: {theirs!r} (exit {p.returncode}), "
                            f"dscpp bleu: {ours!r}")
        lines_compared += 1

    if failures:
        for f in failures[:40]:
            print(f"FAIL: {f}")
        print(f"bleu_parity: {len(failures)} problem(s); files in {tmp}")
        return 1
    print(f"bleu_parity: {len(refs)} segments (fortunes + {2 * len(EDGE)} edge cases) and {len(tiny)} short "
          f"scrambles, sacrebleu {sacrebleu.__version__}: {lines_compared} scores equal (lines exact, counts exact, "
          f"numbers to {TOL}):")
    print("\n".join(scores_seen))
    if not keep:
        for names in files.values():
            for path in names.values():
                os.remove(path)
        os.rmdir(tmp)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
