#!/usr/bin/env bash
# tessera prepare on awkward inputs: texts without a cut point (CRLF or CR
# line ends, one line), --out reused or inside --input, zstd's skippable
# frames and data after a compressed stream, memory that does not grow with
# the input (under ulimit -v), JSONL whose every line is skipped, a UTF-8
# byte order mark. Run from the repository root.
source "$(dirname "$0")/lib.sh"
if ! "$BIN" prepare --help >/dev/null || ! command -v gzip >/dev/null || ! command -v zstd >/dev/null ||
   ! command -v python3 >/dev/null; then
  echo "skip: gzip, zstd and python3 are needed to make the inputs"; echo "0 passed, 0 failed"; exit 0
fi
# P ARGS: a prepare, its stdout and stderr in p.out, its stderr alone in p.err
P() { local rc; "$BIN" prepare "$@" >"$TMP/p.out" 2>"$TMP/p.err"; rc=$?; cat "$TMP/p.err" >>"$TMP/p.out"; return $rc; }
# val and train token counts of the last run's "done:" line
split_of() { sed -n 's/.*tokens (val \([0-9]*\) in .*, train \([0-9]*\) in .*/\1 \2/p' "$TMP/p.out"; }
# near FRAC VAL TRAIN: VAL is within 2 points of FRAC of VAL + TRAIN
near() { awk -v f="$1" -v v="$2" -v t="$3" 'BEGIN { p = v / (v + t); exit !(v > 0 && t > 0 && p > f - 0.02 && p < f + 0.02) }'; }
same_dirs() {
  local f
  [ "$(cd "$1" && ls)" = "$(cd "$2" && ls)" ] || return 1
  for f in "$1"/*.bin; do cmp -s "$f" "$2/$(basename "$f")" || return 1; done
}
one_line() { [ "$(wc -l <"$TMP/p.err")" -eq 1 ]; }   # the error: one line on stderr
has_llama=0
"$BIN" tokenize --tokenizer llama </dev/null >/dev/null 2>&1 && has_llama=1

# ---- texts without an LF cut point: split at about the requested fraction ----
sed 's/$/\r/' "$DATA" >"$TMP/crlf.txt"
cp "$TMP/crlf.txt" "$TMP/crlf2.txt"
tr '\n' '\r' <"$DATA" >"$TMP/cr.txt"
tr -d '\n' <"$DATA" >"$TMP/one.txt"
gzip -k "$TMP/crlf.txt"
for v in "crlf.txt 0.1" "crlf.txt 0.5" "crlf.txt.gz 0.1" "cr.txt 0.1" "one.txt 0.1" "one.txt 0.3"; do
  read -r f frac <<<"$v"
  P --input "$TMP/$f" --out "$TMP/s_$f$frac" --val-fraction "$frac"; rc=$?
  read -r vt tt <<<"$(split_of)"
  [ $rc = 0 ] && near "$frac" "${vt:-0}" "${tt:-0}" && ok "$f, --val-fraction $frac: val $vt, train $tt tokens" ||
    bad "$f at $frac" "rc $rc" "$(tail -1 "$TMP/p.out")"
done
same_dirs "$TMP/s_crlf.txt0.1" "$TMP/s_crlf.txt.gz0.1" && ok "the gzip of the CRLF text gives its shards" || bad "CRLF gzip differs"
P --input "$TMP/crlf.txt" "$TMP/crlf2.txt" --out "$TMP/s_two"; read -r vt tt <<<"$(split_of)"
near 0.1 "${vt:-0}" "${tt:-0}" && ok "two CRLF files: 10% validation (val $vt, train $tt)" || bad "two CRLF files" "$(tail -1 "$TMP/p.out")"
if [ $has_llama = 1 ]; then
  for f in crlf.txt one.txt; do
    P --input "$TMP/$f" --out "$TMP/l_$f" --tokenizer llama; read -r vt tt <<<"$(split_of)"
    near 0.1 "${vt:-0}" "${tt:-0}" && ok "$f with the llama tokenizer: val $vt, train $tt" || bad "$f llama" "$(tail -1 "$TMP/p.out")"
  done
else echo "skip: llama tokenizer files not found"; fi
# one line of 2-byte characters, byte tokenizer: the cut falls between two characters
python3 -c "import sys; sys.stdout.write('é' * 5001)" >"$TMP/utf8.txt"
P --input "$TMP/utf8.txt" --out "$TMP/s_utf8" --tokenizer byte; read -r vt tt <<<"$(split_of)"
[ "${vt:-1}" -gt 0 ] && [ $((vt % 2)) = 0 ] && [ "${tt:-0}" -gt 0 ] &&
  ok "a line of 'é' is cut at a character boundary (val $vt bytes, train $tt)" || bad "UTF-8 cut" "$(tail -1 "$TMP/p.out")"
# one JSONL document cannot be split: refused, nothing written
printf '{"text":"a single document, never cut"}\n' >"$TMP/single.jsonl"
P --input "$TMP/single.jsonl" --out "$TMP/s_single"; rc=$?
[ $rc = 2 ] && one_line && grep -q -- "--val-fraction 0.1: nothing is left for training" "$TMP/p.out" && [ ! -e "$TMP/s_single" ] &&
  ok "one JSONL document and --val-fraction 0.1: exit 2, one line, no --out left" || bad "single document" "rc $rc" "$(cat "$TMP/p.out")"
P --input "$TMP/single.jsonl" --out "$TMP/s_single0" --val-fraction 0 && ok "the same with --val-fraction 0: all training" ||
  bad "single document, no validation" "$(cat "$TMP/p.out")"

# ---- --out: refused when not empty, --force replaces only the shards, never read as input ----
head -c 60000 "$DATA" >"$TMP/small.txt"
P --input "$TMP/small.txt" --out "$TMP/o" --shard-tokens 1024
n1=$(ls "$TMP/o" | wc -l); sum1=$(cat "$TMP/o"/*.bin | cksum)
P --input "$TMP/small.txt" --out "$TMP/o" --shard-tokens 4096; rc=$?
[ $rc = 2 ] && one_line && grep -q -- "--out $TMP/o: not empty" "$TMP/p.out" && [ "$(cat "$TMP/o"/*.bin | cksum)" = "$sum1" ] &&
  ok "a second prepare into a used --out: exit 2, one line, its $n1 shards untouched" || bad "reused --out" "rc $rc" "$(cat "$TMP/p.out")"
echo keep >"$TMP/o/notes.txt"
P --input "$TMP/small.txt" --out "$TMP/o" --shard-tokens 4096 --force; rc=$?
P --input "$TMP/small.txt" --out "$TMP/o_fresh" --shard-tokens 4096
[ $rc = 0 ] && [ "$(ls "$TMP/o" | grep -v notes.txt)" = "$(ls "$TMP/o_fresh")" ] && [ "$(cat "$TMP/o/notes.txt")" = keep ] &&
  ok "--force with fewer shards: only the new shards are left, other files kept" || bad "--force" "rc $rc" "$(ls "$TMP/o")"
"$BIN" train --data "$TMP/o" --tokenizer gpt2 --model gpt2-tiny --steps 1 --batch 2 --seq 32 >"$TMP/t.out" 2>&1 &&
  ok "train --data reads the replaced directory" || bad "train after --force" "$(tail -2 "$TMP/t.out")"
mkdir -p "$TMP/corpus" && cp "$TMP/small.txt" "$TMP/corpus/"
P --input "$TMP/corpus" --out "$TMP/corpus/shards"; first=$(split_of)
P --input "$TMP/corpus" --out "$TMP/corpus/shards" --force; rc=$?
[ $rc = 0 ] && [ "$(split_of)" = "$first" ] && grep -q "prepare: 1 file," "$TMP/p.out" &&
  ok "--out inside an --input directory: its shards are not read as text ($first)" || bad "--out inside --input" "$(cat "$TMP/p.out")"
P --input "$TMP/corpus/shards/train_000000.bin" --out "$TMP/corpus/shards" --force; rc=$?
[ $rc = 2 ] && one_line && grep -q "train_000000.bin: a shard of --out" "$TMP/p.out" && [ -f "$TMP/corpus/shards/train_000000.bin" ] &&
  ok "an --input shard of --out: exit 2, one line, nothing removed" || bad "input inside out" "rc $rc" "$(cat "$TMP/p.out")"
mkdir -p "$TMP/corpus2" && cp "$TMP/small.txt" "$TMP/corpus2/"
P --input "$TMP/corpus2" --out "$TMP/corpus2" --force; rc=$?
P --input "$TMP/corpus2" --out "$TMP/corpus2" --force; rc2=$?
[ $rc = 0 ] && [ $rc2 = 0 ] && [ "$(split_of)" = "$first" ] && [ -f "$TMP/corpus2/small.txt" ] &&
  ok "--out the --input directory itself, twice: its text read, its shards not, the text kept" || bad "--out = --input" "$(cat "$TMP/p.out")"
P --input "$TMP/small.txt" --out "$TMP/small.txt"; rc=$?
[ $rc = 2 ] && one_line && grep -q "not a directory" "$TMP/p.out" && ok "--out a file: exit 2" || bad "--out file" "$(cat "$TMP/p.out")"

# ---- compressed streams: zstd skippable frames, data after the stream ----
head -c 20000 "$DATA" >"$TMP/z.txt"
zstd -q -c "$TMP/z.txt" >"$TMP/z.zst"; gzip -c "$TMP/z.txt" >"$TMP/z.gz"
python3 - "$TMP" <<'EOF'
import struct, sys
d = sys.argv[1]
z = open(d + '/z.zst', 'rb').read()
g = open(d + '/z.gz', 'rb').read()
skip = lambda m, b: struct.pack('<II', m, len(b)) + b
open(d + '/skip_first.zst', 'wb').write(skip(0x184D2A50, b'meta') + z)
open(d + '/skip_last.zst', 'wb').write(z + skip(0x184D2A5F, b'x' * 9))
open(d + '/garbage.zst', 'wb').write(z + b'garbage')
open(d + '/garbage.gz', 'wb').write(g + b'garbage')
open(d + '/zeros.gz', 'wb').write(g + bytes(64))
open(d + '/two.gz', 'wb').write(g[:0] + g)
EOF
P --input "$TMP/z.txt" --out "$TMP/c_ref"
for f in skip_first.zst skip_last.zst; do
  P --input "$TMP/$f" --out "$TMP/c_$f" && same_dirs "$TMP/c_ref" "$TMP/c_$f" &&
    ok "$f: a zstd skippable frame is recognised and skipped" || bad "$f" "$(tail -1 "$TMP/p.out")"
done
for f in garbage.zst garbage.gz zeros.gz; do
  P --input "$TMP/$f" --out "$TMP/c_$f"; rc=$?
  [ $rc = 2 ] && one_line && grep -q "$TMP/$f: not valid" "$TMP/p.out" && [ ! -e "$TMP/c_$f" ] &&
    ok "$f: data after the stream is an error (exit 2, the file named, nothing written)" || bad "$f" "rc $rc" "$(cat "$TMP/p.out")"
done
cat "$TMP/z.gz" "$TMP/z.gz" >"$TMP/two.gz"; cat "$TMP/z.txt" "$TMP/z.txt" >"$TMP/two.txt"
P --input "$TMP/two.txt" --out "$TMP/c_two_ref"
P --input "$TMP/two.gz" --out "$TMP/c_two" && same_dirs "$TMP/c_two_ref" "$TMP/c_two" &&
  ok "two gzip members one after another: their text" || bad "gzip members" "$(tail -1 "$TMP/p.out")"

# ---- memory does not grow with the input: 48 MiB of zeros under ulimit -v 800 MB ----
# (the whole-run reading needed about 1.1 GB here; these runs about 700 MB of address space)
if [ -n "${TSR_ASAN:-}" ]; then   # AddressSanitizer's shadow memory is terabytes of address space
  echo "     (the ulimit -v cases skipped: the binary runs under AddressSanitizer)"
else
  head -c 48M /dev/zero | gzip >"$TMP/zeros48.gz"
  (ulimit -v 800000; "$BIN" prepare --input "$TMP/zeros48.gz" --out "$TMP/m_gpt2" --threads 2 >"$TMP/p.out" 2>&1); rc=$?
  [ $rc = 0 ] && grep -q "50331649 tokens" "$TMP/p.out" && ok "48 MiB of zeros (gzip) under ulimit -v 800000: every byte tokenized" ||
    bad "zeros under ulimit -v" "rc $rc" "$(tail -2 "$TMP/p.out")"
  head -c 8M /dev/zero | tr '\0' 'a' | gzip >"$TMP/a8.gz"
  (ulimit -v 800000; "$BIN" prepare --input "$TMP/a8.gz" --out "$TMP/m_a" --threads 2 >"$TMP/p.out" 2>&1); rc=$?
  [ $rc = 0 ] && ok "8 MiB of one letter (a single pre-token) under ulimit -v 800000" || bad "letters under ulimit -v" "rc $rc" "$(tail -2 "$TMP/p.out")"
  if [ $has_llama = 1 ]; then
    head -c 16M /dev/zero | gzip >"$TMP/zeros16.gz"
    (ulimit -v 800000; "$BIN" prepare --input "$TMP/zeros16.gz" --out "$TMP/m_llama" --tokenizer llama --threads 2 >"$TMP/p.out" 2>&1); rc=$?
    [ $rc = 0 ] && ok "16 MiB of zeros with the llama tokenizer under ulimit -v 800000" || bad "llama under ulimit -v" "rc $rc" "$(tail -2 "$TMP/p.out")"
  fi
fi

# ---- a JSONL line is parsed whole: one over 64 MiB is refused, so memory never follows the input ----
{ printf '{"text":"'; head -c 66M /dev/zero | tr '\0' 'a'; printf '"}\n'; } >"$TMP/longline.jsonl"
P --input "$TMP/longline.jsonl" --out "$TMP/j_long"; rc=$?
[ $rc = 2 ] && one_line && grep -q "longline.jsonl:1: a JSONL line longer than 64 MiB" "$TMP/p.out" && [ ! -e "$TMP/j_long/train_000000.bin" ] &&
  ok "a JSONL line of 66 MiB: exit 2, one line naming the file and line, no shard" || bad "long JSONL line" "rc $rc" "$(cat "$TMP/p.out")"
rm -f "$TMP/longline.jsonl"

# ---- JSONL: every line skipped is an error; a byte order mark is accepted ----
printf '{"body":"x"}\nnot json\n{"text":3}\n' >"$TMP/allbad.jsonl"
P --input "$TMP/allbad.jsonl" --out "$TMP/j_bad"; rc=$?
[ $rc = 2 ] && one_line && grep -q -- "--input $TMP/allbad.jsonl: none of its 3 JSONL lines holds a string \"text\" (the first: line 1)" "$TMP/p.out" &&
  [ ! -e "$TMP/j_bad" ] && ok "a JSONL file whose every line is skipped: exit 2, one line, nothing written" ||
  bad "all lines skipped" "rc $rc" "$(cat "$TMP/p.out")"
printf '{"body":"one"}\n{"body":"two"}\n' >"$TMP/body.jsonl"
P --input "$TMP/body.jsonl" --out "$TMP/j_body" --val-fraction 0; rc=$?
[ $rc = 2 ] && one_line && grep -q 'see --text-field' "$TMP/p.out" && ok "the wrong --text-field for every line: exit 2" ||
  bad "wrong text field" "rc $rc" "$(cat "$TMP/p.out")"
P --input "$TMP/body.jsonl" --out "$TMP/j_body2" --val-fraction 0 --text-field body &&
  ok "the same file with --text-field body" || bad "--text-field body" "$(cat "$TMP/p.out")"
printf '{"text":"first"}\n{"text":"second"}\n' >"$TMP/nobom.jsonl"
printf '\xef\xbb\xbf{"text":"first"}\n{"text":"second"}\n' >"$TMP/bom.jsonl"
P --input "$TMP/nobom.jsonl" --out "$TMP/j_nobom" --val-fraction 0
P --input "$TMP/bom.jsonl" --out "$TMP/j_bom" --val-fraction 0; rc=$?
[ $rc = 0 ] && ! grep -q skipped "$TMP/p.out" && same_dirs "$TMP/j_nobom" "$TMP/j_bom" &&
  ok "a UTF-8 byte order mark before line 1 is accepted" || bad "BOM" "rc $rc" "$(cat "$TMP/p.out")"
gzip -k "$TMP/bom.jsonl"
P --input "$TMP/bom.jsonl.gz" --out "$TMP/j_bomgz" --val-fraction 0 && same_dirs "$TMP/j_nobom" "$TMP/j_bomgz" &&
  ok "and in a gzip-compressed JSONL file" || bad "BOM gz" "$(cat "$TMP/p.out")"

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
