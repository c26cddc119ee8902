#!/usr/bin/env bash
# Runs each test program given, shows its output, and totals the
# "N passed, N failed" lines into one closing line. Exit 1 if any failed.
set -u
total_pass=0
total_fail=0
for t in "$@"; do
  echo "== $t"
  if [[ "$t" == *.sh ]]; then out=$(bash "$t" 2>&1); rc=$?
  else out=$("$t" 2>&1); rc=$?; fi
  echo "$out"
  line=$(echo "$out" | grep -E '^[0-9]+ passed, [0-9]+ failed$' | tail -1)
  if [ -z "$line" ]; then
    echo "   $t ended (exit $rc) without a result line: counted as 1 failure"
    total_fail=$((total_fail + 1))
    continue
  fi
  p=${line%% passed*}; f=${line#*, }; f=${f%% failed*}
  total_pass=$((total_pass + p)); total_fail=$((total_fail + f))
  if [ "$rc" -ne 0 ] && [ "$f" -eq 0 ]; then
    echo "   $t exited $rc: counted as 1 failure"
    total_fail=$((total_fail + 1))
  fi
done
echo "$total_pass passed, $total_fail failed"
[ "$total_fail" -eq 0 ]
