# Shared by the command-line tests: the binary, the data, a scratch folder
# removed on exit, and the ok/bad counters behind the closing line.
set -u
BIN=${TSR_BIN:-./tessera}   # TSR_BIN: another build of the command (the sanitizers')
DATA=${TSR_DATA:-../shared/data}/tinyshakespeare.txt
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
pass=0
fail=0

ok()  { pass=$((pass + 1)); echo "ok   $1"; }
bad() { fail=$((fail + 1)); echo "FAIL $1"; shift; for l in "$@"; do echo "     $l"; done; }

# Comparing runs: losses_match REF.jsonl RUN.jsonl (same number of steps,
# each loss within 1e-5 relative), params_rel DIR_A DIR_B (ckpt diff's max
# relative difference), same_bits DIR1 DIR2 (the final checkpoints' rank
# files are identical), field FILE KEY (a number of the last record).
losses_match() {
  [ "$(grep -c '"loss"' "$1")" -eq "$(grep -c '"loss"' "$2")" ] || return 1
  paste -d' ' <(grep -o '"loss":[0-9.]*' "$1" | cut -d: -f2) <(grep -o '"loss":[0-9.]*' "$2" | cut -d: -f2) |
    awk '{ d = $1 - $2; if (d < 0) d = -d; if (d > 1e-5 * $1) bad = 1 } END { exit bad }'
}
params_rel() { "$BIN" ckpt diff "$1" "$2" 2>&1 | sed 's/.*max relative difference //'; }
same_bits() {
  local a b
  a=$(cat "$1"/latest) && b=$(cat "$2"/latest) || return 1
  [ "$(ls "$1/$a")" = "$(ls "$2/$b")" ] || return 1
  for f in "$1/$a"/rank_*.tsr; do cmp -s "$f" "$2/$b/$(basename "$f")" || return 1; done
}
field() { tail -1 "$1" | sed "s/.*\"$2\":\([0-9.]*\).*/\1/"; }

# ref_and_layouts "TRAIN ARGS" NAME: a 12-step reference run (batch 2 ×
# 4 accumulated) into $TMP/ref, again to see it repeat bit for bit, then
# six layouts (dp=2 ZeRO-1, dp=4 ZeRO-3, tp=2 --sp, pp=2, 2×2×2, pp=2
# interleaved), each against it (losses 1e-5, parameters 1e-4); one ok or
# bad line each for the repeat and the layouts, NAME the model's.
ref_and_layouts() {
  local R=$1 name=$2 lay lname flags rel lay_bad=0
  "$BIN" $R --batch 2 --grad-accum 4 --log "$TMP/ref.jsonl" --ckpt-dir "$TMP/ref" >/dev/null 2>&1
  "$BIN" $R --batch 2 --grad-accum 4 --log "$TMP/again.jsonl" --ckpt-dir "$TMP/again" >/dev/null 2>&1
  same_bits "$TMP/ref" "$TMP/again" && cmp -s <(grep -o '"loss":[0-9.]*' "$TMP/ref.jsonl") <(grep -o '"loss":[0-9.]*' "$TMP/again.jsonl") &&
    ok "$name repeats bit for bit" || bad "$name repeats"
  for lay in "d2z1|--nproc 2 --zero 1 --batch 2 --grad-accum 2" "d4z3|--nproc 4 --zero 3 --batch 2" \
             "t2sp|--nproc 2 --tp 2 --sp --batch 2 --grad-accum 4" "p2|--nproc 2 --pp 2 --micro-batches 4 --batch 2" \
             "d2t2p2|--nproc 8 --dp 2 --tp 2 --pp 2 --zero 1 --micro-batches 2 --batch 2" \
             "p2v2|--nproc 2 --pp 2 --virtual-stages 2 --micro-batches 4 --batch 2"; do
    lname=${lay%%|*}; flags=${lay#*|}
    "$BIN" $R $flags --log "$TMP/$lname.jsonl" --ckpt-dir "$TMP/$lname" >"$TMP/l.out" 2>&1 ||
      { lay_bad=1; echo "     $lname: $(tail -1 "$TMP/l.out")"; continue; }
    rel=$(params_rel "$TMP/ref" "$TMP/$lname")
    losses_match "$TMP/ref.jsonl" "$TMP/$lname.jsonl" && awk -v r="$rel" 'BEGIN { exit !(r < 1e-4) }' ||
      { lay_bad=1; echo "     $lname: losses differ or parameters by $rel"; }
  done
  [ $lay_bad -eq 0 ] && ok "$name on dp=2 ZeRO-1, dp=4 ZeRO-3, tp=2 --sp, pp=2, 2×2×2 and pp=2 interleaved tracks one process" ||
    bad "$name layouts"
}

# precision_recompute_resume "TRAIN ARGS" NAME: after ref_and_layouts, the
# same run in bf16 (each loss within 1% of fp32's), under --recompute
# selective and full (the checkpoint bit for bit), and stopped at step 5
# and resumed (bit for bit): one ok or bad line each.
precision_recompute_resume() {
  local R=$1 name=$2 worst m rc_bad=0
  "$BIN" $R --batch 2 --grad-accum 4 --precision bf16 --log "$TMP/bf.jsonl" >"$TMP/bf.out" 2>&1
  worst=$(paste -d' ' <(grep -o '"loss":[0-9.]*' "$TMP/ref.jsonl" | cut -d: -f2) <(grep -o '"loss":[0-9.]*' "$TMP/bf.jsonl" | cut -d: -f2) |
          awk '{ d = ($1 - $2) / $1; if (d < 0) d = -d; if (d > w) w = d } END { print w + 0 }')
  [ "$(grep -c '"loss"' "$TMP/bf.jsonl")" -eq "$(grep -c '"loss"' "$TMP/ref.jsonl")" ] && awk -v w="$worst" 'BEGIN { exit !(w < 0.01) }' &&
    ok "$name in bf16: losses within $worst of fp32's" || bad "$name bf16: losses off by $worst" "$(tail -1 "$TMP/bf.out")"
  for m in selective full; do
    "$BIN" $R --batch 2 --grad-accum 4 --recompute $m --ckpt-dir "$TMP/rc_$m" >/dev/null 2>&1
    same_bits "$TMP/ref" "$TMP/rc_$m" || { rc_bad=1; echo "     --recompute $m changes the checkpoint"; }
  done
  [ $rc_bad -eq 0 ] && ok "--recompute selective and full leave $name's checkpoint bit for bit" || bad "$name recompute"
  "$BIN" $R --batch 2 --grad-accum 4 --exit-after 5 --ckpt-dir "$TMP/part" >/dev/null 2>&1
  "$BIN" $R --batch 2 --grad-accum 4 --resume --ckpt-dir "$TMP/part" >"$TMP/res.out" 2>&1
  same_bits "$TMP/ref" "$TMP/part" && ok "$name resumes bit for bit" || bad "$name resume" "$(tail -1 "$TMP/res.out")"
}

# kill_rank LAUNCHER_PID K: SIGKILLs the K-th rank the launcher (a job of
# this shell) forked and waits for the launcher; KRC gets its exit status,
# KEL the seconds it took to stop.
kill_rank() {
  local victim start
  victim=$(pgrep -P "$1" | sed -n "${2}p")
  [ -n "$victim" ] && kill -9 "$victim"
  start=$(date +%s)
  wait "$1"
  KRC=$?
  KEL=$(( $(date +%s) - start ))
}

# expect NAME RC TEXT CMD...: CMD exits RC within 60 s, its stderr is one line containing TEXT.
expect() {
  local name=$1 want=$2 text=$3
  shift 3
  timeout 60 "$@" >"$TMP/x.out" 2>"$TMP/x.err"
  local rc=$?
  if [ $rc -eq "$want" ] && [ "$(wc -l <"$TMP/x.err")" -eq 1 ] && grep -qF -- "$text" "$TMP/x.err"; then ok "$name: exit $want, one line"
  else bad "$name" "exit $rc (want $want): $(head -3 "$TMP/x.err")"; fi
}
