#!/usr/bin/env bash
# make demo: the first run. Tokenizes Tiny Shakespeare (or CORPUS=your.txt)
# with the GPT-2 tokenizer, trains a small GPT on it for a few minutes on
# this machine with the validation loss checked along the way, then samples.
set -euo pipefail
cd "$(dirname "$0")/.."
CORPUS=${CORPUS:-../shared/data/tinyshakespeare.txt}
STEPS=${STEPS:-500}
if [ ! -f "$CORPUS" ]; then
  echo "demo: $CORPUS not found; set CORPUS=path/to/text.txt" >&2
  exit 2
fi
mkdir -p runs
rm -rf runs/demo runs/demo-data runs/demo.jsonl
echo "== 1. tokenize $CORPUS with the GPT-2 tokenizer into token shards (90% train, 10% validation)"
./tessera prepare --input "$CORPUS" --out runs/demo-data
echo
echo "== 2. train gpt2-tiny (4 layers, d_model 128, GPT-2 vocabulary) for $STEPS steps;"
echo "      the loss starts near ln(50257) = 10.8; validation every 100 steps"
./tessera train --model gpt2-tiny --data runs/demo-data --batch 16 --seq 64 --steps "$STEPS" \
  --lr 3e-3 --warmup 30 --log-every 25 --eval-every 100 --eval-batches 20 \
  --ckpt-dir runs/demo --log runs/demo.jsonl
echo
echo "== 3. sample from the trained model (tessera sample --ckpt runs/demo)"
./tessera sample --ckpt runs/demo --prompt "ROMEO:" --tokens 120 --temperature 0.8
echo
echo "== 4. plot the run (tessera plot): loss, validation loss, learning rate, throughput, memory"
rm -f runs/demo.svg
./tessera plot runs/demo.jsonl --out runs/demo.svg --log-loss
echo
echo "== done. Metrics of every logged step and evaluation: runs/demo.jsonl; their plot: runs/demo.svg"
echo "   (open it in a browser; compare runs with ./tessera plot A.jsonl B.jsonl --out AB.svg)"
echo "   Evaluate on all validation data: ./tessera eval --ckpt runs/demo --data runs/demo-data"
