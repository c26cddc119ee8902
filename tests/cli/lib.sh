# Shared by the command-line tests: the binary, the data, a scratch folder
# removed on exit, and the ok/bad counters behind the closing line.
set -u
BIN=./tessera
DATA=${TSR_DATA:-../shared/data}/tinyshakespeare.txt
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
pass=0
fail=0

ok()  { pass=$((pass + 1)); echo "ok   $1"; }
bad() { fail=$((fail + 1)); echo "FAIL $1"; shift; for l in "$@"; do echo "     $l"; done; }
