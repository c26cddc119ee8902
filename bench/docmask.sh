#!/usr/bin/env bash
# make bench, document masking: train --doc-mask on Tiny Shakespeare split
# into its paragraphs (about 7,000 documents, one JSONL line each, prepared
# with the GPT-2 tokenizer: <|endoftext|> opens each), against the same run
# without the flag. Masked attention computes only each document's pairs,
# so its step should take no longer (goal: masked / unmasked <= 1.0).
#   bench/docmask.sh [MODEL] [THREADS] [B] [T] [STEPS]   (default gpt2-124m 2 8 256 4)
set -u
cd "$(dirname "$0")/.."
MODEL=${1:-gpt2-124m}; THREADS=${2:-${THREADS:-2}}; BB=${3:-8}; TT=${4:-256}; STEPS=${5:-4}
TEXT=${TSR_DATA:-../shared/data}/tinyshakespeare.txt
PY=${PYTHON:-/usr/bin/python3}; [ -x "$PY" ] || PY=python3
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
$PY - "$TEXT" "$dir/paragraphs.jsonl" <<'PY' || { echo "  (document masking: python3 is needed to split the paragraphs)"; exit 0; }
import json, sys
paras = [p.strip() for p in open(sys.argv[1]).read().split('\n\n') if p.strip()]
with open(sys.argv[2], 'w') as f:
    for p in paras: f.write(json.dumps({"text": p}) + "\n")
PY
ndoc=$(wc -l < "$dir/paragraphs.jsonl")
./tessera prepare --input "$dir/paragraphs.jsonl" --out "$dir/d" --threads "$THREADS" >/dev/null 2>&1 ||
  { echo "  (document masking: prepare failed; the GPT-2 vocabulary is needed)"; exit 0; }
echo "Document masking: $MODEL B=$BB T=$TT on Tiny Shakespeare's $ndoc paragraphs (the faster of steps 2-$STEPS, $THREADS threads; MFU of the attention pairs really computed):"
dmrow() {   # label, then flags; sets DM_MS
  local label=$1 log="$dir/log.jsonl" best mfu
  shift
  rm -f "$log"
  ./tessera train --model "$MODEL" --data "$dir/d" --batch "$BB" --seq "$TT" --steps "$STEPS" --log-every 1 \
    --threads "$THREADS" --eval-batches 1 --log "$log" "$@" >"$dir/out" 2>&1 || { echo "  $label: failed: $(tail -1 "$dir/out")"; DM_MS=0; return; }
  best=$(grep -o '"ms":[0-9.]*' "$log" | tail -n +2 | cut -d: -f2 | sort -n | head -1)
  mfu=$(grep -o '"ms":[0-9.]*,"tokens_per_s":[0-9.]*,"mfu":[0-9.]*' "$log" | tail -n +2 | sort -t: -k2 -n | head -1 | sed 's/.*"mfu"://')
  printf '  %-12s %9.1f ms/step %9.0f tokens/s   MFU %5.1f%%\n' "$label" "$best" \
    "$(awk -v b="$BB" -v t="$TT" -v ms="$best" 'BEGIN { print b * t / ms * 1000 }')" "$(awk -v m="$mfu" 'BEGIN { print 100 * m }')"
  DM_MS=$best
}
dmrow unmasked; u=$DM_MS
dmrow masked --doc-mask; m=$DM_MS
awk -v u="$u" -v m="$m" 'BEGIN { if (u > 0 && m > 0) printf "  masked / unmasked step time %.2f (goal <= 1.0)\n", m / u }'
