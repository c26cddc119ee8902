#!/usr/bin/env bash
# LLaMA as a user trains it (tessera train --model llama-tiny, --tokenizer
# llama): the tokenizer from the command line, it learns Tiny Shakespeare
# (text and prepared shards) and repeats bit for bit, every layout tracks one process,
# bf16 and recomputation work on it, a run resumes bit for bit, the planner
# counts its bytes exactly, and a split its key/value heads do not allow is
# refused. Run from the repository root.
source "$(dirname "$0")/lib.sh"
B="train --model llama-tiny --data $DATA --tokenizer byte --seed 5"

# ---- the LLaMA tokenizer from the command line ----
printf 'Hello world!' | "$BIN" tokenize --tokenizer llama >"$TMP/ids.txt" 2>&1
printf 'Über  naïve 日本\n\tend ' >"$TMP/hard.txt"
"$BIN" tokenize --tokenizer llama <"$TMP/hard.txt" | "$BIN" tokenize --tokenizer llama --decode >"$TMP/back.txt" 2>&1
[ "$(cat "$TMP/ids.txt")" = "1 15043 3186 29991" ] && cmp -s "$TMP/hard.txt" "$TMP/back.txt" &&
  ok "tessera tokenize --tokenizer llama: 'Hello world!' is 1 15043 3186 29991, and text decodes back" ||
  bad "tokenize --tokenizer llama" "$(cat "$TMP/ids.txt")" "$(od -c "$TMP/back.txt" | head -2)"

# ---- learns with the LLaMA tokenizer, from prepared shards too ----
"$BIN" train --model llama-tiny --data "$DATA" --tokenizer llama --seed 5 --batch 4 --steps 300 --log-every 100 \
  --log "$TMP/long.jsonl" >"$TMP/long.out" 2>&1 || echo "     $(tail -1 "$TMP/long.out")"
l=$(field "$TMP/long.jsonl" loss)
grep -q "model:     llama-tiny — 4 layers, 4 heads" "$TMP/long.out" && grep -q "368634 tokens (llama tokenizer)" "$TMP/long.out" &&
  awk -v l="$l" 'BEGIN { exit !(l < 6.0) }' &&
  ok "llama-tiny learns Tiny Shakespeare with --tokenizer llama: loss $l after 300 steps (from ln 32000 = 10.37)" ||
  bad "llama-tiny with the llama tokenizer: loss $l after 300 steps" "$(tail -1 "$TMP/long.out")"
for k in 1 2; do
  "$BIN" train --model llama-tiny --data "$DATA" --tokenizer llama --seed 5 --batch 2 --steps 10 --ckpt-dir "$TMP/lt$k" >/dev/null 2>&1
done
same_bits "$TMP/lt1" "$TMP/lt2" && ok "llama-tiny with --tokenizer llama repeats bit for bit" || bad "llama tokenizer run repeats"
"$BIN" prepare --input "$DATA" --out "$TMP/shards" --tokenizer llama >"$TMP/prep.out" 2>&1 &&
  "$BIN" train --model llama-tiny --data "$TMP/shards" --tokenizer llama --steps 2 --batch 2 >"$TMP/sh.out" 2>&1 &&
  grep -q "368635 tokens" "$TMP/prep.out" && ok "prepare --tokenizer llama writes shards llama-tiny trains on" ||
  bad "prepare --tokenizer llama" "$(tail -1 "$TMP/prep.out")" "$(tail -1 "$TMP/sh.out")"

# ---- repeats bit for bit ----
R="$B --steps 12 --log-every 1 --lr 1e-3 --warmup 2"
ref_and_layouts "$R" llama-tiny

# ---- bf16, recomputation, resume ----
precision_recompute_resume "$R" llama-tiny

# ---- the planner's bytes are the run's ----
"$BIN" $B --steps 1 --batch 4 --log "$TMP/pl.jsonl" >"$TMP/pl.out" 2>&1
want=$(grep -o '"acts":[0-9]*' "$TMP/pl.jsonl" | head -1 | cut -d: -f2)
out=$("$BIN" plan --model llama-tiny --vocab 256 --micro-batch 4 --global-batch 4 --seq 64 --dp 1 --devices 1 --precision fp32 --json)
got=$(echo "$out" | grep -o '"activations_bytes":[0-9]*' | cut -d: -f2)
np=$(echo "$out" | grep -o '"params":[0-9]*' | head -1 | cut -d: -f2)
grep -q "params:    0.80M ($np;" "$TMP/pl.out" && [ -n "$want" ] && [ "$got" = "$want" ] &&
  ok "tessera plan --model llama-tiny: $np parameters and $got activation bytes, as the run has" ||
  bad "planner against the LLaMA run: params $np, activations $got against $want"

# ---- Hugging Face model directories ----
hf_bad=0
"$BIN" export --ckpt "$TMP/ref" --hf-dir "$TMP/hf1" >/dev/null 2>&1 &&
  "$BIN" import --in "$TMP/hf1" --out "$TMP/imp" --tokenizer byte >"$TMP/imp.out" 2>&1 &&
  "$BIN" export --ckpt "$TMP/imp" --hf-dir "$TMP/hf2" >/dev/null 2>&1 || { hf_bad=1; echo "     $(tail -1 "$TMP/imp.out")"; }
cmp -s "$TMP/hf1/model.safetensors" "$TMP/hf2/model.safetensors" && cmp -s "$TMP/hf1/config.json" "$TMP/hf2/config.json" &&
  grep -q '"model_type":"llama"' "$TMP/hf1/config.json" && grep -q '"num_key_value_heads":2' "$TMP/hf1/config.json" &&
  [ "$(params_rel "$TMP/ref" "$TMP/imp")" = 0 ] || { hf_bad=1; echo "     the round trip is not byte-identical"; }
"$BIN" import --in "$TMP/hf1" --out "$TMP/imp2" --tokenizer llama >"$TMP/e.out" 2>&1
[ $? -eq 2 ] && grep -q "its vocabulary has 256 tokens, --tokenizer llama has 32000" "$TMP/e.out" ||
  { hf_bad=1; echo "     vocabulary mismatch: $(cat "$TMP/e.out")"; }
"$BIN" export --ckpt "$TMP/ref" >"$TMP/e.out" 2>&1
[ $? -eq 2 ] && grep -q "give --out FILE or --hf-dir DIR" "$TMP/e.out" || { hf_bad=1; echo "     export without a target: $(cat "$TMP/e.out")"; }
# GPT-2's directory: its head count (4, not d_model/64 = 2) comes from config.json
"$BIN" train --model gpt2-tiny --data "$DATA" --tokenizer byte --steps 2 --ckpt-dir "$TMP/g" >/dev/null 2>&1
"$BIN" export --ckpt "$TMP/g" --hf-dir "$TMP/ghf" >/dev/null 2>&1 &&
  "$BIN" import --in "$TMP/ghf" --out "$TMP/gimp" --tokenizer byte >"$TMP/gimp.out" 2>&1 &&
  grep -q "gpt2, 4 layers, 4 heads" "$TMP/gimp.out" && grep -q '"model_type":"gpt2"' "$TMP/ghf/config.json" &&
  [ "$(params_rel "$TMP/g" "$TMP/gimp")" = 0 ] || { hf_bad=1; echo "     GPT-2 directory: $(tail -1 "$TMP/gimp.out")"; }
[ $hf_bad -eq 0 ] && ok "export --hf-dir → import → export --hf-dir: config.json and model.safetensors byte-identical, the parameters exact; a tokenizer of another vocabulary refused at import; GPT-2's directory too" ||
  bad "Hugging Face directories"

# ---- a split the key/value heads do not allow ----
"$BIN" $B --steps 1 --nproc 4 --tp 4 >"$TMP/e.out" 2>&1
[ $? -eq 2 ] && grep -q "tessera train: --tp 4 does not divide the model's 2 key/value heads" "$TMP/e.out" &&
  ok "--tp 4 on llama-tiny's 2 key/value heads: one line, exit 2" || bad "tp over kv heads" "$(cat "$TMP/e.out")"

# ---- a model this machine cannot hold: refused before anything is allocated ----
"$BIN" train --model llama2-70b --data "$DATA" --tokenizer llama --steps 1 >"$TMP/e.out" 2>&1
[ $? -eq 2 ] && grep -q "tessera train: llama2-70b needs [0-9.]* GiB per rank .* this machine has" "$TMP/e.out" &&
  ok "train --model llama2-70b: one line saying the memory it needs against the machine's, exit 2" ||
  bad "llama2-70b" "$(cat "$TMP/e.out")"

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
