#!/usr/bin/env bash
# scripts/netns-cluster.sh — a cluster of "hosts" on this one machine, to
# run tessera across hosts with MPI as on a real cluster: each host is a
# Linux network namespace (and its own UTS namespace, so its own hostname)
# with one interface on a private switch (a bridge in a namespace of its
# own: addresses and traffic exist only inside these namespaces). OpenMPI
# runs from host 0 and starts its daemons on the others through this
# script as its launch agent (the part ssh plays on a cluster): between
# hosts the ranks talk TCP, inside one host shared memory.
#
#   scripts/netns-cluster.sh up N            hosts tsr-h0 .. tsr-h(N-1), 10.77.0.10 + i
#   scripts/netns-cluster.sh mpirun N SLOTS ARGS...
#                                            mpirun -np N·SLOTS ARGS... across the hosts, SLOTS ranks each
#                                            (rank r on host r / SLOTS), from host 0; the hosts must be up
#   scripts/netns-cluster.sh cut HOST        HOST's link drops every packet (tc netem loss 100%, or the
#                                            link down where the kernel has no netem)
#   scripts/netns-cluster.sh down            removes every host and the switch
#   scripts/netns-cluster.sh check           whether this machine can (root, ip, tc, mpirun): exit 0, or 1
#                                            with the reason
#   scripts/netns-cluster.sh agent HOST CMD  (OpenMPI's plm_rsh_agent) runs CMD on HOST
#
# Needs root, iproute2 (ip, tc) and OpenMPI.
set -euo pipefail
PFX=tsr
NET=10.77.0
SW=${PFX}-sw

here=$(cd "$(dirname "$0")" && pwd)

check() {
  [ "$(id -u)" -eq 0 ] || { echo "needs root (network namespaces)"; return 1; }
  command -v ip >/dev/null || { echo "needs ip (iproute2)"; return 1; }
  command -v tc >/dev/null || { echo "needs tc (iproute2)"; return 1; }
  command -v mpirun >/dev/null || { echo "needs mpirun (openmpi-bin)"; return 1; }
  command -v unshare >/dev/null || { echo "needs unshare (util-linux)"; return 1; }
  ip netns add ${PFX}-probe 2>/dev/null || { echo "cannot create network namespaces here"; return 1; }
  ip netns del ${PFX}-probe
}

down() {
  for ns in $(ip netns list 2>/dev/null | awk '{print $1}' | grep "^${PFX}-"); do ip netns del "$ns" 2>/dev/null || true; done
}

up() {
  local n=$1
  down
  ip netns add $SW
  ip -n $SW link add br0 type bridge
  ip -n $SW link set br0 up
  for i in $(seq 0 $((n - 1))); do
    local h=${PFX}-h$i
    ip netns add "$h"
    ip -n "$h" link set lo up
    ip link add ${PFX}-v$i type veth peer name eth0 netns "$h"
    ip link set ${PFX}-v$i netns $SW
    ip -n $SW link set ${PFX}-v$i master br0 up
    ip -n "$h" addr add $NET.$((10 + i))/24 dev eth0
    ip -n "$h" link set eth0 up
  done
}

# agent HOST CMD...: CMD in HOST's namespaces, its hostname HOST (OpenMPI
# names the host first; it may put options before it)
agent() {
  while [ $# -gt 0 ] && [ "${1#-}" != "$1" ]; do shift; done
  local h=$1
  shift
  exec ip netns exec "$h" unshare --uts sh -c "hostname $h && exec $*"
}

run_mpi() {
  local n=$1 slots=$2
  shift 2
  local hf
  hf=$(mktemp /tmp/${PFX}-hosts.XXXXXX)
  for i in $(seq 0 $((n - 1))); do echo "${PFX}-h$i slots=$slots"; done >"$hf"
  local rc=0
  ip netns exec ${PFX}-h0 unshare --uts sh -c "hostname ${PFX}-h0 && exec mpirun --allow-run-as-root --hostfile '$hf' \
    -np $((n * slots)) --map-by slot --mca plm_rsh_agent '$here/netns-cluster.sh agent' --mca plm_rsh_no_tree_spawn 1 \
    --mca oob_tcp_if_include $NET.0/24 --mca btl_tcp_if_include $NET.0/24 --mca btl self,vader,tcp \
    --mca orte_abort_on_non_zero_status 1 --mca oob_tcp_keepalive_time 1 --mca oob_tcp_keepalive_intvl 1 \
    --mca oob_tcp_keepalive_probes 3 $(printf "'%s' " "$@")" || rc=$?
  rm -f "$hf"
  return $rc
}

# HOST's link drops every packet: tc netem loss 100% where the kernel has
# sch_netem, else the link taken down (kernels built without qdiscs). Says
# which.
cut_host() {
  local i=${1#${PFX}-h}
  if ip netns exec ${PFX}-h$i tc qdisc replace dev eth0 root netem loss 100% 2>/dev/null; then
    echo "cut: ${PFX}-h$i drops every packet (tc netem loss 100%)"
  else
    ip -n ${PFX}-h$i link set eth0 down
    echo "cut: ${PFX}-h$i's link is down (this kernel has no netem qdisc)"
  fi
}

cmd=${1:-}
shift || true
case "$cmd" in
  check) check ;;
  up) up "${1:?up N}" ;;
  down) down ;;
  agent) agent "$@" ;;
  mpirun) run_mpi "$@" ;;
  cut) cut_host "${1:?cut HOST}" ;;
  *) sed -n '2,23p' "$0" | sed 's/^# \{0,1\}//'; exit 2 ;;
esac
