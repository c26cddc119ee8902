#!/usr/bin/env bash
# Data parallelism and ZeRO as a user runs them (tessera train --nproc N
# --dp N --zero Z): every layout tracks the single-process run, repeats bit
# for bit, holds the memory ZeRO promises, sends the bytes the planner
# predicts, checkpoints into any other layout, and stops cleanly when a rank
# dies. Run from the repository root.
source "$(dirname "$0")/lib.sh"

# losses_match REF.jsonl RUN.jsonl: same number of steps, each loss within 1e-5 relative.
losses_match() {
  [ "$(grep -c '"loss"' "$1")" -eq "$(grep -c '"loss"' "$2")" ] || return 1
  paste -d' ' <(grep -o '"loss":[0-9.]*' "$1" | cut -d: -f2) <(grep -o '"loss":[0-9.]*' "$2" | cut -d: -f2) |
    awk '{ d = $1 - $2; if (d < 0) d = -d; if (d > 1e-5 * $1) bad = 1 } END { exit bad }'
}
# params_rel A B: the largest relative parameter difference of two checkpoints.
params_rel() { "$BIN" ckpt diff "$1" "$2" 2>&1 | sed 's/.*max relative difference //'; }
# mem FILE TAG: the peak bytes of TAG in the last JSONL record.
mem() { tail -1 "$1" | sed 's/.*"mem":{\([^}]*\)}.*/\1/' | tr ',' '\n' | grep "\"$2\"" | cut -d: -f2; }
# sent FILE: gradient-communicator bytes sent in the last step.
sent() { tail -1 "$1" | sed 's/.*"grad_comm_bytes":\([0-9]*\).*/\1/'; }
# same_bits DIR1 DIR2: every rank file of the final checkpoints is identical.
same_bits() {
  local a b
  a=$(cat "$1"/latest) && b=$(cat "$2"/latest) || return 1
  [ "$(ls "$1/$a")" = "$(ls "$2/$b")" ] || return 1
  for f in "$1/$a"/rank_*.tsr; do cmp -s "$f" "$2/$b/$(basename "$f")" || return 1; done
}

# ---- gpt2-tiny: dp ∈ {1,2,4} × ZeRO ∈ {0,1,2,3} × grad-accum ∈ {1,2}, global batch 8, 20 steps ----
R="train --data $DATA --tokenizer byte --steps 20 --log-every 1 --seed 21 --lr 1e-3 --warmup 2"
run() {   # run NAME N Z K [extra...]: a layout of global batch 8
  local name=$1 n=$2 z=$3 k=$4
  shift 4
  local par="--nproc $n --dp $n --zero $z"
  [ "$n" = 1 ] && [ "$z" = 0 ] && par=""
  "$BIN" $R $par --grad-accum "$k" --batch $((8 / n / k)) --log "$TMP/$name.jsonl" --ckpt-dir "$TMP/$name" "$@" \
    >"$TMP/$name.out" 2>&1
}
run ref 1 0 1
eq_bad=0
for n in 1 2 4; do for z in 0 1 2 3; do for k in 1 2; do
  [ "$n$z$k" = 101 ] && continue
  if ! run "t$n$z$k" $n $z $k; then eq_bad=1; echo "     dp=$n zero=$z accum=$k: run failed: $(tail -1 "$TMP/t$n$z$k.out")"; continue; fi
  losses_match "$TMP/ref.jsonl" "$TMP/t$n$z$k.jsonl" || { eq_bad=1; echo "     dp=$n zero=$z accum=$k: losses differ"; }
  rel=$(params_rel "$TMP/ref" "$TMP/t$n$z$k")
  awk -v r="$rel" 'BEGIN { exit !(r < 1e-4) }' || { eq_bad=1; echo "     dp=$n zero=$z accum=$k: parameters differ by $rel"; }
done; done; done
if [ $eq_bad -eq 0 ]; then ok "gpt2-tiny: 23 layouts (dp 1,2,4 × ZeRO 0-3 × accum 1,2) track the single-process run over 20 steps"
else bad "gpt2-tiny layouts against the single-process run"; fi

rep_bad=0
for z in 0 1 2 3; do for k in 1 2; do
  run "again4$z$k" 4 $z $k || { rep_bad=1; continue; }
  same_bits "$TMP/t4$z$k" "$TMP/again4$z$k" && cmp -s <(grep -o '"loss":[0-9.]*' "$TMP/t4$z$k.jsonl") \
    <(grep -o '"loss":[0-9.]*' "$TMP/again4$z$k.jsonl") || { rep_bad=1; echo "     dp=4 zero=$z accum=$k differs run to run"; }
done; done
if [ $rep_bad -eq 0 ]; then ok "dp=4 × ZeRO 0-3 × accum 1,2: a second run gives the same losses and checkpoint bits"
else bad "data-parallel runs repeat bit for bit"; fi

# ZeRO-1 changes no arithmetic: the same bits as plain data parallelism.
r01=$("$BIN" ckpt diff "$TMP/t201" "$TMP/t211" 2>&1)
case "$r01" in "max |a-b| 0 "*) ok "ZeRO-1 gives the same parameters, bit for bit, as ZeRO-0" ;; *) bad "ZeRO-1 against ZeRO-0" "$r01" ;; esac

# ---- memory per rank against the ZeRO formulas (fp32 AdamW: 4+4+8 bytes per parameter) ----
# gpt2-tiny, 256-token vocabulary: N = 834,304 parameters; every segment
# divides by 4, so the pieces need no padding. Stated tolerance: 0.5% on
# params+grads+optim. The pooled buffers (MEM_COMM) are exactly the
# embeddings, the final norm and two blocks (gradients in ZeRO-2; twice
# that in ZeRO-3, for the gathered parameters), plus the embedding
# lookup's gradient rows in every layout.
C=128; V=256; S=64
N=$(( V * C + S * C + 4 * (12 * C * C + 13 * C) + 2 * C ))
POOL=$(( 4 * (V * C + S * C + 2 * C + 2 * (12 * C * C + 13 * C)) ))
# and the embedding lookup's gradient rows: this rank's and all 4 ranks'
# token ids and rows (2 sequences × 64 tokens per rank).
ROWS=$(( (4 + 1) * 2 * 64 * (4 + 4 * C) ))
mem_bad=0
for z in 0 1 2 3; do
  f="$TMP/t4${z}1.jsonl"
  p=$(mem "$f" params); g=$(mem "$f" grads); o=$(mem "$f" optim); c=$(mem "$f" comm)
  case $z in
    0) want=$(( 16 * N )); wc=$ROWS ;;
    1) want=$(( 8 * N + 8 * N / 4 )); wc=$ROWS ;;
    2) want=$(( 4 * N + 12 * N / 4 )); wc=$(( POOL + ROWS )) ;;
    3) want=$(( 16 * N / 4 )); wc=$(( 2 * POOL + ROWS )) ;;
  esac
  got=$(( p + g + o ))
  printf "     ZeRO-%d, d=4: params %d + grads %d + optim %d = %d bytes (formula %d), comm buffers %d (want %d)\n" \
    $z "$p" "$g" "$o" $got $want "$c" $wc
  awk -v a=$got -v b=$want 'BEGIN { d = a - b; if (d < 0) d = -d; exit !(d <= 0.005 * b) }' && [ "$c" -eq $wc ] || mem_bad=1
done
if [ $mem_bad -eq 0 ]; then ok "per-rank memory matches (4+4+8)N, (4+4+8/d)N, (4+12/d)N, 16N/d plus comm buffers"
else bad "per-rank memory against the ZeRO formulas"; fi

# ---- communicated bytes per step against the expected volumes ----
# DDP: an allreduce of 4N bytes sends 2(d−1)/d·4N; ZeRO-1 the same as a
# reduce-scatter and an allgather; ZeRO-2 reduce-scatters every
# micro-batch; ZeRO-3 gathers each layer twice per micro-batch (≈1.5×);
# plus, at every reduction, the embedding lookup's token ids and gradient
# rows: (d−1)·B·T·(4 + 4C). `tessera plan` states these formulas; its
# numbers must equal the counters exactly.
cb_bad=0
for n in 2 4; do for z in 0 1 2 3; do for k in 1 2; do
  got=$(sent "$TMP/t$n$z$k.jsonl")
  want=$("$BIN" plan --model gpt2-tiny --vocab 256 --devices $n --dp $n --zero $z --precision fp32 --global-batch 8 \
         --micro-batch $((8 / n / k)) --seq 64 --json | sed 's/.*"comm_bytes":{"dp":\([0-9.e+]*\).*/\1/')
  awk -v a="$got" -v b="$want" 'BEGIN { exit !(a == b) }' || { cb_bad=1; echo "     dp=$n zero=$z accum=$k: sent $got, expected $want"; }
done; done; done
z0=$(sent "$TMP/t401.jsonl"); z3=$(sent "$TMP/t431.jsonl")
echo "     dp=4: DDP $z0 bytes per step = 2(d−1)/d·4N + 3·128·(4+4C) = $(( 6 * N + 3 * 128 * (4 + 4 * C) )); ZeRO-3 $z3 ($(awk -v a="$z3" -v b="$z0" 'BEGIN { printf "%.3f", a / b }')×)"
[ "$z0" -eq $(( 6 * N + 3 * 128 * (4 + 4 * C) )) ] && awk -v a="$z3" -v b="$z0" 'BEGIN { exit !(a / b > 1.4 && a / b <= 1.5) }' || cb_bad=1
if [ $cb_bad -eq 0 ]; then ok "bytes sent per step equal the expected volumes for dp 2,4 × ZeRO 0-3 × accum 1,2 (ZeRO-3 ≈ 1.5× DDP)"
else bad "communicated bytes per step"; fi

# ---- a second model: odd tensor sizes, buckets of a few tensors, ZeRO padding ----
# 3 layers, 3 heads, d_model 39, d_ff 103: 55,026 parameters, no segment of
# which divides by 4.
echo '{"model": {"n_layer": 3, "n_head": 3, "d_model": 39, "d_ff": 103, "max_seq": 32}, "seq": 32}' >"$TMP/odd.json"
O="train --data $DATA --tokenizer byte --config $TMP/odd.json --steps 8 --log-every 1 --seed 5 --lr 2e-3 --warmup 2 --bucket-mb 0.01"
orun() {
  local name=$1 n=$2 z=$3 k=$4
  local par="--nproc $n --dp $n --zero $z"
  [ "$n" = 1 ] && [ "$z" = 0 ] && par=""
  "$BIN" $O $par --grad-accum "$k" --batch $((8 / n / k)) --log "$TMP/$name.jsonl" --ckpt-dir "$TMP/$name" >"$TMP/$name.out" 2>&1
}
orun oref 1 0 1
odd_bad=0
for n in 1 2 4; do for z in 0 1 2 3; do for k in 1 2; do
  [ "$n$z$k" = 101 ] && continue
  orun "o$n$z$k" $n $z $k && orun "oo$n$z$k" $n $z $k || { odd_bad=1; echo "     odd dp=$n zero=$z accum=$k: run failed"; continue; }
  losses_match "$TMP/oref.jsonl" "$TMP/o$n$z$k.jsonl" || { odd_bad=1; echo "     odd dp=$n zero=$z accum=$k: losses differ"; }
  rel=$(params_rel "$TMP/oref" "$TMP/o$n$z$k")
  awk -v r="$rel" 'BEGIN { exit !(r < 1e-4) }' || { odd_bad=1; echo "     odd dp=$n zero=$z accum=$k: parameters differ by $rel"; }
  same_bits "$TMP/o$n$z$k" "$TMP/oo$n$z$k" || { odd_bad=1; echo "     odd dp=$n zero=$z accum=$k: not repeatable"; }
done; done; done
if [ $odd_bad -eq 0 ]; then ok "odd-sized model, 0.01 MB buckets, padded ZeRO pieces: 23 layouts track one process and repeat bit for bit"
else bad "odd-sized model under data parallelism and ZeRO"; fi
f="$TMP/o431.jsonl"
p=$(mem "$f" params); g=$(mem "$f" grads); o=$(mem "$f" optim); p0=$(mem "$TMP/oref.jsonl" params)
echo "     odd model, ZeRO-3, d=4: params $p, grads $g, optim $o bytes; 16N/4 = $(( 4 * p0 / 4 ))"
awk -v a=$((p + g + o)) -v b=$((4 * p0 / 4)) 'BEGIN { exit !(a >= b && a <= 1.005 * b) }' &&
  ok "odd model: ZeRO-3 holds 16N/d bytes of model state per rank (+ padding, < 0.5%)" || bad "odd model ZeRO-3 memory"

# ---- checkpoints move between layouts ----
# dp=4/ZeRO-3 stops at step 10 and dp=1 finishes; dp=1 stops and
# dp=4/ZeRO-3 finishes; dp=2/ZeRO-2 stops and dp=4/ZeRO-1 finishes: each
# ends where the uninterrupted single-process run did.
mv_bad=0
for pair in "4 3 1 0" "1 0 4 3" "2 2 4 1"; do
  read -r n1 z1 n2 z2 <<<"$pair"
  d="$TMP/mv$n1$z1$n2$z2"
  run "mv$n1$z1$n2$z2" $n1 $z1 1 --exit-after 10 &&
    "$BIN" $R $( [ "$n2$z2" = 10 ] || echo "--nproc $n2 --dp $n2 --zero $z2" ) --batch $((8 / n2)) --resume "$d" \
      --ckpt-dir "$d" --log "$d.jsonl" >"$d.out2" 2>&1 || { mv_bad=1; echo "     dp=$n1/zero=$z1 → dp=$n2/zero=$z2 failed: $(tail -1 "$d.out2")"; continue; }
  rel=$(params_rel "$TMP/ref" "$d")
  losses_match "$TMP/ref.jsonl" "$d.jsonl" && awk -v r="$rel" 'BEGIN { exit !(r < 1e-4) }' ||
    { mv_bad=1; echo "     dp=$n1/zero=$z1 → dp=$n2/zero=$z2: parameters differ by $rel"; }
done
files=$(ls "$TMP/mv4310/step_00000010" | grep -c tsr)
if [ $mv_bad -eq 0 ] && [ "$files" -eq 4 ]; then ok "checkpoints move dp=4/ZeRO-3 → dp=1 → dp=4/ZeRO-3 and dp=2/ZeRO-2 → dp=4/ZeRO-1 (each rank writes its pieces: $files files)"
else bad "checkpoints between layouts" "$files rank files"; fi

# ---- --init-from a Hugging Face file under ZeRO-3: every rank reads it once and keeps its pieces ----
"$BIN" export --ckpt "$TMP/t201" --out "$TMP/m.safetensors" >/dev/null 2>&1
I="--init-from $TMP/m.safetensors --steps 4"
"$BIN" $R $I --batch 8 --log "$TMP/if1.jsonl" --ckpt-dir "$TMP/if1" >/dev/null 2>&1
"$BIN" $R $I --nproc 2 --dp 2 --zero 3 --batch 4 --log "$TMP/if3.jsonl" --ckpt-dir "$TMP/if3" >"$TMP/if.out" 2>&1 &&
  losses_match "$TMP/if1.jsonl" "$TMP/if3.jsonl" && awk -v r="$(params_rel "$TMP/if1" "$TMP/if3")" 'BEGIN { exit !(r < 1e-4) }' &&
  ok "--init-from under dp=2/ZeRO-3 trains as one process does" || bad "--init-from under ZeRO-3" "$(tail -2 "$TMP/if.out")"

# ---- evaluation during a sharded run: every rank takes part in ZeRO-3's gathers ----
E="--val-data $DATA --eval-every 4 --eval-batches 2 --steps 8"
"$BIN" $R $E --batch 4 --grad-accum 2 --log "$TMP/evref.jsonl" >/dev/null 2>&1   # evaluation runs batches of --batch
ev_bad=0
for z in 1 3; do
  "$BIN" $R $E --nproc 2 --dp 2 --zero $z --batch 4 --log "$TMP/ev$z.jsonl" >"$TMP/ev.out" 2>&1 || { ev_bad=1; continue; }
  paste -d' ' <(grep -o '"val_loss":[0-9.]*' "$TMP/evref.jsonl" | cut -d: -f2) <(grep -o '"val_loss":[0-9.]*' "$TMP/ev$z.jsonl" | cut -d: -f2) |
    awk '{ n++; d = $1 - $2; if (d < 0) d = -d; if (d > 1e-5 * $1) bad = 1 } END { exit bad || n < 2 }' || ev_bad=1
done
[ $ev_bad -eq 0 ] && ok "validation during dp=2 ZeRO-1 and ZeRO-3 runs equals the single-process one" || bad "validation under ZeRO"

# ---- errors and the planner's memory ----
"$BIN" train --data "$DATA" --tokenizer byte --steps 1 --nproc 4 --dp 2 >"$TMP/e.out" 2>"$TMP/e.err"
[ $? -eq 2 ] && [ "$(wc -l <"$TMP/e.err")" -eq 1 ] && grep -q -- "--dp 2 with --nproc 4" "$TMP/e.err" &&
  ok "dp and nproc disagree: one line, exit 2" || bad "dp and nproc disagree" "$(cat "$TMP/e.err")"
"$BIN" train --data "$DATA" --tokenizer byte --steps 1 --zero 4 >"$TMP/e.out" 2>"$TMP/e.err"
[ $? -eq 2 ] && grep -q -- "--zero" "$TMP/e.err" && ok "--zero 4: one line, exit 2" || bad "--zero 4" "$(cat "$TMP/e.err")"
pl_bad=0
for z in 0 1 2 3; do
  pj=$("$BIN" plan --model gpt2-tiny --vocab 256 --devices 4 --dp 4 --zero $z --precision fp32 --global-batch 8 --micro-batch 2 --seq 64 --json)
  for tag in weights:params grads:grads optim:optim; do
    want=$(echo "$pj" | sed "s/.*\"${tag%%:*}_bytes\":\([0-9.e+]*\).*/\1/"); got=$(mem "$TMP/t4${z}1.jsonl" "${tag#*:}")
    awk -v a="$got" -v b="$want" 'BEGIN { exit !(a == b) }' || { pl_bad=1; echo "     zero $z ${tag#*:}: $got vs plan $want"; }
  done
done
if [ $pl_bad -eq 0 ]; then ok "plan predicts the weights, gradient and optimizer bytes per rank exactly for ZeRO 0-3"; else bad "plan vs ZeRO memory"; fi
cm_bad=0
for z in 0 1 2 3; do
  pj=$("$BIN" plan --model gpt2-tiny --vocab 256 --devices 4 --dp 4 --zero $z --precision fp32 --global-batch 8 --micro-batch 2 --seq 64 --json)
  want=$(echo "$pj" | sed 's/.*"comm_buffer_bytes":\([0-9.e+]*\).*/\1/'); got=$(mem "$TMP/t4${z}1.jsonl" comm)
  awk -v a="$got" -v b="$want" 'BEGIN { exit !(a == b) }' || { cm_bad=1; echo "     zero $z comm: $got vs plan $want"; }
done
if [ $cm_bad -eq 0 ]; then ok "plan predicts the communication buffers per rank exactly for ZeRO 0-3 (pools, embedding rows)"; else bad "plan vs communication buffers"; fi

# ---- a rank killed mid-training under ZeRO-3 ----
# Every rank stops, the launcher exits non-zero, the last complete
# checkpoint (written as pieces by every rank) still loads.
"$BIN" train --data "$DATA" --tokenizer byte --steps 100000 --batch 2 --nproc 3 --dp 3 --zero 3 --ckpt-dir "$TMP/kill" \
  --ckpt-every 5 --log-every 1000 >"$TMP/kill.out" 2>&1 &
lpid=$!
for i in $(seq 1 150); do [ -f "$TMP/kill/latest" ] && break; sleep 0.1; done
kill_rank $lpid 2
krc=$KRC el=$KEL
if [ $krc -ne 0 ] && [ $el -lt 30 ] && grep -q "was killed by signal 9" "$TMP/kill.out" && "$BIN" ckpt info "$TMP/kill" >/dev/null 2>&1 &&
   "$BIN" eval --ckpt "$TMP/kill" --data "$DATA" --batches 1 >/dev/null 2>&1 && [ -z "$(pgrep -P $lpid)" ]; then
  ok "a killed rank stops a ZeRO-3 run (exit $krc in ${el}s), the last checkpoint loads"
else bad "a killed rank stops the run" "exit $krc after ${el}s" "$(tail -3 "$TMP/kill.out")"; fi

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
