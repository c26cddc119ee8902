#!/usr/bin/env bash
# make demo: the first run. Trains a small GPT on Tiny Shakespeare (or the
# text file given as CORPUS=...) with the byte tokenizer for a few minutes on
# this machine, then samples from it.
set -euo pipefail
cd "$(dirname "$0")/.."
CORPUS=${CORPUS:-../shared/data/tinyshakespeare.txt}
STEPS=${STEPS:-1000}
if [ ! -f "$CORPUS" ]; then
  echo "demo: $CORPUS not found; set CORPUS=path/to/text.txt" >&2
  exit 2
fi
echo "== tessera demo: training gpt2-tiny (0.8M parameters) on $CORPUS for $STEPS steps"
rm -rf runs/demo runs/demo.jsonl
mkdir -p runs
./tessera train --model gpt2-tiny --data "$CORPUS" --batch 16 --seq 64 --steps "$STEPS" \
  --lr 2e-3 --warmup 30 --log-every 50 --ckpt-dir runs/demo --log runs/demo.jsonl
echo
echo "== sampling 300 bytes from the trained model (tessera sample --ckpt runs/demo)"
./tessera sample --ckpt runs/demo --prompt "ROMEO:" --tokens 300 --temperature 0.8
echo
echo "== metrics of every logged step are in runs/demo.jsonl"
