#!/usr/bin/env bash
# tessera train --max-restarts K: a rank killed mid-run (SIGKILL, from
# outside) makes the launcher start every rank again from the run
# directory's latest checkpoint, logged in the terminal and the JSONL; the
# run ends at the requested step with the checkpoint bytes of a run never
# interrupted (bitwise resume). One kill more than K ends it with exit 1.
# Run from the repository root.
source "$(dirname "$0")/lib.sh"
R="train --model gpt2-tiny --data $DATA --tokenizer byte --batch 8 --seq 64 --steps 80 --ckpt-every 10 --log-every 20 --seed 9"

# waitfor DIR STEP: until DIR holds the checkpoint of STEP (at most 60 s)
waitfor() { for _ in $(seq 1200); do [ -d "$1/step_$(printf %08d "$2")" ] && return 0; sleep 0.05; done; return 1; }
# killnth LAUNCHER K: SIGKILL the launcher's K-th rank
killnth() { local v; v=$(pgrep -P "$1" | sed -n "${2}p"); [ -n "$v" ] && kill -9 "$v"; }

"$BIN" $R --nproc 4 --dp 4 --ckpt-dir "$TMP/ref" >/dev/null 2>&1 || echo "     the reference run failed"

# ---- dp=4, two kills, --max-restarts 2 ----
"$BIN" $R --nproc 4 --dp 4 --ckpt-dir "$TMP/two" --log "$TMP/two.jsonl" --max-restarts 2 --restart-delay 0.2 >"$TMP/two.out" 2>&1 &
L=$!
waitfor "$TMP/two" 10 && killnth $L 2
waitfor "$TMP/two" 40 && sleep 0.2 && killnth $L 3
wait $L
rc=$?
n=$(grep -c '^restart:   [12] of 2 after the failure above: every rank starts again in 0.2 s from the latest checkpoint' "$TMP/two.out")
recs=$(grep -c '"restart":[12],"max_restarts":2,"reason":"rank [0-9] was killed by signal 9; all ranks stopped","resume_step":[0-9]*' "$TMP/two.jsonl")
[ $rc = 0 ] && [ "$n" = 2 ] && [ "$recs" = 2 ] && same_bits "$TMP/ref" "$TMP/two" && [ "$(cat "$TMP/two/latest")" = step_00000080 ] &&
  ok "dp=4, a rank killed twice, --max-restarts 2: two restarts (terminal and JSONL), step 80 reached with the uninterrupted run's checkpoint bytes" ||
  bad "two restarts" "rc $rc, $n restart lines, $recs records" "$(grep -E 'restart|killed|error' "$TMP/two.out" | head -6)"
grep -o '"resume_step":[0-9]*' "$TMP/two.jsonl" | cut -d: -f2 | awk 'NR == 1 && $1 < 10 { exit 1 } NR == 2 && $1 < 40 { exit 1 }' &&
  ok "each restart resumes from the latest checkpoint ($(grep -o '"resume_step":[0-9]*' "$TMP/two.jsonl" | cut -d: -f2 | tr '\n' ' ')steps)" ||
  bad "restart steps" "$(grep restart "$TMP/two.jsonl")"

# ---- a third kill: exit 1 ----
"$BIN" $R --nproc 4 --dp 4 --ckpt-dir "$TMP/three" --max-restarts 2 --restart-delay 0.2 >"$TMP/three.out" 2>&1 &
L=$!
waitfor "$TMP/three" 10 && killnth $L 1
waitfor "$TMP/three" 30 && sleep 0.2 && killnth $L 2
waitfor "$TMP/three" 50 && sleep 0.2 && killnth $L 4
wait $L
rc=$?
[ $rc = 1 ] && grep -q "tessera train: the ranks failed again after 2 restarts (--max-restarts 2): stopping" "$TMP/three.out" &&
  [ "$(grep -c '^restart:' "$TMP/three.out")" = 2 ] &&
  ok "a third kill with --max-restarts 2 ends the run: exit 1, after 2 restarts" ||
  bad "third kill" "rc $rc" "$(tail -3 "$TMP/three.out")"

# ---- one process: the launcher forks its one rank ----
"$BIN" $R --steps 30 --ckpt-every 5 --ckpt-dir "$TMP/one_ref" >/dev/null 2>&1
"$BIN" $R --steps 30 --ckpt-every 5 --ckpt-dir "$TMP/one" --max-restarts 1 --restart-delay 0 >"$TMP/one.out" 2>&1 &
L=$!
waitfor "$TMP/one" 10 && killnth $L 1
wait $L
rc=$?
[ $rc = 0 ] && grep -q '^restart:   1 of 1' "$TMP/one.out" && same_bits "$TMP/one_ref" "$TMP/one" &&
  ok "one process with --max-restarts 1: killed, restarted, the bytes of a run in one process" || bad "one-process restart" "rc $rc"

# ---- flags ----
"$BIN" $R --max-restarts 2 >"$TMP/f.out" 2>&1
rc=$?
[ $rc = 2 ] && grep -q "tessera train: --max-restarts 2 resumes from the run's checkpoints: it needs --ckpt-dir" "$TMP/f.out" &&
  ok "--max-restarts without --ckpt-dir: exit 2, one line" || bad "--max-restarts without --ckpt-dir" "$(cat "$TMP/f.out")"
# an overflow at step 1 under a loss-scale floor above the halved scale: exit 1 every time, before any checkpoint
TESSERA_TEST_OVERFLOW=1 "$BIN" $R --nproc 2 --dp 2 --ckpt-dir "$TMP/u" --max-restarts 3 --restart-delay 0 --steps 3 \
  --precision fp16 --loss-scale-min 65536 >"$TMP/u.out" 2>&1
rc=$?
[ $rc = 1 ] && [ "$(grep -c '^restart:   [123] of 3 after the failure above: every rank starts again in 0 s from the beginning (no checkpoint yet)' "$TMP/u.out")" = 3 ] &&
  ok "a run that ends with exit 1 (the fp16 loss scale below its floor) is restarted too, from the beginning without a checkpoint; exit 1 after 3 restarts" ||
  bad "exit-1 failure restarts" "rc $rc" "$(tail -3 "$TMP/u.out")"

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
