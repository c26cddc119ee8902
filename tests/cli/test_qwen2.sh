#!/usr/bin/env bash
# Qwen2 as a user trains it (tessera train --model qwen2-tiny: q/k/v
# biases, θ 10⁶, its head tied to the token embedding), and untied through
# --config: it learns and repeats bit for bit, every layout tracks one
# process (the tied head across a pipeline too), bf16 and recomputation
# work on it, a run resumes bit for bit, a Hugging Face Qwen2 directory
# goes out and back byte for byte, and the planner counts Qwen2-0.5B's
# parameters as its release does. Run from the repository root.
source "$(dirname "$0")/lib.sh"
B="train --model qwen2-tiny --data $DATA --tokenizer byte --seed 5"

# ---- learns, and repeats bit for bit ----
"$BIN" $B --batch 4 --steps 150 --log-every 50 --log "$TMP/long.jsonl" >"$TMP/long.out" 2>&1 ||
  echo "     $(tail -1 "$TMP/long.out")"
l=$(field "$TMP/long.jsonl" loss)
grep -q "model:     qwen2-tiny — 4 layers, 4 heads" "$TMP/long.out" && awk -v l="$l" 'BEGIN { exit !(l < 3.0) }' &&
  ok "qwen2-tiny learns Tiny Shakespeare: loss $l after 150 steps (from ln 256 = 5.55)" ||
  bad "qwen2-tiny: loss $l after 150 steps" "$(grep model: "$TMP/long.out")" "$(tail -1 "$TMP/long.out")"
R="$B --steps 12 --log-every 1 --lr 1e-3 --warmup 2"
ref_and_layouts "$R" qwen2-tiny

# ---- bf16, recomputation, resume ----
precision_recompute_resume "$R" qwen2-tiny

# ---- Hugging Face Qwen2 directories, tied and untied ----
hf_bad=0
"$BIN" export --ckpt "$TMP/ref" --hf-dir "$TMP/hf1" >/dev/null 2>&1 &&
  "$BIN" import --in "$TMP/hf1" --out "$TMP/imp" --tokenizer byte >"$TMP/imp.out" 2>&1 &&
  "$BIN" export --ckpt "$TMP/imp" --hf-dir "$TMP/hf2" >/dev/null 2>&1 || { hf_bad=1; echo "     $(tail -1 "$TMP/imp.out")"; }
cmp -s "$TMP/hf1/model.safetensors" "$TMP/hf2/model.safetensors" && cmp -s "$TMP/hf1/config.json" "$TMP/hf2/config.json" &&
  grep -q '"model_type":"qwen2"' "$TMP/hf1/config.json" && grep -q '"tie_word_embeddings":true' "$TMP/hf1/config.json" &&
  grep -q '"rope_theta":1000000.0,' "$TMP/hf1/config.json" && grep -q 'model.layers.3.self_attn.v_proj.bias' "$TMP/hf1/model.safetensors" &&
  ! grep -q 'lm_head' "$TMP/hf1/model.safetensors" && [ "$(params_rel "$TMP/ref" "$TMP/imp")" = 0 ] ||
  { hf_bad=1; echo "     tied: the round trip is not byte-identical, or config.json/the tensors are not Qwen2's"; }
echo '{"model": {"preset": "qwen2-tiny", "tie_embeddings": false}}' >"$TMP/untied.json"
"$BIN" train --data "$DATA" --tokenizer byte --seed 5 --config "$TMP/untied.json" --steps 3 --batch 2 --ckpt-dir "$TMP/un" >"$TMP/un.out" 2>&1 &&
  "$BIN" export --ckpt "$TMP/un" --hf-dir "$TMP/hu1" >/dev/null 2>&1 &&
  "$BIN" import --in "$TMP/hu1" --out "$TMP/uimp" --tokenizer byte >/dev/null 2>&1 &&
  "$BIN" export --ckpt "$TMP/uimp" --hf-dir "$TMP/hu2" >/dev/null 2>&1 || { hf_bad=1; echo "     untied: $(tail -1 "$TMP/un.out")"; }
cmp -s "$TMP/hu1/model.safetensors" "$TMP/hu2/model.safetensors" && cmp -s "$TMP/hu1/config.json" "$TMP/hu2/config.json" &&
  grep -q '"tie_word_embeddings":false' "$TMP/hu1/config.json" && grep -q '"lm_head.weight"' "$TMP/hu1/model.safetensors" ||
  { hf_bad=1; echo "     untied: the round trip is not byte-identical, or lm_head is missing"; }
"$BIN" $B --init-from "$TMP/hf1" --steps 2 --batch 2 --log "$TMP/init.jsonl" >"$TMP/init.out" 2>&1 ||
  { hf_bad=1; echo "     --init-from: $(tail -1 "$TMP/init.out")"; }
[ $hf_bad -eq 0 ] && ok "Qwen2 export --hf-dir → import → export, tied and untied: byte-identical, exact, Qwen2's keys and tensors; --init-from reads it" ||
  bad "Qwen2 Hugging Face directories"

# ---- the planner: Qwen2-0.5B's released count, and this run's bytes ----
out=$("$BIN" plan --model qwen2-0.5b --devices 8 --dp 8 --seq 1024 --micro-batch 1 --global-batch 8 --json 2>&1)
np=$(echo "$out" | grep -o '"params":[0-9]*' | head -1 | cut -d: -f2)
"$BIN" $B --steps 1 --batch 4 --log "$TMP/pl.jsonl" >/dev/null 2>&1
want=$(grep -o '"acts":[0-9]*' "$TMP/pl.jsonl" | head -1 | cut -d: -f2)
got=$("$BIN" plan --model qwen2-tiny --vocab 256 --micro-batch 4 --global-batch 4 --seq 64 --dp 1 --devices 1 --precision fp32 --json |
      grep -o '"activations_bytes":[0-9]*' | cut -d: -f2)
[ "$np" = 494032768 ] && [ -n "$want" ] && [ "$got" = "$want" ] &&
  ok "tessera plan: qwen2-0.5b has 494,032,768 parameters (its release's count); qwen2-tiny's activations $got bytes, as the run has" ||
  bad "planner on Qwen2: params $np, activations $got against the run's $want"

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
