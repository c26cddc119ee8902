#!/usr/bin/env bash
# The parameter offload (tessera train --zero 3 --offload params): the same
# checkpoint bytes as without it on one process, dp=2 ZeRO-3, tp=2 and
# pp=2, fp32 and bf16, gpt2-tiny and llama-tiny; resume across it both
# ways; its files, their sizes the planner's and the allocator's, nothing
# of the shard resident; the reads counted per step; a parameters' file
# changed or cut short underneath ends the run with one line naming it and
# exit 1; a killed run's directory removed by the next; bad flags refused.
# Run from the repository root.
source "$(dirname "$0")/lib.sh"
B="train --data $DATA --tokenizer byte --seed 5 --steps 3 --log-every 3 --batch 2"
export TESSERA_TEST_OFFLOAD_UNIT=1001   # several units per segment (unset where the planner's sizes are compared)

# ---- the same bits as without the offload, on every layout ----
same_bad=0
for lay in "gpt2 fp32|--zero 3" "gpt2 bf16|--zero 3 --precision bf16" "llama fp32|--model llama-tiny --zero 3" \
           "llama bf16 2 micro-batches|--model llama-tiny --zero 3 --precision bf16 --grad-accum 2" \
           "gpt2 dp=2 ZeRO-3 fp32|--nproc 2 --zero 3" "llama dp=2 ZeRO-3 bf16|--model llama-tiny --nproc 2 --zero 3 --precision bf16" \
           "gpt2 tp=2 bf16|--nproc 2 --tp 2 --zero 3 --precision bf16" "llama tp=2 fp32|--model llama-tiny --nproc 2 --tp 2 --zero 3" \
           "gpt2 pp=2 fp32|--nproc 2 --pp 2 --micro-batches 2 --zero 3" \
           "llama pp=2 bf16 recompute|--model llama-tiny --nproc 2 --pp 2 --micro-batches 2 --zero 3 --precision bf16 --recompute full"; do
  name=${lay%%|*}; flags=${lay#*|}; d=$(echo "$name" | tr ' =' '__')
  "$BIN" $B $flags --ckpt-dir "$TMP/r_$d" >"$TMP/r.out" 2>&1 &&
    "$BIN" $B $flags --offload params --offload-prefetch 1 --ckpt-dir "$TMP/o_$d" >"$TMP/o.out" 2>&1 &&
    same_bits "$TMP/r_$d" "$TMP/o_$d" || { same_bad=1; echo "     $name: $(tail -1 "$TMP/r.out") / $(tail -1 "$TMP/o.out")"; }
done
[ $same_bad -eq 0 ] && ok "--offload params gives the same checkpoint bytes on 10 layouts (1 process, dp=2 ZeRO-3, tp=2, pp=2; fp32, bf16; gpt2, llama)" ||
  bad "--offload params changes the checkpoint"

# ---- the read-ahead's depth changes nothing; a spike rollback refills the shard's file ----
"$BIN" $B --zero 3 --precision bf16 --offload params --offload-prefetch 0 --ckpt-dir "$TMP/p0" >/dev/null 2>&1 &&
  "$BIN" $B --zero 3 --precision bf16 --offload params --offload-prefetch 8 --ckpt-dir "$TMP/p8" >/dev/null 2>&1 &&
  same_bits "$TMP/r_gpt2_bf16" "$TMP/p0" && same_bits "$TMP/r_gpt2_bf16" "$TMP/p8" &&
  ok "--offload-prefetch 0 and 8 give the same bits" || bad "--offload-prefetch changes the checkpoint"
S="train --data $DATA --tokenizer byte --seed 3 --batch 2 --log-every 1 --spike-guard 6 --steps 20 --ckpt-every 12 --precision bf16 --zero 3"
TESSERA_TEST_SPIKE=15:2 "$BIN" $S --spike-rollback 2 --offload params --ckpt-dir "$TMP/rb" >"$TMP/rb.out" 2>&1
TESSERA_TEST_SKIP=12:4 "$BIN" $S --ckpt-dir "$TMP/sk" >/dev/null 2>&1
[ "$(grep -c "^spikes: .*back to the checkpoint of step 12" "$TMP/rb.out")" = 1 ] && same_bits "$TMP/rb" "$TMP/sk" &&
  ok "bf16 --spike-rollback with the parameter offload: back to step 12 (the shard's file refilled), then the bits of the run that skipped those batches" ||
  bad "spike rollback with the parameter offload" "$(tail -1 "$TMP/rb.out")"

# ---- resume across the offload, both ways ----
"$BIN" $B --zero 3 --precision bf16 --exit-after 2 --offload params --ckpt-dir "$TMP/x1" >/dev/null 2>&1
"$BIN" $B --zero 3 --precision bf16 --resume --ckpt-dir "$TMP/x1" >"$TMP/x1.out" 2>&1
same_bits "$TMP/r_gpt2_bf16" "$TMP/x1" && ok "a parameter-offloaded run resumed without the offload: bit for bit" ||
  bad "params → plain resume" "$(tail -1 "$TMP/x1.out")"
"$BIN" $B --zero 3 --exit-after 2 --ckpt-dir "$TMP/x2" >/dev/null 2>&1
"$BIN" $B --zero 3 --resume --offload params --ckpt-dir "$TMP/x2" >"$TMP/x2.out" 2>&1
same_bits "$TMP/r_gpt2_fp32" "$TMP/x2" && ok "a plain run resumed with the parameter offload: bit for bit" ||
  bad "plain → params resume" "$(tail -1 "$TMP/x2.out")"
"$BIN" $B --nproc 2 --zero 3 --precision bf16 --exit-after 2 --offload params --ckpt-dir "$TMP/x3" >/dev/null 2>&1
"$BIN" $B --nproc 2 --tp 2 --precision bf16 --resume --offload optimizer --ckpt-dir "$TMP/x3" >"$TMP/x3.out" 2>&1 &&
  grep -q "^step     3/3" "$TMP/x3.out" && ok "dp=2 ZeRO-3 with the parameters offloaded resumes on tp=2 with the optimizer offloaded" ||
  bad "params dp=2 → tp=2 resume" "$(tail -1 "$TMP/x3.out")"

# ---- the files, the planner's and the allocator's figures, the reads ----
unset TESSERA_TEST_OFFLOAD_UNIT
mkdir -p "$TMP/od"
"$BIN" $B --zero 3 --precision bf16 --offload params --offload-dir "$TMP/od" --offload-keep --log "$TMP/k.jsonl" >"$TMP/k.out" 2>&1
files=$(cat "$TMP"/od/offload-r00000-*/* 2>/dev/null | wc -c)
pfile=$(cat "$TMP"/od/offload-r00000-*/params.bin 2>/dev/null | wc -c)
mem=$(tail -1 "$TMP/k.jsonl" | grep -o '"mem":{[^}]*}')
memv() { echo "$mem" | grep -o "\"$1\":[0-9]*" | cut -d: -f2; }
plan=$("$BIN" plan --model gpt2-tiny --vocab 256 --devices 1 --dp 1 --tp 1 --pp 1 --zero 3 --precision bf16 --seq 64 --global-batch 2 \
       --micro-batch 2 --offload params --json)
planv() { echo "$plan" | grep -o "\"$1\":[0-9.e+]*" | cut -d: -f2 | awk '{ printf "%d", $1 }'; }
[ "$(ls "$TMP"/od/offload-r00000-*/ | tr '\n' ' ')" = "exp_avg.f32 exp_avg_sq.f32 masters.f32 params.bin " ] && [ "$pfile" -gt 0 ] &&
  [ "$files" = "$(memv offload)" ] && [ "$files" = "$(planv offload_bytes)" ] && [ "$(memv params)" = 0 ] && [ "$(memv params16)" = 0 ] &&
  [ "$(planv weights_bytes)" = 0 ] && [ "$(planv grads_bytes)" = "$(memv grads)" ] && [ "$(planv optim_bytes)" = "$(memv optim)" ] &&
  [ "$(planv comm_buffer_bytes)" = "$(memv comm)" ] && [ "$(planv activations_bytes)" = "$(memv acts)" ] &&
  ok "--offload-keep keeps the moments', masters' and parameters' files ($files bytes, the shard $pfile): the planner's offload_bytes and the log's mem.offload; no parameters resident; gradients, ring, buffers and activations as planned" ||
  bad "files $files, log $mem" "plan $plan"
# per step: the optimizer's files (12 B a parameter) and the shard at each of the forward's and backward's gathers
rd=$(tail -1 "$TMP/k.jsonl" | grep -o '"io_read_bytes":[0-9]*' | cut -d: -f2)
wr=$(tail -1 "$TMP/k.jsonl" | grep -o '"io_written_bytes":[0-9]*' | cut -d: -f2)
opt=$(( (files - pfile) ))
[ -n "$rd" ] && [ "$rd" -gt $(( opt + pfile * 3 / 2 )) ] && [ "$rd" -le $(( opt + pfile * 2 )) ] && [ "$wr" = "$files" ] &&
  grep -q "^step .*| I/O wait [0-9.]* ms" "$TMP/k.out" && grep -q "and the owned parameter shard ZeRO-3 gathers from (bf16)" "$TMP/k.out" &&
  ok "a step reads the optimizer's files and the shard at its gathers ($rd bytes), writes every file once ($wr), and the header says so" ||
  bad "I/O figures: read $rd written $wr files $files shard $pfile" "$(grep -m1 '^step' "$TMP/k.out")"
"$BIN" plan --model gpt2-1558m --dp 1 --devices 1 --device-mem 24 --seq 1024 --global-batch 1 --zero 3 --recompute full --precision bf16 \
  --offload params --disk-gbps 4 >"$TMP/p.out" 2>&1 && grep -q "^offload    params: .* GiB on disk per device (.*owned parameter shard" "$TMP/p.out" &&
  "$BIN" plan --model gpt2-1558m --devices 1 --device-mem 9 --seq 1024 --global-batch 1 --precision bf16 >"$TMP/p2.out" 2>&1 &&
  grep -q "with --offload params (none without it)" "$TMP/p2.out" &&
  ok "tessera plan --offload params: the shard on disk and read at each gather; the search falls back to it when the optimizer offload is not enough" ||
  bad "plan --offload params" "$(tail -2 "$TMP/p.out") / $(tail -2 "$TMP/p2.out")"

# the disk's figure: measured under --local, named; the reads during forward and backward (the optimizer ring's first
# units, the parameters' gathers) hidden behind the compute up to its time
j=$("$BIN" plan --model gpt2-1558m --devices 1 --dp 1 --tp 1 --pp 1 --zero 3 --seq 1024 --global-batch 1 --precision bf16 --offload params \
    --disk-gbps 0.5 --json)
jv() { echo "$j" | grep -o "\"$1\":[0-9.e+]*" | cut -d: -f2; }
want=$(awk -v r="$(jv io_read_bytes)" -v g="$(jv io_gather_bytes)" -v w="$(jv io_written_bytes)" -v c="$(jv compute_seconds)" \
  -v o="$(jv optim_bytes)" 'BEGIN { bw = 0.5e9; a = o < r - g ? o : r - g; t = (r - g - a + w) / bw; h = (a + g) / bw; if (h > c) t += h - c; print t }')
TMPDIR="$TMP" "$BIN" plan --model gpt2-1558m --local --devices 1 --dp 1 --tp 1 --pp 1 --zero 3 --seq 1024 --global-batch 1 \
  --precision bf16 --offload params >"$TMP/pl.out" 2>&1
awk -v a="$want" -v b="$(jv io_seconds)" 'BEGIN { exit !(a > 0 && (a - b) ^ 2 < 1e-12 * a * a) }' &&
  echo "$j" | grep -q '"disk_gbps_source":"--disk-gbps"' && [ "$(jv io_gather_bytes)" != 0 ] &&
  grep -q "s exposed at [0-9.]* GB/s (measured here: the offload's passes over 48 MB in $TMP" "$TMP/pl.out" &&
  [ -z "$(ls "$TMP" | grep '^offload-r')" ] &&
  ok "plan: the I/O's exposed time (the optimizer's files past the ring's first units whole, those and the gathers' reads past the compute), --disk-gbps named, --local's disk measured in \$TMPDIR and nothing left" ||
  bad "plan's disk figures: want $want, got $(jv io_seconds)" "$(grep -A1 '^offload' "$TMP/pl.out")"

# ---- the parameters' file changed or cut short underneath: one line naming it, exit 1 ----
for how in changed truncated; do
  mkdir -p "$TMP/u_$how"
  "$BIN" $B --zero 3 --steps 100000 --log-every 1 --offload params --offload-dir "$TMP/u_$how" >"$TMP/u.out" 2>"$TMP/u.err" &
  pid=$!
  for i in $(seq 100); do grep -q "^step     2/" "$TMP/u.out" && break; sleep 0.1; done
  f=$(ls "$TMP"/u_$how/offload-r00000-*/params.bin)
  # zeros over 64 KiB of weights, again until the run stops: one that lands while the update rewrites those
  # weights is taken into them (zeros train on), the next is found at a gather
  for i in $(seq 100); do
    [ $how = changed ] && [ $((i % 3)) = 1 ] && dd if=/dev/zero of="$f" bs=65536 seek=1 count=1 conv=notrunc 2>/dev/null
    [ $how = truncated ] && [ $i = 1 ] && truncate -s 0 "$f"
    kill -0 $pid 2>/dev/null || break; sleep 0.1
  done
  kill -9 $pid 2>/dev/null; wait $pid; rc=$?
  # (the rank's line, then --zero 3's launcher says all ranks stopped)
  [ $rc -eq 1 ] && [ "$(wc -l <"$TMP/u.err")" -le 2 ] && head -1 "$TMP/u.err" | grep -q "params.bin: .*\(changed\|cut short\) underneath" &&
    ok "the parameters' file $how underneath: a line naming it, exit 1" || bad "$how: exit $rc" "$(cat "$TMP/u.err")"
done

# ---- a SIGKILL leaves a directory the next run removes; --resume carries on ----
"$BIN" $B --zero 3 --steps 100000 --log-every 1 --ckpt-every 2 --offload params --ckpt-dir "$TMP/kill" >"$TMP/kill.out" 2>&1 &
pid=$!
for i in $(seq 100); do [ -f "$TMP/kill/latest" ] && grep -q "^step     3/" "$TMP/kill.out" && break; sleep 0.1; done
kill -9 $(pgrep -P $pid) $pid; wait $pid 2>/dev/null   # the rank --zero 3's launcher forked, and the launcher
for i in $(seq 50); do pgrep -f "ckpt-dir $TMP/kill" >/dev/null || break; sleep 0.1; done
left=$(ls "$TMP/kill" | grep -c '^offload-r')
last=$(sed 's/^step_0*//' "$TMP/kill/latest" 2>/dev/null); end=$(( ${last:-0} + 2 ))
"$BIN" $B --zero 3 --steps $end --resume --offload params --ckpt-dir "$TMP/kill" >"$TMP/kill2.out" 2>&1 &&
  grep -q "^step *$end/$end" "$TMP/kill2.out" && [ "$left" = 1 ] && [ -z "$(ls "$TMP/kill" | grep '^offload-r')" ] &&
  ok "after a SIGKILL, --resume with the parameter offload carries on, the killed run's directory (params.bin too) removed" ||
  bad "resume after SIGKILL" "$(tail -1 "$TMP/kill2.out")"

# ---- bad flags: one line, exit 2 ----
flag_bad=0
for args in "--offload params" "--offload params --zero 1 --nproc 2" "--offload-prefetch 2" "--offload optimizer --offload-prefetch 2" \
            "--offload params --zero 3 --offload-prefetch -1"; do
  "$BIN" $B $args >/dev/null 2>"$TMP/e.err"; rc=$?
  [ $rc -eq 2 ] && [ "$(wc -l <"$TMP/e.err")" -eq 1 ] && grep -q -- "--offload\|--zero" "$TMP/e.err" || { flag_bad=1; echo "     $args: exit $rc: $(cat "$TMP/e.err")"; }
done
"$BIN" plan --model gpt2-tiny --devices 1 --dp 1 --tp 1 --pp 1 --offload params >/dev/null 2>"$TMP/e.err"; rc=$?
[ $rc -eq 2 ] && grep -q "zero 3" "$TMP/e.err" || { flag_bad=1; echo "     plan --offload params without --zero 3: exit $rc"; }
[ $flag_bad -eq 0 ] && ok "--offload params without --zero 3, and --offload-prefetch without it or out of range, are refused in one line (exit 2)" || bad "flags"

echo "$pass passed, $fail failed"
[ $fail -eq 0 ]
