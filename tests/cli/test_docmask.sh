#!/usr/bin/env bash
# train --doc-mask (document masking) from the command line. The oracle is
# tessera's own unpacked evaluation: a packed row of several documents
# (prepare's gpt2 shards of Tiny Shakespeare paragraphs, each opened by
# <|endoftext|>) scores the token-weighted mean of each document's loss
# evaluated alone (a .bin of the document and the token after it), within
# 1e-6 relative: by `tessera eval` of a masked checkpoint, and as the first
# step's loss of runs started from it (--init-from) in one process, under
# tp=2 (and --sp), pp=2 (and interleaved), dp=2 ZeRO-1, --recompute full and bf16 (against
# bf16 evaluations), their gradient norms alike. Without the flag the same
# row scores otherwise. The byte tokenizer, which marks no documents, is
# refused; a masked run resumes only masked; sample with and without its
# cache writes the same greedy text.
source "$(dirname "$0")/lib.sh"
if ! command -v python3 >/dev/null || [ ! -f "${TSR_DATA:-../shared/data}/gpt2/encoder.json" ]; then
  echo "skip: python3 and the GPT-2 vocabulary are needed to make the inputs"; echo "0 passed, 0 failed"; exit 0
fi
T=64
# documents: the first 60 paragraphs, one JSONL line each
python3 - "$DATA" "$TMP/docs.jsonl" <<'PY'
import json, sys
paras = [p.strip() for p in open(sys.argv[1]).read().split('\n\n') if p.strip()]
with open(sys.argv[2], 'w') as f:
    for p in paras[:60]: f.write(json.dumps({"text": p}) + "\n")
PY
"$BIN" prepare --input "$TMP/docs.jsonl" --out "$TMP/d" --threads 2 >/dev/null 2>&1 || bad "prepare"
# packed.bin: the first T+1 tokens of the train shard; seg_S.bin: the document
# at S (to the next <|endoftext|> or the row's end) and the token after it
python3 - "$TMP" $T <<'PY'
import struct, sys
d, T = sys.argv[1], int(sys.argv[2])
b = open(d + '/d/train_000000.bin', 'rb').read()
n = struct.unpack('256i', b[:1024])[2]
tok = struct.unpack('%dH' % n, b[1024:1024 + 2 * n])
def w(name, ts):
    h = [0] * 256; h[0] = 20240520; h[1] = 1; h[2] = len(ts)
    open(d + '/' + name, 'wb').write(struct.pack('256i', *h) + struct.pack('%dH' % len(ts), *ts))
w('packed.bin', tok[:T + 1])
st = [i for i in range(T) if i == 0 or tok[i] == 50256] + [T]
with open(d + '/segs.txt', 'w') as f:
    for a, c in zip(st, st[1:]):
        w('seg_%d.bin' % a, tok[a:c + 1]); f.write('%d %d\n' % (a, c - a))
PY
ndocs=$(wc -l < "$TMP/segs.txt")
[ "$ndocs" -ge 3 ] && ok "a packed row of $ndocs documents" || bad "the packed row holds $ndocs documents"

# refused where nothing marks documents
"$BIN" train --model gpt2-tiny --data "$DATA" --tokenizer byte --doc-mask --steps 1 >"$TMP/o" 2>&1; rc=$?
[ $rc -eq 2 ] && grep -q -- "--doc-mask" "$TMP/o" && [ "$(wc -l < "$TMP/o")" -eq 1 ] &&
  ok "--doc-mask with the byte tokenizer: exit 2, one line" || bad "byte tokenizer: exit $rc" "$(cat "$TMP/o")"

# a masked model worth testing: 30 steps
"$BIN" train --model gpt2-tiny --data "$TMP/d" --doc-mask --steps 30 --lr 3e-3 --warmup 2 --batch 4 --seq $T \
  --eval-batches 1 --threads 2 --ckpt-dir "$TMP/ck" --log "$TMP/ck.jsonl" >"$TMP/o" 2>&1 || bad "masked training" "$(tail -1 "$TMP/o")"
grep -q '"doc_mask":true' "$TMP/ck/$(cat "$TMP/ck/latest")/meta.json" && ok "the checkpoint's meta says doc_mask" ||
  bad "no doc_mask in the checkpoint's meta"

# oracle PREC: the token-weighted mean of the documents' losses alone
oracle() {
  local s L l sum=0
  while read -r s L; do
    l=$("$BIN" eval --ckpt "$TMP/ck" --data "$TMP/seg_$s.bin" --seq "$L" --batch 1 --threads 2 --precision "$1" |
        sed -n 's/^val loss \([0-9.]*\).*/\1/p')
    sum=$(awk -v a="$sum" -v L="$L" -v l="$l" 'BEGIN { printf "%.9f", a + L * l }')
  done < "$TMP/segs.txt"
  awk -v a="$sum" -v T=$T 'BEGIN { printf "%.9f", a / T }'
}
close() { awk -v a="$1" -v b="$2" -v t="$3" 'BEGIN { d = a - b; if (d < 0) d = -d; exit !(a != "" && d <= t * b) }'; }
want=$(oracle fp32)
"$BIN" eval --ckpt "$TMP/ck" --data "$TMP/packed.bin" --seq $T --batch 1 --threads 2 >"$TMP/e" 2>&1
got=$(sed -n 's/^val loss \([0-9.]*\).*/\1/p' "$TMP/e")
close "$got" "$want" 1e-6 && grep -q "documents masked" "$TMP/e" &&
  ok "eval of the packed row ($got) is the documents' weighted mean alone ($want)" ||
  bad "eval of the packed row $got, documents alone $want" "$(tail -1 "$TMP/e")"

# the first step's loss (the forward at the checkpoint's weights) in each layout
R="train --init-from $TMP/ck --data $TMP/packed.bin --steps 1 --batch 1 --seq $T --doc-mask"
step1() { "$BIN" $R "$@" --log "$TMP/s.jsonl" >"$TMP/s.out" 2>&1 && echo "$(field "$TMP/s.jsonl" loss) $(field "$TMP/s.jsonl" grad_norm)"; }
read -r l1 n1 <<<"$(step1 --threads 2)"
close "$l1" "$want" 1e-6 && ok "the first step's loss in one process ($l1) is the oracle's" ||
  bad "one process: step-1 loss $l1, oracle $want" "$(tail -1 "$TMP/s.out")"
for lay in "tp=2|--nproc 2 --tp 2 --threads 1" "tp=2 --sp|--nproc 2 --tp 2 --sp --threads 1" \
           "pp=2|--nproc 2 --pp 2 --grad-accum 2 --threads 1" "dp=2 ZeRO-1|--nproc 2 --dp 2 --zero 1 --threads 1" \
           "pp=2 interleaved|--nproc 2 --pp 2 --virtual-stages 2 --micro-batches 2 --threads 1" \
           "recompute full|--recompute full --threads 2"; do
  name=${lay%%|*}; flags=${lay#*|}
  read -r l n <<<"$(step1 $flags)"
  close "$l" "$want" 1e-6 && close "$n" "$n1" 1e-4 && ok "$name: step-1 loss $l (the oracle's), gradient norm $n" ||
    bad "$name: step-1 loss $l (oracle $want), norm $n (one process $n1)" "$(tail -1 "$TMP/s.out")"
done
want16=$(oracle bf16)
read -r l n <<<"$(step1 --precision bf16 --threads 2)"
close "$l" "$want16" 1e-6 && ok "bf16: step-1 loss $l is bf16's oracle ($want16)" ||
  bad "bf16: step-1 loss $l, bf16 oracle $want16" "$(tail -1 "$TMP/s.out")"

# without the flag the row attends across its documents: another loss
"$BIN" train --init-from "$TMP/ck" --data "$TMP/packed.bin" --steps 1 --batch 1 --seq $T --threads 2 --log "$TMP/u.jsonl" >/dev/null 2>&1
u=$(field "$TMP/u.jsonl" loss)
! close "$u" "$want" 1e-3 && ok "unmasked, the same row scores $u" || bad "unmasked loss $u is the masked one's"

# resume only as trained
"$BIN" train --model gpt2-tiny --data "$TMP/d" --steps 31 --batch 4 --seq $T --resume "$TMP/ck" >"$TMP/o" 2>&1; rc=$?
[ $rc -eq 2 ] && grep -q "with --doc-mask" "$TMP/o" && ok "resuming a masked run without --doc-mask: exit 2" ||
  bad "resume without --doc-mask: exit $rc" "$(tail -1 "$TMP/o")"
"$BIN" train --model gpt2-tiny --data "$TMP/d" --doc-mask --steps 31 --batch 4 --seq $T --resume "$TMP/ck" \
  --threads 2 --ckpt-dir "$TMP/ck" >"$TMP/o" 2>&1 && ok "resuming it with --doc-mask" || bad "masked resume" "$(tail -1 "$TMP/o")"

# sample: the cache's masked passes write what whole-context passes write
S="sample --ckpt $TMP/ck --tokens 30 --temperature 0 --threads 2"
"$BIN" $S >"$TMP/c.txt" 2>&1 && "$BIN" $S --no-cache >"$TMP/n.txt" 2>&1 && cmp -s "$TMP/c.txt" "$TMP/n.txt" &&
  ok "sample with and without the cache: the same greedy text" || bad "sample differs with the cache" "$(head -c 200 "$TMP/c.txt")"

# the planner: documents of D tokens scale attention's 12·L·h·s by (D+1)/(s+1)
P="plan --model gpt2-124m --dp 8 --seq 1024 --json"
f0=$("$BIN" $P | grep -o '"flops_per_token":[0-9.e+]*' | cut -d: -f2)
f1=$("$BIN" $P --doc-len 100 | grep -o '"flops_per_token":[0-9.e+]*' | cut -d: -f2)
awk -v a="$f0" -v b="$f1" 'BEGIN { att = 12 * 12 * 1024 * 768; w = a - att + att * 101 / 1025; d = b - w
  exit !(a != "" && (d < 0 ? -d : d) < 1e-9 * a) }' && ok "plan --doc-len 100: $f1 FLOPs per token ($f0 unmasked)" ||
  bad "plan --doc-len 100: $f1 FLOPs per token, unmasked $f0"

echo "$pass passed, $fail failed"
[ $fail -eq 0 ]
