#!/usr/bin/env bash
# make bench, checkpoints: the wall time of a step with a checkpoint saved
# after every step (--ckpt-every 1), synchronous and --ckpt-async, against
# the step without checkpoints (goal: async <= 1.10x). A step's time is the
# difference of two whole runs' wall times, STEPS steps and 1 step, over
# STEPS - 1: start-up, the first step and the last save cancel, and each
# step left holds one step and the save of the one before it (async: its
# staging copy, and any wait for the previous write).
#   bench/ckpt.sh [MODEL B T STEPS THREADS]   (default gpt2-124m 8 256 5 $THREADS or 2)
set -u
cd "$(dirname "$0")/.."
MODEL=${1:-gpt2-124m} BB=${2:-8} TT=${3:-256} STEPS=${4:-5} THREADS=${5:-${THREADS:-2}}
[ "$STEPS" -ge 2 ] || { echo "bench/ckpt.sh: STEPS must be at least 2" >&2; exit 2; }
TEXT=${TSR_DATA:-../shared/data}/tinyshakespeare.txt
TOK=gpt2; [ "$MODEL" = gpt2-tiny ] && TOK=byte   # (tiny settings: a check that the rows run)
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
echo "Checkpoints every step, $MODEL B=$BB T=$TT, $STEPS steps, $THREADS threads (wall ms per step, its save included):"
# wall seconds of a run of N steps, then tessera train flags
wall() {
  local n=$1; shift
  rm -rf "$dir/run"
  local t0; t0=$(date +%s.%N)
  ./tessera train --model "$MODEL" --data "$TEXT" --tokenizer "$TOK" --batch "$BB" --seq "$TT" --steps "$n" --log-every 1000 \
    --threads "$THREADS" "$@" >"$dir/out" 2>&1 || { echo "failed: $(tail -1 "$dir/out")" >&2; echo 0; return; }
  awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { print b - a }'
}
ckrow() {   # label, then tessera train flags; sets CK_MS
  local label=$1; shift
  local tn t1
  tn=$(wall "$STEPS" "$@"); t1=$(wall 1 "$@")
  CK_MS=$(awk -v a="$tn" -v b="$t1" -v n="$STEPS" 'BEGIN { print (a - b) * 1000 / (n - 1) }')
  printf '  %-34s %9.1f ms/step\n' "$label" "$CK_MS"
}
ckrow "no checkpoints"; none=$CK_MS
ckrow "--ckpt-every 1" --ckpt-dir "$dir/run" --ckpt-every 1 --keep 2; sync=$CK_MS
ckrow "--ckpt-every 1 --ckpt-async" --ckpt-dir "$dir/run" --ckpt-every 1 --keep 2 --ckpt-async; async=$CK_MS
awk -v n="$none" -v s="$sync" -v a="$async" 'BEGIN { if (n > 0)
  printf "  against no checkpoints: synchronous %.2fx, --ckpt-async %.2fx (goal <= 1.10)\n", s / n, a / n }'
