#!/usr/bin/env bash
# Fixed short runs whose losses, exported weights and checkpoint bytes
# (parameters and AdamW moments) must not change when the code is
# restructured: gpt2-tiny on the byte tokenizer, 10 steps with clipping
# active and an evaluation, in four layouts — one process, dp=2 ZeRO-0,
# dp=4 ZeRO-3 and one process with --grad-accum 2. The expected values in
# tests/cli/expected/same_model.txt were first written by the code before
# the training stack was restructured (one step, one path), and again when
# the bias and norm gradients took their sums by chunks of rows, on this
# project's machines (results are bitwise repeatable for a given thread count and
# CPU, so the runs pin their threads, and the file records the CPU — name,
# family, model, the instruction sets the kernels choose by — and OpenBLAS
# kernel it was written on: on another the comparison is skipped, saying
# why). Regenerate the file only when a change is meant to alter the
# numbers:
#   bash tests/cli/test_same_model.sh --write
source "$(dirname "$0")/lib.sh"
EXPECTED=$(dirname "$0")/expected/same_model.txt
# The CPU as the kernels see it: its name (which a virtual machine may blur),
# family and model, and the instruction sets that choose the kernels' paths.
cpu_field() { grep -m1 "^$1[[:space:]]*:" /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//'; }
isa=$(cpu_field flags | tr ' ' '\n' | grep -xE 'avx2|fma|avx512f|avx512vl|avx512_bf16|amx_tile|amx_bf16' | sort | tr '\n' ' ')
machine="# machine: $(cpu_field 'model name'), family $(cpu_field 'cpu family') model $(cpu_field model), ${isa}OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE:-unset}"
if [ "${1:-}" != "--write" ] && [ "$(head -1 "$EXPECTED")" != "$machine" ]; then
  echo "skip same-model runs: $EXPECTED was recorded on '$(head -1 "$EXPECTED" | cut -c12-)', this is '${machine:11}'"
  echo "0 passed, 0 failed"
  exit 0
fi

R="train --model gpt2-tiny --data $DATA --val-data $DATA --eval-every 5 --eval-batches 2 --tokenizer byte --steps 10
   --seq 64 --log-every 1 --seed 7 --lr 2e-3 --warmup 3 --clip 0.5"
layouts=("dp1|--batch 8 --threads 2"
         "dp2_zero0|--nproc 2 --dp 2 --batch 4 --threads 1"
         "dp4_zero3|--nproc 4 --dp 4 --zero 3 --batch 2 --threads 1"
         "accum2|--grad-accum 2 --batch 4 --threads 2")

# digest NAME: the run's losses, then SHA-256 of its export and of each rank file of its checkpoint.
digest() {
  local name=$1 d="$TMP/$1" step
  step=$(cat "$d/latest") || return 1
  "$BIN" export --ckpt "$d" --out "$TMP/$name.safetensors" >/dev/null || return 1
  grep -o '"\(val_\)\?loss":[0-9.]*' "$TMP/$name.jsonl" | tr '\n' ' '
  echo
  echo "export $(sha256sum < "$TMP/$name.safetensors" | cut -c1-64)"
  for f in "$d/$step"/rank_*.tsr; do echo "$(basename "$f") $(sha256sum < "$f" | cut -c1-64)"; done
}

out="$TMP/now.txt"
echo "$machine" > "$out"
for l in "${layouts[@]}"; do
  name=${l%%|*}; flags=${l#*|}
  if ! "$BIN" $R $flags --log "$TMP/$name.jsonl" --ckpt-dir "$TMP/$name" > "$TMP/$name.out" 2>&1; then
    bad "$name: the run failed" "$(tail -1 "$TMP/$name.out")"
    continue
  fi
  { echo "== $name"; digest "$name"; } >> "$out"
done

if [ "${1:-}" = "--write" ]; then
  cp "$out" "$EXPECTED"
  echo "wrote $EXPECTED"
  exit 0
fi
for l in "${layouts[@]}"; do
  name=${l%%|*}
  want=$(sed -n "/^== $name\$/,/^== /p" "$EXPECTED" | grep -v '^== ')
  got=$(sed -n "/^== $name\$/,/^== /p" "$out" | grep -v '^== ')
  if [ -n "$want" ] && [ "$want" = "$got" ]; then ok "$name: the same losses, exported weights and checkpoint bytes (parameters and moments) as before"
  else bad "$name differs from tests/cli/expected/same_model.txt" "$(diff <(echo "$want") <(echo "$got") | head -6)"; fi
done
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
