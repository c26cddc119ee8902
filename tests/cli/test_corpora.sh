#!/usr/bin/env bash
# tessera prepare on real corpora: JSONL (one document per line, its text
# in --text-field) and gzip/zstd-compressed inputs, read as streams. The
# same documents give the same shards whatever their packaging (text files,
# JSONL, JSONL.gz, JSONL.zst; a compressed text and the text itself, the
# validation split included) and thread count; malformed lines are skipped
# and counted, or refused with --strict; a broken stream is an error
# naming the file. Run from the repository root.
source "$(dirname "$0")/lib.sh"
if ! "$BIN" prepare --help >/dev/null || ! command -v gzip >/dev/null || ! command -v zstd >/dev/null; then
  echo "skip: gzip and zstd are needed to make the inputs (scripts/deps.sh installs them)"; echo "0 passed, 0 failed"; exit 0
fi
same_dirs() {   # the same shard files, byte for byte
  [ "$(cd "$1" && ls)" = "$(cd "$2" && ls)" ] || return 1
  for f in "$1"/*.bin; do cmp -s "$f" "$2/$(basename "$f")" || return 1; done
}
P() { "$BIN" prepare "$@" >"$TMP/p.out" 2>&1; }

# ---- the same documents, four packagings ----
mkdir -p "$TMP/docs"
printf 'First doc.\nWith "quotes", a \\ backslash and two lines.' >"$TMP/docs/a.txt"
printf 'Second — ünïcode 日本 \t tab' >"$TMP/docs/b.txt"
printf '' >"$TMP/docs/c.txt"
{ printf '{"text":"First doc.\\nWith \\"quotes\\", a \\\\ backslash and two lines.","id":1}\n\n'
  printf '{"id":2,"text":"Second \\u2014 \\u00fcn\\u00efcode \\u65e5\\u672c \\t tab"}\n{"text":""}\n'; } >"$TMP/d.jsonl"
gzip -k "$TMP/d.jsonl"; zstd -q -k "$TMP/d.jsonl"
P --input "$TMP/docs" --out "$TMP/o_txt" --val-fraction 0
ok_all=1
for f in d.jsonl d.jsonl.gz d.jsonl.zst; do
  P --input "$TMP/$f" --out "$TMP/o_$f" --val-fraction 0 && same_dirs "$TMP/o_txt" "$TMP/o_$f" || { ok_all=0; echo "     $f: $(tail -1 "$TMP/p.out")"; }
done
[ $ok_all = 1 ] && ok "three documents as text files, JSONL, JSONL.gz and JSONL.zst: the same shards (escapes, unicode, an empty document)" ||
  bad "document packagings"

# ---- a corpus of paragraphs: JSONL plain, gzip, zstd, with the validation split, on 1 and 2 threads ----
awk 'BEGIN { RS = ""; ORS = "" } { gsub(/\\/, "\\\\"); gsub(/"/, "\\\""); gsub(/\t/, "\\t"); gsub(/\n/, "\\n"); printf "{\"text\":\"%s\"}\n", $0 }' \
  "$DATA" >"$TMP/ts.jsonl"
gzip -k "$TMP/ts.jsonl"; zstd -q -k "$TMP/ts.jsonl"
docs=$(wc -l <"$TMP/ts.jsonl")
P --input "$TMP/ts.jsonl" --out "$TMP/j1" --threads 1 --shard-tokens 100000
sum=$(grep -o '[0-9]* tokens (val [0-9]*' "$TMP/p.out")
ok_all=1
for v in "ts.jsonl 2" "ts.jsonl.gz 1" "ts.jsonl.gz 2" "ts.jsonl.zst 1" "ts.jsonl.zst 2"; do
  read -r f th <<<"$v"
  P --input "$TMP/$f" --out "$TMP/j_$f$th" --threads "$th" --shard-tokens 100000 && same_dirs "$TMP/j1" "$TMP/j_$f$th" ||
    { ok_all=0; echo "     $f on $th threads: $(tail -1 "$TMP/p.out")"; }
done
nval=$(ls "$TMP/j1" | grep -c '^val_'); ntrain=$(ls "$TMP/j1" | grep -c '^train_')
[ $ok_all = 1 ] && [ "$nval" -ge 1 ] && [ "$ntrain" -ge 2 ] &&
  ok "Tiny Shakespeare as $docs JSONL paragraphs: plain, gzip and zstd on 1 and 2 threads give the same shards ($sum; $nval val, $ntrain train shards)" ||
  bad "JSONL corpus packagings" "val $nval train $ntrain"

# ---- a compressed text is its text, validation split included, both tokenizers ----
cp "$DATA" "$TMP/ts.txt"; gzip -k "$TMP/ts.txt"; zstd -q -k "$TMP/ts.txt"
ok_all=1
for tk in gpt2 llama; do
  P --input "$TMP/ts.txt" --out "$TMP/t_$tk" --tokenizer "$tk" --shard-tokens 100000
  for f in ts.txt.gz ts.txt.zst; do
    P --input "$TMP/$f" --out "$TMP/t_$tk$f" --tokenizer "$tk" --shard-tokens 100000 && same_dirs "$TMP/t_$tk" "$TMP/t_$tk$f" ||
      { ok_all=0; echo "     $f ($tk): $(tail -1 "$TMP/p.out")"; }
  done
done
[ $ok_all = 1 ] && ok "tinyshakespeare.txt.gz and .zst give the shards of the text itself (gpt2 and llama tokenizers, 10% validation)" ||
  bad "compressed text"

# ---- malformed lines: skipped and counted, or refused with --strict ----
printf '{"text":"good one"}\n{"text": broken}\n[1,2]\n{"content":"x"}\n{"text":7}\n{"text":"good two"}\n' >"$TMP/bad.jsonl"
P --input "$TMP/bad.jsonl" --out "$TMP/ob" --val-fraction 0
rc=$?
[ $rc = 0 ] && grep -q "note: skipped 4 JSONL lines without a string \"text\" (malformed, or another shape); the first: $TMP/bad.jsonl:2" "$TMP/p.out" &&
  grep -q "6 tokens" "$TMP/p.out" && ok "malformed JSONL lines are skipped: the count and the first line reported, the good documents kept" ||
  bad "skipped lines" "rc $rc" "$(cat "$TMP/p.out")"
P --input "$TMP/bad.jsonl" --out "$TMP/ob2" --val-fraction 0 --strict
rc=$?
[ $rc = 2 ] && grep -q "tessera prepare: --input: $TMP/bad.jsonl:2: col 10: unexpected character (--strict)" "$TMP/p.out" &&
  [ -z "$(ls "$TMP/ob2" 2>/dev/null)" ] && ok "--strict refuses the first malformed line (exit 2, FILE:LINE), no shard written" ||
  bad "--strict" "rc $rc" "$(cat "$TMP/p.out")"
P --input "$TMP/bad.jsonl" --out "$TMP/ob3" --val-fraction 0 --text-field content
grep -q "2 tokens" "$TMP/p.out" && grep -q 'skipped 5 JSONL lines without a string "content"' "$TMP/p.out" &&
  ok "--text-field content reads another member" || bad "--text-field" "$(cat "$TMP/p.out")"
cp "$TMP/d.jsonl" "$TMP/d_as.txt"
P --input "$TMP/d_as.txt" --out "$TMP/o_fmt" --val-fraction 0 --format jsonl && same_dirs "$TMP/o_txt" "$TMP/o_fmt" &&
  ok "--format jsonl reads a file of another name as JSONL" || bad "--format jsonl" "$(cat "$TMP/p.out")"

# ---- broken streams and bad flags: one line naming the file or flag, exit 2 ----
head -c 4000 "$TMP/ts.jsonl.gz" >"$TMP/cut.jsonl.gz"; head -c 4000 "$TMP/ts.txt.zst" >"$TMP/cut.txt.zst"
printf 'not gzip at all' | cat <(printf '\x1f\x8b') - >"$TMP/fake.gz"
for c in "cut.jsonl.gz|the gzip stream is truncated" "cut.txt.zst|the zstd stream is truncated" "fake.gz|not valid gzip"; do
  f=${c%%|*}; want=${c#*|}
  P --input "$TMP/$f" --out "$TMP/o_$f"
  rc=$?
  [ $rc = 2 ] && [ "$(wc -l <"$TMP/p.out" | tr -d ' ')" -le 2 ] && grep -q "tessera prepare: --input: $TMP/$f: $want" "$TMP/p.out" &&
    ok "$f: exit 2, '$want'" || bad "$f" "rc $rc" "$(cat "$TMP/p.out")"
done
P --input "$TMP/d.jsonl" --out "$TMP/o_x" --format yaml
rc=$?
[ $rc = 2 ] && grep -q "tessera prepare: --format: 'yaml' is not auto, text or jsonl" "$TMP/p.out" && ok "--format yaml: exit 2, one line" ||
  bad "--format yaml" "$(cat "$TMP/p.out")"

# ---- the shards train ----
"$BIN" train --model gpt2-tiny --data "$TMP/j1" --steps 3 --batch 2 --seq 32 >"$TMP/t.out" 2>&1 &&
  grep -q "^done:" "$TMP/t.out" && ok "tessera train reads the shards of a JSONL corpus" || bad "train on JSONL shards" "$(tail -2 "$TMP/t.out")"

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
