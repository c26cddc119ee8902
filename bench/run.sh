#!/usr/bin/env bash
# make bench: training-step speed and memory of tessera, next to a PyTorch
# reference of the same step in the same invocation when python3-torch is
# installed (this machine is shared: compare the ratios, not the absolutes).
set -u
cd "$(dirname "$0")/.."
THREADS=${THREADS:-2}
B=build/bench
ceiling=$($B/sgemm "$THREADS")
echo "SGEMM ceiling (2048³, $THREADS threads): $ceiling GFLOP/s; FMA peak 204.8 GFLOP/s (3.2 GHz × 32 flop × 2 cores)"
echo
printf '%-16s %3s %4s %6s | %9s | %8s | %6s | %6s | %6s | %7s | %7s\n' model B T vocab "ms/step" "tok/s" GFLOP/s \
  "MFU/sg" "MFU/pk" "tagMiB" "RSS MiB"
configs=("gpt2-124m 4 64 50257 5" "gpt2-124m 8 256 50257 3" "gpt2-tiny 12 64 256 30")
have_torch=0
PY=${PYTHON:-/usr/bin/python3}; [ -x "$PY" ] || PY=python3
OMP_WAIT_POLICY=PASSIVE $PY -c "import torch" 2>/dev/null && have_torch=1
for c in "${configs[@]}"; do
  read -r preset b t v steps <<<"$c"
  out=$($B/bench_train "$preset" "$b" "$t" "$v" "$steps" "$THREADS" "$ceiling")
  echo "$out"
  if [ "$have_torch" = 1 ]; then
    ref=$(OMP_WAIT_POLICY=PASSIVE $PY bench/torch_ref.py "$preset" "$b" "$t" "$v" "$steps" "$THREADS" "$ceiling" 2>/dev/null)
    echo "$ref"
    ms=$(echo "$out" | awk -F'|' '{print $2}'); rms=$(echo "$ref" | awk -F'|' '{print $2}')
    [ -n "$rms" ] && awk -v a="$ms" -v b="$rms" 'BEGIN { printf "%-33s   speedup vs PyTorch: %.2fx\n", "", b / a }'
  fi
done
[ "$have_torch" = 1 ] || echo "(python3-torch not installed: no PyTorch reference rows)"
echo
echo "MFU/sg: against the measured SGEMM ceiling; MFU/pk: against the FMA peak; FLOPs per token 6N + 12·L·T·C."
echo "tagMiB: peak of tessera's tagged allocator; RSS: the process's peak resident memory."

echo
echo "GPT-2 tokenizer: tinyshakespeare repeated to >= 20 MB"
TEXT=${TSR_DATA:-../shared/data}/tinyshakespeare.txt
$B/bench_tokenizer "$TEXT" "$THREADS"
if command -v node >/dev/null; then
  if [ ! -d build/node/node_modules/tiktoken ]; then
    npm install --silent --prefix build/node tiktoken >/dev/null 2>&1 || true
  fi
  if [ -d build/node/node_modules/tiktoken ]; then
    NODE_PATH=build/node/node_modules node bench/tiktoken_bench.js "$TEXT"
  else
    echo "(tiktoken could not be installed from npm: no reference row)"
  fi
else
  echo "(node not installed: no tiktoken reference row)"
fi

echo
echo "Collectives, 2 ranks on this machine: allreduce, float32"
./tessera comm-bench --nproc 2 --op allreduce --min-bytes 8 --max-bytes 64M --iters 20 | grep -E "^(#| +(bytes|8|4096|1048576|67108864) )"
if [ -x $B/mpi_allreduce ]; then
  MPIRUN=(mpirun --oversubscribe -np 2)
  [ "$(id -u)" -eq 0 ] && MPIRUN+=(--allow-run-as-root)
  "${MPIRUN[@]}" $B/mpi_allreduce 8 67108864 20 2>/dev/null | grep -E "^(#| +(bytes|8|4096|1048576|67108864) )"
  echo "tessera's MPI backend (same collectives over MPI, rank-order reduction):"
  "${MPIRUN[@]}" ./tessera comm-bench --op allreduce --min-bytes 8 --max-bytes 64M --iters 20 2>/dev/null | grep -E "^ +(8|4096|1048576|67108864) "
fi

echo
echo "Data parallel, gpt2-124m, B=4 T=64 per rank, GPT-2 tokenizer on tinyshakespeare, 6 steps (median of steps 2-6):"
dpbench() {   # label, then tessera train flags
  local label=$1; shift
  local log; log=$(mktemp)
  ./tessera train --model gpt2-124m --data "$TEXT" --batch 4 --seq 64 --steps 6 --log-every 1 --log "$log" "$@" >"$log.out" 2>&1
  local ms; ms=$(grep -o '"ms":[0-9.]*' "$log" | tail -5 | cut -d: -f2 | sort -n | sed -n 3p)
  local tok; tok=$(grep -o '"tokens_per_s":[0-9.]*' "$log" | tail -5 | cut -d: -f2 | sort -n | sed -n 3p)
  printf '%-34s %9.1f ms/step %9.1f tokens/s   %s\n' "$label" "$ms" "$tok" "$(grep '^comm:' "$log.out" | cut -c12-)"
  echo "$tok" >"$log.tok"; DP_TOK=$tok
  rm -f "$log" "$log.out" "$log.tok"
}
dpbench "dp=1, 2 threads" --threads 2; base=$DP_TOK
dpbench "dp=2 (1 thread each), ZeRO-0" --nproc 2 --dp 2; awk -v a="$DP_TOK" -v b="$base" 'BEGIN { printf "%-34s scaling %.2fx the 2-thread run (tokens/s of twice the batch)\n", "", a / b }'
for z in 1 2 3; do
  dpbench "dp=2 (1 thread each), ZeRO-$z" --nproc 2 --dp 2 --zero $z
  awk -v a="$DP_TOK" -v b="$base" 'BEGIN { printf "%-34s scaling %.2fx\n", "", a / b }'
done
