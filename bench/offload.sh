#!/usr/bin/env bash
# The offload, part of make bench: gpt2-124m B=8 T=256 with and without
# --offload optimizer (goal: <= 1.25x the step time), then gpt2-1558m in
# bf16 with --zero 3 --offload params, B=1 T=1024, 3 steps — a model
# whose fp32 weights, gradients and AdamW moments (25 GB) do not fit a
# 24 GB machine: peak resident memory, step time, I/O bytes and wait per
# step, loss falling. The files go under $OFFLOAD_DIR (default $TMPDIR or
# /tmp); the big row is skipped with a reason when they do not fit there.
# SMALL / BIG (model B T) replace the two rows' shapes (a quick check:
# SMALL="gpt2-tiny 2 64" BIG="gpt2-tiny 1 64" bash bench/offload.sh).
set -u
cd "$(dirname "$0")/.."
THREADS=${THREADS:-2}
TEXT=${TSR_DATA:-../shared/data}/tinyshakespeare.txt
DIR=${OFFLOAD_DIR:-${TMPDIR:-/tmp}}
read -r s_model s_b s_t <<<"${SMALL:-gpt2-124m 8 256}"
read -r b_model b_b b_t <<<"${BIG:-gpt2-1558m 1 1024}"
TOK=gpt2
case "$s_model$b_model" in *tiny*) TOK=byte ;; esac

# runs tessera train with the flags; sets OR_MS (the fastest of steps 2-3; step 1 alone when only one),
# OR_WAIT / OR_READ / OR_WRITE (the last step's I/O), OR_PEAK (tagged peak bytes), OR_RSS (KiB),
# OR_LOSS (first and last loss)
offrow() {
  local log; log=$(mktemp)
  /usr/bin/env time -f "%M" -o "$log.rss" ./tessera train --data "$TEXT" --tokenizer "$TOK" --steps 3 --log-every 1 \
    --threads "$THREADS" --log "$log" "$@" >"$log.out" 2>&1 || { echo "  failed: $(tail -1 "$log.out")"; OR_MS=0; rm -f "$log"*; return 1; }
  OR_MS=$(grep -o '"ms":[0-9.]*' "$log" | cut -d: -f2 | { n=$(cat); echo "$n" | tail -n +2 | sort -n | head -1 | grep . || echo "$n" | head -1; })
  OR_WAIT=$(grep -o '"io_wait_ms":[0-9.]*' "$log" | tail -1 | cut -d: -f2)
  OR_READ=$(grep -o '"io_read_bytes":[0-9]*' "$log" | tail -1 | cut -d: -f2)
  OR_WRITE=$(grep -o '"io_written_bytes":[0-9]*' "$log" | tail -1 | cut -d: -f2)
  OR_PEAK=$(grep -o '"mem_peak_bytes":[0-9]*' "$log" | tail -1 | cut -d: -f2)
  OR_RSS=$(tail -1 "$log.rss" 2>/dev/null)
  OR_LOSS="$(grep -o '"loss":[0-9.]*' "$log" | head -1 | cut -d: -f2) -> $(grep -o '"loss":[0-9.]*' "$log" | tail -1 | cut -d: -f2)"
  rm -f "$log"*
}

echo "Offload (--offload optimizer, then params; files under $DIR; tessera comm-bench --disk there:" \
  "$(./tessera comm-bench --disk "$DIR" --max-bytes 256M --iters 2 2>&1 | grep -o '[0-9.]* GB/s' | head -1))"
offrow --model "$s_model" --batch "$s_b" --seq "$s_t"; base=$OR_MS
offrow --model "$s_model" --batch "$s_b" --seq "$s_t" --offload optimizer --offload-dir "$DIR"
printf '  %-11s B=%d T=%-4d %9.1f ms/step without, %9.1f with (%.2fx; goal <= 1.25): I/O wait %s ms, %.1f MB read and %.1f MB written per step\n' \
  "$s_model" "$s_b" "$s_t" "$base" "$OR_MS" "$(awk -v a="$OR_MS" -v b="$base" 'BEGIN { print (b > 0 ? a / b : 0) }')" "${OR_WAIT:-0}" \
  "$(awk -v x="${OR_READ:-0}" 'BEGIN { print x / 1e6 }')" "$(awk -v x="${OR_WRITE:-0}" 'BEGIN { print x / 1e6 }')"
need=$(./tessera plan --model "$b_model" --dp 1 --devices 1 --precision bf16 --seq "$b_t" --global-batch "$b_b" --micro-batch "$b_b" \
  --zero 3 --offload params --recompute full --json $([ "$TOK" = byte ] && echo --vocab 256) | grep -o '"offload_bytes":[0-9.e+]*' | cut -d: -f2)
free=$(df -B1 --output=avail "$DIR" 2>/dev/null | tail -1)
if [ -z "$need" ] || [ -z "$free" ] || awk -v n="$need" -v f="$free" 'BEGIN { exit !(n * 1.05 > f) }'; then
  echo "  $b_model: skipped, its offload files need $(awk -v n="${need:-0}" 'BEGIN { printf "%.1f", n / 1e9 }') GB and $DIR has" \
    "$(awk -v f="${free:-0}" 'BEGIN { printf "%.1f", f / 1e9 }') GB free (set OFFLOAD_DIR)"
else
  # (--lr 3e-5: at B=1 the default 6e-4's first warmup steps move a 1.5B model's loss up)
  offrow --model "$b_model" --batch "$b_b" --seq "$b_t" --precision bf16 --recompute full --zero 3 --offload params --offload-dir "$DIR" --lr 3e-5 &&
    printf '  %-11s B=%d T=%-4d bf16, --zero 3 --offload params --recompute full --lr 3e-5: %.1f s/step, peak resident %.2f GB (RSS; tagged %.2f GB; goal <= 12), I/O wait %.1f s, %.2f GB read and %.2f GB written per step, loss %s\n' \
      "$b_model" "$b_b" "$b_t" "$(awk -v m="$OR_MS" 'BEGIN { print m / 1000 }')" "$(awk -v r="${OR_RSS:-0}" 'BEGIN { print r * 1024 / 1e9 }')" \
      "$(awk -v p="${OR_PEAK:-0}" 'BEGIN { print p / 1e9 }')" "$(awk -v w="${OR_WAIT:-0}" 'BEGIN { print w / 1000 }')" \
      "$(awk -v x="${OR_READ:-0}" 'BEGIN { print x / 1e9 }')" "$(awk -v x="${OR_WRITE:-0}" 'BEGIN { print x / 1e9 }')" "$OR_LOSS"
fi
