#!/usr/bin/env bash
# make bench, the whole machine: the register-only peaks of the machine in
# hand (kernels/peak), then the training step in fp32 and bf16 against them,
# each row twice — with OPENBLAS_CORETYPE as the environment sets it and with
# it unset (what a user gets: OpenBLAS then picks its AVX-512 kernels) — and
# PyTorch's fp32 and bf16 autocast beside them, with the goals.
#   bench/machine.sh [THREADS]
set -u
cd "$(dirname "$0")/.."
THREADS=${1:-${THREADS:-2}}
B=build/bench
TEXT=${TSR_DATA:-../shared/data}/tinyshakespeare.txt
PY=${PYTHON:-/usr/bin/python3}; [ -x "$PY" ] || PY=python3
have_torch=0
OMP_WAIT_POLICY=PASSIVE $PY -c "import torch" 2>/dev/null && have_torch=1
ma=$(gcc -print-multiarch 2>/dev/null || echo x86_64-linux-gnu)
TORCH_ENV=(OMP_WAIT_POLICY=PASSIVE)
[ -f /usr/lib/$ma/libtcmalloc_minimal.so.4 ] && TORCH_ENV+=(LD_PRELOAD=/usr/lib/$ma/libtcmalloc_minimal.so.4)

IFS='|' read -r isa p256 p512 pbf pamx bfpeak bfunit <<<"$($B/peaks "$THREADS")"
fp32peak=$(awk -v a="$p256" -v b="$p512" 'BEGIN { print (b > a ? b : a) }')
echo "The whole machine: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//'), family $(grep -m1 'cpu family' /proc/cpuinfo | cut -d: -f2 | tr -d ' '), $isa"
echo "  register-only peaks, $THREADS threads: fp32 FMA $p256 GFLOP/s (256-bit), $p512 (512-bit); bf16 dot product $pbf; AMX bf16 tiles $pamx"
# What a GEMM's inner loop reaches here with nothing to wait for but L1, and with its panels streaming from L2.
IFS='|' read -r c32a c32b cdota cdotb camxa camxb <<<"$($B/ceilings "$THREADS")"
pct() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.0f%%", (b > 0 ? 100 * a / b : 0) }'; }
# A tile that ran faster than the probe (in L1, or from L2) shows the probe ran in a slow moment (the machine
# is shared): the peak is then the fastest tile's rate, so that no figure below reads above 100% of it.
if [ "$bfunit" = "bf16 tiles (AMX tdpbf16ps)" ]; then cbfa=$camxa cbfb=$camxb; else cbfa=$cdota cbfb=$cdotb; fi
for v in "fp32peak:$c32a:$c32b" "bfpeak:$cbfa:$cbfb"; do
  IFS=: read -r name ta tb <<<"$v"
  read -r tile where <<<"$(awk -v a="$ta" -v b="$tb" 'BEGIN { if (b > a) print b, "from L2"; else print a, "in L1" }')"
  if awk -v t="$tile" -v p="${!name}" 'BEGIN { exit !(t > p) }'; then
    echo "  the $([ $name = fp32peak ] && echo fp32 || echo bf16) probe read ${!name}, below its tile $where ($tile): the peak below is the tile's"
    printf -v "$name" '%s' "$tile"
  fi
done
ceil32="$(pct "$c32a" "$fp32peak") in L1, $(pct "$c32b" "$fp32peak") from L2"
if [ "$bfunit" = "bf16 tiles (AMX tdpbf16ps)" ]; then ceilbf="$(pct "$camxa" "$bfpeak") in L1, $(pct "$camxb" "$bfpeak") from L2"
else ceilbf="$(pct "$cdota" "$bfpeak") in L1, $(pct "$cdotb" "$bfpeak") from L2"; fi
echo "  MFU/pk: fp32 rows against $fp32peak, bf16 rows against $bfpeak ($bfunit: the peak of the arithmetic the products use;" \
     "each tessera row probes it again at its start, as the trainer does)"
echo "  ceilings (bench/ceilings: a register tile over packed operands, loads and products together, $THREADS threads):"
echo "    fp32 12x32 tile $c32a GFLOP/s in L1, $c32b from L2 ($ceil32 of the fp32 peak);" \
     "bf16 dot tile $cdota / $cdotb; AMX 2x2 supertile $camxa / $camxb"
echo

# ms of a row printed by bench_train or torch_ref.py (field 2)
ms_of() { awk -F'|' '{ print $2 + 0 }' <<<"$1"; }
row() {   # env-mode preset B T precision; prints the row, sets ROW_MS
  local mode=$1; shift
  local out
  if [ "$mode" = set ]; then out=$($B/bench_train "$1" "$2" "$3" 50257 3 "$THREADS" -1 "$4")
  else out=$(env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE $B/bench_train "$1" "$2" "$3" 50257 3 "$THREADS" -1 "$4"); fi
  echo "  $out"
  ROW_MS=$(ms_of "$out")
}
trow() {   # env-mode B T precision; prints PyTorch's row, sets ROW_MS (0 without torch)
  ROW_MS=0
  [ "$have_torch" = 1 ] || return 0
  local mode=$1 pk out; shift
  pk=$([ "$3" = bf16 ] && echo "$bfpeak" || echo "$fp32peak")
  if [ "$mode" = set ]; then out=$(env "${TORCH_ENV[@]}" $PY bench/torch_ref.py gpt2-124m "$1" "$2" 50257 3 "$THREADS" -1 "$3" "$pk" 2>/dev/null)
  else out=$(env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE "${TORCH_ENV[@]}" $PY bench/torch_ref.py gpt2-124m "$1" "$2" 50257 3 "$THREADS" -1 "$3" "$pk" 2>/dev/null); fi
  [ -n "$out" ] && echo "  $out" && ROW_MS=$(ms_of "$out")
}
for mode in set unset; do
  if [ "$mode" = set ]; then echo "OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE:-(unset)} (as the environment sets it):"
  else echo "OPENBLAS_CORETYPE unset (env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE: what a user gets):"; fi
  printf '  %-16s %3s %4s %6s | %9s | %8s | %6s | %6s | %6s | %7s | %7s\n' model B T vocab "ms/step" "tok/s" GFLOP/s \
    "MFU/sg" "MFU/pk" "tagMiB" "RSS MiB"
  for shape in "4 64" "8 256"; do
    read -r bb tt <<<"$shape"
    row $mode gpt2-124m $bb $tt fp32; f=$ROW_MS
    row $mode gpt2-124m $bb $tt bf16; h=$ROW_MS
    trow $mode $bb $tt fp32; tf=$ROW_MS
    trow $mode $bb $tt bf16; th=$ROW_MS
    row $mode llama-120m $bb $tt fp32; lf=$ROW_MS
    row $mode llama-120m $bb $tt bf16; lh=$ROW_MS
    goal=$([ "$bb" = 8 ] && echo 0.55 || echo 0.65)
    awk -v f="$f" -v h="$h" -v tf="$tf" -v th="$th" -v lf="$lf" -v lh="$lh" -v g="$goal" -v b="$bb" -v t="$tt" 'BEGIN {
      printf "    B=%d T=%d: bf16/fp32 %.2f (goal <= %s), llama-120m %.2f", b, t, h / f, g, lh / lf
      if (tf > 0) {
        best = tf < th || th == 0 ? tf : th
        printf "; PyTorch fastest / tessera bf16 %.2fx (goal >= 2), PyTorch fp32 / tessera fp32 %.2fx (goal >= %s)",
               best / h, tf / f, b == 8 ? "1.5" : "2"
      }
      printf "\n" }'
  done
done
echo "  MFU/pk: each row's median step against the peak above (no SGEMM ceiling here: the MFU/sg column is \"-\")."
echo

# The products' share and their speed against the peak: --profile at B=8 T=256, and the tp=2 and pp=2 per-rank shapes.
echo "GEMMs against the peak of their arithmetic (tessera train --profile, steps 2-4; OPENBLAS_CORETYPE as set):"
prof() {   # label, ranks to show (each rank's profile in order), then flags
  local label=$1 ranks=$2 log r=0; shift 2
  log=$(mktemp)
  ./tessera train --model gpt2-124m --data "$TEXT" --steps 4 "$@" --profile >"$log" 2>&1
  grep '^  all GEMMs' "$log" | head -"$ranks" | while read -r line; do
    printf '  %-44s %s\n' "${label//RANK/$r}" "$line"
    r=$((r + 1))
  done
  rm -f "$log"
}
for p in fp32 bf16; do
  prof "$p B=8 T=256, $THREADS threads" 1 --batch 8 --seq 256 --threads "$THREADS" --precision $p
  prof "$p tp=2 B=4 T=64 (rank RANK, 1 thread)" 1 --batch 4 --seq 64 --nproc 2 --tp 2 --precision $p
  prof "$p pp=2 B=1 T=64 x8 (stage RANK, 1 thread)" 2 --batch 1 --seq 64 --nproc 2 --pp 2 --micro-batches 8 --precision $p
done
echo "  goals: fp32 GEMMs >= 85% of the fp32 peak (the tile alone: $ceil32); bf16 GEMMs >= 65% of the bf16 peak (the tile alone: $ceilbf)"
