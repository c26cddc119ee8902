#!/usr/bin/env bash
# Tensor parallelism as a user runs it (tessera train --nproc N --tp T
# [--dp D] [--sp] [--zero Z]): every layout tracks the single-process run
# and repeats bit for bit, a vocabulary that the padding splits unevenly
# trains the same model, checkpoints move between tensor-parallel sizes,
# exports have Hugging Face shapes, the bytes sent equal the planner's, and
# bad layouts are refused before any work. Run from the repository root.
source "$(dirname "$0")/lib.sh"

# ---- every layout against one process: two models × (dp, tp) ∈ {1×2, 2×2, 1×4, 2×4} × --sp × ZeRO 0,1 × accum 1,2 ----
# gpt2-tiny on the byte vocabulary (256 tokens: padded to 512 at tp=4, so
# two of the four vocabulary slices hold padding only), and a model of odd
# sizes (3 layers, 4 heads of 11, d_ff 116, its own padding). Global batch
# 8 sequences, 20 steps.
echo '{"model": {"n_layer": 3, "n_head": 4, "d_model": 44, "d_ff": 116, "max_seq": 32}, "seq": 32}' >"$TMP/odd.json"
MODELS=("tiny|--model gpt2-tiny" "odd|--config $TMP/odd.json")
R="train --data $DATA --tokenizer byte --steps 20 --log-every 1 --seed 21 --lr 1e-3 --warmup 2 --clip 0.5"
run() {   # run NAME MODELFLAGS DP TP SP Z K [extra...]
  local name=$1 mf=$2 dp=$3 tp=$4 sp=$5 z=$6 k=$7
  shift 7
  local par="--nproc $((dp * tp)) --dp $dp --tp $tp --zero $z"
  [ "$tp" = 1 ] && [ "$dp" = 1 ] && [ "$z" = 0 ] && par=""
  [ "$sp" = 1 ] && par="$par --sp"
  "$BIN" $R $mf $par --grad-accum "$k" --batch $((8 / dp / k)) --log "$TMP/$name.jsonl" --ckpt-dir "$TMP/$name" "$@" \
    >"$TMP/$name.out" 2>&1
}
for m in "${MODELS[@]}"; do
  mn=${m%%|*}; mf=${m#*|}
  run "${mn}_ref" "$mf" 1 1 0 0 1
  bad=0; rep=0; n=0
  for l in "1 2" "2 2" "1 4" "2 4"; do read -r dp tp <<<"$l"; for sp in 0 1; do for z in 0 1; do for k in 1 2; do
    name="${mn}_d${dp}t${tp}s${sp}z${z}k${k}"
    n=$((n + 1))
    if ! run "$name" "$mf" $dp $tp $sp $z $k || ! run "${name}_again" "$mf" $dp $tp $sp $z $k; then
      bad=1; echo "     $mn dp=$dp tp=$tp sp=$sp zero=$z accum=$k: run failed: $(tail -1 "$TMP/$name.out")"; continue
    fi
    losses_match "$TMP/${mn}_ref.jsonl" "$TMP/$name.jsonl" || { bad=1; echo "     $mn dp=$dp tp=$tp sp=$sp zero=$z accum=$k: losses differ"; }
    rel=$(params_rel "$TMP/${mn}_ref" "$TMP/$name")
    awk -v r="$rel" 'BEGIN { exit !(r < 1e-4) }' || { bad=1; echo "     $mn dp=$dp tp=$tp sp=$sp zero=$z accum=$k: parameters differ by $rel"; }
    same_bits "$TMP/$name" "$TMP/${name}_again" && cmp -s <(grep -o '"loss":[0-9.]*' "$TMP/$name.jsonl") \
      <(grep -o '"loss":[0-9.]*' "$TMP/${name}_again.jsonl") || { rep=1; echo "     $mn dp=$dp tp=$tp sp=$sp zero=$z accum=$k differs run to run"; }
  done; done; done; done
  if [ $bad -eq 0 ]; then ok "$mn: $n tensor-parallel layouts track the single-process run over 20 steps (losses 1e-5, parameters 1e-4)"
  else bad "$mn: tensor-parallel layouts against the single-process run"; fi
  if [ $rep -eq 0 ]; then ok "$mn: each of the $n layouts repeats bit for bit (losses and checkpoint files)"
  else bad "$mn: tensor-parallel runs repeat bit for bit"; fi
done
# ZeRO-3 over the DP group with TP: each TP rank shards its own slice
z3_bad=0
for sp in 0 1; do
  run "z3s$sp" "--model gpt2-tiny" 2 2 $sp 3 2 || { z3_bad=1; continue; }
  losses_match "$TMP/tiny_ref.jsonl" "$TMP/z3s$sp.jsonl" && awk -v r="$(params_rel "$TMP/tiny_ref" "$TMP/z3s$sp")" 'BEGIN { exit !(r < 1e-4) }' || z3_bad=1
done
files=$(ls "$TMP/z3s1/$(cat "$TMP/z3s1/latest")" | grep -c tsr)
[ $z3_bad -eq 0 ] && [ "$files" -eq 4 ] && ok "dp=2 × tp=2 under ZeRO-3 (with and without --sp) tracks one process; 4 rank files" ||
  bad "ZeRO-3 with tensor parallelism" "$files files"

# ---- a vocabulary the padding needs: GPT-2's 50257 tokens, padded to 50304, 50432 (tp=2) and 50688 (tp=4) ----
# The padding logits must not enter the softmax (Megatron-LM issue #1754:
# the loss then differs between tensor-parallel sizes).
G="train --data $DATA --tokenizer gpt2 --model gpt2-tiny --steps 4 --log-every 1 --seed 3 --seq 32 --batch 4 --lr 1e-3"
"$BIN" $G --log "$TMP/g1.jsonl" >"$TMP/g1.out" 2>&1
gv_bad=0
for par in "--nproc 2 --tp 2" "--nproc 4 --tp 4 --sp"; do
  "$BIN" $G $par --log "$TMP/gt.jsonl" >"$TMP/gt.out" 2>&1 && losses_match "$TMP/g1.jsonl" "$TMP/gt.jsonl" || { gv_bad=1; echo "     $par: $(tail -1 "$TMP/gt.out")"; }
  rm -f "$TMP/gt.jsonl"
done
grep -q "vocab 50257 (padded 50688)" "$TMP/gt.out" || gv_bad=1
[ $gv_bad -eq 0 ] && ok "GPT-2 vocabulary padded to 50432 / 50688 rows: tp=2 and tp=4 --sp give the single-process losses" ||
  bad "padded GPT-2 vocabulary under tensor parallelism" "$(grep vocab "$TMP/gt.out")"

# ---- checkpoints between tensor-parallel sizes ----
# tp=2 stops at step 10; tp=1 and dp=2 × tp=2 finish: each ends where the
# uninterrupted single-process run ends.
mv_bad=0
run tp2stop "--model gpt2-tiny" 1 2 0 0 1 --exit-after 10
for to in "1 1" "2 2"; do
  read -r dp tp <<<"$to"
  d="$TMP/resume$dp$tp"
  cp -r "$TMP/tp2stop" "$d"
  par=""; [ "$tp" = 2 ] && par="--nproc 4 --dp 2 --tp 2"
  "$BIN" $R --model gpt2-tiny $par --batch $((8 / dp)) --resume "$d" --ckpt-dir "$d" --log "$d.jsonl" >"$d.out" 2>&1 ||
    { mv_bad=1; echo "     tp=2 → dp=$dp tp=$tp: $(tail -1 "$d.out")"; continue; }
  rel=$(params_rel "$TMP/tiny_ref" "$d")
  sed -n '11,20p' "$TMP/tiny_ref.jsonl" >"$TMP/ref_11_20.jsonl"
  losses_match "$TMP/ref_11_20.jsonl" "$d.jsonl" && awk -v r="$rel" 'BEGIN { exit !(r < 1e-4) }' ||
    { mv_bad=1; echo "     tp=2 → dp=$dp tp=$tp: parameters differ by $rel"; }
done
info=$("$BIN" ckpt info "$TMP/tp2stop" 2>&1)
echo "$info" | grep -q "layout:     dp 1, tp 2, pp 1, zero 0; 2 files" && echo "$info" | grep -qE "^h.0.attn.c_attn.weight +3×128×128 +0\+3,64\+64,0\+128 " ||
  { mv_bad=1; echo "     ckpt info does not show the slices"; }
[ $mv_bad -eq 0 ] && ok "a tp=2 checkpoint resumes at tp=1 and at dp=2 × tp=2 and ends as one process does; ckpt info shows the slices" ||
  bad "checkpoints between tensor-parallel sizes"

# ---- export from a tp=4 run: Hugging Face shapes, the single-process weights ----
"$BIN" $R --model gpt2-tiny --steps 3 --batch 8 --ckpt-dir "$TMP/ex1" >/dev/null 2>&1
"$BIN" $R --model gpt2-tiny --steps 3 --batch 8 --nproc 4 --tp 4 --ckpt-dir "$TMP/ex4" >/dev/null 2>&1
"$BIN" export --ckpt "$TMP/ex1" --out "$TMP/ex1.safetensors" >/dev/null 2>&1
"$BIN" export --ckpt "$TMP/ex4" --out "$TMP/ex4.safetensors" >/dev/null 2>&1
hdr=$(head -c 8 "$TMP/ex4.safetensors" | od -An -tu8 | tr -d ' ')
shapes=$(head -c $((8 + hdr)) "$TMP/ex4.safetensors" | tail -c "$hdr")
"$BIN" import --in "$TMP/ex1.safetensors" --out "$TMP/im1" --model gpt2-tiny --tokenizer byte >/dev/null 2>&1
"$BIN" import --in "$TMP/ex4.safetensors" --out "$TMP/im4" --model gpt2-tiny --tokenizer byte >/dev/null 2>&1
d=$("$BIN" ckpt diff "$TMP/im1" "$TMP/im4" 2>&1 | sed 's/^max |a-b| \([0-9.e+-]*\) .*/\1/')
if echo "$shapes" | grep -q '"transformer.wte.weight":{"dtype":"F32","shape":\[256,128\]' &&
   echo "$shapes" | grep -q '"transformer.h.3.attn.c_attn.weight":{"dtype":"F32","shape":\[128,384\]' &&
   echo "$shapes" | grep -q '"transformer.h.3.mlp.c_proj.weight":{"dtype":"F32","shape":\[512,128\]' &&
   awk -v a="$d" 'BEGIN { exit !(a <= 1e-5) }'; then
  ok "safetensors exported from a tp=4 run have Hugging Face shapes and the single-process values (max |a-b| $d)"
else bad "export from a tp=4 run" "max |a-b| $d"; fi

# ---- communicated bytes per step: the planner's prediction, exactly ----
# TP: 4 allreduces of s·b·h per layer and micro-batch + the embedding's and
# the head's + the loss statistics (the SP equivalents with --sp); DP: the
# gradients of this rank's slice and the embedding rows, as without TP.
cb_bad=0
for c in "tiny 2 2 0 1 1" "tiny 1 4 1 0 2" "tiny 2 4 0 1 2" "tiny 2 2 1 0 1" "odd 2 2 1 1 2" "odd 1 4 0 0 1"; do
  read -r mn dp tp sp z k <<<"$c"
  f="$TMP/${mn}_d${dp}t${tp}s${sp}z${z}k${k}.jsonl"
  mf="--model gpt2-tiny --seq 64"; [ "$mn" = odd ] && mf="--config $TMP/odd.json --seq 32"
  spf=""; [ "$sp" = 1 ] && spf="--sp"
  pj=$("$BIN" plan $mf --vocab 256 --devices $((dp * tp)) --dp $dp --tp $tp $spf --zero $z --precision fp32 \
       --global-batch 8 --micro-batch $((8 / dp / k)) --json)
  wtp=$(echo "$pj" | sed 's/.*"comm_bytes":{[^}]*"tp":\([0-9.e+]*\).*/\1/'); wdp=$(echo "$pj" | sed 's/.*"comm_bytes":{"dp":\([0-9.e+]*\).*/\1/')
  gtp=$(field "$f" tp_comm_bytes); gdp=$(field "$f" grad_comm_bytes)
  awk -v a="$gtp" -v b="$wtp" -v c="$gdp" -v d="$wdp" 'BEGIN { exit !(a == b && c == d && a > 0) }' ||
    { cb_bad=1; echo "     $mn dp=$dp tp=$tp sp=$sp zero=$z accum=$k: TP sent $gtp (plan $wtp), DP sent $gdp (plan $wdp)"; }
done
L=4; C=128; N=$((8 * 64))   # tiny, tp=2, dp=1, one micro-batch of 8×64: (4L+2) allreduces of N·C floats, 2(t−1)/t each, + 3N loss floats
want=$(( (4 * L + 2) * N * C * 4 + 3 * N * 4 ))
run tpbytes "--model gpt2-tiny" 1 2 0 0 1
[ "$(field "$TMP/tpbytes.jsonl" tp_comm_bytes)" -eq $want ] || { cb_bad=1; echo "     tp=2: $(field "$TMP/tpbytes.jsonl" tp_comm_bytes) bytes, expected $want"; }
[ $cb_bad -eq 0 ] && ok "bytes sent per step on the TP and DP groups equal tessera plan's exactly (6 layouts; tp=2: $want = (4L+2)·2(t−1)/t·4sbh + 12sb)" ||
  bad "communicated bytes with tensor parallelism"

# ---- errors: one line, exit 2, before any rank starts ----
err_case() {   # DESCRIPTION EXPECTED-TEXT FLAGS...
  local what=$1 want=$2
  shift 2
  "$BIN" train --data "$DATA" --tokenizer byte --steps 1 "$@" >"$TMP/e.out" 2>"$TMP/e.err"
  local rc=$?
  if [ $rc -eq 2 ] && [ "$(wc -l <"$TMP/e.err")" -eq 1 ] && grep -q -- "$want" "$TMP/e.err" && [ ! -s "$TMP/e.out" ]; then ok "$what: one line, exit 2"
  else bad "$what" "exit $rc: $(cat "$TMP/e.err")"; fi
}
echo '{"model": {"n_layer": 2, "n_head": 4, "d_model": 32, "d_ff": 90, "max_seq": 32}}' >"$TMP/ff.json"
err_case "heads not divisible by --tp" "does not divide the model's 4 heads" --nproc 3 --tp 3
err_case "d_ff not divisible by --tp" "d_ff 90" --config "$TMP/ff.json" --nproc 4 --tp 4
err_case "dp·tp not the ranks started" "dp × tp" --nproc 4 --dp 4 --tp 2
err_case "--tp not dividing --nproc" "--tp 4 does not divide --nproc 6" --nproc 6 --tp 4
err_case "--sp without --tp" "--sp" --sp
err_case "--sp with a sequence not split evenly" "--seq 30 is not a multiple of --tp 4" --nproc 4 --tp 4 --sp --seq 30

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
