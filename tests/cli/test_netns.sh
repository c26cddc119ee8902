#!/usr/bin/env bash
# Multi-host runs proven on one machine: scripts/netns-cluster.sh makes
# "hosts" of Linux network namespaces on a private switch and runs mpirun
# across them (TCP between hosts, shared memory inside one). dp=4 ZeRO-1 on
# 2 hosts × 2 ranks and the 2×2×2 3D mesh on 4 hosts × 2 and on 2 hosts × 4
# give checkpoints byte-identical to the same layouts as forked ranks on one
# host; the header's placement of the groups (hosts:) is the planner's
# intra/inter-node split for that many devices per node; a host whose link
# drops everything ends the job with the unreachable ranks named. Needs
# root, ip and OpenMPI; otherwise says why it is skipped. Run from the
# repository root.
source "$(dirname "$0")/lib.sh"
C=scripts/netns-cluster.sh
if ! why=$($C check 2>&1); then
  echo "skip multi-host runs: $why"; echo "0 passed, 0 failed"; exit 0
fi
if ! ldd "$BIN" | grep -q libmpi; then
  echo "skip multi-host runs: tessera was built without MPI"; echo "0 passed, 0 failed"; exit 0
fi
trap '$C down; rm -rf "$TMP"' EXIT
T="train --model gpt2-tiny --data $DATA --tokenizer byte --seq 32 --steps 6 --log-every 3 --seed 5"

# layout NAME HOSTS SLOTS WANT_HOSTS WANT_PLAN "MESH" FLAGS...: the run of MESH FLAGS across the hosts
# against forked ranks, its hosts: line, and the planner's placement line for MESH
layout() {
  local name=$1 hosts=$2 slots=$3 want_hosts=$4 want_plan=$5 mesh=$6
  shift 6
  set -- $mesh "$@"
  local n=$((hosts * slots))
  $C up "$hosts"
  timeout 600 $C mpirun "$hosts" "$slots" "$BIN" $T "$@" --ckpt-dir "$TMP/$name.mh" >"$TMP/$name.out" 2>&1 </dev/null
  local rc=$?
  "$BIN" $T "$@" --nproc "$n" --ckpt-dir "$TMP/$name.fk" >/dev/null 2>&1
  local got; got=$(grep -a '^hosts:' "$TMP/$name.out" | head -1 | cut -c12-)
  local plan; plan=$("$BIN" plan --model gpt2-tiny --devices "$n" --devices-per-node "$slots" $mesh --global-batch 8 \
                     --micro-batch 2 --seq 32 2>&1 | grep '^placement' | cut -c12-)
  if [ $rc = 0 ] && same_bits "$TMP/$name.fk" "$TMP/$name.mh" && [ "$got" = "$want_hosts" ] && [ "$plan" = "$want_plan" ]; then
    ok "$name on $hosts hosts × $slots ranks (mpirun, TCP between hosts): checkpoint bytes of $n forked ranks; $want_hosts; tessera plan: $plan"
  else
    bad "$name on $hosts hosts × $slots" "rc $rc; hosts: $got" "plan: $plan" "$(grep -a -iE 'error|tessera train' "$TMP/$name.out" | head -3)"
  fi
  $C down
}
layout dp4_zero1 2 2 "2 (tsr-h0: ranks 0-1, tsr-h1: ranks 2-3); across hosts: data-parallel groups" \
  "inside a node: none; across nodes: dp" "--dp 4 --zero 1" --batch 2
layout 3d_4x2 4 2 "4 (tsr-h0: ranks 0-1, tsr-h1: ranks 2-3, tsr-h2: ranks 4-5, tsr-h3: ranks 6-7); inside one host: tensor-parallel groups; across hosts: data-parallel, pipeline groups" \
  "inside a node: tp; across nodes: dp, pp" "--dp 2 --tp 2 --pp 2 --zero 1" --sp --micro-batches 4 --batch 2
layout 3d_2x4 2 4 "2 (tsr-h0: ranks 0-3, tsr-h1: ranks 4-7); inside one host: data-parallel, tensor-parallel groups; across hosts: pipeline groups" \
  "inside a node: tp, dp; across nodes: pp" "--dp 2 --tp 2 --pp 2 --zero 1" --sp --micro-batches 4 --batch 2

# ---- a host whose link drops everything, mid-run ----
# dp=4 on 2 hosts × 2; once the run has a checkpoint, tsr-h1's link drops every packet (tc netem, or the link
# down where the kernel has no netem): the ranks on tsr-h0 name world ranks 2 and 3 unreachable when their
# collective times out (--comm-timeout 3), and the job ends (mpirun notices the lost host by the keepalive the
# harness sets: 1 s idle, 3 probes 1 s apart)
$C up 2
timeout 120 $C mpirun 2 2 "$BIN" $T --dp 4 --batch 2 --steps 100000 --log-every 100000 --ckpt-every 10 --comm-timeout 3 \
  --ckpt-dir "$TMP/cut" >"$TMP/cut.out" 2>&1 </dev/null &
P=$!
for _ in $(seq 1200); do [ -d "$TMP/cut/step_00000010" ] && break; sleep 0.05; done
t0=$(date +%s.%N)
how=$($C cut tsr-h1)
wait $P
rc=$?
el=$(echo "$(date +%s.%N) - $t0" | bc)
msg=$(grep -a -o 'tessera: MPI rank [01]: [a-z_]* (seq [0-9]*) timed out after 3 s; unreachable: world ranks 2, 3 ([^)]*)' "$TMP/cut.out" | head -1)
if [ $rc != 0 ] && [ $rc != 124 ] && [ -n "$msg" ] && awk -v e="$el" 'BEGIN { exit !(e < 10) }'; then
  ok "${how#cut: }: the job ends ${el%??????} s later (--comm-timeout 3), rank 0 or 1 saying: ${msg#tessera: }"
else
  bad "a host cut off" "rc $rc after $el s ($how)" "$(grep -a -E 'tessera|ORTE' "$TMP/cut.out" | sed 's/.*tessera:/tessera:/' | head -3)"
fi
$C down

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
