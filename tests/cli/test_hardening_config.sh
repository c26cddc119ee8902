#!/usr/bin/env bash
# Model configs and layouts every entry point refuses alike: a head size the
# rotary kernel cannot turn, a field of another architecture, a resumed
# layout that does not split the model, planner inputs out of range — each
# one line, exit 2, nothing written. And the validation loss of a step is
# the same number whatever the layout. Run from the repository root.
source "$(dirname "$0")/lib.sh"
# model FILE JSON: a config file holding {"model": JSON}
model() { echo "{\"model\":$2}" >"$TMP/$1"; }
# unseal CKPT_DIR SED: edits the latest checkpoint's meta.json (dropping its checksum, which is optional)
unseal() { local m; m="$1/$(cat "$1/latest")/meta.json"; sed -i "s/,\"crc32c\": *[0-9]*}/}/; $2" "$m"; }
T=(train --data "$DATA" --tokenizer byte --seq 16 --batch 2)
ODD="an odd head size"

# ---- 1. an odd rotary head size: refused by train, plan, import, eval, sample and resume ----
model odd.json '{"arch":"llama","n_layer":1,"n_head":2,"d_model":6,"d_ff":8,"max_seq":64,"vocab":256}'
expect "train: llama with head size 3" 2 "head size d_model/n_head = 6/2 = 3 is odd" "$BIN" "${T[@]}" --steps 1 --config "$TMP/odd.json"
[ ! -s "$TMP/x.out" ] && ok "train: $ODD is refused before the header" || bad "train: $ODD printed" "$(head -2 "$TMP/x.out")"
model odd2.json '{"preset":"llama-tiny","d_model":132}'
expect "train: llama-tiny with d_model 132 (head size 33)" 2 "= 33 is odd" "$BIN" "${T[@]}" --steps 1 --config "$TMP/odd2.json"
expect "plan --config: $ODD" 2 "is odd" "$BIN" plan --config "$TMP/odd.json"
expect "plan shape flags: $ODD" 2 "is odd" "$BIN" plan --arch llama --layers 1 --heads 2 --d-model 6 --d-ff 8 --positions 64
expect "plan --model llama-tiny --heads 8 (head size 16 is even, --d-model 120 / 8 = 15 is not)" 2 "= 15 is odd" \
  "$BIN" plan --model llama-tiny --heads 8 --kv-heads 2 --d-model 120
model gpt2odd.json '{"arch":"gpt2","n_layer":1,"n_head":2,"d_model":6,"max_seq":64}'
"$BIN" "${T[@]}" --steps 1 --config "$TMP/gpt2odd.json" >"$TMP/g.out" 2>&1 &&
  ok "GPT-2 (no rotary embedding) trains with head size 3" || bad "GPT-2 with head size 3" "$(tail -2 "$TMP/g.out")"
# an even-headed LLaMA exported, its config.json then given two heads of 3
model even.json '{"arch":"llama","n_layer":1,"n_head":1,"d_model":6,"d_ff":8,"max_seq":64,"vocab":256}'
"$BIN" "${T[@]}" --steps 1 --config "$TMP/even.json" --ckpt-dir "$TMP/even" >/dev/null 2>&1
"$BIN" export --ckpt "$TMP/even" --hf-dir "$TMP/hf" >/dev/null 2>&1
sed -i 's/"num_attention_heads":1/"num_attention_heads":2/; s/"num_key_value_heads":1/"num_key_value_heads":2/' "$TMP/hf/config.json"
expect "import of a Hugging Face directory with $ODD" 2 "config.json: the head size" \
  "$BIN" import --in "$TMP/hf" --out "$TMP/imp" --tokenizer byte
[ ! -e "$TMP/imp" ] && ok "the refused import wrote nothing" || bad "the refused import wrote $TMP/imp"
cp -r "$TMP/even" "$TMP/oddck"
unseal "$TMP/oddck" 's/"n_head":1,/"n_head":2,"n_kv_head":2,/'
expect "eval of a checkpoint with $ODD" 2 "meta.json: model: the head size" "$BIN" eval --ckpt "$TMP/oddck" --data "$DATA" --batches 1
expect "sample of a checkpoint with $ODD" 2 "meta.json: model: the head size" "$BIN" sample --ckpt "$TMP/oddck" --prompt hi --tokens 2
expect "train --resume of a checkpoint with $ODD" 2 "meta.json: model: the head size" \
  "$BIN" "${T[@]}" --steps 2 --resume "$TMP/oddck"

# ---- 8. fields of another architecture: config files, checkpoints, plan flags ----
for kv in '"n_kv_head":2' '"rope_theta":500000' '"norm_eps":1e-6'; do
  key=${kv%%:*}; key=${key//\"/}
  model gkv.json "{\"preset\":\"gpt2-tiny\",$kv}"
  expect "train: gpt2-tiny with $key" 2 "model field '$key' is a llama, qwen2 field: a gpt2 model has none" \
    "$BIN" "${T[@]}" --steps 1 --config "$TMP/gkv.json"
done
model gkv.json '{"arch":"gpt2","n_layer":2,"n_head":4,"n_kv_head":4,"d_model":16,"max_seq":32}'
expect "plan --config: gpt2 with n_kv_head" 2 "'n_kv_head' is a llama, qwen2 field" "$BIN" plan --config "$TMP/gkv.json"
expect "plan --kv-heads on gpt2-124m" 2 "--kv-heads: a gpt2 model has no separate key/value heads" \
  "$BIN" plan --model gpt2-124m --kv-heads 4
expect "plan --arch gpt2 --kv-heads 8 over llama2-70b" 2 "--kv-heads: a gpt2 model" \
  "$BIN" plan --model llama2-70b --arch gpt2 --kv-heads 8 --devices 64
"$BIN" plan --model llama2-70b --arch gpt2 --devices 64 --dp 8 --tp 8 --json >"$TMP/p.out" 2>&1 &&
  ok "plan --arch gpt2 over llama2-70b drops the preset's key/value heads" || bad "plan --arch gpt2 over llama2-70b" "$(tail -1 "$TMP/p.out")"
model l2g.json '{"preset":"llama-tiny","arch":"gpt2"}'
"$BIN" plan --config "$TMP/l2g.json" --devices 1 --dp 1 >"$TMP/p.out" 2>&1 &&
  ok "config {preset llama-tiny, arch gpt2} drops the preset's LLaMA fields" || bad "llama preset as gpt2" "$(tail -1 "$TMP/p.out")"
model g2.json '{"arch":"gpt2","n_layer":2,"n_head":4,"d_model":16,"max_seq":32}'
"$BIN" "${T[@]}" --steps 2 --config "$TMP/g2.json" --ckpt-dir "$TMP/g" >/dev/null 2>&1
cp -r "$TMP/g" "$TMP/gkvck"
unseal "$TMP/gkvck" 's/"n_head":4,/"n_head":4,"n_kv_head":2,/'
expect "eval of a gpt2 checkpoint with n_kv_head" 2 "n_kv_head (2) is a llama, qwen2 field: a gpt2 model has none" \
  "$BIN" eval --ckpt "$TMP/gkvck" --data "$DATA" --batches 1

# ---- 15. --resume checks the layout as a fresh run does, before any tensor ----
before=$(ls "$TMP/g")
expect "fresh run --tp 3 on 4 heads" 2 "--tp 3 does not divide the model's 4 heads" \
  "$BIN" "${T[@]}" --steps 4 --config "$TMP/g2.json" --nproc 3 --tp 3
expect "--resume --tp 3 on 4 heads" 2 "--tp 3 does not divide the model's 4 heads" \
  "$BIN" "${T[@]}" --steps 4 --resume "$TMP/g" --nproc 3 --tp 3
expect "--resume --tp 2 --sp with --seq 15" 2 "--seq 15 is not a multiple of --tp 2" \
  "$BIN" "${T[@]}" --steps 4 --resume "$TMP/g" --nproc 2 --tp 2 --sp --seq 15
model kv.json '{"arch":"llama","n_layer":1,"n_head":4,"n_kv_head":2,"d_model":16,"d_ff":32,"max_seq":32,"vocab":256}'
"$BIN" "${T[@]}" --steps 1 --config "$TMP/kv.json" --ckpt-dir "$TMP/kv" >/dev/null 2>&1
expect "--resume --tp 4 on 2 key/value heads" 2 "--tp 4 does not divide the model's 2 key/value heads" \
  "$BIN" "${T[@]}" --steps 4 --resume "$TMP/kv" --nproc 4 --tp 4
[ "$(ls "$TMP/g")" = "$before" ] && ok "the refused resumes left the run directory as it was" || bad "a refused resume changed $TMP/g"

# ---- 17. the planner's job and cluster; fp16's loss scale on resume ----
expect "plan --seq beyond the positions" 2 "--seq 128 is above the model's 64 positions" "$BIN" plan --model gpt2-tiny --seq 128
expect "plan --seq beyond gpt2-124m's positions" 2 "--seq 2048 is above the model's 1024 positions" \
  "$BIN" plan --model gpt2-124m --seq 2048 --devices 8 --dp 8
expect "plan --devices-per-node 3 of 8" 2 "--devices-per-node 3 does not divide --devices 8" \
  "$BIN" plan --model gpt2-tiny --devices 8 --devices-per-node 3
expect "plan --devices 12 (8 per node by default)" 2 "--devices-per-node 8 does not divide --devices 12" \
  "$BIN" plan --model gpt2-tiny --devices 12
"$BIN" plan --model gpt2-tiny --devices 4 >"$TMP/p.out" 2>&1 && grep -q "on 4 devices (8 per node" "$TMP/p.out" &&
  ok "plan --devices 4: one node, partly used" || bad "plan --devices 4" "$(tail -1 "$TMP/p.out")"
expect "plan --devices 6 --devices-per-node 4" 2 "--devices-per-node 4 does not divide --devices 6" \
  "$BIN" plan --model gpt2-tiny --devices 6 --devices-per-node 4 --dp 6
"$BIN" "${T[@]}" --steps 2 --config "$TMP/g2.json" --precision fp16 --ckpt-dir "$TMP/f16" >/dev/null 2>&1
"$BIN" "${T[@]}" --steps 3 --resume "$TMP/f16" --precision fp16 --loss-scale 1024 >"$TMP/r.out" 2>&1 &&
  grep -q "the checkpoint's loss scale 65536 is used, not --loss-scale 1024" "$TMP/r.out" &&
  ok "fp16 --resume --loss-scale 1024: the log says the checkpoint's 65536 wins" || bad "fp16 resume note" "$(grep scaler "$TMP/r.out")"
"$BIN" "${T[@]}" --steps 3 --resume "$TMP/f16" --precision fp16 >"$TMP/r.out" 2>&1 && ! grep -q "is used, not" "$TMP/r.out" &&
  ok "fp16 --resume without --loss-scale: no note" || bad "fp16 resume without --loss-scale" "$(grep scaler "$TMP/r.out")"
"$BIN" "${T[@]}" --steps 1 --config "$TMP/g2.json" --precision fp16 --loss-scale 1024 >"$TMP/r.out" 2>&1 &&
  grep -q "dynamic loss scale from 1024:" "$TMP/r.out" && ! grep -q "is used, not" "$TMP/r.out" &&
  ok "a fresh fp16 run starts from --loss-scale 1024" || bad "fresh fp16 --loss-scale" "$(grep scaler "$TMP/r.out")"

# ---- 10. the validation loss of a step, whatever the layout ----
E=("${T[@]}" --config "$TMP/g2.json" --val-data "$DATA" --steps 2 --eval-batches 3)
vloss() { grep -o "val loss [0-9.]*" "$1" | tail -1; }
"$BIN" "${E[@]}" --batch 4 >"$TMP/v1.out" 2>&1
v1=$(vloss "$TMP/v1.out")
for l in "dp=2|--batch 2 --nproc 2 --dp 2" "tp=2|--batch 4 --nproc 2 --tp 2" "pp=2|--batch 2 --nproc 2 --pp 2 --micro-batches 2" \
         "dp=2 ZeRO-3|--batch 2 --nproc 2 --dp 2 --zero 3" "one process, --grad-accum 2|--batch 2 --grad-accum 2"; do
  # shellcheck disable=SC2086
  timeout 60 "$BIN" "${E[@]}" ${l#*|} >"$TMP/v.out" 2>&1
  v=$(vloss "$TMP/v.out")
  [ -n "$v1" ] && [ "$v" = "$v1" ] && ok "${l%%|*}: the one process's $v1 (4 sequences a step)" || bad "${l%%|*} validation" "one process: $v1" "${l%%|*}: $v"
done
# a validation set of 5 sequences: the last round leaves dp rank 1 without one (it still joins ZeRO-3's gathers)
head -c 81 "$DATA" >"$TMP/val5.txt"
V=("${T[@]}" --config "$TMP/g2.json" --val-data "$TMP/val5.txt" --steps 2 --eval-batches 0)
"$BIN" "${V[@]}" --batch 4 >"$TMP/v1.out" 2>&1
timeout 60 "$BIN" "${V[@]}" --batch 2 --nproc 2 --dp 2 --zero 3 >"$TMP/v.out" 2>&1
a=$(vloss "$TMP/v1.out"); b=$(vloss "$TMP/v.out")
[ -n "$a" ] && [ "$a" = "$b" ] && grep -q "80 tokens" "$TMP/v.out" &&
  ok "all of a 5-sequence validation set under dp=2 ZeRO-3: the one process's $a over 80 tokens" || bad "uneven validation rounds" "$a" "$b"
"$BIN" "${E[@]}" --steps 4 --eval-every 2 --exit-after 2 --ckpt-dir "$TMP/ea" --log "$TMP/ea.jsonl" >"$TMP/ea.out" 2>&1
grep -q "^eval      2 " "$TMP/ea.out" && grep -q "stopped:   after step 2" "$TMP/ea.out" && grep -q '"val_loss"' "$TMP/ea.jsonl" &&
  ok "--exit-after 2 with --eval-every 2 evaluates step 2 before stopping" || bad "exit-after at an evaluation step" "$(tail -3 "$TMP/ea.out")"
"$BIN" "${E[@]}" --steps 4 --eval-every 2 --exit-after 3 --ckpt-dir "$TMP/eb" >"$TMP/eb.out" 2>&1
[ "$(grep -c "^eval " "$TMP/eb.out")" -eq 1 ] && grep -q "stopped:   after step 3" "$TMP/eb.out" &&
  ok "--exit-after 3 with --eval-every 2: step 2's evaluation, none at 3" || bad "exit-after off an evaluation step" "$(grep -E "^eval|stopped" "$TMP/eb.out")"

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
