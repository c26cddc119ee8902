#!/usr/bin/env bash
# Hardening of plot, sample, the overflow test hook, the help texts and the
# progress bar: values an axis cannot draw (±1e308, inf steps, ≤ 0 on a log
# scale) are left out and counted, and file names of any bytes still give a
# valid SVG; an --out that is one of the inputs (by any path, hard link or
# symlink) is refused, the input intact; --smooth and --top-k run in linear
# time, smoothing as its direct definition and top-k drawing the tokens a
# full ordering gives; TESSERA_TEST_OVERFLOW's numbers range-checked; the
# help texts say what the code does; no progress bar's escape codes in a
# file, whether the ranks are forked or started by mpirun. Run from the
# repository root.
source "$(dirname "$0")/lib.sh"
# fails NAME WANT CMD...: CMD ends with exit 2 and one line holding WANT
fails() {
  local name=$1 want=$2
  shift 2
  "$@" >"$TMP/f.out" 2>&1
  local rc=$?
  if [ $rc = 2 ] && [ "$(wc -l <"$TMP/f.out")" = 1 ] && grep -qF -- "$want" "$TMP/f.out"; then
    ok "$name: exit 2, '$(cut -c1-110 "$TMP/f.out")'"
  else
    bad "$name" "rc $rc" "$(head -3 "$TMP/f.out")"
  fi
}
# valid_svg FILE: xmllint accepts it and no coordinate is nan or inf
valid_svg() {
  xmllint --noout "$1" 2>"$TMP/xml.err" && ! grep -qiE '(nan|inf)[,"]' "$1"
}
command -v xmllint >/dev/null || { bad "xmllint missing (scripts/deps.sh installs libxml2-utils)"; echo "$pass passed, $fail failed"; exit 1; }

# ---- plot: values an axis cannot draw ----
printf '{"step":1,"loss":1e308}\n{"step":2,"loss":-1e308}\n{"step":3,"loss":2.5}\n{"step":4,"loss":2.0}\n' >"$TMP/big.jsonl"
"$BIN" plot "$TMP/big.jsonl" --out "$TMP/big.svg" --metrics loss >"$TMP/p.out" 2>"$TMP/p.err"
rc=$?
note=$(grep -o 'class="skipped"[^>]*>[^<]*' "$TMP/big.svg" | sed 's/.*>//')
pts=$(grep -o 'points="[^"]*"' "$TMP/big.svg" | wc -w)
[ $rc = 0 ] && valid_svg "$TMP/big.svg" && [ "$note" = "2 values not drawn (not finite or beyond ±1e300)" ] && [ "$pts" = 2 ] &&
  grep -q "^plot: 2 values not drawn" "$TMP/p.err" &&
  ok "plot of loss ±1e308 on a linear axis: valid SVG, no nan, the other 2 points drawn, '$note' in the panel and on stderr" ||
  bad "plot ±1e308" "rc $rc, note '$note', $pts points" "$(head -2 "$TMP/xml.err")" "$(cat "$TMP/p.err")"
# sibling: on a log axis 0 and -1 cannot be drawn; a step of 1e308 has no place on the step axis
printf '{"step":1,"loss":3}\n{"step":2,"loss":0}\n{"step":3,"loss":-1}\n{"step":1e308,"loss":2}\n{"step":5,"loss":1.5,"lr":1e-3}\n' >"$TMP/log.jsonl"
"$BIN" plot "$TMP/log.jsonl" --out "$TMP/log.svg" --metrics loss,lr --log-loss --smooth 2 >/dev/null 2>"$TMP/p.err"
rc=$?
note=$(sed -n '/id="panel-loss"/,/^<\/g>/p' "$TMP/log.svg" | grep -o 'class="skipped"[^>]*>[^<]*' | sed 's/.*>//')
[ $rc = 0 ] && valid_svg "$TMP/log.svg" && [ "$note" = "3 values not drawn (not finite, beyond ±1e300 or not above 0)" ] &&
  ! sed -n '/id="panel-lr"/,/^<\/g>/p' "$TMP/log.svg" | grep -q 'class="skipped"' && grep -q "^plot: 3 values" "$TMP/p.err" &&
  ok "plot --log-loss of 0, -1 and a step of 1e308: valid SVG, '$note' in the loss panel only" ||
  bad "plot log axis" "rc $rc, note '$note'" "$(head -2 "$TMP/xml.err")"
# a file of nothing but such records: a valid SVG whose panel says none can be drawn
printf '{"step":1,"loss":1e308}\n' >"$TMP/none.jsonl"
"$BIN" plot "$TMP/none.jsonl" --out "$TMP/none.svg" --metrics loss >/dev/null 2>&1
[ $? = 0 ] && valid_svg "$TMP/none.svg" && grep -q '>no loss value can be drawn<' "$TMP/none.svg" &&
  ok "plot of one loss of 1e308: a valid SVG saying no loss value can be drawn" || bad "plot of nothing drawable"

# ---- plot: file names of any bytes ----
odd=$TMP/$'run\x01\x1b[31m\xff\xfe.jsonl'
cp "$TMP/big.jsonl" "$odd"
"$BIN" plot "$odd" --out "$TMP/odd.svg" >/dev/null 2>&1
rc=$?
leg=$(grep -o '<text x="[0-9.]*" y="22.0" font-size="12">[^<]*' "$TMP/odd.svg" | sed 's/.*>//')
R=$'\xef\xbf\xbd'   # U+FFFD
[ $rc = 0 ] && valid_svg "$TMP/odd.svg" && [ "$leg" = "run$R$R[31m$R$R.jsonl" ] &&
  ok "plot of a file named with control bytes and invalid UTF-8: valid SVG, legend '$leg'" ||
  bad "plot odd name" "rc $rc, legend '$leg'" "$(head -2 "$TMP/xml.err")"
# sibling: XML's own characters, a tab and valid UTF-8 in a name
amp=$TMP/$'a&b<c>"d\te é.jsonl'
cp "$TMP/big.jsonl" "$amp"
"$BIN" plot "$amp" "$odd" --out "$TMP/amp.svg" >/dev/null 2>&1
rc=$?
[ $rc = 0 ] && valid_svg "$TMP/amp.svg" && grep -qF ">a&amp;b&lt;c&gt;&quot;d${R}e é.jsonl<" "$TMP/amp.svg" &&
  ok "plot of a file named a&b<c>\"d<tab>e é.jsonl: escaped, the tab replaced, é kept, valid SVG" ||
  bad "plot XML characters in a name" "rc $rc" "$(grep -o 'font-size="12">a[^<]*' "$TMP/amp.svg")"

# ---- plot: --out that is an input ----
mkdir -p "$TMP/d"
cp "$TMP/big.jsonl" "$TMP/d/run.jsonl"
cp "$TMP/big.jsonl" "$TMP/d/other.jsonl"
cp "$TMP/d/run.jsonl" "$TMP/orig.jsonl"
ln "$TMP/d/run.jsonl" "$TMP/d/hard.jsonl"
ln -s run.jsonl "$TMP/d/sym.jsonl"
for c in "the same path|$TMP/d/run.jsonl --out $TMP/d/run.jsonl" \
         "another spelling|$TMP/d/run.jsonl --out $TMP/d/../d/./run.jsonl" \
         "a hard link|$TMP/d/run.jsonl --out $TMP/d/hard.jsonl" \
         "a symlink to it|$TMP/d/run.jsonl --out $TMP/d/sym.jsonl" \
         "the second of two inputs|$TMP/d/other.jsonl $TMP/d/run.jsonl --out $TMP/d/run.jsonl"; do
  name=${c%%|*}; args=${c#*|}
  fails "plot --out as $name of an input" "is the input" "$BIN" plot $args
  cmp -s "$TMP/d/run.jsonl" "$TMP/orig.jsonl" && [ -L "$TMP/d/sym.jsonl" ] && [ "$(ls "$TMP/d" | wc -l)" = 4 ] ||
    bad "plot --out as $name: the input or its links changed" "$(ls -l "$TMP/d")"
done
"$BIN" plot "$TMP/d/run.jsonl" --out "$TMP/d/run.svg" >/dev/null 2>&1 && valid_svg "$TMP/d/run.svg" &&
  ok "plot --out beside its input (another name) writes the SVG" || bad "plot beside the input"

# ---- plot --smooth: linear time, the direct definition ----
# 1..10 smoothed over 3: 1, 1.5, then the raw value one step back; the
# smoothed line's y pixels are the raw line's shifted by one point
for s in $(seq 1 10); do echo "{\"step\":$s,\"loss\":$s}"; done >"$TMP/lin.jsonl"
"$BIN" plot "$TMP/lin.jsonl" --out "$TMP/lin.svg" --metrics loss --smooth 3 >/dev/null 2>&1
raw=$(grep -o 'stroke-opacity="0.30"[^>]*points="[^"]*"' "$TMP/lin.svg" | grep -o 'points="[^"]*"' | tr -d 'points="' | tr ' ' '\n' | cut -d, -f2)
smo=$(grep -o 'stroke-opacity="1.00"[^>]*points="[^"]*"' "$TMP/lin.svg" | grep -o 'points="[^"]*"' | tr -d 'points="' | tr ' ' '\n' | cut -d, -f2)
r1=$(echo "$raw" | sed -n 1p); r2=$(echo "$raw" | sed -n 2p)
mid=$(awk -v a="$r1" -v b="$r2" 'BEGIN { printf "%.2f", (a + b) / 2 }')
[ "$(echo "$smo" | sed -n 1p)" = "$r1" ] && [ "$(echo "$smo" | sed -n 2p)" = "$mid" ] &&
  [ "$(echo "$smo" | sed -n '3,10p')" = "$(echo "$raw" | sed -n '2,9p')" ] && [ "$(echo "$smo" | wc -l)" = 10 ] &&
  ok "--smooth 3 of 1..10: 1, 1.5, then each raw value one step back (the trailing mean, pixel for pixel)" ||
  bad "smooth 1..10" "raw $(echo $raw)" "smoothed $(echo $smo)"
# sibling: a value that cannot be drawn is left out of its neighbours' means too
printf '{"step":1,"loss":2}\n{"step":2,"loss":1e308}\n{"step":3,"loss":4}\n{"step":4,"loss":6}\n' >"$TMP/gap.jsonl"
printf '{"step":1,"loss":2}\n{"step":3,"loss":4}\n{"step":4,"loss":6}\n' >"$TMP/nogap.jsonl"
"$BIN" plot "$TMP/gap.jsonl" --out "$TMP/gap.svg" --metrics loss --smooth 2 >/dev/null 2>&1
"$BIN" plot "$TMP/nogap.jsonl" --out "$TMP/nogap.svg" --metrics loss --smooth 2 >/dev/null 2>&1
# (both files draw 2, 4 and 6: the same axis): smoothed, the gap file's
# lines are [2] and [4 (the mean of 4 alone), 5]; the other's 5 is the same point
pts_of() { grep "stroke-opacity=\"$2\"" "$1" | grep -o 'points="[^"]*"' | sed 's/points="//; s/"$//' | tr '\n' '|'; }
sg=$(pts_of "$TMP/gap.svg" 1.00)
sn=$(pts_of "$TMP/nogap.svg" 1.00)
raw3=$(pts_of "$TMP/gap.svg" 0.30 | tr ' |' '\n\n' | grep '^614.00,')
first=${sn%% *}; last=${sn%|}; last=${last##* }
[ -n "$raw3" ] && [ "$sg" = "$first|$raw3 $last|" ] &&
  ok "--smooth 2 over a 1e308 between 2 and 4: left out of the means (4 alone, then 5), the line broken there" ||
  bad "smooth over a gap" "with the gap: $sg" "without: $sn" "raw step 3: $raw3"
awk 'BEGIN { for (i = 1; i <= 1000000; i++) printf "{\"step\":%d,\"loss\":%.4f}\n", i, 3 + sin(i / 1000.0) + (i % 7) / 10.0 }' >"$TMP/m.jsonl"
start=$(date +%s.%N)
"$BIN" plot "$TMP/m.jsonl" --out "$TMP/m.svg" --metrics loss --smooth 100000 >/dev/null 2>&1
rc=$?
el=$(awk -v s="$start" -v e="$(date +%s.%N)" 'BEGIN { printf "%.1f", e - s }')
[ $rc = 0 ] && awk -v e="$el" 'BEGIN { exit !(e < 20) }' && xmllint --huge --noout "$TMP/m.svg" 2>/dev/null &&
  ok "plot --smooth 100000 of 10^6 records: ${el} s (the window's mean by block sums, not O(n·w))" ||
  bad "plot --smooth 100000 of 10^6 records" "rc $rc, ${el} s"
rm -f "$TMP/m.jsonl" "$TMP/m.svg"

# ---- sample --top-k: a selection, the same tokens ----
"$BIN" train --model gpt2-tiny --data "$DATA" --tokenizer byte --steps 5 --batch 2 --seq 32 --peak-gflops 100 --ckpt-dir "$TMP/g" \
  >/dev/null 2>&1 ||
  bad "training the byte model failed"
S=(sample --ckpt "$TMP/g" --prompt "ROMEO:" --tokens 120)
same() { "$BIN" "${S[@]}" $1 >"$TMP/a.txt" 2>&1; "$BIN" "${S[@]}" $2 >"$TMP/b.txt" 2>&1; cmp -s "$TMP/a.txt" "$TMP/b.txt" && [ "$(wc -c <"$TMP/a.txt")" -gt 120 ]; }
same "--seed 3 --top-k 256 --temperature 1.5" "--seed 3 --top-k 0 --temperature 1.5" &&
  ok "sample --top-k 256 (the whole byte vocabulary) draws what --top-k 0 draws" || bad "top-k V against all" "$(head -c 200 "$TMP/a.txt")"
same "--seed 4 --top-k 1 --temperature 2" "--seed 4 --temperature 0" &&
  ok "sample --top-k 1 at temperature 2 is greedy sampling" || bad "top-k 1 against greedy"
# sibling: a K beyond the vocabulary is all of it (tests/kernels/test_sampling
# checks every cut against the old selection, token for token)
same "--seed 5 --top-k 300 --temperature 0.7" "--seed 5 --top-k 0 --temperature 0.7" &&
  ok "sample --top-k 300 (beyond the byte vocabulary) draws what --top-k 0 draws" || bad "top-k 300 against all"
head -c 20000 "$DATA" >"$TMP/small.txt"
if TESSERA_GPT2_DIR=${TSR_DATA:-../shared/data}/gpt2 "$BIN" train --model gpt2-tiny --data "$TMP/small.txt" --steps 1 --batch 1 \
     --seq 16 --peak-gflops 100 --ckpt-dir "$TMP/gg" >/dev/null 2>&1; then
  start=$(date +%s.%N)
  TESSERA_GPT2_DIR=${TSR_DATA:-../shared/data}/gpt2 "$BIN" sample --ckpt "$TMP/gg" --tokens 20 --top-k 50000 --temperature 1.5 \
    >"$TMP/k.txt" 2>&1
  rc=$?
  el=$(awk -v s="$start" -v e="$(date +%s.%N)" 'BEGIN { printf "%.1f", e - s }')
  [ $rc = 0 ] && awk -v e="$el" 'BEGIN { exit !(e < 8) }' &&
    ok "sample --top-k 50000 of GPT-2's 50257: 20 tokens in ${el} s (a selection, not 50000 maximum searches)" ||
    bad "sample --top-k 50000" "rc $rc, ${el} s" "$(tail -1 "$TMP/k.txt")"
else
  bad "training the GPT-2-vocabulary model failed"
fi

# ---- TESSERA_TEST_OVERFLOW ----
O=(train --data "$DATA" --tokenizer byte --steps 3 --batch 2 --seq 16 --precision fp16 --peak-gflops 100 --log "$TMP/ov.jsonl")
for c in "2:4294967296|rank 4294967296 is not a rank" "2:99|rank 99 is not one of the run's 1 rank" \
         "4294967297|step 4294967297 is not one of the run's steps (1..3)" "4|step 4 is not one of the run's steps" \
         "0|step 0 is not" "2:|expected STEP or STEP:RANK" "2:1x|expected STEP or STEP:RANK"; do
  v=${c%%|*}; want=${c#*|}
  fails "TESSERA_TEST_OVERFLOW=$v" "TESSERA_TEST_OVERFLOW='$v': $want" env TESSERA_TEST_OVERFLOW="$v" "$BIN" "${O[@]}"
  [ ! -e "$TMP/ov.jsonl" ] || { bad "TESSERA_TEST_OVERFLOW=$v wrote the log"; rm -f "$TMP/ov.jsonl"; }
done
fails "TESSERA_TEST_OVERFLOW=2:2 with --nproc 2" "rank 2 is not one of the run's 2 ranks (0..1)" \
  env TESSERA_TEST_OVERFLOW=2:2 "$BIN" "${O[@]}" --nproc 2
TESSERA_TEST_OVERFLOW=2:1 "$BIN" "${O[@]}" --nproc 2 >"$TMP/ok.out" 2>&1 && grep -q '"skipped":true' "$TMP/ov.jsonl" &&
  ok "TESSERA_TEST_OVERFLOW=2:1 with --nproc 2 runs, step 2 skipped" || bad "TESSERA_TEST_OVERFLOW=2:1" "$(tail -2 "$TMP/ok.out")"

# ---- help texts ----
h=$("$BIN" --help)
echo "$h" | grep -A1 '^  train ' | grep -q 'fp32, bf16 or fp16' && echo "$h" | grep -A1 '^  train ' | grep -q -- '--pp' &&
  echo "$h" | grep '^  export ' | grep -q LLaMA && echo "$h" | grep '^  import ' | grep -q LLaMA &&
  ok "tessera --help: train in fp32, bf16 or fp16 with --pp; export and import name LLaMA" || bad "top-level help" "$h"
"$BIN" ckpt --help >"$TMP/h.out" 2>&1 && grep -q 'ckpt diff PATH_A PATH_B' "$TMP/h.out" && grep -q '^diff:' "$TMP/h.out" &&
  "$BIN" ckpt diff --help >/dev/null 2>&1 && "$BIN" ckpt info --help >/dev/null 2>&1 &&
  ok "ckpt --help (and ckpt diff --help, ckpt info --help) describe info and diff" || bad "ckpt help" "$(cat "$TMP/h.out")"
"$BIN" train --help | grep -E '^  --dp ' | grep -q -- '--pp' && "$BIN" plan --help | grep -E '^  --model ' | grep -q 'list above' &&
  "$BIN" plan --help | grep -E '^  --config ' | grep -q 'n_kv_head' && "$BIN" export --help | grep -E '^  --out ' | grep -q 'GPT-2' &&
  ok "train --dp's default counts --pp; plan --model points at its list, --config names train's keys" || bad "flag help"
fails "ckpt with no subcommand" "usage: tessera ckpt info PATH | tessera ckpt diff PATH_A PATH_B" "$BIN" ckpt

# ---- the progress bar: drawn for a terminal only, never into a file ----
P=(train --data "$DATA" --tokenizer byte --steps 6 --log-every 100 --batch 2 --seq 32 --peak-gflops 100)
"$BIN" "${P[@]}" --nproc 2 >"$TMP/bar.out" 2>&1
[ $? = 0 ] && ! grep -q $'\033' "$TMP/bar.out" && grep -q '^done:' "$TMP/bar.out" &&
  ok "--nproc 2 with stdout to a file: no escape bytes" || bad "--nproc 2 into a file" "$(grep -c $'\033' "$TMP/bar.out") ESC lines"
if command -v script >/dev/null; then
  script -qec "$BIN ${P[*]} --nproc 2" /dev/null >"$TMP/pty.out" 2>&1
  grep -q $'\033\[K' "$TMP/pty.out" && ok "--nproc 2 on a terminal: the bar is drawn" || bad "no bar on a terminal" "$(tail -2 "$TMP/pty.out")"
else
  echo "skip the terminal check: script (bsdutils) missing"
fi
if command -v mpirun >/dev/null && ldd "$BIN" | grep -q libmpi; then
  MPIRUN=(mpirun --oversubscribe --mca mpi_yield_when_idle 1 --mca btl_vader_single_copy_mechanism none)
  [ "$(id -u)" -eq 0 ] && MPIRUN+=(--allow-run-as-root)
  timeout 120 "${MPIRUN[@]}" -np 2 "$BIN" "${P[@]}" >"$TMP/mpi.out" 2>&1
  [ $? = 0 ] && ! grep -q $'\033' "$TMP/mpi.out" && grep -q '^done:' "$TMP/mpi.out" &&
    ok "mpirun -np 2 with stdout to a file (its ranks on mpirun's terminal): no escape bytes" ||
    bad "mpirun into a file" "$(grep -c $'\033' "$TMP/mpi.out") ESC lines" "$(tail -2 "$TMP/mpi.out")"
  # under mpirun the world is known only in the ranks: rank 0 says it, once
  TESSERA_TEST_OVERFLOW=2:5 timeout 120 "${MPIRUN[@]}" -np 2 "$BIN" "${P[@]}" >"$TMP/mo.out" 2>&1
  rc=$?
  [ $rc = 2 ] && [ "$(grep -c '^tessera' "$TMP/mo.out")" = 1 ] &&
    grep -q "TESSERA_TEST_OVERFLOW='2:5': rank 5 is not one of the run's 2 ranks (0..1)" "$TMP/mo.out" &&
    ok "mpirun -np 2 with TESSERA_TEST_OVERFLOW=2:5: exit 2, one line from rank 0" ||
    bad "mpirun TESSERA_TEST_OVERFLOW=2:5" "rc $rc" "$(grep '^tessera' "$TMP/mo.out")"
else
  echo "skip the mpirun checks: mpirun or an MPI build missing"
fi

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
