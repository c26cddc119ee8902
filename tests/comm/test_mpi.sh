#!/usr/bin/env bash
# The MPI backend under mpirun --oversubscribe: the collective cases on 2, 3
# and 8 ranks, comm-bench, and a killed rank ending the job with an error.
set -u
pass=0
fail=0
if ! command -v mpirun >/dev/null; then
  echo "FAIL mpirun not found (scripts/deps.sh installs openmpi-bin)"
  echo "0 passed, 1 failed"
  exit 1
fi
MPIRUN=(mpirun --oversubscribe --mca mpi_yield_when_idle 1 --mca btl_vader_single_copy_mechanism none)
[ "$(id -u)" -eq 0 ] && MPIRUN+=(--allow-run-as-root)
for np in 2 3 8; do
  out=$(timeout 300 "${MPIRUN[@]}" -np $np build/tests/comm/test_comm_mpi 2>&1)
  rc=$?
  echo "$out" | grep -E "^(ok|FAIL)" | sed 's/^/  /'
  line=$(echo "$out" | grep -E '^[0-9]+ passed, [0-9]+ failed$' | tail -1)
  if [ $rc -eq 0 ] && [ -n "$line" ] && [ "${line#*, }" = "0 failed" ]; then pass=$((pass + 1)); echo "ok   mpi cases on $np ranks"
  else fail=$((fail + 1)); echo "FAIL mpi cases on $np ranks (exit $rc)"; echo "$out" | tail -5; fi
done
out=$(timeout 120 "${MPIRUN[@]}" -np 2 ./tessera comm-bench --op allreduce --max-bytes 1M --iters 3 2>&1)
if [ $? -eq 0 ] && echo "$out" | grep -q "backend mpi" && echo "$out" | grep -qE "^ +1048576 "; then pass=$((pass + 1)); echo "ok   comm-bench under mpirun"
else fail=$((fail + 1)); echo "FAIL comm-bench under mpirun"; echo "$out" | tail -5; fi
# A rank killed mid-run: mpirun ends the job and exits non-zero, no hang.
start=$(date +%s)
TESSERA_COMM_TIMEOUT=20 TESSERA_TEST_KILL_RANK=1 timeout 120 "${MPIRUN[@]}" -np 3 build/tests/comm/test_comm_mpi >/dev/null 2>&1
rc=$?
el=$(( $(date +%s) - start ))
if [ $rc -ne 0 ] && [ $rc -ne 124 ] && [ $el -lt 60 ]; then pass=$((pass + 1)); echo "ok   killed MPI rank ends the job (exit $rc, ${el}s)"
else fail=$((fail + 1)); echo "FAIL killed MPI rank: exit $rc after ${el}s"; fi
# Data-parallel training and every ZeRO stage under mpirun give the same
# bits as with forked ranks (collectives reduce in rank order in both
# backends), on 2 and 4 ranks, with gradient accumulation.
DATA=${TSR_DATA:-../shared/data}/tinyshakespeare.txt
TMP=$(mktemp -d)
R=(train --data "$DATA" --tokenizer byte --steps 8 --log-every 100 --seed 21 --lr 1e-3 --warmup 2)
# mpirun_matches NAME RANKS FLAGS...: the run under mpirun leaves the same
# checkpoint bits as with forked ranks (0), or says what differs (1).
mpirun_matches() {
  local name=$1 n=$2
  shift 2
  timeout 120 "${MPIRUN[@]}" -np "$n" ./tessera "${R[@]}" "$@" --ckpt-dir "$TMP/mpi_$name" >"$TMP/mpi.out" 2>&1 ||
    { echo "     mpirun $name: $(tail -1 "$TMP/mpi.out")"; return 1; }
  ./tessera "${R[@]}" "$@" --nproc "$n" --ckpt-dir "$TMP/loc_$name" >/dev/null 2>&1
  local f rc=0
  for f in "$TMP/loc_$name/step_00000008"/rank_*.tsr; do
    cmp -s "$f" "$TMP/mpi_$name/step_00000008/$(basename "$f")" || { rc=1; echo "     $name: $(basename "$f") differs"; }
  done
  return $rc
}
mpi_bad=0
for cfg in "2 0 1" "2 1 1" "2 2 2" "2 3 1" "4 3 2" "4 2 1"; do
  read -r n z k <<<"$cfg"
  mpirun_matches "dp${n}z${z}k$k" $n --dp $n --zero $z --grad-accum $k --batch $((8 / n / k)) || mpi_bad=1
done
if [ $mpi_bad -eq 0 ]; then pass=$((pass + 1)); echo "ok   dp=2,4 × ZeRO 0-3 under mpirun: checkpoints identical to forked ranks"
else fail=$((fail + 1)); echo "FAIL data-parallel training under mpirun differs from forked ranks"; fi
# Tensor parallelism (and sequence parallelism, and TP × DP under ZeRO-1)
# under mpirun: the same bits as with forked ranks.
tp_bad=0
for cfg in "2 2 1 0 1 --sp" "4 2 2 1 2" "4 4 1 0 1 --sp"; do
  read -r n tp dp z k sp <<<"$cfg"
  mpirun_matches "tp${tp}dp${dp}z$z" $n --tp $tp --dp $dp --zero $z --grad-accum $k --batch $((8 / dp / k)) $sp || tp_bad=1
done
if [ $tp_bad -eq 0 ]; then pass=$((pass + 1)); echo "ok   tp=2 --sp, dp=2 × tp=2 ZeRO-1, tp=4 --sp under mpirun: checkpoints identical to forked ranks"
else fail=$((fail + 1)); echo "FAIL tensor-parallel training under mpirun differs from forked ranks"; fi
# Pipeline parallelism in 3D meshes under mpirun (dp × tp × pp = 2×2×2
# with ZeRO-1 and --sp, 1×2×4 with GPipe, 2×1×2 interleaved): the same
# bits as forked ranks.
pp_bad=0
for cfg in "8 2 2 2 1 1f1b --sp" "8 1 2 4 0 gpipe" "4 2 1 2 1 1f1b --virtual-stages 2"; do
  read -r n dp tp pp z sc sp <<<"$cfg"
  mpirun_matches "pp${pp}tp${tp}dp${dp}" $n --dp $dp --tp $tp --pp $pp --zero $z --schedule $sc --micro-batches 4 \
    --batch $((8 / dp / 4)) $sp || pp_bad=1
done
if [ $pp_bad -eq 0 ]; then pass=$((pass + 1)); echo "ok   3D meshes 2×2×2 (ZeRO-1, --sp), 1×2×4 (gpipe) and 2×1×2 (interleaved, V=2) under mpirun: checkpoints identical to forked ranks"
else fail=$((fail + 1)); echo "FAIL pipeline-parallel training under mpirun differs from forked ranks"; fi
# Mixed precision under mpirun (bf16 dp=2 ZeRO-2 with the bf16 gradient
# reduction; fp16 2×1×2 with its loss scale) and LLaMA (dp=2 × tp=2): the
# same bits as forked ranks.
mp_bad=0
mpirun_matches "bf16dp2" 2 --dp 2 --zero 2 --batch 4 --precision bf16 --reduce-dtype bf16 || mp_bad=1
mpirun_matches "fp16pp2" 4 --dp 2 --pp 2 --zero 1 --micro-batches 2 --batch 2 --precision fp16 || mp_bad=1
mpirun_matches "llama" 4 --model llama-tiny --dp 2 --tp 2 --zero 1 --batch 4 || mp_bad=1
if [ $mp_bad -eq 0 ]; then pass=$((pass + 1)); echo "ok   bf16 (dp=2 ZeRO-2, bf16 reduction), fp16 (2×1×2) and llama-tiny (dp=2 × tp=2) under mpirun: checkpoints identical to forked ranks"
else fail=$((fail + 1)); echo "FAIL mixed-precision training under mpirun differs from forked ranks"; fi
# --trace under mpirun: every rank's events reach rank 0 over the MPI
# communicator, one file with a pid per rank, each thread's events apart.
timeout 300 "${MPIRUN[@]}" -np 4 ./tessera "${R[@]}" --model gpt2-tiny --seq 32 --steps 3 --tp 2 --pp 2 --micro-batches 2 \
  --batch 1 --trace "$TMP/mpi_trace.json" >"$TMP/trace.out" 2>&1
tr=$(/usr/bin/python3 -c "
import json, sys
ev = json.load(open(sys.argv[1]))['traceEvents']
x = sorted((e['pid'], e['tid'], e['ts'], e['dur']) for e in ev if e['ph'] == 'X')
apart = all(a[:2] != b[:2] or a[2] + a[3] <= b[2] + 1e-6 for a, b in zip(x, x[1:]))
print(sorted({e['pid'] for e in ev}), apart)" "$TMP/mpi_trace.json" 2>&1)
if [ "$tr" = "[0, 1, 2, 3] True" ]; then pass=$((pass + 1)); echo "ok   --trace under mpirun (1×2×2): one file, 4 pids, each thread's events apart"
else fail=$((fail + 1)); echo "FAIL --trace under mpirun: $tr"; tail -2 "$TMP/trace.out"; fi
rm -rf "$TMP"
echo "$pass passed, $fail failed"
[ $fail -eq 0 ]
