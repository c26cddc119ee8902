#!/usr/bin/env bash
# The tessera command as a user runs it: bad input gives one line on stderr
# naming the flag/file and exit 2; training learns; runs repeat bit for bit;
# sample reads what train wrote. Run from the repository root.
source "$(dirname "$0")/lib.sh"

# expect_error NAME WANT_EXIT PATTERN -- ARGS...: exit status, one stderr
# line, matching PATTERN.
expect_error() {
  local name=$1 want=$2 pat=$3
  shift 4
  "$BIN" "$@" >"$TMP/out" 2>"$TMP/err" <"${STDIN:-/dev/null}"
  local rc=$? lines
  lines=$(wc -l <"$TMP/err")
  if [ "$rc" -eq "$want" ] && [ "$lines" -eq 1 ] && grep -q -- "$pat" "$TMP/err"; then ok "$name"
  else bad "$name" "exit $rc (want $want), $lines stderr lines, want /$pat/:" "$(head -3 "$TMP/err")"; fi
}

T="train --data $DATA --tokenizer byte --steps 1"
expect_error "unknown command"          2 "unknown command 'bogus'"    -- bogus
expect_error "unknown flag"             2 "unknown flag '--bogus'"     -- $T --bogus 1
expect_error "non-integer batch"        2 "\-\-batch: expected an integer, got 'abc'" -- $T --batch abc
expect_error "zero batch"               2 "\-\-batch: 0 is out of range" -- $T --batch 0
expect_error "negative lr"              2 "\-\-lr: -1 is out of range" -- $T --lr -1
expect_error "missing value"            2 "\-\-steps: missing value"    -- train --data "$DATA" --steps
expect_error "missing string value"     2 "\-\-data: missing value"     -- train --data
expect_error "string value before a flag" 2 "\-\-data: missing value"   -- train --data --steps 1
expect_error "missing --data"           2 "\-\-data PATH is required"   -- train --steps 1
expect_error "missing data file"        2 "\-\-data: /nonexistent.txt: No such file" -- train --data /nonexistent.txt
expect_error "unknown tokenizer"        2 "\-\-tokenizer: unknown tokenizer 'bpe'" -- $T --tokenizer bpe
expect_error "unknown preset"           2 "unknown model preset 'gpt9'" -- $T --model gpt9
expect_error "seq above max_seq"        2 "\-\-seq 65 is above the model's max_seq 64" -- $T --seq 65
expect_error "bad lr schedule"          2 "\-\-lr-schedule: expected cosine or constant" -- $T --lr-schedule linear
expect_error "min-lr above lr"          2 "\-\-min-lr"                  -- $T --lr 1e-3 --min-lr 1e-2
expect_error "positional argument"      2 "unexpected argument 'oops'"  -- $T oops
: >"$TMP/empty.txt"
expect_error "empty data file"          2 "too short"                   -- train --data "$TMP/empty.txt" --tokenizer byte --steps 1

echo '{"model": {"n_layer": 2, "n_head": 3, "d_model": 64, "max_seq": 32}}' >"$TMP/heads.json"
expect_error "heads not dividing d_model" 2 "n_head (3) must divide d_model (64)" -- $T --config "$TMP/heads.json"
echo '{"batch": 4,}' >"$TMP/badjson.json"
expect_error "malformed config"         2 "badjson.json: invalid JSON at line 1" -- $T --config "$TMP/badjson.json"
echo '{"batchsize": 4}' >"$TMP/unknown.json"
expect_error "unknown config key"       2 "unknown key 'batchsize'" -- $T --config "$TMP/unknown.json"
expect_error "missing config file"      2 "\-\-config: /nope.json: No such file" -- $T --config /nope.json
expect_error "sample without --ckpt"    2 "\-\-ckpt PATH is required"  -- sample
expect_error "sample of a missing ckpt" 2 "no such checkpoint"         -- sample --ckpt "$TMP/none"

if "$BIN" --help | grep -q "train" && "$BIN" train --help | grep -q -- "--grad-accum"; then ok "help"; else bad "help"; fi
# Flag lists: a metavar after a flag that takes a value, none after a boolean.
if "$BIN" tokenize --help | grep -qE '^  --tokenizer gpt2\|llama\|byte +tokenizer' &&
   "$BIN" tokenize --help | grep -qE '^  --decode +read ids' &&
   "$BIN" plan --help | grep -qE '^  --json +one JSON' && "$BIN" plan --help | grep -qE '^  --sp +sequence' &&
   "$BIN" plan --help | grep -qE '^  --top N +layouts' &&
   "$BIN" eval --help | grep -qE '^  --data PATH +validation' &&
   "$BIN" sample --help | grep -qE '^  --temperature X +softmax'; then ok "help lists metavars, none for booleans"
else bad "help lists metavars, none for booleans" "$("$BIN" plan --help | grep -E -- '--(json|sp|top) ')"; fi

# Training learns: loss from ~ln(256)=5.55 to clearly below 2.5.
if "$BIN" train --data "$DATA" --tokenizer byte --batch 12 --steps 300 --lr 2e-3 --warmup 20 --log-every 50 \
     --log "$TMP/learn.jsonl" --ckpt-dir "$TMP/learn" >"$TMP/learn.out" 2>&1; then
  first=$(head -1 "$TMP/learn.jsonl" | sed 's/.*"loss":\([0-9.]*\).*/\1/')
  last=$(tail -1 "$TMP/learn.jsonl" | sed 's/.*"loss":\([0-9.]*\).*/\1/')
  if awk -v f="$first" -v l="$last" 'BEGIN { exit !(f > 5.3 && f < 5.8 && l < 2.5) }'; then ok "training learns (loss $first -> $last)"
  else bad "training learns" "first $first last $last"; fi
else bad "training learns" "$(tail -3 "$TMP/learn.out")"; fi

# Config file: flags from JSON, command line wins.
echo '{"model": "gpt2-tiny", "batch": 2, "steps": 3, "lr": 1e-3}' >"$TMP/cfg.json"
if "$BIN" train --data "$DATA" --tokenizer byte --config "$TMP/cfg.json" --steps 2 --log-every 1 >"$TMP/cfg.out" 2>&1 &&
   grep -q "2 × 64 tokens" "$TMP/cfg.out" && grep -q "step     2/2" "$TMP/cfg.out"; then ok "config file and overrides"
else bad "config file and overrides" "$(tail -3 "$TMP/cfg.out")"; fi

# Bitwise repeatable: same flags, same losses and same checkpoint bytes;
# gradient accumulation works.
run() { "$BIN" train --data "$DATA" --tokenizer byte --batch 4 --grad-accum 2 --steps 20 --log-every 1 --seed 7 \
          --log "$TMP/$1.jsonl" --ckpt-dir "$TMP/$1" >/dev/null 2>&1; }
if run r1 && run r2; then
  l1=$(sed 's/"ms".*//' "$TMP/r1.jsonl"); l2=$(sed 's/"ms".*//' "$TMP/r2.jsonl")
  if [ "$l1" = "$l2" ] && cmp -s "$TMP/r1/step_00000020/rank_00000.tsr" "$TMP/r2/step_00000020/rank_00000.tsr"; then
    ok "two runs are bitwise identical"
  else bad "two runs are bitwise identical"; fi
else bad "two runs are bitwise identical" "a run failed"; fi

# Sample from the trained model; reproducible with the seed.
s1=$("$BIN" sample --ckpt "$TMP/learn" --prompt "ROMEO:" --tokens 40 --seed 3 2>&1)
s2=$("$BIN" sample --ckpt "$TMP/learn/step_00000300" --prompt "ROMEO:" --tokens 40 --seed 3 2>&1)
if [ "$s1" = "$s2" ] && [ "${#s1}" -ge 46 ] && [[ "$s1" == ROMEO:* ]]; then ok "sample"
else bad "sample" "$s1" "$s2"; fi

# A corrupted checkpoint is refused with the file named.
f="$TMP/r1/step_00000020/rank_00000.tsr"
size=$(stat -c %s "$f")
printf '\xff' | dd of="$f" bs=1 seek=$((size / 6)) conv=notrunc status=none
expect_error "corrupt checkpoint" 2 "rank_00000.tsr: tensor .*: checksum mismatch" -- sample --ckpt "$TMP/r1"
echo '{"format":"tessera-checkpoint","version":99}' >"$TMP/r2/step_00000020/meta.json"
expect_error "checkpoint version" 2 "meta.json: unsupported checkpoint version" -- sample --ckpt "$TMP/r2"

# The GPT-2 data path: tokenize, prepare, train on shards with evaluation, eval, sample.
if [ "$(printf 'Hello world' | "$BIN" tokenize)" = "15496 995" ] &&
   [ "$(echo '15496 995 11 340 338' | "$BIN" tokenize --decode)" = "Hello world, it's" ] &&
   [ "$(printf 'ab' | "$BIN" tokenize --tokenizer byte)" = "97 98" ]; then ok "tokenize both ways"
else bad "tokenize both ways"; fi
ids='15496 995 11 340 338'
if [ "$(echo "$ids" | "$BIN" tokenize --decode true)" = "Hello world, it's" ] &&
   [ "$(echo "$ids" | "$BIN" tokenize --decode --tokenizer gpt2)" = "Hello world, it's" ] &&
   [ "$(echo "$ids" | "$BIN" tokenize --tokenizer gpt2 --decode)" = "Hello world, it's" ] &&
   [ "$(printf 'Hello world' | "$BIN" tokenize --decode false)" = "15496 995" ]; then ok "tokenize --decode bare, true and false"
else bad "tokenize --decode bare, true and false"; fi
expect_error "boolean before a word"    2 "unexpected argument 'yes'" -- tokenize --decode yes
echo 50257 >"$TMP/badid"
STDIN="$TMP/badid" expect_error "decode a bad id" 2 "is not a token id of gpt2" -- tokenize --decode
expect_error "prepare without --input"  2 "\-\-input PATH... is required" -- prepare --out "$TMP/x"
expect_error "prepare a missing input"  2 "\-\-input /nope.txt: No such file" -- prepare --input /nope.txt --out "$TMP/x"
expect_error "prepare without --out"    2 "\-\-out DIR is required" -- prepare --input "$DATA"
mkdir -p "$TMP/empty"
expect_error "no shards in a directory" 2 "no training shards"          -- train --data "$TMP/empty" --steps 1

if "$BIN" prepare --input "$DATA" --out "$TMP/shk" >"$TMP/prep.out" 2>&1 &&
   grep -q "338026 tokens" "$TMP/prep.out" && [ -f "$TMP/shk/val_000000.bin" ] && [ -f "$TMP/shk/train_000000.bin" ]; then
  ok "prepare tinyshakespeare"
else bad "prepare tinyshakespeare" "$(cat "$TMP/prep.out")"; fi
if "$BIN" train --data "$TMP/shk" --batch 4 --seq 32 --steps 6 --log-every 3 --eval-every 3 --eval-batches 2 \
     --log "$TMP/g.jsonl" --ckpt-dir "$TMP/g" >"$TMP/g.out" 2>&1; then
  first=$(head -1 "$TMP/g.jsonl" | sed 's/.*"loss":\([0-9.]*\).*/\1/')
  nval=$(grep -c '"val_loss"' "$TMP/g.jsonl")
  if awk -v f="$first" 'BEGIN { exit !(f > 10.5 && f < 11.1) }' && [ "$nval" -eq 2 ]; then
    ok "train on gpt2 shards with evaluation (first loss $first ~ ln 50257)"
  else bad "train on gpt2 shards with evaluation" "first $first, $nval evaluations"; fi
else bad "train on gpt2 shards with evaluation" "$(tail -3 "$TMP/g.out")"; fi
if "$BIN" eval --ckpt "$TMP/g" --data "$TMP/shk" --batches 3 >"$TMP/e.out" 2>&1 && grep -q "val loss .* perplexity" "$TMP/e.out"; then
  ok "eval"
else bad "eval" "$(cat "$TMP/e.out")"; fi
out=$("$BIN" sample --ckpt "$TMP/g" --tokens 5 2>&1)
if [ $? -eq 0 ] && [ -n "$out" ]; then ok "sample a gpt2 model"; else bad "sample a gpt2 model" "$out"; fi
expect_error "eval without --data"      2 "\-\-data PATH is required" -- eval --ckpt "$TMP/g"
printf 'garbage' >"$TMP/shk/train_000001.bin"
expect_error "corrupt shard"            2 "train_000001.bin: .*shorter than the 1024-byte shard header" -- train --data "$TMP/shk" --steps 1

# Resume: 2N steps straight == N steps, stop, resume, N steps — losses and
# every byte of the final parameters and optimizer state.
R="train --data $DATA --tokenizer byte --batch 4 --grad-accum 2 --log-every 1 --seed 11 --lr 1e-3 --warmup 3"
"$BIN" $R --steps 12 --log "$TMP/full.jsonl" --ckpt-dir "$TMP/full" >/dev/null 2>&1
"$BIN" $R --steps 12 --exit-after 6 --log "$TMP/part.jsonl" --ckpt-dir "$TMP/part" >/dev/null 2>&1
"$BIN" $R --steps 12 --log "$TMP/part.jsonl" --ckpt-dir "$TMP/part" --resume >"$TMP/resume.out" 2>&1
if [ "$(sed 's/"ms".*//' "$TMP/full.jsonl")" = "$(sed 's/"ms".*//' "$TMP/part.jsonl")" ] &&
   cmp -s "$TMP/full/step_00000012/rank_00000.tsr" "$TMP/part/step_00000012/rank_00000.tsr" &&
   grep -q "resumed: .*step_00000006 at step 6" "$TMP/resume.out"; then
  ok "resume is bitwise identical to an uninterrupted run"
else bad "resume is bitwise identical to an uninterrupted run" "$(diff <(sed 's/"ms".*//' "$TMP/full.jsonl") <(sed 's/"ms".*//' "$TMP/part.jsonl") | head -4)"; fi
# a run of its own --seq continues with it when --seq is not given again
echo '{"model": {"n_layer": 2, "n_head": 2, "d_model": 32, "d_ff": 64, "max_seq": 32}}' >"$TMP/s32.json"
"$BIN" train --data "$DATA" --tokenizer byte --config "$TMP/s32.json" --seq 24 --steps 2 --ckpt-dir "$TMP/s32" >/dev/null 2>&1
if "$BIN" train --data "$DATA" --tokenizer byte --steps 3 --ckpt-dir "$TMP/s32" --resume >"$TMP/s32.out" 2>&1 &&
   grep -q "× 24 tokens" "$TMP/s32.out"; then ok "resume without --seq keeps the run's sequence length (24, below the default model's)"
else bad "resume without --seq" "$(tail -1 "$TMP/s32.out")"; fi
expect_error "resume without a checkpoint" 2 "\-\-resume: .*no such checkpoint" -- $R --steps 2 --resume "$TMP/none"
expect_error "resume without --ckpt-dir"   2 "\-\-resume without a path needs \-\-ckpt-dir" -- $R --steps 2 --resume
expect_error "resume with another tokenizer" 2 "the run used \-\-tokenizer byte" -- train --data "$DATA" --steps 2 --resume "$TMP/part"

# Crash safety: kill -9 at every write, fsync and rename of two saves; the
# latest checkpoint always loads and verifies, and resuming from it
# finishes with the same parameters as an uninterrupted run.
C="train --data $DATA --tokenizer byte --batch 2 --seq 16 --steps 4 --ckpt-every 2 --log-every 10 --seed 5"
"$BIN" $C --ckpt-dir "$TMP/crash_ref" >/dev/null 2>&1
crash_bad=0; crashes=0
for k in $(seq 1 22); do
  rm -rf "$TMP/crash"
  TESSERA_CKPT_CRASH_AFTER=$k "$BIN" $C --ckpt-dir "$TMP/crash" >/dev/null 2>&1
  rc=$?
  [ $rc -eq 137 ] && crashes=$((crashes + 1))
  if [ -f "$TMP/crash/latest" ]; then
    if ! "$BIN" ckpt info "$TMP/crash" >/dev/null 2>&1; then crash_bad=$((crash_bad + 1)); echo "     crash at event $k: latest does not verify"; continue; fi
    "$BIN" $C --ckpt-dir "$TMP/crash" --resume >/dev/null 2>&1
    cmp -s "$TMP/crash/step_00000004/rank_00000.tsr" "$TMP/crash_ref/step_00000004/rank_00000.tsr" ||
      { crash_bad=$((crash_bad + 1)); echo "     crash at event $k: resumed run differs"; }
  elif [ $rc -ne 137 ]; then crash_bad=$((crash_bad + 1)); echo "     event $k: no crash and no checkpoint"; fi
done 2>/dev/null   # (the shell's "Killed" notices)
if [ $crash_bad -eq 0 ] && [ $crashes -ge 18 ]; then ok "kill -9 during saves ($crashes crash points) leaves a loadable latest"
else bad "kill -9 during saves" "$crash_bad bad outcomes, $crashes crashes"; fi

# Hugging Face safetensors: export -> import -> export gives the same bytes;
# an imported model trains with --init-from; ckpt info.
if "$BIN" export --ckpt "$TMP/full" --out "$TMP/m.safetensors" >/dev/null 2>&1 &&
   "$BIN" import --in "$TMP/m.safetensors" --out "$TMP/imp" --model gpt2-tiny --tokenizer byte >/dev/null 2>&1 &&
   "$BIN" export --ckpt "$TMP/imp" --out "$TMP/m2.safetensors" >/dev/null 2>&1 &&
   cmp -s "$TMP/m.safetensors" "$TMP/m2.safetensors"; then ok "safetensors export -> import -> export is byte-identical"
else bad "safetensors export -> import -> export is byte-identical"; fi
if "$BIN" train --data "$DATA" --tokenizer byte --steps 2 --init-from "$TMP/m.safetensors" --log "$TMP/init.jsonl" \
     >/dev/null 2>&1 && awk -F'"loss":' 'NR==1 { split($2, a, ","); exit !(a[1] < 4.5) }' "$TMP/init.jsonl"; then
  ok "--init-from starts from the imported weights"
else bad "--init-from starts from the imported weights" "$(head -1 "$TMP/init.jsonl")"; fi
if "$BIN" ckpt info "$TMP/full" | grep -q "checksums: all OK"; then ok "ckpt info"; else bad "ckpt info"; fi
printf 'not safetensors' >"$TMP/bad.safetensors"
expect_error "import a malformed file"   2 "bad.safetensors: .*header length" -- import --in "$TMP/bad.safetensors" --out "$TMP/x"
expect_error "init from a missing file"  2 "\-\-init-from: /nope.safetensors" -- $T --init-from /nope.safetensors
expect_error "resume from an imported model" 2 "holds no optimizer state" -- $T --steps 3 --resume "$TMP/imp"
expect_error "ckpt info of a corrupt checkpoint" 2 "checksum mismatch" -- ckpt info "$TMP/r1"

# comm-bench: a table for every op, and its errors.
out=$("$BIN" comm-bench --nproc 3 --min-bytes 8 --max-bytes 64K --iters 2 --warmup 1 2>&1)
if [ $? -eq 0 ] && [ "$(echo "$out" | grep -c '^# ')" -eq 5 ] && echo "$out" | grep -qE "^ +65532 +16383 " &&
   echo "$out" | grep -qE "^ +8 +2 "; then ok "comm-bench on 3 forked ranks"
else bad "comm-bench on 3 forked ranks" "$(echo "$out" | head -5)"; fi
expect_error "comm-bench bad size"      2 "\-\-max-bytes: expected a size" -- comm-bench --max-bytes 12Q
expect_error "comm-bench bad op"        2 "\-\-op: expected allreduce" -- comm-bench --op alltoall
expect_error "comm-bench too many ranks" 2 "\-\-nproc: 300 is out of range" -- comm-bench --nproc 300

# tessera plan: a layout, JSON, a search, why-not, the tutorial, errors, and
# a sweep of flag combinations that must never crash.
out=$("$BIN" plan --model gpt2-124m --devices 1 --dp 1 --precision fp32 --json 2>&1)
if echo "$out" | grep -q '"params":124439808' && echo "$out" | grep -q '"model_states_bytes":' &&
   echo "$out" | grep -q '"activations_bytes":' && echo "$out" | grep -q '"total_bytes":' &&
   echo "$out" | grep -q '"step_seconds":' && echo "$out" | grep -q '"comm_bytes":{"dp":'; then ok "plan --json"
else bad "plan --json" "$out"; fi
j2=$("$BIN" plan --json --model gpt2-124m --devices 1 --dp 1 --precision fp32 2>&1)
j3=$("$BIN" plan --model gpt2-124m --json true --devices 1 --dp 1 --precision fp32 2>&1)
if [[ "$out" == '{"model":"gpt2-124m"'* ]] && [ "$j2" = "$out" ] && [ "$j3" = "$out" ]; then ok "plan --json before another flag, and --json true"
else bad "plan --json before another flag, and --json true" "$j2" "$j3"; fi
S="plan --model gpt2-124m --devices 8 --tp 2"
out=$("$BIN" $S --sp --explain 2>&1)
if echo "$out" | grep -q "bf16, sequence parallel," && echo "$out" | grep -q "= states:" &&
   "$BIN" $S --sp | grep -q "bf16, sequence parallel," &&
   [ "$("$BIN" $S --sp false 2>&1)" = "$("$BIN" $S 2>&1)" ] && ! "$BIN" $S --sp false | grep -q "sequence parallel"; then
  ok "plan --sp at the end, before another flag, and --sp false"
else bad "plan --sp at the end, before another flag, and --sp false" "$(echo "$out" | grep layout)"; fi
out=$("$BIN" plan --model llama2-70b --devices 64 --global-batch 1024 --seq 4096 --tokens 2e12 2>&1)
if echo "$out" | grep -qE "^ +[0-9]+ +[0-9]+ +[0-9]+ +[0-3] " && echo "$out" | grep -q "layouts fit"; then ok "plan search"
else bad "plan search" "$(echo "$out" | tail -3)"; fi
out=$("$BIN" plan --model llama2-70b --devices 64 --global-batch 1024 --why-not dp=64,tp=1,pp=1,zero=0 2>&1)
if echo "$out" | grep -q "why not: needs .* GiB per device, more than the 80 GiB"; then ok "plan --why-not"
else bad "plan --why-not" "$(echo "$out" | tail -2)"; fi
out=$("$BIN" plan --model gpt3-175b --tutorial 2>&1)
if echo "$out" | grep -q "110.7 years" && echo "$out" | grep -q "14.0 s"; then ok "plan --tutorial"; else bad "plan --tutorial" "$out"; fi
out=$("$BIN" plan --model gpt3-175b --devices 8 --dp 8 --explain 2>&1)
if echo "$out" | grep -q "DOES NOT FIT" && echo "$out" | grep -q "= states:"; then ok "plan --explain"; else bad "plan --explain" "$(echo "$out" | head -3)"; fi
expect_error "plan: tp not dividing heads" 2 "tp=8 does not divide the 12 heads" -- plan --model gpt2-124m --devices 8 --tp 8
expect_error "plan: no layout fits"        2 "no layout fits" -- plan --model gpt3-175b --devices 8 --device-mem 16
expect_error "plan: negative size"         2 "\-\-seq: expected an integer, got '-5'" -- plan --seq -5
expect_error "plan: unknown preset"        2 "\-\-model: unknown preset 'gpt5'" -- plan --model gpt5
crashes=0
for m in gpt2-tiny gpt3-175b llama2-70b; do
  for d in 1 3 8 512; do
    for extra in "" "--tp 2" "--pp 4 --schedule gpipe" "--tp 8 --pp 2 --zero 3 --sp" "--recompute full --precision fp16" \
                 "--micro-batch 7 --global-batch 13" "--device-mem 0.001" "--mfu 1 --bw-inter 0.001"; do
      "$BIN" plan --model $m --devices $d $extra >/dev/null 2>&1
      rc=$?
      [ $rc -ne 0 ] && [ $rc -ne 2 ] && { crashes=$((crashes + 1)); echo "     plan --model $m --devices $d $extra: exit $rc"; }
    done
  done
done
if [ $crashes -eq 0 ]; then ok "plan never crashes over 96 flag combinations"; else bad "plan crashes" "$crashes"; fi

# ---- --recompute: the same model bit for bit, less activation memory ----
# one process, and a 2×2×2 mesh (ZeRO-1, --sp, 1F1B) whose recomputation
# repeats TP collectives inside a pipeline stage
RC="train --data $DATA --tokenizer byte --steps 5 --log-every 1 --seed 4"
rc_bad=0
for lay in "one --batch 2 --grad-accum 2" "mesh --nproc 8 --dp 2 --tp 2 --pp 2 --zero 1 --sp --micro-batches 2 --batch 1"; do
  read -r name flags <<<"$lay"
  for m in none selective full; do
    "$BIN" $RC $flags --recompute $m --ckpt-dir "$TMP/rc_${name}_$m" --log "$TMP/rc_${name}_$m.jsonl" >"$TMP/rc.out" 2>&1 ||
      { rc_bad=1; echo "     $name $m: $(tail -1 "$TMP/rc.out")"; }
  done
  for m in selective full; do
    same_bits "$TMP/rc_${name}_none" "$TMP/rc_${name}_$m" || { rc_bad=1; echo "     $name: --recompute $m changes the checkpoint"; }
  done
  a0=$(field "$TMP/rc_${name}_none.jsonl" acts); a1=$(field "$TMP/rc_${name}_selective.jsonl" acts)
  a2=$(field "$TMP/rc_${name}_full.jsonl" acts)
  awk -v a="$a0" -v b="$a1" -v c="$a2" 'BEGIN { exit !(c < b && b < a) }' ||
    { rc_bad=1; echo "     $name: activation bytes none $a0, selective $a1, full $a2"; }
done
"$BIN" $RC --recompute some >"$TMP/rc.out" 2>&1
[ $? -eq 2 ] && grep -q "expected none, selective or full" "$TMP/rc.out" || { rc_bad=1; echo "     --recompute some: $(cat "$TMP/rc.out")"; }
[ $rc_bad -eq 0 ] && ok "--recompute selective and full leave the checkpoint of none bit for bit (one process, 2×2×2 ZeRO-1 --sp) with fewer activation bytes" ||
  bad "--recompute"

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
