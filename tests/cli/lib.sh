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
