#!/usr/bin/env bash
# tessera train --ckpt-async: checkpoints staged in memory and written by a
# background thread are the bytes of synchronous saves (one process, ZeRO-1
# over two ranks, a two-stage pipeline with its tied embeddings), --keep
# included; --exit-after waits for the write and the run resumes bit for
# bit; a spike rollback commits the write in flight and goes back to it;
# the staging copy shows in the memory line; and SIGKILLs at 20
# random moments of runs whose writer is slowed (TESSERA_TEST_CKPT_DELAY)
# never leave `latest` naming an incomplete checkpoint, the resumed run
# ending bitwise where the uninterrupted run ends (and 4 more kills of one
# rank of a ZeRO-1 pair). Run from the repository root.
source "$(dirname "$0")/lib.sh"
R="train --model gpt2-tiny --data $DATA --tokenizer byte --batch 2 --seq 32 --log-every 100 --seed 11 --threads 1"

# ---- the same bytes as a synchronous save ----
same_bad=0
for lay in "one|" "z1|--nproc 2 --zero 1" "pp|--nproc 2 --pp 2 --micro-batches 2"; do
  n=${lay%%|*}; f=${lay#*|}
  "$BIN" $R $f --steps 6 --ckpt-every 1 --keep 3 --ckpt-dir "$TMP/s_$n" >/dev/null 2>&1
  "$BIN" $R $f --steps 6 --ckpt-every 1 --keep 3 --ckpt-async --ckpt-dir "$TMP/a_$n" >"$TMP/a_$n.out" 2>&1
  if ! diff -r -x .lock "$TMP/s_$n" "$TMP/a_$n" >/dev/null || [ "$(ls "$TMP/a_$n")" != "$(printf 'latest\nstep_00000004\nstep_00000005\nstep_00000006')" ]; then
    same_bad=1; echo "     $n: $(ls "$TMP/a_$n" | tr '\n' ' ') $(tail -1 "$TMP/a_$n.out")"
  fi
done
[ $same_bad -eq 0 ] && ok "--ckpt-async writes the bytes of synchronous saves (one process, ZeRO-1 dp=2, pp=2), --keep 3 keeping the same steps" ||
  bad "async checkpoints differ from synchronous ones"
grep -q "^checkpoint: $TMP/a_one/step_00000006 (.* s to stage it, written in the background)" "$TMP/a_one.out" &&
  grep "^memory:" "$TMP/a_one.out" | tail -1 | grep -q "ckpt 9.55 MiB" &&
  ok "the checkpoint lines say the write went on in the background; the staging copy shows as ckpt in the memory line" ||
  bad "async output" "$(grep -E '^(checkpoint|memory)' "$TMP/a_one.out" | tail -2)"

# ---- --exit-after waits for the write; the resumed run ends bit for bit ----
"$BIN" $R --steps 6 --ckpt-async --exit-after 3 --ckpt-dir "$TMP/ex" >"$TMP/ex.out" 2>&1
[ "$(cat "$TMP/ex/latest" 2>/dev/null)" = step_00000003 ] && ! ls -d "$TMP/ex"/*.tmp >/dev/null 2>&1 &&
  "$BIN" $R --steps 6 --ckpt-async --resume --ckpt-dir "$TMP/ex" >"$TMP/exr.out" 2>&1 && same_bits "$TMP/s_one" "$TMP/ex" &&
  ok "--exit-after 3 commits step 3 before it stops; --resume ends with the uninterrupted run's bytes" ||
  bad "--exit-after with --ckpt-async" "$(tail -1 "$TMP/ex.out")" "$(tail -1 "$TMP/exr.out")"

# ---- a spike rollback commits the checkpoint in flight, then goes back to it ----
S="$R --spike-guard 6 --log-every 1 --steps 20 --ckpt-every 12"
TESSERA_TEST_CKPT_DELAY=200 TESSERA_TEST_SPIKE=13:2 "$BIN" $S --spike-rollback 2 --ckpt-async --ckpt-dir "$TMP/rb" >"$TMP/rb.out" 2>&1
TESSERA_TEST_SKIP=12:2 "$BIN" $S --ckpt-dir "$TMP/sk" >/dev/null 2>&1
grep -q "^spikes: .*back to the checkpoint of step 12" "$TMP/rb.out" && same_bits "$TMP/rb" "$TMP/sk" &&
  ok "--spike-rollback with step 12's write still in flight: committed, gone back to, bitwise the run that skipped the spikes' batches" ||
  bad "spike rollback with --ckpt-async" "$(grep -E '^(spikes|checkpoint)' "$TMP/rb.out" | head -3)" "$(tail -1 "$TMP/rb.out")"

"$BIN" $R --steps 2 --ckpt-async >"$TMP/nodir.out" 2>&1
rc=$?
[ $rc -eq 2 ] && [ "$(wc -l <"$TMP/nodir.out")" -eq 1 ] && grep -q "\-\-ckpt-async .* needs --ckpt-dir" "$TMP/nodir.out" &&
  ok "--ckpt-async without --ckpt-dir: one line, exit 2" || bad "--ckpt-async without --ckpt-dir" "rc $rc: $(head -1 "$TMP/nodir.out")"

# ---- SIGKILL at random moments of background writes ----
# each attempt resumes from the run directory's latest (if any), its writer
# slowed to 30 ms before and after each file, and is killed at a random
# moment 0 to 0.3 s after it logs its first step (a few steps, each with a
# save in flight); then `latest` must name a checkpoint that loads and
# verifies. A last run finishes from whatever latest is left.
seed=${TSR_SEED:-$(date +%s)}
RANDOM=$seed
K="$R --steps 64 --ckpt-every 1 --ckpt-async"
"$BIN" $K --ckpt-dir "$TMP/kref" >/dev/null 2>&1
# after_step PID LOG N: returns a random moment of 0 to 0.3 s after LOG has more than N lines (PID's first step)
after_step() {
  for _ in $(seq 1000); do
    [ "$(wc -l <"$2" 2>/dev/null || echo 0)" -gt "$3" ] && break
    kill -0 "$1" 2>/dev/null || break
    sleep 0.02
  done
  sleep "$(awk -v r=$RANDOM 'BEGIN { printf "%.3f", 0.3 * r / 32768 }')"
}
kill_bad=0; kills=0; mid=0
for i in $(seq 1 20); do
  res=""; [ -f "$TMP/k/latest" ] && res=--resume
  n=$(wc -l <"$TMP/k.jsonl" 2>/dev/null || echo 0)
  TESSERA_TEST_CKPT_DELAY=30 "$BIN" $K $res --log-every 1 --log "$TMP/k.jsonl" --ckpt-dir "$TMP/k" >/dev/null 2>&1 &
  p=$!
  after_step $p "$TMP/k.jsonl" "$n"
  kill -9 $p 2>/dev/null && kills=$((kills + 1))
  wait $p 2>/dev/null
  ls -d "$TMP/k"/step_*.tmp >/dev/null 2>&1 && mid=$((mid + 1))   # killed with a save in flight
  if [ -f "$TMP/k/latest" ] && ! "$BIN" ckpt info "$TMP/k" >/dev/null 2>&1; then
    kill_bad=$((kill_bad + 1)); echo "     kill $i: latest ($(cat "$TMP/k/latest")) does not load and verify"
  fi
done 2>/dev/null   # (the shell's "Killed" notices)
res=""; [ -f "$TMP/k/latest" ] && res=--resume
"$BIN" $K $res --ckpt-dir "$TMP/k" >"$TMP/kfin.out" 2>&1
[ $kill_bad -eq 0 ] && [ $kills -ge 15 ] && [ $mid -ge 10 ] && same_bits "$TMP/kref" "$TMP/k" &&
  ok "$kills SIGKILLs at random moments ($mid with a background save in flight) never left latest incomplete; the resumed run ends bitwise as the uninterrupted one" ||
  bad "SIGKILL during background writes (seed $seed)" "$kill_bad bad, $kills kills, $mid mid-save" "$(tail -1 "$TMP/kfin.out")"

# two ranks (ZeRO-1): one rank killed at a random moment, four times; the
# commit needs both ranks' files
Z="$R --steps 16 --ckpt-every 1 --ckpt-async --nproc 2 --zero 1"
"$BIN" $Z --ckpt-dir "$TMP/zref" >/dev/null 2>&1
z_bad=0
for i in $(seq 1 4); do
  res=""; [ -f "$TMP/z/latest" ] && res=--resume
  n=$(wc -l <"$TMP/z.jsonl" 2>/dev/null || echo 0)
  TESSERA_TEST_CKPT_DELAY=30 "$BIN" $Z $res --log-every 1 --log "$TMP/z.jsonl" --ckpt-dir "$TMP/z" >/dev/null 2>&1 &
  L=$!
  after_step $L "$TMP/z.jsonl" "$n"
  kill_rank $L $((1 + RANDOM % 2))
  if [ -f "$TMP/z/latest" ] && ! "$BIN" ckpt info "$TMP/z" >/dev/null 2>&1; then
    z_bad=$((z_bad + 1)); echo "     rank kill $i: latest ($(cat "$TMP/z/latest")) does not load and verify"
  fi
done 2>/dev/null
res=""; [ -f "$TMP/z/latest" ] && res=--resume
"$BIN" $Z $res --ckpt-dir "$TMP/z" >"$TMP/zfin.out" 2>&1
[ $z_bad -eq 0 ] && same_bits "$TMP/zref" "$TMP/z" &&
  ok "a rank of a ZeRO-1 pair killed 4 times: latest always complete, the resumed run ends bitwise as the uninterrupted one" ||
  bad "rank kills with --ckpt-async (seed $seed)" "$z_bad bad" "$(tail -1 "$TMP/zfin.out")"

echo "$pass passed, $fail failed"
[ $fail -eq 0 ]
