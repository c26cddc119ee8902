#!/usr/bin/env bash
# Hostile and careless inputs: each ends with one line naming the flag or
# file and exit 2 (bad input) or exit 1 (a failure while running) — never a
# crash, a hang, silent garbage, or a file left behind. Run from the
# repository root.
source "$(dirname "$0")/lib.sh"
T=(train --data "$DATA" --tokenizer byte --steps 1)

# ---- sizes that overflow ----
for s in 18446744073709551615 1e30 17179869184G 0; do
  expect "comm-bench --max-bytes $s" 2 "--max-bytes" "$BIN" comm-bench --nproc 2 --max-bytes $s
done

# ---- a run whose gradient norm stops being finite stops with exit 1 (no undefined behaviour on NaN) ----
expect "a diverging run (--lr 10 --clip 0 --beta2 0)" 1 "became" "$BIN" train --data "$DATA" --tokenizer byte --steps 30 \
  --lr 10 --clip 0 --warmup 0 --beta2 0

# ---- non-finite weights are refused at load, naming the tensor ----
"$BIN" "${T[@]}" --steps 2 --ckpt-dir "$TMP/w" >/dev/null 2>&1
"$BIN" export --ckpt "$TMP/w" --out "$TMP/w.safetensors" >/dev/null 2>&1
cp "$TMP/w.safetensors" "$TMP/nan.safetensors"
sz=$(stat -c %s "$TMP/nan.safetensors")
printf '\x00\x00\xc0\x7f' | dd of="$TMP/nan.safetensors" bs=1 seek=$((sz - 4)) conv=notrunc 2>/dev/null
expect "import of a file holding NaN" 2 "ln_f.bias holds a non-finite value" "$BIN" import --in "$TMP/nan.safetensors" --out "$TMP/imnan" --tokenizer byte
expect "--init-from a file holding NaN" 2 "ln_f.bias holds a non-finite value" "$BIN" "${T[@]}" --init-from "$TMP/nan.safetensors"
[ ! -e "$TMP/imnan" ] || [ -z "$(ls "$TMP/imnan")" ] && ok "the refused import wrote no checkpoint" || bad "the refused import wrote a checkpoint"

# ---- a version-2 shard token at or above 2^31 is outside the vocabulary ----
{ printf '\x88\xd8\x34\x01\x02\x00\x00\x00\x40\x00\x00\x00'; head -c $((1024 - 12)) /dev/zero
  for i in $(seq 1 63); do printf '\x05\x00\x00\x00'; done; printf '\x07\x00\x00\x80'; } >"$TMP/big.bin"
expect "a shard token of 2^31+7" 2 "token 2147483655 at position 63 is outside the vocabulary" \
  "$BIN" train --data "$TMP/big.bin" --tokenizer byte --steps 1 --seq 16 --batch 1

# ---- import validates its tokenizer and the file's vocabulary against it ----
expect "import --tokenizer with a quote" 2 "--tokenizer: expected gpt2, llama or byte" "$BIN" import --in "$TMP/w.safetensors" --out "$TMP/imq" --tokenizer 'bo"gus'
expect "import of a 256-token file as gpt2" 2 "its vocabulary has 256 tokens, --tokenizer gpt2 has 50257" \
  "$BIN" import --in "$TMP/w.safetensors" --out "$TMP/img" --tokenizer gpt2

# ---- FIFOs and devices are refused, not waited on or read without end ----
mkfifo "$TMP/fifo"
expect "--data FIFO" 2 "not a regular file" "$BIN" "${T[@]/$DATA/$TMP/fifo}"
expect "--data /dev/zero" 2 "not a regular file" "$BIN" "${T[@]/$DATA//dev/zero}"
expect "--config FIFO" 2 "not a regular file" "$BIN" "${T[@]}" --config "$TMP/fifo"
expect "--init-from FIFO" 2 "not a regular file" "$BIN" "${T[@]}" --init-from "$TMP/fifo"
cp -r "$TMP/w" "$TMP/wf"; rm "$TMP/wf/$(cat "$TMP/wf/latest")/meta.json"; mkfifo "$TMP/wf/$(cat "$TMP/wf/latest")/meta.json"
expect "meta.json a FIFO" 2 "not a regular file" "$BIN" eval --ckpt "$TMP/wf" --data "$DATA" --batches 1

# ---- `ulimit -f` during a save, an export, a prepare: exit 1 naming the file, no temporary left ----
(ulimit -f 64; "$BIN" export --ckpt "$TMP/w" --out "$TMP/big.safetensors" >/dev/null 2>"$TMP/x.err"); rc=$?
[ $rc -eq 1 ] && grep -q "big.safetensors: write failed: File too large" "$TMP/x.err" && [ -z "$(ls "$TMP" | grep big.safetensors)" ] &&
  ok "export past ulimit -f: exit 1, EFBIG named, no temporary" || bad "export past ulimit -f" "exit $rc: $(cat "$TMP/x.err")"
(ulimit -f 200; "$BIN" "${T[@]}" --steps 2 --ckpt-dir "$TMP/fz" >/dev/null 2>"$TMP/x.err"); rc=$?
[ $rc -eq 1 ] && grep -q "write failed: File too large" "$TMP/x.err" && [ -z "$(ls "$TMP/fz")" ] &&
  ok "a checkpoint past ulimit -f: exit 1, EFBIG named, the temporary step removed" || bad "checkpoint past ulimit -f" "exit $rc: $(cat "$TMP/x.err"); $(ls "$TMP/fz")"
(ulimit -f 100; "$BIN" prepare --input "$DATA" --out "$TMP/pz" --tokenizer byte >/dev/null 2>"$TMP/x.err"); rc=$?
[ $rc -eq 1 ] && grep -q "write failed: File too large" "$TMP/x.err" && [ -z "$(ls "$TMP/pz" | grep tmp)" ] &&
  ok "prepare past ulimit -f: exit 1, EFBIG named, no temporary" || bad "prepare past ulimit -f" "exit $rc: $(cat "$TMP/x.err")"

# ---- output paths and usage checked before the first step, and before forking: one line, exit 2 ----
expect "--ckpt-dir under a missing directory" 2 "--ckpt-dir $TMP/no/a/b: No such file or directory" "$BIN" "${T[@]}" --nproc 2 --ckpt-dir "$TMP/no/a/b"
expect "--ckpt-dir a regular file" 2 "not a directory" "$BIN" "${T[@]}" --ckpt-dir "$DATA"
expect "--exit-after without --ckpt-dir" 2 "--exit-after 3 stops with a checkpoint to resume from: it needs --ckpt-dir" "$BIN" "${T[@]}" --exit-after 3
expect "--data missing, 2 ranks" 2 "--data: $TMP/none: No such file or directory" "$BIN" train --data "$TMP/none" --tokenizer byte --nproc 2
expect "--seq above max_seq, 2 ranks" 2 "--seq 65 is above the model's max_seq 64" "$BIN" "${T[@]}" --seq 65 --nproc 2
expect "--nproc 32" 2 "--nproc 32: the ranks' shared-memory communicators need" "$BIN" "${T[@]}" --nproc 32

# ---- symbolic links in a run directory are never followed ----
mkdir -p "$TMP/victim" && echo precious >"$TMP/victim/keep.txt"
for entry in step_00000001 step_00000002.tmp latest.tmp; do
  d="$TMP/sl_$entry"; mkdir -p "$d"
  ln -s "$TMP/victim" "$d/$entry" 2>/dev/null
  [ "$entry" = latest.tmp ] && { rm "$d/$entry"; ln -s "$TMP/victim/keep.txt" "$d/$entry"; }
  expect "a symbolic link $entry in --ckpt-dir" 2 "$entry is a symbolic link" "$BIN" "${T[@]}" --steps 2 --ckpt-dir "$d" --keep 1
done
[ "$(cat "$TMP/victim/keep.txt")" = precious ] && [ "$(ls "$TMP/victim")" = keep.txt ] &&
  ok "the links' targets are untouched" || bad "a symbolic link's target was changed" "$(ls -la "$TMP/victim")"
ln -s "$TMP/victim" "$TMP/prep_link.tmp" 2>/dev/null
mkdir -p "$TMP/pl" && ln -s "$TMP/victim/keep.txt" "$TMP/pl/train_000000.bin.tmp"
"$BIN" prepare --input "$DATA" --out "$TMP/pl" --tokenizer byte >/dev/null 2>&1
[ "$(cat "$TMP/victim/keep.txt")" = precious ] && [ -f "$TMP/pl/train_000000.bin" ] && [ ! -L "$TMP/pl/train_000000.bin" ] &&
  ok "prepare replaces a planted temporary link without writing through it" || bad "prepare wrote through a symbolic link"

# ---- one run per run directory ----
"$BIN" train --data "$DATA" --tokenizer byte --steps 100000 --log-every 100000 --ckpt-dir "$TMP/busy" >/dev/null 2>&1 &
first=$!
for i in $(seq 1 100); do [ -s "$TMP/busy/.lock" ] && break; sleep 0.1; done
expect "a second run on a busy --ckpt-dir" 2 "another run (pid $first) is using it" "$BIN" "${T[@]}" --ckpt-dir "$TMP/busy"
kill $first; wait $first 2>/dev/null

# ---- a --model that is not the checkpoint's ----
expect "--model gpt2-124m --resume a gpt2-tiny run" 2 "holds another model" "$BIN" "${T[@]}" --steps 3 --model gpt2-124m --resume "$TMP/w"

# ---- a damaged latest, a config whose model cannot be built: named ----
cp -r "$TMP/w" "$TMP/l2"; printf 'step_00000002\nstep_00000002\n' >"$TMP/l2/latest"
expect "a latest of two lines" 2 "latest: does not name a step directory" "$BIN" ckpt info "$TMP/l2"
head -c 5000 /dev/zero | tr '\0' 'x' >"$TMP/l2/latest"
expect "a 5000-byte latest" 2 "latest: larger than 4096 bytes" "$BIN" ckpt info "$TMP/l2"
echo '{"model": {"n_layer": 2, "n_head": 3, "d_model": 128, "d_ff": 256, "max_seq": 32}}' >"$TMP/h3.json"
expect "a --config model whose heads do not divide d_model" 2 "--config: model" "$BIN" "${T[@]}" --config "$TMP/h3.json"

# ---- tessera plan --why-not takes only a valid layout ----
for w in dp=0,tp=0,pp=0 dp=2147483648,tp=1,pp=1 dp=2,tp=1,pp=1junk dp=2,tp=1; do
  expect "plan --why-not $w" 2 "--why-not" "$BIN" plan --model gpt2-124m --devices 2 --why-not $w
done

# ---- tessera plan for the user's own model: shape flags over a preset ----
pj=$("$BIN" plan --layers 32 --d-model 4096 --heads 32 --vocab 50000 --devices 8 --dp 8 --json 2>&1)
echo "$pj" | grep -q '"params":6653157376' && ok "plan --layers 32 --d-model 4096 --heads 32 --vocab 50000: 6,653,157,376 parameters" ||
  bad "plan with shape flags" "$(echo "$pj" | head -c 300)"
expect "plan --arch with an unknown name" 2 "--arch: expected one of \"gpt2\", \"llama\", \"qwen2\", got 'mamba'" "$BIN" plan --arch mamba --devices 1 --dp 1
# --config's strings (a preset's name, --precision) are read after the model is chosen
echo '{"model": "gpt2-350m", "precision": "fp32", "dp": 8}' >"$TMP/plan.json"
pj=$("$BIN" plan --config "$TMP/plan.json" --json 2>&1)
echo "$pj" | grep -q '"model":"gpt2-350m"' && echo "$pj" | grep -q '"precision":"fp32"' &&
  ok "plan --config with a preset's name and --precision as strings" || bad "plan --config with strings" "$(echo "$pj" | head -c 300)"
echo '{"model": "gpt5"}' >"$TMP/plan.json"
expect "plan --config: a string that is no preset" 2 "unknown preset 'gpt5'" "$BIN" plan --config "$TMP/plan.json"

# ---- an MFU above 100% is explained, never printed silently ----
"$BIN" "${T[@]}" --peak-gflops 0.001 >"$TMP/x.out" 2>&1
grep -q "^warning:   MFU above 100%" "$TMP/x.out" && ok "an MFU above 100% comes with a warning" || bad "MFU above 100% without a warning"

# ---- 18: the OpenBLAS build tessera runs with is the one it was linked with ----
# Debian's alternatives may point libopenblas.so.0 at the pthreads build;
# the binary's run-time path names pkg-config's (OpenMP) build, and the
# header says which one runs.
if pkg-config --exists openblas 2>/dev/null; then
  libdir=$(pkg-config --variable=libdir openblas)
  loaded=$(ldd "$BIN" | awk '/libopenblas/ {print $3}')
  "$BIN" train --data "$DATA" --tokenizer byte --steps 1 --batch 1 >"$TMP/blas.out" 2>&1
  case "$loaded" in
    "${libdir%/}"/*) grep -q "(openmp); " "$TMP/blas.out" &&
      ok "tessera loads the OpenBLAS build it was linked with ($loaded), whatever the system's alternatives select" ||
      bad "the OpenBLAS build in the header" "$(grep '^compute' "$TMP/blas.out")";;
    *) bad "tessera loads $loaded, not the build in $libdir";;
  esac
fi

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
