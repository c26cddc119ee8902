#!/usr/bin/env bash
# tessera plot: runs' metrics as one SVG. Two runs (fp32 and bf16, with
# evaluations) plotted with the default panels, --log-loss and --smooth give
# an SVG that validates (xmllint), a panel per metric with a line per run
# and a legend, and renders (rsvg-convert) to a PNG whose panels hold the
# runs' colours; a resumed run's repeated steps count once; bad input ends
# with one line and exit 2, writing nothing. Run from the repository root.
source "$(dirname "$0")/lib.sh"
R="train --model gpt2-tiny --data $DATA --val-data $DATA --tokenizer byte --seed 4 --batch 4 --seq 32 --steps 40
   --log-every 1 --eval-every 10 --eval-batches 2"
"$BIN" $R --log "$TMP/fp32.jsonl" >/dev/null 2>&1 || echo "     fp32 run failed"
"$BIN" $R --precision bf16 --log "$TMP/bf16.jsonl" >/dev/null 2>&1 || echo "     bf16 run failed"
"$BIN" plot "$TMP/fp32.jsonl" "$TMP/bf16.jsonl" --out "$TMP/p.svg" --log-loss --smooth 5 >"$TMP/plot.out" 2>&1
rc=$?
S="$TMP/p.svg"
panels=$(grep -o 'id="panel-[a-z_]*"' "$S" 2>/dev/null | tr '\n' ' ')
[ $rc = 0 ] && [ "$panels" = 'id="panel-loss" id="panel-val_loss" id="panel-lr" id="panel-tokens_per_s" id="panel-mem" ' ] &&
  grep -q "^plot: $S (2 runs)" "$TMP/plot.out" &&
  ok "tessera plot A.jsonl B.jsonl --out F.svg: one panel per default metric (loss, val_loss, lr, tokens_per_s, mem)" ||
  bad "plot panels" "rc $rc, panels: $panels" "$(cat "$TMP/plot.out")"
# in each panel, each run's colour: a line (raw faint and smoothed), evaluations marked
lines_ok=1
for p in loss val_loss lr tokens_per_s mem; do
  body=$(sed -n "/id=\"panel-$p\"/,/^<\/g>/p" "$S")
  for c in '#1f77b4' '#d62728'; do
    echo "$body" | grep -q "<polyline fill=\"none\" stroke=\"$c\"" || { lines_ok=0; echo "     no $c line in $p"; }
  done
done
nval=$(sed -n '/id="panel-val_loss"/,/^<\/g>/p' "$S" | grep -c '<circle')
[ $lines_ok = 1 ] && [ "$nval" = 8 ] && grep -q '>fp32.jsonl</text>' "$S" && grep -q '>bf16.jsonl</text>' "$S" &&
  grep -q 'training loss (nats per token) — log scale' "$S" && grep -q 'stroke-opacity="0.30"' "$S" &&
  grep -q '>peak memory per rank (MiB)<' "$S" && grep -q '>throughput (tokens/s)<' "$S" &&
  ok "a line per run in every panel (smoothed over a faint raw one), 4 evaluations per run marked, legend, units, log-scale loss" ||
  bad "plot lines" "val_loss points $nval"
if command -v xmllint >/dev/null; then
  xmllint --noout "$S" 2>"$TMP/xml.err" && ok "the SVG is well-formed XML (xmllint)" || bad "xmllint" "$(head -3 "$TMP/xml.err")"
else
  echo "skip xmllint: not installed (scripts/deps.sh installs libxml2-utils)"
fi
# rendered, each panel's plot area holds coloured pixels: the runs' lines
if command -v rsvg-convert >/dev/null && cc -O1 -o "$TMP/png_ink" tests/cli/png_ink.c -lz 2>/dev/null; then
  rsvg-convert "$S" -o "$TMP/p.png" 2>"$TMP/rsvg.err"
  ranges=$(grep -o '<rect x="[0-9.]*" y="[0-9.]*" width="[0-9.]*" height="[0-9.]*" fill="#ffffff" stroke' "$S" |
           sed 's/.* y="\([0-9.]*\)".* height="\([0-9.]*\)".*/\1 \2/' | awk '{ printf "%d %d ", $1 + 1, $1 + $2 - 1 }')
  ink=$("$TMP/png_ink" "$TMP/p.png" $ranges 2>&1 | tr '\n' ' ')
  echo "$ink" | awk 'NF == 5 { for (i = 1; i <= NF; i++) if ($i < 100) exit 1; exit 0 } { exit 1 }' &&
    ok "rsvg-convert renders it: every panel holds the runs' coloured lines (pixels per panel: $ink)" ||
    bad "rendered panels" "pixels: $ink" "$(head -3 "$TMP/rsvg.err")"
else
  echo "skip the rendering check: rsvg-convert (librsvg2-bin) or a C compiler with zlib (zlib1g-dev) missing; scripts/deps.sh installs them"
fi

# a resumed run's file repeats steps: the later record counts, once
for s in 1 2 3 4 5 6; do echo "{\"step\":$s,\"loss\":$((10 - s)).5,\"lr\":0.001}"; done >"$TMP/res.jsonl"
for s in 4 5 6 7 8; do echo "{\"step\":$s,\"loss\":$((10 - s)).25,\"lr\":0.001}"; done >>"$TMP/res.jsonl"
echo '{"step":8,"val_loss":2.0,"val_ppl":7.4,"val_tokens":10}' >>"$TMP/res.jsonl"
"$BIN" plot "$TMP/res.jsonl" --out "$TMP/res.svg" --metrics loss,val_loss,grad_norm >/dev/null 2>&1
pts=$(sed -n '/id="panel-loss"/,/^<\/g>/p' "$TMP/res.svg" | grep -o 'points="[^"]*"' | wc -w)
[ "$pts" = 8 ] && grep -q '>no grad_norm records<' "$TMP/res.svg" &&
  ok "a resumed run's repeated steps are plotted once (8 points from 11 records); a metric without records says so" ||
  bad "resumed steps" "$pts points"

# bad input: one line naming the problem, exit 2, nothing written
printf '{"step":1,"loss":3}\n{"step":2,"loss":\n' >"$TMP/broken.jsonl"
echo '{"note":"nothing"}' >"$TMP/empty.jsonl"
cases=("missing.jsonl --out $TMP/x.svg|$TMP/missing.jsonl"
       "$TMP/broken.jsonl --out $TMP/x.svg|broken.jsonl:2: not a metrics record"
       "$TMP/empty.jsonl --out $TMP/x.svg|no step or evaluation records"
       "$TMP/fp32.jsonl|--out FILE.svg is required"
       "$TMP/fp32.jsonl --out $TMP/x.svg --metrics loss,bogus|--metrics: 'bogus' is not a metric"
       "--out $TMP/x.svg|give one or more metrics files"
       "$TMP/fp32.jsonl --out $TMP/x.svg --smooth -1|--smooth")
for c in "${cases[@]}"; do
  args=${c%%|*}; want=${c#*|}
  args=${args/missing.jsonl/$TMP/missing.jsonl}
  "$BIN" plot $args >"$TMP/e.out" 2>&1
  rc=$?
  if [ $rc = 2 ] && [ "$(wc -l <"$TMP/e.out")" = 1 ] && grep -qF -- "$want" "$TMP/e.out" && [ ! -e "$TMP/x.svg" ]; then
    ok "plot $(echo "$args" | sed "s|$TMP/||g"): exit 2, '$(cut -c1-90 "$TMP/e.out")'"
  else
    bad "plot $args" "rc $rc" "$(cat "$TMP/e.out")"
  fi
done

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
