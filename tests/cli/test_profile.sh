#!/usr/bin/env bash
# tessera train --profile: where the steps' time goes. The table names every
# GEMM by layer and shape (forward, input gradient, weight gradient) and the
# other kinds of work, its rows and "other" add up to the step time, the
# JSONL carries each step's milliseconds by kind, a pipeline prints one
# table per stage and tensor parallelism the per-rank shapes, and profiling
# changes no number of the run. Run from the repository root.
source "$(dirname "$0")/lib.sh"
R="train --data $DATA --tokenizer byte --seed 3 --steps 4 --log-every 1"

# rows_sum OUT: the ms/step of every row of the first table plus "other",
# against the table's mean step ("sum mean"); each line of a table is
# "  kind [layer] [shape] calls ms/step share% ..."
rows_sum() {
  awk '/^profile:/ { n++; if (n == 1) { for (i = 1; i <= NF; i++) if ($i == "ms/step;") { m = $(i - 1) } } next }
       n == 1 && /^  other/ { s += $2; done = 1 }
       n == 1 && !done && /^  / && !/^  work/ { for (i = 1; i <= NF; i++) if ($i ~ /%$/ && $(i - 1) ~ /^[0-9.]+$/) { s += $(i - 1); break } }
       END { print s, m }' "$1"
}

# ---- one process: the rows, their names and shapes, and the sum ----
"$BIN" $R --model gpt2-tiny --batch 4 --seq 32 --threads 2 --profile --log "$TMP/p.jsonl" --ckpt-dir "$TMP/p" >"$TMP/p.out" 2>&1 ||
  echo "     $(tail -1 "$TMP/p.out")"
missing=""
for row in "gemm fwd      qkv        128×128 · 128×384" "gemm fwd      attn.proj  128×128 · 128×128" \
           "gemm fwd      fc         128×128 · 128×512" "gemm fwd      mlp.proj   128×512 · 512×128" \
           "gemm fwd      head       128×128 · 128×256" "gemm dinp     qkv        128×384 · 384×128" \
           "gemm dweight  qkv        384×128 · 128×128" "gemm dweight  head       256×128 · 128×128" \
           "attention" "softmax + loss" "norms" "pointwise" "embedding" "AdamW" "grads zero/norm" "loader wait" \
           "other" "all GEMMs"; do
  grep -q "^  $row " "$TMP/p.out" || missing="$missing [$row]"
done
grep -q "^profile:   rank 0 of 1 (2 threads), mean of 3 steps: " "$TMP/p.out" && [ -z "$missing" ] &&
  ok "--profile prints a row per GEMM (layer and M×K · K×N shape, forward and both gradients) and per kind of work" ||
  bad "--profile rows" "missing:$missing" "$(grep -A3 '^profile' "$TMP/p.out")"
read -r s m <<<"$(rows_sum "$TMP/p.out")"
awk -v s="$s" -v m="$m" 'BEGIN { d = s - m; if (d < 0) d = -d; exit !(m > 0 && d <= 0.01 * m + 0.05) }' &&
  ok "the profile's rows and 'other' add up to the mean step ($s of $m ms)" || bad "profile rows add up" "rows $s, step $m"
# calls OUT KIND LAYER [TABLE]: the calls per step of a GEMM row (the fifth
# field from the end: calls, ms/step, share, GFLOP/s, ceiling), in the
# TABLE-th table (default 1)
calls() { awk -v k="$2" -v l="$3" -v t="${4:-1}" '/^profile:/ { n++ } n == t && index($0, "  " k) == 1 && $3 == l { print $(NF - 4); exit }' "$1"; }
[ "$(calls "$TMP/p.out" "gemm fwd" qkv)" = 4 ] && [ "$(calls "$TMP/p.out" "gemm fwd" head)" = 1 ] &&
  [ "$(calls "$TMP/p.out" "gemm dweight" mlp.proj)" = 4 ] &&
  ok "calls are per step: 4 layers' qkv and mlp.proj GEMMs, one head" || bad "calls per step" "$(grep 'gemm fwd' "$TMP/p.out")"
# the JSONL: milliseconds by kind on every step record, adding up to the step's
n=$(grep -c '"profile_ms":{"gemm_fwd":' "$TMP/p.jsonl")
bad_sum=$(grep -o '"ms":[0-9.]*\|"profile_ms":{[^}]*}' "$TMP/p.jsonl" | paste - - | sed 's/"ms"://; s/"profile_ms"://' |
  awk '{ ms = $1; s = 0; n = split($2, kv, ","); for (i = 1; i <= n; i++) { split(kv[i], p, ":"); gsub(/[{}]/, "", p[2]); s += p[2] }
         d = s - ms; if (d < 0) d = -d; if (d > 0.01) print ms, s }')
[ "$n" = 4 ] && [ -z "$bad_sum" ] && grep -q '"adamw":[0-9.]*,"grads":[0-9.]*,"loader":[0-9.]*,"comm":[0-9.]*,"io":[0-9.]*,"other":' "$TMP/p.jsonl" &&
  ok "the JSONL gives each step's milliseconds by kind (profile_ms), adding up to its ms" ||
  bad "JSONL profile_ms" "$n records; sums off: $bad_sum" "$(head -1 "$TMP/p.jsonl" | cut -c1-300)"
# profiling changes nothing the run computes
"$BIN" $R --model gpt2-tiny --batch 4 --seq 32 --threads 2 --log "$TMP/n.jsonl" --ckpt-dir "$TMP/n" >"$TMP/n.out" 2>&1
same_bits "$TMP/p" "$TMP/n" && losses_match "$TMP/p.jsonl" "$TMP/n.jsonl" && ! grep -q "^profile:" "$TMP/n.out" &&
  ! grep -q profile_ms "$TMP/n.jsonl" && ok "a run with --profile ends with the same checkpoint bits; without it, no table" ||
  bad "--profile changes the run"

# ---- a pipeline: a table per stage, the head on the last ----
"$BIN" $R --model gpt2-tiny --batch 1 --seq 32 --nproc 2 --pp 2 --micro-batches 4 --profile >"$TMP/pp.out" 2>&1 ||
  echo "     $(tail -1 "$TMP/pp.out")"
grep -q "^profile:   stage 0 of 2 (world rank 0, 1 thread)" "$TMP/pp.out" && grep -q "^profile:   stage 1 of 2 (world rank 1, 1 thread)" "$TMP/pp.out" &&
  grep -q "^  gemm fwd      qkv        32×128 · 128×384 " "$TMP/pp.out" && [ "$(calls "$TMP/pp.out" "gemm fwd" qkv 1)" = 8 ] &&
  [ -z "$(calls "$TMP/pp.out" "gemm fwd" head 1)" ] && [ "$(calls "$TMP/pp.out" "gemm fwd" head 2)" = 4 ] &&
  sed -n '/^profile:   stage 1/,$p' "$TMP/pp.out" | grep -q "^  communication " &&
  ok "pp=2: one table per stage (world ranks 0 and 1): micro-batch shapes, 2 layers × 4 micro-batches, the head on stage 1" ||
  bad "pp=2 profile" "$(grep -E '^profile|gemm fwd' "$TMP/pp.out")"

# ---- tensor parallel: the per-rank halves; LLaMA's layers ----
"$BIN" $R --model gpt2-tiny --batch 4 --seq 32 --nproc 2 --tp 2 --profile >"$TMP/tp.out" 2>&1 || echo "     $(tail -1 "$TMP/tp.out")"
grep -q "^profile:   rank 0 of 2 (1 thread)" "$TMP/tp.out" && grep -q "^  gemm fwd      qkv        128×128 · 128×192 " "$TMP/tp.out" &&
  grep -q "^  gemm fwd      mlp.proj   128×256 · 256×128 " "$TMP/tp.out" && grep -q "^  gemm fwd      head       128×128 · 128×128 " "$TMP/tp.out" &&
  ok "tp=2: the per-rank shapes (half the heads, FFN columns and vocabulary)" || bad "tp=2 profile" "$(grep 'gemm fwd' "$TMP/tp.out")"
"$BIN" $R --model llama-tiny --batch 2 --seq 32 --profile >"$TMP/ll.out" 2>&1 || echo "     $(tail -1 "$TMP/ll.out")"
for l in o_proj gate+up down_proj; do [ "$(calls "$TMP/ll.out" "gemm fwd" $l)" = 4 ] || missing="$missing $l"; done
# llama-tiny's q, k and v are 128 + 2·64 wide, as wide as the byte vocabulary: one shape, one row for both
[ -z "$missing" ] && [ "$(calls "$TMP/ll.out" "gemm fwd" qkv/head)" = 5 ] &&
  ok "llama-tiny: o_proj, gate+up and down_proj rows; qkv and the head share a shape and a row (qkv/head)" ||
  bad "llama profile rows" "missing $missing" "$(grep 'gemm fwd' "$TMP/ll.out")"

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
