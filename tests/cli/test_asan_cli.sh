#!/usr/bin/env bash
# The hardening and corpora tests again with the command built under
# AddressSanitizer and UBSan (build/asan/tessera, `make test` builds it): a
# hostile input must end in one line and its exit status there too, with no
# memory error or undefined behaviour on the way. Each sanitizer report
# goes to a log of its own; any log at all is a failure, whatever the test
# concluded. Run from the repository root.
set -u
ASAN_BIN=${ASAN_BIN:-build/asan/tessera}
[ -x "$ASAN_BIN" ] || { echo "FAIL $ASAN_BIN not built (make $ASAN_BIN)"; echo "0 passed, 1 failed"; exit 1; }
logs=$(mktemp -d)
trap 'rm -rf "$logs"' EXIT
# leaks at exit are not checked: a command that exits on an error does not free what it holds
export TSR_BIN=$ASAN_BIN TSR_ASAN=1
export ASAN_OPTIONS="detect_leaks=0:abort_on_error=1:log_path=$logs/asan"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1:log_path=$logs/ubsan"
pass=0
fail=0
for t in tests/cli/test_hardening.sh tests/cli/test_hardening_hf.sh tests/cli/test_hardening_corpora.sh \
         tests/cli/test_hardening_config.sh tests/cli/test_hardening_misc.sh tests/cli/test_corpora.sh; do
  [ -f "$t" ] || continue
  out=$(bash "$t" 2>&1)
  line=$(echo "$out" | grep -E '^[0-9]+ passed, [0-9]+ failed$' | tail -1)
  echo "$out" | grep -E '^(FAIL|     )' | sed "s|^|  $(basename "$t"): |"
  if [ -z "$line" ]; then echo "FAIL $t under the sanitizers: no result line"; fail=$((fail + 1)); continue; fi
  p=${line%% passed*}; f=${line#*, }; f=${f%% failed*}
  pass=$((pass + p)); fail=$((fail + f))
  echo "ok   $t under AddressSanitizer and UBSan: $line"
done
if ls "$logs"/* >/dev/null 2>&1; then
  fail=$((fail + 1))
  echo "FAIL sanitizer reports:"
  for l in "$logs"/*; do echo "  == $l"; grep -m1 -E "ERROR|runtime error" "$l"; grep -m8 "^    #" "$l"; done
else
  pass=$((pass + 1))
  echo "ok   no AddressSanitizer or UBSan report in any run"
fi
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
