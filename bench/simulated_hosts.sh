#!/bin/bash
# Two simulated hosts on this machine: network namespaces vs10a and vs10b joined by a veth
# pair (both ends named veth0, 10.77.0.1 and .2), shaped by a token bucket (this kernel has
# no netem: no added latency). Needs root and iproute2; traffic stays on this machine.
#
#   bash bench/simulated_hosts.sh up                 # create the namespaces and the link
#   bash bench/simulated_hosts.sh shape 1gbit 256kb  # rate and burst, both directions
#   MPIEXEC="bench/simulated_hosts.sh mpiexec" python bench/bench_distributed.py ... --configs 2x1
#   bash bench/simulated_hosts.sh down
#
# "mpiexec" runs prterun in vs10a with a hostfile naming both namespaces (ranks mapped by
# node: --oversubscribe alone would put them all in vs10a); it starts a daemon
# in each through "agent" (an ssh that is `ip netns exec`). Open MPI's TCP transport and
# its out-of-band channel use veth0; shared-memory collectives are off, since both "hosts"
# share one hostname and Open MPI would take them for one node (Barrier then hangs).
set -e
here=$(cd "$(dirname "$0")" && pwd)
case "$1" in
up)
  ip netns add vs10a && ip netns add vs10b
  ip link add vs10x type veth peer name vs10y
  ip link set vs10x netns vs10a && ip link set vs10y netns vs10b
  ip -n vs10a link set vs10x name veth0 && ip -n vs10b link set vs10y name veth0
  ip -n vs10a addr add 10.77.0.1/24 dev veth0 && ip -n vs10b addr add 10.77.0.2/24 dev veth0
  for ns in vs10a vs10b; do ip -n $ns link set veth0 up; ip -n $ns link set lo up; done ;;
shape)
  for ns in vs10a vs10b; do
    tc -n $ns qdisc del dev veth0 root 2>/dev/null || true
    tc -n $ns qdisc add dev veth0 root tbf rate "$2" burst "$3" latency 50ms
  done ;;
sent)  # bytes vs10a has sent on the link
  ip -n vs10a -s link show veth0 | awk 'NR==6{print $1}' ;;
agent)
  host=$2; shift 2
  exec ip netns exec "$host" /bin/sh -c "$*" ;;
mpiexec)
  shift
  hosts=$(mktemp); printf "vs10a slots=1\nvs10b slots=1\n" > "$hosts"
  exec ip netns exec vs10a "${MPIEXEC_BIN:-$(dirname "$(command -v python)")/mpiexec}" \
    --hostfile "$hosts" --map-by node --prtemca plm_ssh_agent "$here/simulated_hosts.sh agent" \
    --prtemca oob_tcp_if_include veth0 --mca btl tcp,self --mca btl_tcp_if_include veth0 \
    --mca coll ^han,sm,hcoll,ucc "$@" ;;
down)
  ip netns del vs10a; ip netns del vs10b ;;
*) echo "usage: $0 up|shape RATE BURST|sent|mpiexec ARGS...|down" >&2; exit 2 ;;
esac
