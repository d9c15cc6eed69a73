"""Greedy translation of the eval pairs by the exported model, in transformers: the check that
`dscpp export-hf` wrote a T5ForConditionalGeneration that Python loads and runs as dscpp trained it.
It first computes the eval loss and token accuracy as dscpp's final evaluation does (sources and
targets cut at --max_source_length / --max_target_length, the mean over the target tokens), which
should print the numbers dscpp printed.

Reads MODEL_DIR (config.json, model.safetensors, and the tokenizer files copied beside them) and
EVAL.jsonl; writes OUT_PREFIX.src (sources, without the prefix), OUT_PREFIX.ref (references) and
OUT_PREFIX.hf.txt (transformers' outputs), one line each; prints the first --show triples, the
exact-match rate, and corpus BLEU and chrF by PyPI's sacrebleu when it is installed.

Usage: translate_hf.py MODEL_DIR EVAL.jsonl OUT_PREFIX [--source_prefix P] [--max_source_length N]
                       [--max_target_length N] [--max_new_tokens N] [--show N]
Needs PyPI's transformers and torch (e.g. the venv scripts/setup.sh makes).
"""
import argparse
import json
import time

import torch
from transformers import AutoTokenizer, T5ForConditionalGeneration


def one_line(text):
    return " ".join(text.split())


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("model_dir")
    ap.add_argument("eval")
    ap.add_argument("out_prefix")
    ap.add_argument("--source_prefix", default="translate English to German: ")
    ap.add_argument("--max_source_length", type=int, default=24)
    ap.add_argument("--max_target_length", type=int, default=16)
    ap.add_argument("--max_new_tokens", type=int, default=16)
    ap.add_argument("--batch_size", type=int, default=64)
    ap.add_argument("--show", type=int, default=12)
    a = ap.parse_args()

    pairs = []
    with open(a.eval, encoding="utf-8") as f:
        for line in f:
            if line.strip():
                t = json.loads(line)["translation"]
                pairs.append((one_line(t["en"]), one_line(t["de"])))
    tok = AutoTokenizer.from_pretrained(a.model_dir)
    model = T5ForConditionalGeneration.from_pretrained(a.model_dir).eval()
    print(f"translate_hf.py: {model.num_parameters()} parameters loaded from {a.model_dir}")
    total, tokens, correct = 0.0, 0, 0
    with torch.no_grad():
        for i in range(0, len(pairs), a.batch_size):
            rows = pairs[i:i + a.batch_size]
            enc = tok([a.source_prefix + en for en, _ in rows], max_length=a.max_source_length, truncation=True,
                      padding=True, return_tensors="pt", return_token_type_ids=False)
            labels = tok(text_target=[de for _, de in rows], max_length=a.max_target_length, truncation=True,
                         padding=True, return_tensors="pt", return_token_type_ids=False)["input_ids"]
            labels[labels == tok.pad_token_id] = -100
            out = model(**enc, labels=labels)
            n = int((labels != -100).sum())
            total += out.loss.item() * n
            tokens += n
            correct += int(((out.logits.argmax(-1) == labels) & (labels != -100)).sum())
    print(f"translate_hf.py: eval loss {total / tokens:.4f}, accuracy {100.0 * correct / tokens:.2f}% "
          f"({tokens} tokens), as transformers computes them")

    start = time.time()
    outputs = []
    with torch.no_grad():
        for i in range(0, len(pairs), a.batch_size):
            batch = [a.source_prefix + en for en, _ in pairs[i:i + a.batch_size]]
            enc = tok(batch, return_tensors="pt", padding=True, return_token_type_ids=False)
            ids = model.generate(**enc, max_new_tokens=a.max_new_tokens, num_beams=1, do_sample=False)
            outputs += [one_line(s) for s in tok.batch_decode(ids, skip_special_tokens=True)]
    seconds = time.time() - start
    for suffix, lines in ((".src", [en for en, _ in pairs]), (".ref", [de for _, de in pairs]), (".hf.txt", outputs)):
        with open(a.out_prefix + suffix, "w", encoding="utf-8") as f:
            f.write("".join(line + "\n" for line in lines))

    print(f"translate_hf.py: {len(pairs)} sources translated greedily in {seconds:.1f} s")
    for (en, de), out in list(zip(pairs, outputs))[:a.show]:
        print(f"  source     {en}\n  reference  {de}\n  output     {out}\n")
    exact = sum(o == de for (_, de), o in zip(pairs, outputs))
    print(f"translate_hf.py: exact match {exact}/{len(pairs)} ({100.0 * exact / len(pairs):.1f}%)")
    try:
        import sacrebleu
    except ImportError:
        print("translate_hf.py: PyPI sacrebleu is not installed: no Python BLEU")
        return
    refs = [[de for _, de in pairs]]
    print(f"sacrebleu {sacrebleu.__version__}: {sacrebleu.corpus_bleu(outputs, refs)}")
    print(f"sacrebleu {sacrebleu.__version__}: {sacrebleu.corpus_chrf(outputs, refs)}")


if __name__ == "__main__":
    main()
