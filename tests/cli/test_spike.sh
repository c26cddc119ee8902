#!/usr/bin/env bash
# The loss-spike guard (train --spike-guard Z, --spike-rollback K): an
# injected spike (TESSERA_TEST_SPIKE=STEP:N, the losses of N steps from
# STEP seen ×1000) is skipped on every rank of one process, dp=2, tp=2 and
# pp=2 — the checkpoint after it is the one before, bit for bit — and
# logged; K spikes in a row send the run back to its last checkpoint once,
# after which it ends bitwise where a run that skipped those batches ends
# (TESSERA_TEST_SKIP=STEP:N), on one process and on dp=2 ZeRO-3 × pp=2; a
# guarded run resumes bit for bit; bad flags are refused. Run from the
# repository root.
source "$(dirname "$0")/lib.sh"
R="train --model gpt2-tiny --data $DATA --tokenizer byte --seed 3 --batch 2 --log-every 1 --spike-guard 6"

# ---- a spike is skipped everywhere ----
sk_bad=0
for lay in "one|" "d2|--nproc 2 --dp 2 --zero 1" "t2|--nproc 2 --tp 2" "p2|--nproc 2 --pp 2 --micro-batches 2"; do
  name=${lay%%|*}; flags=${lay#*|}
  TESSERA_TEST_SPIKE=14:1 "$BIN" $R --steps 16 $flags --ckpt-dir "$TMP/s_$name" --ckpt-every 1 --keep 0 \
    --log "$TMP/s_$name.jsonl" >"$TMP/s.out" 2>&1 || { sk_bad=1; echo "     $name: $(tail -1 "$TMP/s.out")"; continue; }
  d=$("$BIN" ckpt diff "$TMP/s_$name/step_00000013" "$TMP/s_$name/step_00000014" 2>&1 | sed 's/.*max relative difference //')
  n=$(grep -c '"spike":true' "$TMP/s_$name.jsonl")
  [ "$d" = 0 ] && [ "$n" = 1 ] && grep -q '"step":14,.*"spike":true' "$TMP/s_$name.jsonl" &&
    grep -q "step    14/16 .*skipped: a spike" "$TMP/s.out" || { sk_bad=1; echo "     $name: step 14 moved the parameters by $d, $n spikes logged"; }
done
[ $sk_bad -eq 0 ] && ok "an injected spike at step 14 is skipped on every rank (one process, dp=2 ZeRO-1, tp=2, pp=2): step 14's checkpoint is step 13's, one \"spike\" in the log" ||
  bad "spike skipping"

# ---- K spikes in a row: one rollback, then the run of the skipped batches ----
rb_bad=0
for lay in "one|" "d2z3p2|--nproc 4 --dp 2 --zero 3 --pp 2 --micro-batches 2"; do
  name=${lay%%|*}; flags=${lay#*|}
  TESSERA_TEST_SPIKE=15:2 "$BIN" $R --steps 20 $flags --spike-rollback 2 --ckpt-every 12 --ckpt-dir "$TMP/rb_$name" \
    >"$TMP/rb.out" 2>&1 || { rb_bad=1; echo "     $name: $(tail -1 "$TMP/rb.out")"; continue; }
  TESSERA_TEST_SKIP=12:4 "$BIN" $R --steps 20 $flags --ckpt-every 12 --ckpt-dir "$TMP/sk_$name" >"$TMP/sk.out" 2>&1 ||
    { rb_bad=1; echo "     $name: $(tail -1 "$TMP/sk.out")"; continue; }
  [ "$(grep -c "^spikes: .*back to the checkpoint of step 12" "$TMP/rb.out")" = 1 ] && same_bits "$TMP/rb_$name" "$TMP/sk_$name" ||
    { rb_bad=1; echo "     $name: $(grep -c '^spikes:' "$TMP/rb.out") rollbacks; the end differs from the run that skipped those batches"; }
done
[ $rb_bad -eq 0 ] && ok "2 spikes in a row at steps 15-16 with --spike-rollback 2: one rollback to step 12, then bitwise the run that skipped those batches (one process, dp=2 ZeRO-3 × pp=2)" ||
  bad "spike rollback"

# ---- a guarded run resumes bit for bit ----
"$BIN" $R --steps 20 --ckpt-dir "$TMP/full" >/dev/null 2>&1
"$BIN" $R --steps 20 --ckpt-dir "$TMP/part" --exit-after 13 >/dev/null 2>&1
"$BIN" $R --steps 20 --ckpt-dir "$TMP/part" --resume >"$TMP/res.out" 2>&1
grep -q '"spike":{"loss":\[' "$TMP/part/step_00000013/meta.json" && same_bits "$TMP/full" "$TMP/part" &&
  ok "the guard's window is in the checkpoint, and a guarded run resumes bit for bit" ||
  bad "spike guard resume" "$(tail -1 "$TMP/res.out")"

# ---- flags ----
expect "--spike-rollback without --spike-guard" 2 "--spike-rollback is the spike guard's: it needs --spike-guard Z" \
  "$BIN" train --data "$DATA" --tokenizer byte --steps 1 --spike-rollback 2 --ckpt-dir "$TMP/f1"
expect "--spike-rollback without --ckpt-dir" 2 "--spike-rollback goes back to the run's last checkpoint: it needs --ckpt-dir" \
  "$BIN" train --data "$DATA" --tokenizer byte --steps 1 --spike-guard 5 --spike-rollback 2
expect "--spike-window 3" 2 "--spike-window" "$BIN" train --data "$DATA" --tokenizer byte --steps 1 --spike-guard 5 --spike-window 3
TESSERA_TEST_SPIKE=15:2 "$BIN" $R --steps 20 --spike-rollback 2 --ckpt-dir "$TMP/none" >"$TMP/n.out" 2>"$TMP/n.err"
[ $? -eq 1 ] && grep -q "2 spikes in a row at step 16 and no checkpoint in" "$TMP/n.err" && [ "$(wc -l <"$TMP/n.err")" -eq 1 ] &&
  ok "K spikes before any checkpoint: one line, exit 1" || bad "rollback without a checkpoint" "$(cat "$TMP/n.err")"

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
