#!/usr/bin/env bash
# bench/ab.sh OTHER_TESSERA [ROUNDS]: this checkout's ./tessera against
# another build (say, the commit before a change, built in a temporary
# directory), alternating the two in every round so that both see the same
# machine: gpt2-124m at B=4 T=64 on one process and the data-parallel rows
# of make bench (dp=2, ZeRO 0-3). Prints each layout's median step time per
# binary (median of steps 2-6 of each run, then the median over rounds) and
# the ratio new/other.
set -u
OTHER=$(realpath "${1:?usage: bench/ab.sh OTHER_TESSERA [ROUNDS]}") || exit 2
cd "$(dirname "$0")/.."
ROUNDS=${2:-3}
TEXT=${TSR_DATA:-../shared/data}/tinyshakespeare.txt
layouts=("dp=1, 2 threads|--threads 2"
         "dp=2, ZeRO-0|--nproc 2 --dp 2"
         "dp=2, ZeRO-1|--nproc 2 --dp 2 --zero 1"
         "dp=2, ZeRO-2|--nproc 2 --dp 2 --zero 2"
         "dp=2, ZeRO-3|--nproc 2 --dp 2 --zero 3")
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# one BINARY FLAGS...: the median ms of steps 2-6 of a 6-step run
one() {
  local bin=$1; shift
  "$bin" train --model gpt2-124m --data "$TEXT" --batch 4 --seq 64 --steps 6 --log-every 1 --peak-gflops 1 \
    --log "$tmp/log.jsonl" "$@" >/dev/null 2>&1 || { echo "nan"; return; }
  grep -o '"ms":[0-9.]*' "$tmp/log.jsonl" | tail -5 | cut -d: -f2 | sort -n | sed -n 3p
  rm -f "$tmp/log.jsonl"
}
median() { sort -n | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }
for r in $(seq "$ROUNDS"); do
  for i in "${!layouts[@]}"; do
    flags=${layouts[$i]#*|}
    if [ $((r % 2)) -eq 1 ]; then
      one ./tessera $flags >>"$tmp/new$i"; one "$OTHER" $flags >>"$tmp/old$i"
    else
      one "$OTHER" $flags >>"$tmp/old$i"; one ./tessera $flags >>"$tmp/new$i"
    fi
  done
done
printf '%-18s %12s %12s %9s   (%d rounds, median ms/step)\n' layout "this" "other" "this/other" "$ROUNDS"
for i in "${!layouts[@]}"; do
  n=$(median <"$tmp/new$i"); o=$(median <"$tmp/old$i")
  awk -v l="${layouts[$i]%%|*}" -v n="$n" -v o="$o" 'BEGIN { printf "%-18s %12.1f %12.1f %9.3f\n", l, n, o, n / o }'
done
