#!/usr/bin/env bash
# Pipeline parallelism and 3D meshes as a user runs them (tessera train
# --nproc N --dp D --tp T --pp P [--pp-layers a,b,…] [--schedule S]
# [--virtual-stages V] --micro-batches M): every layout tracks the
# single-process run and
# repeats bit for bit, checkpoints move between any layouts, the bytes
# sent between stages equal the planner's, a killed rank stops the mesh,
# and bad layouts are refused before any work. Run from the repository root.
source "$(dirname "$0")/lib.sh"

# ---- every layout against one process ----
# gpt2-tiny (4 layers), a model of 5 layers that no stage count divides
# evenly (its stages given with --pp-layers) and one of 8 for four stages
# of two interleaved chunks. Global batch 8 sequences: batch ×
# micro-batches × dp = 8, 20 steps.
echo '{"model": {"n_layer": 5, "n_head": 4, "d_model": 44, "d_ff": 116, "max_seq": 32}, "seq": 32}' >"$TMP/odd.json"
echo '{"model": {"n_layer": 8, "n_head": 4, "d_model": 32, "d_ff": 64, "max_seq": 32}, "seq": 32}' >"$TMP/eight.json"
R="train --data $DATA --tokenizer byte --steps 20 --log-every 1 --seed 21 --lr 1e-3 --warmup 2 --clip 0.5"
run() {   # run NAME MODELFLAGS DP TP PP ZERO SCHEDULE M [extra...]
  local name=$1 mf=$2 dp=$3 tp=$4 pp=$5 z=$6 sc=$7 m=$8
  shift 8
  "$BIN" $R $mf --nproc $((dp * tp * pp)) --dp $dp --tp $tp --pp $pp --zero $z --schedule $sc --micro-batches $m \
    --batch $((8 / dp / m)) --log "$TMP/$name.jsonl" --ckpt-dir "$TMP/$name" "$@" >"$TMP/$name.out" 2>&1
}
check() {   # check REFNAME NAME WHAT: tracks the reference and repeats bit for bit; 1 (and a line) if not
  local r=$1 n=$2 what=$3 rel
  losses_match "$TMP/$r.jsonl" "$TMP/$n.jsonl" || { echo "     $what: losses differ from one process"; return 1; }
  rel=$(params_rel "$TMP/$r" "$TMP/$n")
  awk -v r="$rel" 'BEGIN { exit !(r < 1e-4) }' || { echo "     $what: parameters differ by $rel"; return 1; }
}
repeat_check() {   # NAME: its _again run left the same checkpoint bits and losses
  same_bits "$TMP/$1" "$TMP/$1_again" &&
    cmp -s <(grep -o '"loss":[0-9.]*' "$TMP/$1.jsonl") <(grep -o '"loss":[0-9.]*' "$TMP/$1_again.jsonl")
}
"$BIN" $R --model gpt2-tiny --batch 2 --grad-accum 4 --log "$TMP/tiny_ref.jsonl" --ckpt-dir "$TMP/tiny_ref" >/dev/null 2>&1
"$BIN" $R --config "$TMP/odd.json" --batch 2 --grad-accum 4 --log "$TMP/odd_ref.jsonl" --ckpt-dir "$TMP/odd_ref" >/dev/null 2>&1
"$BIN" $R --config "$TMP/eight.json" --batch 2 --grad-accum 4 --log "$TMP/eight_ref.jsonl" --ckpt-dir "$TMP/eight_ref" >/dev/null 2>&1
# model dp tp pp zero schedule M [flags]
LAYOUTS=(
  "tiny 1 1 2 0 1f1b 8" "tiny 1 1 2 0 gpipe 8" "tiny 1 1 4 0 1f1b 4" "tiny 1 1 4 0 gpipe 4"
  "tiny 2 2 2 0 1f1b 4" "tiny 2 2 2 1 1f1b 4 --sp" "tiny 2 2 2 1 gpipe 2"
  "tiny 1 2 4 0 1f1b 4" "tiny 1 2 4 1 gpipe 4" "tiny 2 1 4 0 gpipe 4" "tiny 2 1 4 1 1f1b 4"
  "tiny 4 2 1 0 1f1b 2" "tiny 4 2 1 1 1f1b 1"
  "tiny 2 1 2 2 1f1b 2" "tiny 2 2 2 3 1f1b 2 --sp"
  "odd 1 1 2 0 1f1b 4 --pp-layers 3,2" "odd 1 1 2 0 gpipe 4 --pp-layers 2,3"
  "odd 1 1 4 0 1f1b 4 --pp-layers 1,2,1,1" "odd 2 2 2 1 1f1b 2 --pp-layers 3,2"
  "tiny 1 1 2 0 1f1b 4 --virtual-stages 2" "tiny 1 1 2 0 1f1b 8 --virtual-stages 2" "tiny 2 1 2 1 1f1b 2 --virtual-stages 2"
  "tiny 2 2 2 3 1f1b 2 --virtual-stages 2 --sp" "eight 1 1 4 0 1f1b 4 --virtual-stages 2" "eight 2 1 4 1 1f1b 4 --virtual-stages 2"
)
bad_n=0; rep=0; n=0
for l in "${LAYOUTS[@]}"; do
  read -r mn dp tp pp z sc m extra <<<"$l"
  mf="--model gpt2-tiny"; [ "$mn" != tiny ] && mf="--config $TMP/$mn.json"
  name="${mn}_d${dp}t${tp}p${pp}z${z}${sc}m${m}${extra//[^0-9a-z]/}"
  what="$mn dp=$dp tp=$tp pp=$pp zero=$z $sc M=$m $extra"
  n=$((n + 1))
  if ! run "$name" "$mf" $dp $tp $pp $z $sc $m $extra || ! run "${name}_again" "$mf" $dp $tp $pp $z $sc $m $extra; then
    bad_n=$((bad_n + 1)); echo "     $what: run failed: $(tail -1 "$TMP/$name.out")"; continue
  fi
  check "${mn}_ref" "$name" "$what" || bad_n=$((bad_n + 1))
  repeat_check "$name" || { rep=1; echo "     $what differs run to run"; }
done
if [ $bad_n -eq 0 ]; then ok "$n pipeline and 3D layouts (pp 2 and 4, gpipe, 1f1b and interleaved with V=2, ZeRO 0-3, --sp, an uneven --pp-layers split) track the single-process run over 20 steps (losses 1e-5, parameters 1e-4)"
else bad "$bad_n of $n pipeline layouts against the single-process run"; fi
if [ $rep -eq 0 ]; then ok "each of the $n pipeline layouts repeats bit for bit (losses and checkpoint files)"
else bad "pipeline runs repeat bit for bit"; fi

# ---- the header and ckpt info say which rank holds what ----
o="$TMP/tiny_d2t2p2z01f1bm4.out"
grep -q "^pipeline:  2 stages .*1f1b schedule, 4 micro-batches" "$o" && grep -q "rank 6: stage 1, layers 2–3 + final norm, head, loss, tp 0/2" "$o" &&
  grep -q "activations of 2 micro-batches held at once" "$o" && grep -q "bubble .* measured .* planned" "$o" &&
  "$BIN" ckpt info "$TMP/tiny_d2t2p2z01f1bm4" | grep -q "rank_00003.tsr: stage 1 of 2, tp rank 1 of 2, written by dp rank 0" &&
  ok "the header names each rank's stage, layers and TP slice; ckpt info each file's stage, TP and DP rank; the summary the bubble" ||
  bad "pipeline header, summary and ckpt info" "$(grep -E '^(pipeline|ranks)' "$o" | head -3)"
o="$TMP/eight_d1t1p4z01f1bm4virtualstages2.out"
grep -q "interleaved 1f1b schedule (2 chunks of 1 layer per stage), 4 micro-batches" "$o" &&
  grep -q "rank 0: stage 0, layers 0, 4 + embeddings" "$o" && grep -q "rank 3: stage 3, layers 3, 7 + final norm, head, loss" "$o" &&
  grep -q "activations of 8 micro-batch chunks held at once" "$o" && grep -q "against (P−1)/(V·M+P−1) = 27.3% planned" "$o" &&
  ok "interleaved: the header names each rank's two chunks and the 8 chunks (all of them) in flight on stage 0, the summary the interleaved bubble" ||
  bad "interleaved pipeline header and summary" "$(grep -E '^(pipeline|ranks)' "$o" | head -3)"

# ---- activation memory: 1F1B holds P micro-batches, GPipe all M ----
a1=$(grep -o '"acts":[0-9]*' "$TMP/tiny_d1t1p2z01f1bm8.jsonl" | tail -1 | cut -d: -f2)
a2=$(grep -o '"acts":[0-9]*' "$TMP/tiny_d1t1p2z0gpipem8.jsonl" | tail -1 | cut -d: -f2)
[ -n "$a1" ] && [ -n "$a2" ] && awk -v a="$a1" -v b="$a2" 'BEGIN { exit !(a > 0 && b >= 3.9 * a) }' &&
  grep -q "activations of 8 micro-batches" "$TMP/tiny_d1t1p2z0gpipem8.out" &&
  grep -q "activations of 2 micro-batches" "$TMP/tiny_d1t1p2z01f1bm8.out" &&
  ok "stage 0 holds P=2 micro-batches of activations under 1F1B, all M=8 under GPipe ($a1 vs $a2 bytes)" ||
  bad "activations in flight" "1f1b $a1, gpipe $a2"

# ---- resharding: 2×2×2 → one process → 1×2×4 → 4×1×2 (ZeRO-1) through checkpoints ----
T="train --data $DATA --tokenizer byte --steps 20 --log-every 1 --seed 21 --lr 1e-3 --warmup 2 --clip 0.5 --model gpt2-tiny"
C="--ckpt-dir $TMP/resh --log $TMP/resh.jsonl"
"$BIN" $T $C --nproc 8 --dp 2 --tp 2 --pp 2 --micro-batches 4 --batch 1 --exit-after 5 >"$TMP/r1.out" 2>&1 &&
  "$BIN" $T $C --resume --batch 2 --grad-accum 4 --exit-after 10 >"$TMP/r2.out" 2>&1 &&
  "$BIN" $T $C --resume --nproc 8 --dp 1 --tp 2 --pp 4 --micro-batches 4 --batch 2 --exit-after 15 >"$TMP/r3.out" 2>&1 &&
  "$BIN" $T $C --resume --nproc 8 --dp 4 --tp 1 --pp 2 --zero 1 --micro-batches 2 --batch 1 >"$TMP/r4.out" 2>&1
rc=$?
rel=$(params_rel "$TMP/tiny_ref" "$TMP/resh")
[ $rc -eq 0 ] && losses_match "$TMP/tiny_ref.jsonl" "$TMP/resh.jsonl" && awk -v r="$rel" 'BEGIN { exit !(r < 1e-4) }' &&
  grep -q "resumed:   .*step_00000015" "$TMP/r4.out" &&
  ok "2×2×2 → one process → 1×2×4 → 4×1×2 (ZeRO-1) through checkpoints ends where the uninterrupted run ends ($rel)" ||
  bad "resharding through pipeline checkpoints" "exit $rc, parameters $rel" "$(tail -1 "$TMP/r4.out")"

# ---- an interleaved checkpoint into a plain pipeline and back ----
C="--ckpt-dir $TMP/resv --log $TMP/resv.jsonl"
"$BIN" $T $C --nproc 2 --pp 2 --virtual-stages 2 --micro-batches 4 --batch 2 --exit-after 10 >"$TMP/v1.out" 2>&1 &&
  "$BIN" $T $C --resume --nproc 8 --dp 2 --tp 2 --pp 2 --zero 1 --micro-batches 2 --batch 2 --exit-after 15 >"$TMP/v2.out" 2>&1 &&
  "$BIN" $T $C --resume --nproc 4 --dp 2 --pp 2 --virtual-stages 2 --micro-batches 2 --batch 2 >"$TMP/v3.out" 2>&1
rc=$?
rel=$(params_rel "$TMP/tiny_ref" "$TMP/resv")
[ $rc -eq 0 ] && losses_match "$TMP/tiny_ref.jsonl" "$TMP/resv.jsonl" && awk -v r="$rel" 'BEGIN { exit !(r < 1e-4) }' &&
  ok "interleaved pp=2 → 2×2×2 (ZeRO-1) → interleaved 2×1×2 through checkpoints ends where the uninterrupted run ends ($rel)" ||
  bad "resharding through interleaved checkpoints" "exit $rc, parameters $rel" "$(tail -1 "$TMP/v3.out")"

# ---- evaluation through the pipeline: the one-process validation loss ----
E="train --data $DATA --val-data $DATA --tokenizer byte --steps 2 --seed 5 --model gpt2-tiny --batch 2 --eval-batches 3"
"$BIN" $E --grad-accum 2 >"$TMP/e1.out" 2>&1
"$BIN" $E --nproc 4 --tp 2 --pp 2 --micro-batches 2 >"$TMP/e2.out" 2>&1
"$BIN" $E --nproc 2 --pp 2 --virtual-stages 2 --micro-batches 2 >"$TMP/e3.out" 2>&1
v1=$(grep -o "val loss [0-9.]*" "$TMP/e1.out" | tail -1); v2=$(grep -o "val loss [0-9.]*" "$TMP/e2.out" | tail -1)
v3=$(grep -o "val loss [0-9.]*" "$TMP/e3.out" | tail -1)
[ -n "$v1" ] && [ "$v1" = "$v2" ] && [ "$v1" = "$v3" ] &&
  ok "the validation loss through a tp=2 × pp=2 pipeline and an interleaved pp=2 one is the one process's ($v1)" ||
  bad "evaluation through the pipeline" "one process: $v1" "pipeline: $v2" "interleaved: $v3"

# ---- bytes between stages per step: the planner's, exactly ----
# A stage sends each micro-batch's activations (B·T·C floats; under --sp
# its B·T/tp rows) to the next stage and their gradients to the previous:
# an end stage one direction, a middle stage both (the planner's busiest).
pb_bad=0
# Interleaved, each chunk's: stage 0 of 4 sends V forward and V − 1
# backward per micro-batch, 3/4 of a middle stage's 2V.
for c in "tiny_d1t1p2z01f1bm8 1 1 2 8 0 1 1 1" "tiny_d2t2p2z11f1bm4sp 2 2 2 4 1 1 1 1" "tiny_d1t1p4z01f1bm4 1 1 4 4 0 1 1 2" \
         "tiny_d1t1p2z01f1bm4virtualstages2 1 1 2 4 0 2 1 1" "eight_d1t1p4z01f1bm4virtualstages2 1 1 4 4 0 2 3 4"; do
  read -r name dp tp pp m sp v num den <<<"$c"
  spf=""; [ "$sp" = 1 ] && spf="--sp"
  mdl="--model gpt2-tiny --seq 64"; [[ $name = eight* ]] && mdl="--config $TMP/eight.json --seq 32"
  pj=$("$BIN" plan $mdl --vocab 256 --devices $((dp * tp * pp)) --dp $dp --tp $tp --pp $pp $spf --virtual-stages $v \
       --precision fp32 --global-batch 8 --micro-batch $((8 / dp / m)) --json)
  want=$(echo "$pj" | sed 's/.*"comm_bytes":{[^}]*"pp":\([0-9.e+]*\).*/\1/')
  got=$(field "$TMP/$name.jsonl" pp_comm_bytes)
  awk -v a="$got" -v b="$want" -v n="$num" -v d="$den" 'BEGIN { exit !(a > 0 && a * d == b * n) }' ||
    { pb_bad=1; echo "     $name: stage 0 sent $got bytes per step, plan $want (busiest stage) × $num/$den"; }
done
[ $pb_bad -eq 0 ] && ok "bytes sent between stages per step equal tessera plan's exactly (pp=2, 3D with --sp, pp=4's first stage: half the busiest; interleaved pp=2 and pp=4)" ||
  bad "pipeline bytes against the planner"

# ---- messages larger than the shared-memory mailbox: a send completes only as the receiver takes it ----
# (512 KiB and 320 KiB per micro-batch, above the 256 KiB mailbox, as MPI's
# rendezvous sends): no schedule waits for a send it must itself unblock.
L="train --data $DATA --tokenizer byte --steps 2 --log-every 1 --seed 3 --comm-timeout 30"
"$BIN" $L --model gpt2-tiny --batch 16 --seq 64 --grad-accum 4 --log "$TMP/big_ref.jsonl" >/dev/null 2>&1
"$BIN" $L --config "$TMP/eight.json" --batch 80 --grad-accum 4 --log "$TMP/big8_ref.jsonl" >/dev/null 2>&1
big_bad=0
for c in "tiny 2 1f1b 1" "tiny 4 1f1b 1" "tiny 2 gpipe 1" "tiny 2 1f1b 2" "eight 4 1f1b 2"; do
  read -r mn pp sc v <<<"$c"
  if [ "$mn" = tiny ]; then mf="--model gpt2-tiny --batch 16 --seq 64"; ref=big_ref; else mf="--config $TMP/eight.json --batch 80"; ref=big8_ref; fi
  n="big_${mn}p${pp}${sc}v$v"
  "$BIN" $L $mf --nproc $pp --pp $pp --schedule $sc --virtual-stages $v --micro-batches 4 --log "$TMP/$n.jsonl" >"$TMP/$n.out" 2>&1 &&
    losses_match "$TMP/$ref.jsonl" "$TMP/$n.jsonl" || { big_bad=1; echo "     $mn pp=$pp $sc V=$v: $(tail -1 "$TMP/$n.out")"; }
done
[ $big_bad -eq 0 ] && ok "messages above the mailbox (taken only by the receiver): pp 2 and 4, gpipe, 1f1b and interleaved run through and match one process" ||
  bad "pipelines with messages above the mailbox"

# ---- a rank killed in a 3D run: every rank stops within the timeout, the error names it ----
"$BIN" train --data "$DATA" --tokenizer byte --steps 100000 --batch 1 --nproc 8 --dp 2 --tp 2 --pp 2 --micro-batches 2 \
  --log-every 1000 --comm-timeout 20 >"$TMP/kill.out" 2>&1 &
lpid=$!
for i in $(seq 1 100); do [ "$(pgrep -P $lpid | wc -l)" -ge 8 ] && break; sleep 0.1; done
sleep 1
kill_rank $lpid 6
krc=$KRC el=$KEL
# each rank's error once (its first failed collective; not again by the
# trainer or the launcher), the launcher's one line naming the killed rank
dups=$(grep -o "^tessera: rank [0-9]*:" "$TMP/kill.out" | sort | uniq -d)
if [ $krc -ne 0 ] && [ $el -lt 20 ] && grep -q "was killed by signal 9" "$TMP/kill.out" && [ -z "$(pgrep -P $lpid)" ] &&
   [ -z "$dups" ] && ! grep -q "^tessera train: rank [0-9]*:" "$TMP/kill.out" &&
   [ "$(grep -c "^tessera train:" "$TMP/kill.out")" -eq 1 ]; then
  ok "a rank killed in a 2×2×2 run stops every rank (exit $krc in ${el}s) with the rank named; each rank's error once"
else bad "a killed rank stops a 3D run" "exit $krc after ${el}s" "$(tail -3 "$TMP/kill.out")"; fi

# ---- errors: one line, exit 2, before any rank starts ----
E="train --data $DATA --tokenizer byte --steps 1 --batch 1"
err_bad=0
expect_err() {   # MESSAGE-PATTERN FLAGS...
  local pat=$1
  shift
  "$BIN" $E "$@" >"$TMP/err.out" 2>&1
  local rc=$?
  [ $rc -eq 2 ] && [ "$(wc -l <"$TMP/err.out")" -eq 1 ] && grep -q -- "$pat" "$TMP/err.out" ||
    { err_bad=1; echo "     $*: exit $rc: $(head -2 "$TMP/err.out")"; }
}
expect_err "does not divide the model's 5 layers" --config "$TMP/odd.json" --nproc 2 --pp 2 --micro-batches 2
expect_err "sum to 4, but the model has 5" --config "$TMP/odd.json" --nproc 2 --pp 2 --micro-batches 2 --pp-layers 2,2
expect_err "expected 2 positive layer counts" --nproc 2 --pp 2 --micro-batches 2 --pp-layers 2,x
expect_err "micro-batches 2 is below --pp 4" --nproc 4 --pp 4 --micro-batches 2
expect_err "dp × tp × pp = 1 × 2 × 2" --nproc 8 --dp 1 --tp 2 --pp 2 --micro-batches 2
expect_err "does not divide --nproc 6" --nproc 6 --tp 2 --pp 2 --micro-batches 2
expect_err "only 4 layers" --nproc 8 --pp 8 --micro-batches 8
expect_err "expected 1f1b or gpipe" --nproc 2 --pp 2 --micro-batches 2 --schedule zigzag
expect_err "name the same number" --nproc 2 --pp 2 --micro-batches 2 --grad-accum 3
expect_err "2 × --pp 2 = 4 chunks do not divide the model's 5 layers" --config "$TMP/odd.json" --nproc 2 --pp 2 --micro-batches 2 --virtual-stages 2
expect_err "micro-batches 6 is not a multiple of --pp 4" --config "$TMP/eight.json" --nproc 4 --pp 4 --micro-batches 6 --virtual-stages 2
expect_err "needs --pp 2 or more" --virtual-stages 2
expect_err "leave out --schedule gpipe" --nproc 2 --pp 2 --micro-batches 2 --virtual-stages 2 --schedule gpipe
expect_err "splits the layers evenly" --nproc 2 --pp 2 --micro-batches 2 --virtual-stages 2 --pp-layers 1,3
[ $err_bad -eq 0 ] && ok "bad pipeline layouts exit 2 with one line before any rank starts (14 cases)" || bad "pipeline layout errors"

# ---- an error every rank finds (a checkpoint's 5 layers on 2 stages): written once, naming the ranks ----
"$BIN" train --data "$DATA" --tokenizer byte --config "$TMP/odd.json" --steps 1 --batch 1 --ckpt-dir "$TMP/odd1" >/dev/null 2>&1
"$BIN" train --data "$DATA" --tokenizer byte --steps 2 --batch 1 --seq 32 --resume "$TMP/odd1" --nproc 4 --pp 2 \
  --micro-batches 2 >"$TMP/same.out" 2>&1
rc=$?
[ $rc -eq 2 ] && [ "$(wc -l <"$TMP/same.out")" -eq 2 ] &&
  grep -q "^tessera train: ranks 0, 1, 2, 3: --pp 2 does not divide the model's 5 layers" "$TMP/same.out" &&
  grep -q "^tessera train: all ranks stopped after rank [0-3]'s error above" "$TMP/same.out" &&
  ok "an error all 4 ranks find is written once with their ranks, and the launcher does not repeat it (exit 2)" ||
  bad "one error from every rank" "exit $rc" "$(head -3 "$TMP/same.out")"

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
