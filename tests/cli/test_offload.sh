#!/usr/bin/env bash
# The optimizer offload (tessera train --offload optimizer): the same
# checkpoint bytes as without it on one process, dp=2 ZeRO-1/2/3, tp=2 and
# pp=2, fp32/bf16/fp16, gpt2-tiny and llama-tiny (units cut small so each
# segment streams as several); resume across it both ways; its files made
# and removed where it says, their sizes the planner's and the allocator's;
# I/O that fails (a file-size limit, a full tmpfs, a file truncated
# underneath) ends the run with one line naming the file and exit 1, the
# last checkpoint intact; a SIGKILL leaves nothing --resume trips over; bad
# flags refused. Run from the repository root.
source "$(dirname "$0")/lib.sh"
B="train --data $DATA --tokenizer byte --seed 5 --steps 3 --log-every 3 --batch 2"
export TESSERA_TEST_OFFLOAD_UNIT=1001   # several units per segment (unset where the planner's sizes are compared)

# ---- the same bits as without the offload, on every layout ----
same_bad=0
for lay in "gpt2 fp32|" "gpt2 bf16|--precision bf16" "llama fp32|--model llama-tiny" "llama bf16|--model llama-tiny --precision bf16" \
           "gpt2 dp=2 ZeRO-1 bf16|--nproc 2 --zero 1 --precision bf16" "llama dp=2 ZeRO-1 fp32|--model llama-tiny --nproc 2 --zero 1" \
           "gpt2 dp=2 ZeRO-2 fp16|--nproc 2 --zero 2 --precision fp16" "gpt2 dp=2 ZeRO-3 fp32|--nproc 2 --zero 3" \
           "llama dp=2 ZeRO-3 bf16|--model llama-tiny --nproc 2 --zero 3 --precision bf16" \
           "gpt2 tp=2 bf16|--nproc 2 --tp 2 --precision bf16" "llama tp=2 fp32|--model llama-tiny --nproc 2 --tp 2" \
           "gpt2 pp=2 fp32|--nproc 2 --pp 2 --micro-batches 2" "llama pp=2 bf16|--model llama-tiny --nproc 2 --pp 2 --micro-batches 2 --precision bf16"; do
  name=${lay%%|*}; flags=${lay#*|}; d=$(echo "$name" | tr ' =' '__')
  "$BIN" $B $flags --ckpt-dir "$TMP/r_$d" >"$TMP/r.out" 2>&1 &&
    "$BIN" $B $flags --offload optimizer --ckpt-dir "$TMP/o_$d" >"$TMP/o.out" 2>&1 && same_bits "$TMP/r_$d" "$TMP/o_$d" ||
    { same_bad=1; echo "     $name: $(tail -1 "$TMP/r.out") / $(tail -1 "$TMP/o.out")"; }
done
[ $same_bad -eq 0 ] && ok "--offload optimizer gives the same checkpoint bytes on 13 layouts (1 process, dp=2 ZeRO-1/2/3, tp=2, pp=2; fp32, bf16, fp16; gpt2, llama)" ||
  bad "--offload optimizer changes the checkpoint"
ls "$TMP"/o_gpt2_bf16 | grep -q offload && bad "the offload directory was left in --ckpt-dir" ||
  ok "the offload directory made inside --ckpt-dir is gone after the run"

# ---- the fp16 overflow skip, and a spike rollback (the state refilled from a checkpoint into the files) ----
O="train --data $DATA --tokenizer byte --seed 5 --steps 4 --log-every 1 --batch 2 --precision fp16 --nproc 2 --zero 3"
TESSERA_TEST_OVERFLOW=2 "$BIN" $O --ckpt-dir "$TMP/ov_r" >/dev/null 2>&1
TESSERA_TEST_OVERFLOW=2 "$BIN" $O --offload optimizer --ckpt-dir "$TMP/ov_o" >"$TMP/ov.out" 2>&1
grep -q "step     2/4 .*skipped: gradients overflowed" "$TMP/ov.out" && same_bits "$TMP/ov_r" "$TMP/ov_o" &&
  ok "fp16 dp=2 ZeRO-3: an overflow skips the step with the offload as without it, the same bits" || bad "fp16 overflow" "$(tail -1 "$TMP/ov.out")"
S="train --data $DATA --tokenizer byte --seed 3 --batch 2 --log-every 1 --spike-guard 6 --steps 20 --ckpt-every 12 --precision bf16"
TESSERA_TEST_SPIKE=15:2 "$BIN" $S --spike-rollback 2 --offload optimizer --ckpt-dir "$TMP/rb" >"$TMP/rb.out" 2>&1
TESSERA_TEST_SKIP=12:4 "$BIN" $S --ckpt-dir "$TMP/sk" >/dev/null 2>&1
[ "$(grep -c "^spikes: .*back to the checkpoint of step 12" "$TMP/rb.out")" = 1 ] && same_bits "$TMP/rb" "$TMP/sk" &&
  ok "bf16 --spike-rollback with the offload: back to step 12 (masters and moments refilled into the files), then the bits of the run that skipped those batches" ||
  bad "spike rollback with the offload" "$(tail -1 "$TMP/rb.out")"

# ---- resume across the offload, both ways (bf16: the masters move between memory and disk) ----
"$BIN" $B --precision bf16 --exit-after 2 --offload optimizer --ckpt-dir "$TMP/x1" >/dev/null 2>&1
"$BIN" $B --precision bf16 --resume --ckpt-dir "$TMP/x1" >"$TMP/x1.out" 2>&1
same_bits "$TMP/r_gpt2_bf16" "$TMP/x1" && ok "an offloaded run resumed without the offload: bit for bit" || bad "offloaded → plain resume" "$(tail -1 "$TMP/x1.out")"
"$BIN" $B --exit-after 2 --ckpt-dir "$TMP/x2" >/dev/null 2>&1
"$BIN" $B --resume --offload optimizer --ckpt-dir "$TMP/x2" >"$TMP/x2.out" 2>&1
same_bits "$TMP/r_gpt2_fp32" "$TMP/x2" && ok "a plain run resumed with the offload: bit for bit" || bad "plain → offloaded resume" "$(tail -1 "$TMP/x2.out")"
"$BIN" $B --nproc 2 --zero 3 --precision bf16 --exit-after 2 --offload optimizer --ckpt-dir "$TMP/x3" >/dev/null 2>&1
"$BIN" $B --nproc 2 --tp 2 --precision bf16 --resume --offload optimizer --ckpt-dir "$TMP/x3" >"$TMP/x3.out" 2>&1 &&
  grep -q "^step     3/3" "$TMP/x3.out" && ok "dp=2 ZeRO-3 offloaded resumes on tp=2 offloaded" || bad "ZeRO-3 → tp=2 resume" "$(tail -1 "$TMP/x3.out")"

# ---- the files: where, how large, the planner's and the allocator's figures ----
unset TESSERA_TEST_OFFLOAD_UNIT
mkdir -p "$TMP/od" "$TMP/tmpd"
"$BIN" $B --precision bf16 --offload optimizer --offload-dir "$TMP/od" --offload-keep --log "$TMP/k.jsonl" --profile >"$TMP/k.out" 2>&1
files=$(cat "$TMP"/od/offload-r00000-*/*.f32 2>/dev/null | wc -c)
mem=$(tail -1 "$TMP/k.jsonl" | grep -o '"mem":{[^}]*}')
memv() { echo "$mem" | grep -o "\"$1\":[0-9]*" | cut -d: -f2; }
plan=$("$BIN" plan --model gpt2-tiny --vocab 256 --devices 1 --dp 1 --tp 1 --pp 1 --precision bf16 --seq 64 --global-batch 2 \
       --micro-batch 2 --offload optimizer --json)
planv() { echo "$plan" | grep -o "\"$1\":[0-9.e+]*" | cut -d: -f2 | awk '{ printf "%d", $1 }'; }
[ "$(ls "$TMP"/od/offload-r00000-*/ | tr '\n' ' ')" = "exp_avg.f32 exp_avg_sq.f32 masters.f32 " ] && [ "$files" -gt 0 ] &&
  [ "$files" = "$(memv offload)" ] && [ "$files" = "$(planv offload_bytes)" ] && [ "$(memv params)" = 0 ] &&
  [ "$(planv weights_bytes)" = "$(memv params16)" ] && [ "$(planv grads_bytes)" = "$(memv grads)" ] &&
  [ "$(planv optim_bytes)" = "$(memv optim)" ] && [ "$(planv activations_bytes)" = "$(memv acts)" ] &&
  ok "--offload-keep keeps the moments' and masters' files ($files bytes): the planner's offload_bytes and the log's mem.offload; resident weights, gradients, optimizer ring and activations as planned" ||
  bad "files $files, log $mem" "plan $plan"
"$BIN" $B --nproc 2 --zero 3 --precision bf16 --offload optimizer --log "$TMP/k3.jsonl" >"$TMP/k3.out" 2>&1
mem=$(tail -1 "$TMP/k3.jsonl" | grep -o '"mem":{[^}]*}')
plan=$("$BIN" plan --model gpt2-tiny --vocab 256 --devices 2 --dp 2 --tp 1 --pp 1 --zero 3 --precision bf16 --seq 64 \
       --global-batch 4 --micro-batch 2 --offload optimizer --json)
[ -n "$mem" ] && [ "$(memv params)" = 0 ] && [ "$(planv weights_bytes)" = "$(memv params16)" ] && [ "$(planv grads_bytes)" = "$(memv grads)" ] &&
  [ "$(planv optim_bytes)" = "$(memv optim)" ] && [ "$(planv comm_buffer_bytes)" = "$(memv comm)" ] &&
  [ "$(planv offload_bytes)" = "$(memv offload)" ] &&
  ok "dp=2 ZeRO-3 bf16: the owned shard's 16-bit copy, gradients, ring, communication buffers and bytes on disk as planned" ||
  bad "ZeRO-3 bf16: log $mem" "plan $plan"
last=$(tail -1 "$TMP/k.jsonl")
echo "$last" | grep -q "\"io_read_bytes\":$files,\"io_written_bytes\":$files,\"io_wait_ms\":" && grep -q "^step .*| I/O wait [0-9.]* ms" "$TMP/k.out" &&
  grep -q "^memory: .*; offload [0-9.]* [KM]iB on disk" "$TMP/k.out" && grep -q "^  disk I/O wait " "$TMP/k.out" &&
  ok "the step line shows the I/O wait, the log each step's bytes read and written, the memory line the bytes on disk, --profile the I/O as its own row" ||
  bad "the I/O figures" "$last"
TMPDIR="$TMP/tmpd" "$BIN" $B --offload optimizer >/dev/null 2>&1 && [ -z "$(ls -A "$TMP/tmpd")" ] &&
  ok "without --ckpt-dir the files go to \$TMPDIR and are removed at exit" || bad "TMPDIR left: $(ls "$TMP/tmpd")"

# ---- I/O that fails: one line naming the file, exit 1, the last checkpoint intact ----
"$BIN" $B --precision bf16 --ckpt-dir "$TMP/c" >/dev/null 2>&1
sum0=$(cat "$TMP"/c/step_*/* | md5sum)
(ulimit -f 2000; "$BIN" $B --precision bf16 --steps 5 --resume --offload optimizer --ckpt-dir "$TMP/c" >"$TMP/f.out" 2>"$TMP/f.err"); rc=$?
[ $rc -eq 1 ] && [ "$(wc -l <"$TMP/f.err")" -eq 1 ] && grep -q "offload-r00000-[A-Za-z0-9_]*-p[0-9]*\.[A-Za-z0-9]*/[a-z_]*\.f32: .*File too large" "$TMP/f.err" &&
  [ "$(cat "$TMP"/c/step_*/* | md5sum)" = "$sum0" ] && [ -z "$(ls "$TMP/c" | grep offload)" ] &&
  ok "under ulimit -f: one line naming the file ($(cut -c1-60 "$TMP/f.err")...), exit 1, the checkpoint untouched, nothing left" ||
  bad "ulimit -f: exit $rc" "$(cat "$TMP/f.err")"
mkdir -p "$TMP/small"
if mount -t tmpfs -o size=26m tessera-offload-test "$TMP/small" 2>"$TMP/m.err"; then
  # offload files (10 MB) and one checkpoint (10 MB) fit; the second checkpoint does not
  "$BIN" $B --precision bf16 --steps 4 --ckpt-every 2 --keep 1 --offload optimizer --ckpt-dir "$TMP/small/run" >"$TMP/t.out" 2>"$TMP/t.err"; rc=$?
  "$BIN" ckpt info "$TMP/small/run" >/dev/null 2>&1; info=$?
  [ $rc -eq 1 ] && [ "$(wc -l <"$TMP/t.err")" -eq 1 ] && grep -q "No space left on device" "$TMP/t.err" && [ $info -eq 0 ] &&
    [ "$(cat "$TMP/small/run/latest")" = step_00000002 ] && [ -z "$(ls "$TMP/small/run" | grep offload)" ] &&
    ok "a tmpfs full in the middle of a run: one line ($(cut -c1-50 "$TMP/t.err")...), exit 1, step 2's checkpoint intact" ||
    bad "full tmpfs: exit $rc, info $info" "$(cat "$TMP/t.err")"
  rm -rf "$TMP/small/run"
  head -c 20000000 /dev/zero >"$TMP/small/fill"   # 6 MB left: the offload's files do not fit
  "$BIN" $B --precision bf16 --offload optimizer --offload-dir "$TMP/small" --resume --ckpt-dir "$TMP/c" >/dev/null 2>"$TMP/t2.err"; rc=$?
  [ $rc -eq 1 ] && [ "$(wc -l <"$TMP/t2.err")" -eq 1 ] && grep -q "\.f32: cannot reserve .*No space left on device" "$TMP/t2.err" &&
    [ "$(cat "$TMP"/c/step_*/* | md5sum)" = "$sum0" ] && [ "$(ls "$TMP/small")" = fill ] &&
    ok "--offload-dir on a full tmpfs: one line naming the file, exit 1, the checkpoint untouched" || bad "full --offload-dir: exit $rc" "$(cat "$TMP/t2.err")"
  umount "$TMP/small"
else
  echo "skip the full-tmpfs checks: mount is not permitted here ($(head -1 "$TMP/m.err"))"
fi
mkdir -p "$TMP/tr"
"$BIN" $B --steps 100000 --log-every 1 --offload optimizer --offload-dir "$TMP/tr" >"$TMP/tr.out" 2>"$TMP/tr.err" &
pid=$!
for i in $(seq 100); do grep -q "^step     2/" "$TMP/tr.out" && break; sleep 0.1; done
f=$(ls "$TMP"/tr/offload-r00000-*/exp_avg.f32)
truncate -s 0 "$f"
for i in $(seq 100); do kill -0 $pid 2>/dev/null || break; sleep 0.1; done
kill -9 $pid 2>/dev/null; wait $pid; rc=$?
[ $rc -eq 1 ] && [ "$(wc -l <"$TMP/tr.err")" -eq 1 ] && grep -q "exp_avg.f32: .*\(truncated\|changed\) underneath" "$TMP/tr.err" &&
  ok "a file truncated underneath: one line naming it, exit 1" || bad "truncated: exit $rc" "$(cat "$TMP/tr.err")"

mkdir -p "$TMP/tr2"   # one rank of dp=2 ZeRO-3 fails: every rank stops at that step, the files of both removed
"$BIN" $B --steps 100000 --log-every 1 --nproc 2 --zero 3 --offload optimizer --offload-dir "$TMP/tr2" >"$TMP/tr2.out" 2>"$TMP/tr2.err" &
pid=$!
for i in $(seq 100); do grep -q "^step     2/" "$TMP/tr2.out" && break; sleep 0.1; done
truncate -s 0 "$TMP"/tr2/offload-r00001-*/exp_avg.f32
for i in $(seq 100); do kill -0 $pid 2>/dev/null || break; sleep 0.1; done
kill -9 $pid 2>/dev/null; wait $pid; rc=$?
[ $rc -eq 1 ] && grep -q "rank 1: .*offload-r00001-.*/exp_avg.f32: .*underneath" "$TMP/tr2.err" &&
  grep -q "rank 0: another rank failed its offload's I/O" "$TMP/tr2.err" && [ -z "$(ls -A "$TMP/tr2")" ] &&
  ok "one rank's file truncated under dp=2 ZeRO-3: that rank names it, every rank stops (exit 1), no files left" ||
  bad "dp=2 truncated: exit $rc" "$(cat "$TMP/tr2.err")"

# ---- SIGKILL mid-step: --resume carries on ----
"$BIN" $B --steps 100000 --log-every 1 --ckpt-every 2 --offload optimizer --ckpt-dir "$TMP/kill" >"$TMP/kill.out" 2>&1 &
pid=$!
for i in $(seq 100); do [ -f "$TMP/kill/latest" ] && grep -q "^step     3/" "$TMP/kill.out" && break; sleep 0.1; done
kill -9 $pid; wait $pid 2>/dev/null
left=$(ls "$TMP/kill" | grep -c '^offload-r')
# the run may have gone on past step 3 before the kill landed: resume to two steps past its last checkpoint
last=$(sed 's/^step_0*//' "$TMP/kill/latest" 2>/dev/null); end=$(( ${last:-0} + 2 ))
"$BIN" $B --steps $end --resume --offload optimizer --ckpt-dir "$TMP/kill" >"$TMP/kill2.out" 2>&1 &&
  grep -q "^step *$end/$end" "$TMP/kill2.out" &&
  "$BIN" ckpt info "$TMP/kill" >/dev/null 2>&1 && [ "$left" = 1 ] && [ -z "$(ls "$TMP/kill" | grep '^offload-r')" ] &&
  ok "after a SIGKILL mid-run, --resume with the offload carries on to the end, the killed run's files removed" ||
  bad "resume after SIGKILL" "$(tail -1 "$TMP/kill2.out")"

# ---- bad flags: one line, exit 2 ----
flag_bad=0
for args in "--offload params" "--offload-dir $TMP" "--offload-keep" "--offload optimizer --offload-dir $TMP/none"; do
  "$BIN" $B $args >/dev/null 2>"$TMP/e.err"; rc=$?
  [ $rc -eq 2 ] && [ "$(wc -l <"$TMP/e.err")" -eq 1 ] && grep -q -- "--offload" "$TMP/e.err" || { flag_bad=1; echo "     $args: exit $rc: $(cat "$TMP/e.err")"; }
done
"$BIN" plan --offload disk >/dev/null 2>&1; [ $? -eq 2 ] || { flag_bad=1; echo "     plan --offload disk accepted"; }
[ $flag_bad -eq 0 ] && ok "bad --offload, --offload-dir and --offload-keep uses are refused in one line (exit 2)" || bad "flags"

# ---- comm-bench --disk: the offload's own bandwidth, nothing left behind ----
mkdir -p "$TMP/db"
"$BIN" comm-bench --disk "$TMP/db" --max-bytes 4M --iters 2 >"$TMP/db.out" 2>&1 &&
  grep -q "^disk: [0-9.]* GB/s read and written together .* -> tessera plan --disk-gbps [0-9.]*" "$TMP/db.out" &&
  [ -z "$(ls -A "$TMP/db")" ] && ok "comm-bench --disk measures the offload's bandwidth for plan's --disk-gbps and leaves nothing" ||
  bad "comm-bench --disk" "$(cat "$TMP/db.out")"

# ---- the planner: a model that fits nowhere in memory fits with the offload ----
"$BIN" plan --model gpt2-1558m --devices 1 --device-mem 24 --seq 1024 --global-batch 1 --recompute full >"$TMP/p1.out" 2>&1
"$BIN" plan --model gpt2-1558m --devices 1 --device-mem 14 --seq 1024 --global-batch 1 >"$TMP/p2.out" 2>&1
grep -q "with --offload optimizer (none without it)" "$TMP/p2.out" &&
  "$BIN" plan --model gpt2-1558m --dp 1 --devices 1 --device-mem 24 --seq 1024 --global-batch 1 --recompute full --offload optimizer \
    --disk-gbps 4 >"$TMP/p3.out" && grep -q "^offload    optimizer: .* GiB on disk per device" "$TMP/p3.out" &&
  grep -q "per step .* GB read and .* GB written, .* s exposed at 4 GB/s (--disk-gbps)" "$TMP/p3.out" &&
  ok "tessera plan: the search falls back to the offload when nothing fits; --offload shows bytes on disk, read and written and their time" ||
  bad "plan offload" "$(tail -2 "$TMP/p2.out")"

# ---- the planner's I/O rule on a fixed input: the reads during forward and backward (the ring's
# first units of the optimizer's files, at most optim_bytes) hidden up to the compute's time, the
# rest read and all written exposed ----
for g in 4 0.001; do
  j=$("$BIN" plan --model gpt2-1558m --dp 1 --devices 1 --device-mem 24 --seq 1024 --global-batch 1 --recompute full \
      --offload optimizer --disk-gbps $g --json)
  jf() { echo "$j" | grep -o "\"$1\":[0-9.e+-]*" | cut -d: -f2; }
  want=$(awk -v r="$(jf io_read_bytes)" -v w="$(jf io_written_bytes)" -v o="$(jf optim_bytes)" -v t="$(jf compute_seconds)" -v g=$g \
    'BEGIN { bw = g * 1e9; a = o < r ? o : r; h = a / bw; x = (r - a + w) / bw + (h > t ? h - t : 0); printf "%.9e", x }')
  got=$(awk -v x="$(jf io_seconds)" 'BEGIN { printf "%.9e", x }')
  [ "$got" = "$want" ] && echo "$j" | grep -q '"disk_gbps_source":"--disk-gbps"' ||
    { bad "plan's I/O rule at $g GB/s" "io_seconds $got, want $want"; continue; }
  ok "plan at --disk-gbps $g: io_seconds $got = the reads past the ring's, the writes, and the ring's reads beyond the compute"
done
"$BIN" plan --model gpt2-tiny --vocab 256 --devices 1 --dp 1 --tp 1 --pp 1 --seq 64 --global-batch 2 --offload optimizer --json |
  grep -q '"disk_gbps":2,"disk_gbps_source":"the default for a cluster not in hand' &&
  ok "plan without --local or --disk-gbps: the stated 2 GB/s, named as the default" || bad "plan's non-local disk default" ""

echo "$pass passed, $fail failed"
[ $fail -eq 0 ]
