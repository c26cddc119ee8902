#!/usr/bin/env bash
# Mixed precision as a user runs it (tessera train --precision bf16|fp16,
# --reduce-dtype bf16, fp16's loss-scale flags): 300 steps train to the
# fp32 loss, an overflow on one rank skips that step on every rank and
# halves the scale, a scale below the floor stops the run, resumes are bit
# for bit (the scaler's state included), every layout tracks one process,
# and bad flags are refused. Run from the repository root.
source "$(dirname "$0")/lib.sh"
B="train --data $DATA --tokenizer byte --seed 5"
losses() { grep -o '"loss":[0-9.]*' "$1" | cut -d: -f2; }
rel_close() { awk -v a="$1" -v b="$2" -v t="$3" 'BEGIN { d = a - b; if (d < 0) d = -d; exit !(d <= t * b) }'; }

# ---- 300 steps: bf16 and fp16 end within 2% of fp32's loss ----
for p in fp32 bf16 fp16; do
  "$BIN" $B --steps 300 --log-every 50 --precision $p --log "$TMP/long_$p.jsonl" >"$TMP/long_$p.out" 2>&1 ||
    echo "     $p: $(tail -1 "$TMP/long_$p.out")"
done
l32=$(field "$TMP/long_fp32.jsonl" loss); lb=$(field "$TMP/long_bf16.jsonl" loss); lh=$(field "$TMP/long_fp16.jsonl" loss)
if rel_close "$lb" "$l32" 0.02 && rel_close "$lh" "$l32" 0.02 && awk -v a="$l32" 'BEGIN { exit !(a < 2.6) }'; then
  ok "300 steps of gpt2-tiny: final loss fp32 $l32, bf16 $lb, fp16 $lh (within 2%)"
else bad "300 steps: final loss fp32 $l32, bf16 $lb, fp16 $lh"; fi
grep -q "params16" "$TMP/long_bf16.out" && grep -q '"params16":[1-9]' "$TMP/long_bf16.jsonl" &&
  ! grep -q '"params16":[1-9]' "$TMP/long_fp32.jsonl" && ok "the memory line and the log show the 16-bit weights (params16)" ||
  bad "params16 not reported"
a32=$(field "$TMP/long_fp32.jsonl" acts); ab=$(field "$TMP/long_bf16.jsonl" acts)
awk -v a="$a32" -v b="$ab" 'BEGIN { exit !(b < 0.8 * a) }' && ok "bf16 activations $ab bytes against fp32's $a32" ||
  bad "bf16 activations $ab bytes against fp32's $a32"

# ---- llama-tiny (fused q/k/v and gate/up products, an untied head), 2 micro-batches a step: 40 steps of
# bf16 and fp16 end within 2% of fp32's loss ----
for p in fp32 bf16 fp16; do
  "$BIN" $B --model llama-tiny --steps 40 --log-every 40 --batch 4 --seq 64 --grad-accum 2 --precision $p \
    --log "$TMP/llama_$p.jsonl" >"$TMP/llama_$p.out" 2>&1 || echo "     llama $p: $(tail -1 "$TMP/llama_$p.out")"
done
l32=$(field "$TMP/llama_fp32.jsonl" loss); lb=$(field "$TMP/llama_bf16.jsonl" loss); lh=$(field "$TMP/llama_fp16.jsonl" loss)
if [ -n "$l32" ] && rel_close "$lb" "$l32" 0.02 && rel_close "$lh" "$l32" 0.02; then
  ok "40 steps of llama-tiny: final loss fp32 $l32, bf16 $lb, fp16 $lh (within 2%)"
else bad "40 steps of llama-tiny: final loss fp32 $l32, bf16 $lb, fp16 $lh"; fi

# ---- MFU against the measured peak of the run's arithmetic: never above 100% ----
mx=$(cat "$TMP"/long_*.jsonl | grep -o '"mfu":[0-9.e+-]*' | cut -d: -f2 | sort -g | tail -1)
awk -v m="$mx" 'BEGIN { exit !(m > 0 && m <= 1) }' && grep -q "^cpu: .*peaks of .* thread.*(register-only probes): fp32 FMA" "$TMP/long_fp32.out" &&
  grep -q "MFU against .* (fp32 FMA" "$TMP/long_fp32.out" && grep -q "MFU against .* (fp32 FMA" "$TMP/long_fp16.out" &&
  ok "the header names the ISA and the probed peaks, MFU is quoted against the fp32 FMA peak (fp32, fp16) and never reads above 100% (highest $mx)" ||
  bad "MFU: highest $mx" "$(grep -E '^(cpu|compute):' "$TMP/long_fp32.out")"
# bf16's products on the unit that outruns the fp32 FMAs here, MFU against that unit's peak
bcomp=$(grep -E '^compute:' "$TMP/long_bf16.out")
case "$bcomp" in
  *"bf16 products on AMX tiles"*) want="bf16 tiles (AMX" ;;
  *"bf16 products on vdpbf16ps"*) want="bf16 dot product" ;;
  *"bf16 products widened to fp32"*) want="fp32 FMA" ;;
  *) want="" ;;
esac
if [ -n "$want" ]; then
  echo "$bcomp" | grep -qF "MFU against" && echo "$bcomp" | grep -qF "($want" &&
    ok "bf16 products on the unit chosen by the probes, MFU against its peak ($want)" || bad "bf16 MFU peak" "$bcomp"
elif grep -q avx512_bf16 /proc/cpuinfo; then   # the default build is -march=native
  bad "this CPU has avx512_bf16 but the bf16 run names no unit for its products" "$bcomp"
else
  grep -q "MFU against .* (fp32 FMA" "$TMP/long_bf16.out" && ok "bf16 without the bf16 units: MFU against the fp32 FMA peak" || bad "bf16 MFU peak"
fi

# ---- an overflow on one rank: every rank skips exactly that step ----
# the hook puts an inf into world rank 1's gradients at step 3: in dp=2
# ZeRO-1 and in a pp=2 pipeline (rank 1: the last stage) the run must
# match one process whose only rank overflows at step 3
O="$B --steps 6 --log-every 1 --precision fp16 --lr 1e-3"
TESSERA_TEST_OVERFLOW=3 "$BIN" $O --batch 4 --grad-accum 2 --log "$TMP/ov1.jsonl" --ckpt-dir "$TMP/ov1" >"$TMP/ov1.out" 2>&1
TESSERA_TEST_OVERFLOW=3:1 "$BIN" $O --batch 2 --grad-accum 2 --nproc 2 --zero 1 --log "$TMP/ovd.jsonl" --ckpt-dir "$TMP/ovd" >"$TMP/ovd.out" 2>&1
TESSERA_TEST_OVERFLOW=3:1 "$BIN" $O --batch 4 --nproc 2 --pp 2 --micro-batches 2 --log "$TMP/ovp.jsonl" --ckpt-dir "$TMP/ovp" >"$TMP/ovp.out" 2>&1
ov_bad=0
for r in ov1 ovd ovp; do
  sk=$(grep -n '"skipped":true' "$TMP/$r.jsonl" | cut -d: -f1 | tr '\n' ' ')
  sc=$(grep -o '"loss_scale":[0-9]*' "$TMP/$r.jsonl" | cut -d: -f2 | tr '\n' ' ')
  [ "$sk" = "3 " ] && [ "$sc" = "65536 65536 65536 32768 32768 32768 " ] || { ov_bad=1; echo "     $r: skipped at lines '$sk', scales '$sc'"; }
  grep -q '"adam_t": *5' "$TMP/$r/$(cat "$TMP/$r/latest")/meta.json" || { ov_bad=1; echo "     $r: AdamW took other than 5 steps"; }
  grep -q "step     3/6 .* | skipped: gradients overflowed" "$TMP/$r.out" || { ov_bad=1; echo "     $r: the step line does not say skipped"; }
done
for r in ovd ovp; do
  rel=$(params_rel "$TMP/ov1" "$TMP/$r")
  awk -v r="$rel" 'BEGIN { exit !(r < 1e-3) }' || { ov_bad=1; echo "     $r: parameters differ from one process by $rel"; }
done
[ $ov_bad -eq 0 ] && ok "an inf in one rank's gradients at step 3 skips step 3 on every rank (one process, dp=2 ZeRO-1, pp=2), halves the scale, and training goes on" ||
  bad "forced overflow"

# ---- the scale falls below the floor: exit 1, one clear line ----
TESSERA_TEST_OVERFLOW=2 "$BIN" $B --steps 5 --precision fp16 --loss-scale 1024 --loss-scale-min 1024 >"$TMP/floor.out" 2>&1
rc=$?
[ $rc -eq 1 ] && grep -q "tessera train: fp16 gradients overflowed at step 2 with the loss scale at 1024: halved to 512, below --loss-scale-min 1024" "$TMP/floor.out" &&
  ok "a scale below --loss-scale-min stops the run with exit 1 and says why" || bad "floor: exit $rc" "$(tail -2 "$TMP/floor.out")"
# hysteresis 2: the first overflow is skipped without halving
TESSERA_TEST_OVERFLOW=2 "$BIN" $B --steps 3 --log-every 1 --precision fp16 --hysteresis 2 --log "$TMP/hy.jsonl" >/dev/null 2>&1
[ "$(grep -o '"loss_scale":[0-9]*,"skipped":[a-z]*' "$TMP/hy.jsonl" | cut -d: -f2- | tr '\n' ' ')" = '65536,"skipped":false 65536,"skipped":true 65536,"skipped":false ' ] &&
  ok "--hysteresis 2: the first overflow skips the step and keeps the scale" || bad "hysteresis" "$(cat "$TMP/hy.jsonl" | cut -c1-80)"

# ---- resume bit for bit: bf16; fp16 with its scaler mid-window ----
res_bad=0
for p in "bf16|--precision bf16" "fp16|--precision fp16 --loss-scale-window 3" "fp16dp|--precision fp16 --loss-scale-window 3 --nproc 2 --zero 2 --reduce-dtype bf16"; do
  name=${p%%|*}; flags=${p#*|}
  R="$B --steps 8 --log-every 1 --batch 4 $flags"
  hook=; [ "$name" != bf16 ] && hook=3   # fp16: an overflow before the checkpoint
  TESSERA_TEST_OVERFLOW=$hook "$BIN" $R --ckpt-dir "$TMP/rs_$name" --log "$TMP/rs_$name.jsonl" >/dev/null 2>&1
  TESSERA_TEST_OVERFLOW=$hook "$BIN" $R --ckpt-dir "$TMP/rp_$name" --exit-after 5 --log "$TMP/rp_$name.jsonl" >/dev/null 2>&1
  "$BIN" $R --ckpt-dir "$TMP/rp_$name" --resume --log "$TMP/rp_$name.jsonl" >"$TMP/rp.out" 2>&1 || echo "     $name resume: $(tail -1 "$TMP/rp.out")"
  same_bits "$TMP/rs_$name" "$TMP/rp_$name" && cmp -s <(grep -o '"loss":[0-9.]*,"lr[^,]*\|"loss_scale":[0-9]*' "$TMP/rs_$name.jsonl") \
    <(grep -o '"loss":[0-9.]*,"lr[^,]*\|"loss_scale":[0-9]*' "$TMP/rp_$name.jsonl") || { res_bad=1; echo "     $name: the resumed run differs"; }
done
# window 3: ×2 at step 3 is cut short by its overflow (32768), steps 4 and 5
# count towards the next doubling, at step 6 after the resume
grep -q '"loss_scaler":{"scale":32768,"good":2,"left":0}' "$TMP/rp_fp16/step_00000005/meta.json" &&
  [ "$(grep -o '"loss_scale":[0-9]*' "$TMP/rs_fp16.jsonl" | cut -d: -f2 | tr '\n' ' ')" = "65536 65536 65536 32768 32768 32768 65536 65536 " ] ||
  { res_bad=1; echo "     the fp16 scaler: $(grep -o '"loss_scaler[^}]*}' "$TMP/rp_fp16/step_00000005/meta.json"), scales $(grep -o '"loss_scale":[0-9]*' "$TMP/rs_fp16.jsonl" | cut -d: -f2 | tr '\n' ' ')"; }
[ $res_bad -eq 0 ] && ok "bf16 and fp16 runs (one process; dp=2 ZeRO-2 with bf16 reduction) resume bit for bit, the loss scale and its counters included" ||
  bad "resume"
# the masters are fp32: a bf16 run continues in fp32 and in fp16
"$BIN" $B --steps 9 --batch 4 --precision fp32 --ckpt-dir "$TMP/rp_bf16" --resume >"$TMP/sw.out" 2>&1 &&
  "$BIN" $B --steps 10 --batch 4 --precision fp16 --ckpt-dir "$TMP/rp_bf16" --resume >>"$TMP/sw.out" 2>&1 &&
  ok "a bf16 checkpoint continues in fp32 and then in fp16" || bad "precision change on resume" "$(tail -1 "$TMP/sw.out")"

# ---- every layout against one process, in bf16 and fp16 ----
L="$B --steps 12 --log-every 1 --lr 1e-3 --warmup 2"
lay_bad=0
for p in bf16 fp16; do
  "$BIN" $L --precision $p --batch 2 --grad-accum 4 --log "$TMP/l_$p.jsonl" --ckpt-dir "$TMP/l_$p" >/dev/null 2>&1
  for lay in "d2z0|--nproc 2 --batch 2 --grad-accum 2" "d2z3|--nproc 2 --zero 3 --batch 2 --grad-accum 2" \
             "t2sp|--nproc 2 --tp 2 --sp --batch 2 --grad-accum 4" "p2|--nproc 2 --pp 2 --micro-batches 4 --batch 2 --recompute full" \
             "p2v2|--nproc 2 --pp 2 --virtual-stages 2 --micro-batches 4 --batch 2" \
             "d2t2p2|--nproc 8 --dp 2 --tp 2 --pp 2 --zero 1 --micro-batches 2 --batch 2 --recompute selective"; do
    name=${lay%%|*}; flags=${lay#*|}
    "$BIN" $L --precision $p $flags --log "$TMP/l_${p}_$name.jsonl" --ckpt-dir "$TMP/l_${p}_$name" >"$TMP/l.out" 2>&1 ||
      { lay_bad=1; echo "     $p $name: $(tail -1 "$TMP/l.out")"; continue; }
    worst=$(paste -d' ' <(losses "$TMP/l_$p.jsonl") <(losses "$TMP/l_${p}_$name.jsonl") |
            awk '{ d = ($1 - $2) / $1; if (d < 0) d = -d; if (d > w) w = d } END { print w + 0 }')
    rel=$(params_rel "$TMP/l_$p" "$TMP/l_${p}_$name")
    awk -v w="$worst" -v r="$rel" 'BEGIN { exit !(w < 1e-4 && r < 1e-2) }' ||
      { lay_bad=1; echo "     $p $name: losses off by $worst, parameters by $rel"; }
  done
done
[ $lay_bad -eq 0 ] && ok "bf16 and fp16 in dp=2 (ZeRO-0, 3), tp=2 --sp, pp=2 --recompute full, pp=2 interleaved and 2×2×2 --recompute selective track one process (losses within 1e-4)" ||
  bad "16-bit layouts"
# --reduce-dtype bf16 halves the gradient bytes and stays near the fp32 reduction
"$BIN" $L --precision bf16 --nproc 2 --batch 2 --grad-accum 2 --reduce-dtype bf16 --log "$TMP/rd.jsonl" >"$TMP/rd.out" 2>&1
g32=$(field "$TMP/l_bf16_d2z0.jsonl" grad_comm_bytes); g16=$(field "$TMP/rd.jsonl" grad_comm_bytes)
worst=$(paste -d' ' <(losses "$TMP/l_bf16_d2z0.jsonl") <(losses "$TMP/rd.jsonl") | awk '{ d = ($1 - $2) / $1; if (d < 0) d = -d; if (d > w) w = d } END { print w + 0 }')
awk -v a="$g32" -v b="$g16" -v w="$worst" 'BEGIN { exit !(b < 0.52 * a && w < 1e-3) }' &&
  ok "--reduce-dtype bf16 sends $g16 gradient bytes per step against $g32 (the embedding rows stay fp32), losses within $worst" ||
  bad "--reduce-dtype bf16: $g16 bytes against $g32, losses off by $worst" "$(tail -1 "$TMP/rd.out")"

# ---- the planner's activation bytes are the trainer's, to the byte ----
pl_bad=0
for c in "bf16 none 1 1" "fp16 full 1 1" "bf16 selective 2 4" "fp16 none 2 2"; do
  read -r p rc pp m <<<"$c"
  "$BIN" $B --steps 1 --batch 4 --precision $p --recompute $rc --nproc $pp --pp $pp --micro-batches $m --log "$TMP/pl.jsonl" >/dev/null 2>&1
  want=$(grep -o '"acts":[0-9]*' "$TMP/pl.jsonl" | head -1 | cut -d: -f2)
  got=$("$BIN" plan --model gpt2-tiny --vocab 256 --micro-batch 4 --global-batch $((4 * m)) --seq 64 --dp 1 --pp $pp \
        --devices $pp --precision $p --recompute $rc --json | grep -o '"activations_bytes":[0-9]*' | cut -d: -f2)
  [ -n "$want" ] && [ "$got" = "$want" ] || { pl_bad=1; echo "     $p $rc pp=$pp M=$m: plan $got bytes, the run $want"; }
  rm -f "$TMP/pl.jsonl"
done
[ $pl_bad -eq 0 ] && ok "tessera plan's activation bytes equal the run's (bf16/fp16, every recomputation, one process and pp=2)" ||
  bad "planned activations"

# ---- bad flags: one line, exit 2 ----
err_bad=0
expect_usage() {   # MESSAGE FLAGS...: exit 2 and the message
  local want=$1; shift
  "$BIN" $B --steps 1 "$@" >"$TMP/e.out" 2>&1
  [ $? -eq 2 ] && grep -q -- "$want" "$TMP/e.out" || { err_bad=1; echo "     $*: $(cat "$TMP/e.out")"; }
}
expect_usage "--precision: expected fp32, bf16 or fp16, got 'fp8'" --precision fp8
expect_usage "--reduce-dtype: expected fp32 or bf16, got 'f16'" --reduce-dtype f16
expect_usage "--loss-scale is fp16's dynamic loss scale: it needs --precision fp16 (bf16 needs no scale)" --precision bf16 --loss-scale 8
expect_usage "--hysteresis is fp16's dynamic loss scale" --hysteresis 2
expect_usage "--loss-scale 2 is below --loss-scale-min 4" --precision fp16 --loss-scale 2 --loss-scale-min 4
TESSERA_TEST_OVERFLOW=x "$BIN" $B --steps 1 >"$TMP/e.out" 2>&1
[ $? -eq 2 ] && grep -q "TESSERA_TEST_OVERFLOW='x': expected STEP or STEP:RANK" "$TMP/e.out" || { err_bad=1; echo "     hook: $(cat "$TMP/e.out")"; }
"$BIN" export --ckpt "$TMP/l_bf16" --out "$TMP/x.safetensors" --dtype f8 >"$TMP/e.out" 2>&1
[ $? -eq 2 ] && grep -q "expected f32, bf16 or f16" "$TMP/e.out" || { err_bad=1; echo "     export --dtype f8: $(cat "$TMP/e.out")"; }
[ $err_bad -eq 0 ] && ok "bad precision flags: one line naming the flag, exit 2" || bad "precision flag errors"

# ---- export in 16 bits, read back by import ----
exp_bad=0
for d in f32 bf16 f16; do
  "$BIN" export --ckpt "$TMP/l_bf16" --out "$TMP/m_$d.safetensors" --dtype $d >/dev/null 2>&1 &&
    "$BIN" import --in "$TMP/m_$d.safetensors" --out "$TMP/imp_$d" --tokenizer byte --model gpt2-tiny >/dev/null 2>&1 || { exp_bad=1; echo "     $d: export or import failed"; }
done
s32=$(stat -c %s "$TMP/m_f32.safetensors"); s16=$(stat -c %s "$TMP/m_bf16.safetensors")
r16=$(params_rel "$TMP/imp_f32" "$TMP/imp_bf16"); r8=$(params_rel "$TMP/imp_f32" "$TMP/imp_f16")
awk -v a="$s32" -v b="$s16" -v r="$r16" -v h="$r8" 'BEGIN { exit !(b < 0.51 * a && r > 0 && r <= 1.0 / 256 && h > 0 && h <= 1.0 / 2048) }' ||
  { exp_bad=1; echo "     sizes $s32 / $s16 bytes, bf16 off by $r16, f16 by $r8"; }
[ $exp_bad -eq 0 ] && ok "export --dtype bf16 and f16 write half the bytes, rounded within half an ulp (import reads them)" || bad "16-bit export"

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
