#!/usr/bin/env bash
# Data mixtures (train --data NAME=DIR:W,...): the first 1,000 sequences
# hold each source within one of its weight's share, the step log and JSONL
# count each source's tokens; the loader's state (each source's epoch and
# position) is in the checkpoint and resumes bit for bit on the same layout
# and on another (dp=2 ZeRO-0 to ZeRO-1: the same parameters, bit for bit;
# one process to dp=2: the same sources step by step, the same loader
# state, the losses within 1e-5); a JSON spec is the same mixture;
# evaluation reports each source's loss (train and eval; a --val-data
# mixture's val loss is the weighted mean of its sources'); a plain path
# logs as before; a zero weight, a
# missing directory, a weight that does not parse, sources of different
# tokenizers and a resume with another mixture are refused with exit 2.
# Run from the repository root.
source "$(dirname "$0")/lib.sh"
head -c 200000 "$DATA" >"$TMP/a.txt"; tail -c 100000 "$DATA" >"$TMP/b.txt"; sed -n 3000,4000p "$DATA" >"$TMP/c.txt"
for x in a b c; do "$BIN" prepare --input "$TMP/$x.txt" --out "$TMP/$x" --tokenizer byte --threads 1 >/dev/null; done
head -c 20000 "$DATA" >"$TMP/g.txt"
"$BIN" prepare --input "$TMP/g.txt" --out "$TMP/g" --tokenizer gpt2 --threads 1 >/dev/null
[ -f "$TMP/a/shards.json" ] && grep -q '"tokenizer":"byte"' "$TMP/a/shards.json" && grep -q '"tokenizer":"gpt2"' "$TMP/g/shards.json" &&
  ok "prepare records the shards' tokenizer (shards.json)" || bad "shards.json" "$(cat "$TMP/a/shards.json" 2>&1)"
MIX="web=$TMP/a:0.7,books=$TMP/b:0.2,code=$TMP/c:0.1"
R="train --model gpt2-tiny --tokenizer byte --threads 1 --seq 8 --seed 5"

# ---- shares: 20 steps of 50 sequences ----
"$BIN" $R --data "$MIX" --batch 50 --steps 20 --log-every 20 --eval-batches 1 --log "$TMP/s.jsonl" >"$TMP/s.out" 2>&1
toks=$(grep '"step":20,"loss"' "$TMP/s.jsonl" | grep -o '"tokens_by_source":{[^}]*}')
awk -v t="$toks" 'BEGIN { split("web 0.7 books 0.2 code 0.1", w, " ")
  for (i = 1; i < 6; i += 2) { if (!match(t, "\"" w[i] "\":[0-9]+")) exit 1
    n = substr(t, RSTART + length(w[i]) + 3, RLENGTH - length(w[i]) - 3) / 8; d = n - w[i + 1] * 1000
    if (d > 1 || d < -1) exit 1 } }' && grep -q "step    20/20 .* | tokens web 5600, books 1600, code 800" "$TMP/s.out" &&
  ok "the first 1000 sequences hold each source within one of weight·1000 ($toks)" || bad "shares" "$toks" "$(grep step "$TMP/s.out" | tail -1)"
grep -q '"val_loss_by_source":{"web":[0-9.]*,"books":[0-9.]*,"code":[0-9.]*}' "$TMP/s.jsonl" &&
  grep -q "^eval .* | by source web [0-9.]*, books [0-9.]*, code [0-9.]*$" "$TMP/s.out" &&
  grep -q "^data:      a mixture of 3 sources" "$TMP/s.out" &&
  ok "the sources' val shards are evaluated each: a loss per source in the step log and JSONL" ||
  bad "val loss by source" "$(grep eval "$TMP/s.out")"

"$BIN" $R --data "$MIX" --val-data "a=$TMP/a:1,c=$TMP/c:3" --batch 4 --steps 2 --eval-batches 2 --log "$TMP/v.jsonl" >"$TMP/v.out" 2>&1
rec=$(grep '"val_loss"' "$TMP/v.jsonl")
echo "$rec" | awk '{ match($0, /"val_loss":[0-9.]+/); v = substr($0, RSTART + 11, RLENGTH - 11)
  match($0, /"a":[0-9.]+/); a = substr($0, RSTART + 4, RLENGTH - 4); match($0, /"c":[0-9.]+/); c = substr($0, RSTART + 4, RLENGTH - 4)
  d = v - (0.25 * a + 0.75 * c); if (d < 0) d = -d; exit !(a > 0 && c > 0 && d < 2e-6) }' &&
  ok "a --val-data mixture (a:1, c:3): each source's loss, and the val loss their weighted mean ($rec)" || bad "--val-data mixture" "$rec" "$(tail -1 "$TMP/v.out")"
"$BIN" $R --data "$TMP/a" --batch 4 --steps 2 --eval-batches 1 --log "$TMP/plain.jsonl" >"$TMP/plain.out" 2>&1
[ -s "$TMP/plain.jsonl" ] && ! grep -q "by_source" "$TMP/plain.jsonl" && ! grep -q "tokens web\|by source\|mixture" "$TMP/plain.out" &&
  grep -q "^data:      $TMP/a — 1 file, " "$TMP/plain.out" && ok "a plain --data path logs and prints as before (no per-source figures)" ||
  bad "plain path" "$(grep -c by_source "$TMP/plain.jsonl")"

# ---- resume: the same layout bit for bit; the state in meta.json ----
M="$R --data $MIX --steps 12 --log-every 1 --eval-every 0 --eval-batches 1"
"$BIN" $M --batch 4 --grad-accum 2 --ckpt-dir "$TMP/ref" --log "$TMP/ref.jsonl" >/dev/null 2>&1
"$BIN" $M --batch 4 --grad-accum 2 --ckpt-dir "$TMP/part" --exit-after 5 --log "$TMP/part.jsonl" >/dev/null 2>&1
"$BIN" $M --batch 4 --grad-accum 2 --ckpt-dir "$TMP/part" --resume --log "$TMP/part.jsonl" >"$TMP/r.out" 2>&1
same_bits "$TMP/ref" "$TMP/part" && ok "a mixture run stopped at step 5 resumes bit for bit" || bad "resume" "$(tail -1 "$TMP/r.out")"
grep -q '"loader":{"count":40,"sources":\[{"name":"web","weight":0.7,"epoch":0,"pos":28},{"name":"books","weight":0.2,"epoch":0,"pos":8},{"name":"code","weight":0.1,"epoch":0,"pos":4}\]}' \
  "$TMP/part/step_00000005/meta.json" && ok "meta.json holds each source's epoch and position and the mixture's count" ||
  bad "loader state" "$(grep -o '"loader":.*' "$TMP/part/step_00000005/meta.json")"

# ---- resume on another layout ----
"$BIN" $M --batch 4 --nproc 2 --ckpt-dir "$TMP/d0" >/dev/null 2>&1
"$BIN" $M --batch 4 --nproc 2 --ckpt-dir "$TMP/d01" --exit-after 5 >/dev/null 2>&1
"$BIN" $M --batch 4 --nproc 2 --zero 1 --ckpt-dir "$TMP/d01" --resume >"$TMP/r.out" 2>&1
r=$("$BIN" ckpt diff "$TMP/d0" "$TMP/d01" 2>&1)
case "$r" in "max |a-b| 0 "*) ok "dp=2 ZeRO-0 stopped at step 5 and resumed on dp=2 ZeRO-1: the parameters of the uninterrupted run, bit for bit" ;;
  *) bad "resume on ZeRO-1" "$r" "$(tail -1 "$TMP/r.out")" ;; esac
"$BIN" $M --batch 4 --grad-accum 2 --ckpt-dir "$TMP/p1" --exit-after 5 --log "$TMP/p1.jsonl" >/dev/null 2>&1
"$BIN" $M --batch 2 --grad-accum 2 --nproc 2 --ckpt-dir "$TMP/p1" --resume --log "$TMP/p1.jsonl" >"$TMP/r.out" 2>&1
loader_of() { grep -o '"loader":{[^]]*\]}' "$1/$(cat "$1/latest")/meta.json"; }
[ -n "$(loader_of "$TMP/ref")" ] && [ "$(loader_of "$TMP/ref")" = "$(loader_of "$TMP/p1")" ] &&
  cmp -s <(grep -o '"tokens_by_source":{[^}]*}' "$TMP/ref.jsonl") <(grep -o '"tokens_by_source":{[^}]*}' "$TMP/p1.jsonl") &&
  losses_match "$TMP/ref.jsonl" "$TMP/p1.jsonl" &&
  ok "one process stopped at step 5 and resumed on dp=2: the same sources step by step, the same loader state, losses within 1e-5" ||
  bad "resume on dp=2" "$(loader_of "$TMP/p1")" "$(tail -1 "$TMP/r.out")"

# ---- a JSON spec ----
printf '{"sources": [{"name": "web", "path": "%s", "weight": 7}, {"name": "books", "path": "%s", "weight": 2}, {"name": "code", "path": "%s", "weight": 1}]}\n' \
  "$TMP/a" "$TMP/b" "$TMP/c" >"$TMP/mix.json"
"$BIN" $R --data "$TMP/mix.json" --steps 12 --log-every 1 --eval-every 0 --eval-batches 1 --batch 4 --grad-accum 2 \
  --ckpt-dir "$TMP/js" >"$TMP/j.out" 2>&1
same_bits "$TMP/ref" "$TMP/js" && ok "a JSON file of the same sources and weights (7:2:1) trains the same run, bit for bit" ||
  bad "JSON spec" "$(tail -1 "$TMP/j.out")"

# ---- eval: each source's loss ----
"$BIN" eval --ckpt "$TMP/ref" --data "$MIX" --threads 1 --batches 2 >"$TMP/e.out" 2>&1
grep -q "^  web          weight 0.7: val loss [0-9.]*" "$TMP/e.out" && grep -q "^  code         weight 0.1: val loss" "$TMP/e.out" &&
  grep -q "^val loss [0-9.]* .*(the sources' losses, weighted)" "$TMP/e.out" &&
  "$BIN" eval --ckpt "$TMP/ref" --data "$TMP/a" --threads 1 --batches 2 2>&1 | grep -q "^val loss [0-9.]*  perplexity [0-9.]*$" &&
  ok "eval --data with a mixture prints each source's loss and the weighted mean; a plain path prints as before" ||
  bad "eval" "$(cat "$TMP/e.out")"

# ---- refusals ----
T1="$BIN $R --steps 1 --batch 2"
expect "a source of weight 0" 2 "--data 'code=$TMP/c:0': weight 0" $T1 --data "web=$TMP/a:1,code=$TMP/c:0"
expect "a missing directory" 2 "$TMP/nope: No such file or directory" $T1 --data "web=$TMP/a:1,code=$TMP/nope:1"
expect "a weight that does not parse" 2 "the weight 'x7' is not a number" $T1 --data "web=$TMP/a:1,code=$TMP/c:x7"
expect "a name given twice" 2 "the name 'web' is given to two sources" $T1 --data "web=$TMP/a:1,web=$TMP/c:1"
expect "sources of different tokenizers" 2 "holds shards of the gpt2 tokenizer, not byte" $T1 --data "web=$TMP/a:1,gpt=$TMP/g:1"
expect "a --val-data mixture with a zero weight" 2 "--val-data 'b=$TMP/b:0'" $T1 --data "$TMP/a" --val-data "a=$TMP/a:1,b=$TMP/b:0"
expect "a resume with other weights" 2 "the run read the mixture web 0.7, books 0.2, code 0.1, and --data gives web 0.5, books 0.4, code 0.1" \
  "$BIN" $R --data "web=$TMP/a:0.5,books=$TMP/b:0.4,code=$TMP/c:0.1" --steps 12 --batch 4 --grad-accum 2 --resume "$TMP/ref"
expect "a resume of a mixture run on a plain path" 2 "give --data that mixture to continue it" \
  "$BIN" $R --data "$TMP/a" --steps 12 --batch 4 --grad-accum 2 --resume "$TMP/ref"
echo "$pass passed, $fail failed"
[ $fail -eq 0 ]
