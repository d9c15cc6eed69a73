#!/usr/bin/env bash
# Regenerate (or --check) the Hugging Face parity reference data in this directory.
#
# It builds five tiny random causal models (make_parity.py) and two T5s (make_t5.py: v1.0 and
# v1.1, with 4 pre-tokenized pairs and transformers' generate outputs) with Hugging Face transformers (Llama with
# GQA, Llama 3 with tied embeddings and llama3 RoPE scaling, GPT-2, Qwen2 with
# q/k/v biases, Mistral with a sliding window shorter than the context), saves them with save_pretrained (config.json +
# model.safetensors), a llm.c-format tokens.bin, and reference.safetensors
# holding transformers' logits, loss, gradients and the parameters after 3
# AdamW steps.  These are committed so that CI can check dscpp's model
# loading, forward, backward and optimizer against transformers without
# needing Python, torch or transformers.  make_lora.py then puts PEFT LoRA
# adapters on three of these models and writes lora/<case>/ (PEFT's adapter
# files, the loss, the adapter gradients, one SGD step and merge_and_unload's
# weights; README.md, "LoRA").
#
# Usage: tests/data/hf/make.sh [--check] [VENV_DIR]
#        tests/data/hf/make.sh --load-export MODEL_NAME EXPORT_DIR
#                              [--expect initial|after3] [VENV_DIR]
#   VENV_DIR defaults to ${TMPDIR:-/tmp}/dscpp-hf-venv.  It is created with
#   Debian's python3 and its system site packages (python3-torch 1.13), plus
#   transformers==4.44.2 and safetensors from PyPI, and peft==0.12.0 with
#   --no-deps (its metadata wants torch>=1.13.0, which Debian's 1.13.0a0 is not)
#   plus what it imports that is missing (accelerate==0.33.0 --no-deps, psutil,
#   jinja2 for the model card save_pretrained writes), and sacrebleu==2.6.0
#   (make_t5.py).
#   Without --check: rewrite the data under tests/data/hf/.
#   With --check: generate into a temporary directory and compare every file
#   byte for byte with the committed ones; a reference.safetensors that differs
#   passes only if compare_reference.py finds the difference to be another CPU's
#   rounding; exit 1 on any other difference.
#   With --load-export: check that EXPORT_DIR, an HF directory exported by
#   dscpp for MODEL_NAME (llama_gqa, llama3_tied, gpt2, qwen2 or mistral_swa), loads in
#   transformers and reproduces the reference (--expect initial, the default:
#   the untrained weights; --expect after3: the weights after 3 AdamW steps);
#   exit 1 if not.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
models=(llama_gqa llama3_tied gpt2 qwen2 mistral_swa)
seq2seq_models=(t5_v10 t5_v11)  # made by make_t5.py
# lora/<case>/ (LoRA adapters on the models above) is made by make_lora.py

check=0
venv=""
load_model=""
load_dir=""
expect=""
while [[ $# -gt 0 ]]; do
  arg="$1"; shift
  case "$arg" in
    --check) check=1 ;;
    --load-export)
      if [[ $# -lt 2 ]]; then echo "make.sh: --load-export needs MODEL_NAME EXPORT_DIR" >&2; exit 2; fi
      load_model="$1"; load_dir="$2"; shift 2
      if [[ " ${models[*]} " != *" $load_model "* ]]; then
        echo "make.sh: unknown model $load_model (one of ${models[*]})" >&2; exit 2
      fi
      if [[ ! -d "$load_dir" ]]; then echo "make.sh: no directory $load_dir" >&2; exit 2; fi ;;
    --expect)
      if [[ $# -lt 1 ]]; then echo "make.sh: --expect needs initial or after3" >&2; exit 2; fi
      expect="$1"; shift
      case "$expect" in initial|after3) ;; *) echo "make.sh: --expect $expect: use initial or after3" >&2; exit 2 ;; esac ;;
    -h|--help) sed -n '2,36p' "$0"; exit 0 ;;
    -*) echo "make.sh: unknown option $arg" >&2; exit 2 ;;
    *)
      if [[ -n "$venv" ]]; then echo "make.sh: more than one VENV_DIR" >&2; exit 2; fi
      venv="$arg" ;;
  esac
done
if [[ -n "$load_model" && "$check" == 1 ]]; then
  echo "make.sh: --check and --load-export are exclusive" >&2; exit 2
fi
if [[ -n "$expect" && -z "$load_model" ]]; then
  echo "make.sh: --expect only goes with --load-export" >&2; exit 2
fi
venv="${venv:-${TMPDIR:-/tmp}/dscpp-hf-venv}"

if [[ ! -x "$venv/bin/python" ]]; then
  echo "make.sh: creating venv $venv"
  /usr/bin/python3 -m venv --system-site-packages "$venv"
fi
if ! "$venv/bin/python" -c 'import transformers, safetensors, sys; sys.exit(transformers.__version__ != "4.44.2")' 2>/dev/null; then
  echo "make.sh: installing transformers==4.44.2 safetensors into $venv"
  "$venv/bin/pip" install -q transformers==4.44.2 safetensors
fi
if ! "$venv/bin/python" -c 'import sacrebleu' 2>/dev/null; then  # make_t5.py scores its outputs with it
  echo "make.sh: installing sacrebleu==2.6.0 into $venv"
  "$venv/bin/pip" install -q sacrebleu==2.6.0
fi
if ! "$venv/bin/python" -c 'import peft, sys; sys.exit(peft.__version__ != "0.12.0")' 2>/dev/null; then
  echo "make.sh: installing peft==0.12.0 (--no-deps) into $venv"
  "$venv/bin/python" -c 'import accelerate' 2>/dev/null || "$venv/bin/pip" install -q --no-deps accelerate==0.33.0
  "$venv/bin/python" -c 'import psutil' 2>/dev/null || "$venv/bin/pip" install -q psutil
  "$venv/bin/python" -c 'import jinja2' 2>/dev/null || "$venv/bin/pip" install -q jinja2
  "$venv/bin/pip" install -q --no-deps peft==0.12.0
fi

# Keep the run single-threaded and quiet.
export OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 PYTHONHASHSEED=0 CUDA_VISIBLE_DEVICES=""
export TRANSFORMERS_OFFLINE=1 HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false

if [[ -n "$load_model" ]]; then
  exec "$venv/bin/python" "$here/make_parity.py" --load-export "$load_model" "$load_dir" \
    --expect "${expect:-initial}"
fi

if [[ "$check" == 0 ]]; then
  "$venv/bin/python" "$here/make_parity.py" "$here"
  "$venv/bin/python" "$here/make_t5.py" "$here"
  "$venv/bin/python" "$here/make_lora.py" "$here"
  exit 0
fi

tmp="$(mktemp -d "${TMPDIR:-/tmp}/dscpp-hf-check.XXXXXX")"
trap 'rm -rf "$tmp"' EXIT
{ "$venv/bin/python" "$here/make_parity.py" "$tmp" && "$venv/bin/python" "$here/make_t5.py" "$tmp" &&
  "$venv/bin/python" "$here/make_lora.py" "$tmp"; } >"$tmp.log" 2>&1 || {
  cat "$tmp.log" >&2; rm -f "$tmp.log"; exit 1; }
rm -f "$tmp.log"

status=0
nfiles=0
rounded=0
out=""
for m in "${models[@]}" "${seq2seq_models[@]}" lora; do
  # Files generated now: each must exist in the committed tree and be identical.
  while IFS= read -r -d '' f; do
    rel="${f#"$tmp"/}"
    nfiles=$((nfiles + 1))
    if [[ ! -f "$here/$rel" ]]; then
      echo "missing in tests/data/hf: $rel"; status=1
    elif cmp -s "$f" "$here/$rel"; then :
    elif [[ "${rel##*/}" == reference.safetensors ]] &&
         out=$("$venv/bin/python" "$here/compare_reference.py" "$f" "$here/$rel"); then
      # Another CPU's vector code rounds differently (compare_reference.py says why).
      echo "$rel: not byte for byte, $out"; rounded=$((rounded + 1))
    else
      echo "differs: $rel${out:+ ($out)}"; status=1
    fi
    out=""
  done < <(find "$tmp/$m" -type f -print0 | sort -z)
  # Committed files the generator no longer produces.
  if [[ -d "$here/$m" ]]; then
    while IFS= read -r -d '' f; do
      rel="${f#"$here"/}"
      if [[ ! -f "$tmp/$rel" ]]; then echo "stale (not generated): $rel"; status=1; fi
    done < <(find "$here/$m" -type f -print0 | sort -z)
  fi
done

if [[ "$status" == 0 ]]; then
  if [[ "$rounded" == 0 ]]; then echo "make.sh --check: all $nfiles files identical"
  else echo "make.sh --check: all $nfiles files identical but $rounded reference.safetensors within rounding"; fi
else
  echo "make.sh --check: FAILED (regenerate with tests/data/hf/make.sh and review the diff)" >&2
fi
exit "$status"
