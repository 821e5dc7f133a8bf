#!/usr/bin/env bash
# Two "machines" on one: network namespaces A and B joined by a veth pair (10.99.0.1/24 and
# 10.99.0.2/24, each end named tgveth0, nothing else in them but loopback). mpirun starts inside A
# and reaches both hosts through a launch agent that runs `ip netns exec` where ssh would log in;
# the ranks talk over TCP on the veth only. The run must print the log and write the checkpoint of
# the single process with --micro-batches 2. Needs root and iproute2; skipped (exit 77) otherwise.
. "$(dirname "$0")/lib.sh"

NS_A=tgdist$$a NS_B=tgdist$$b IF=tgveth0
require_netns() {
  [ "$(id -u)" = 0 ] || skip "network namespaces need root"
  command -v ip >/dev/null || skip "ip (iproute2) not installed"
  ip netns add "tgprobe$$" 2>/dev/null || skip "cannot create a network namespace here"
  ip netns del "tgprobe$$"
}
require_engine
require_netns
[ "$WORK" = --check ] && exit 0

cleanup() {
  ip netns del "$NS_A" 2>/dev/null
  ip netns del "$NS_B" 2>/dev/null
}
trap cleanup EXIT
trap "exit 1" INT TERM HUP
# Deleting a namespace deletes its end of the veth pair, and with it the other end.
ip netns add "$NS_A" && ip netns add "$NS_B" || fail "cannot create the namespaces"
ip link add "tg$$a" type veth peer name "tg$$b" || fail "cannot create a veth pair"
setup_end() {  # namespace, host-side name, address
  ip link set "$2" netns "$1" && ip -n "$1" link set "$2" name $IF &&
    ip -n "$1" addr add "$3/24" dev $IF && ip -n "$1" link set $IF up && ip -n "$1" link set lo up
}
setup_end "$NS_A" "tg$$a" 10.99.0.1 && setup_end "$NS_B" "tg$$b" 10.99.0.2 ||
  fail "cannot set up the veth pair"

# The launch agent: Open MPI calls it as ssh, `AGENT HOST COMMAND...`, to start its daemon. Each
# host gets its own temporary directory, as two machines would: in a shared /tmp both daemons
# (same host name) wrote one session directory, and one crashed in hwloc_shmem_topology_write
# while the other rewrote the topology file (SIGSEGV, 1 run in ~15 under load).
agent=$WORK/agent.sh
cat >"$agent" <<AGENT
#!/bin/sh
host=\$1; shift
case \$host in
  a) ns=$NS_A ;;
  b) ns=$NS_B ;;
  *) echo "agent: unknown host \$host" >&2; exit 1 ;;
esac
echo "\$host" >>"$WORK/agent.log"
mkdir -p "$WORK/tmp.\$host"
OMPI_MCA_orte_tmpdir_base=$WORK/tmp.\$host exec ip netns exec "\$ns" /bin/sh -c "\$*"
AGENT
chmod +x "$agent"

run_single "$WORK/single" --epochs 1 --micro-batches 2 || fail "the single process failed: $(cat "$WORK/single/stderr.txt")"

dir=$WORK/two_hosts
mkdir -p "$dir"
timeout 300 ip netns exec "$NS_A" mpirun --host a:1,b:1 -np 2 --mca plm_rsh_agent "$agent" \
  --mca btl tcp,self --mca btl_tcp_if_include $IF --mca oob_tcp_if_include $IF \
  "$TAPEGRAD" train $(train_args) --epochs 1 --out "$dir/out" --log "$dir/log.jsonl" \
  >"$dir/stdout.txt" 2>"$dir/stderr.txt"
rc=$?
[ $rc = 0 ] || fail "mpirun across the namespaces exited $rc: $(head -25 "$dir/stderr.txt")"
# Both daemons were started through the agent, one per host: the ranks ran in A and in B.
[ "$(sort "$WORK/agent.log" | tr '\n' ' ')" = "a b " ] ||
  fail "the agent started '$(tr '\n' ' ' <"$WORK/agent.log")', not one daemon on a and one on b"
same_run "$WORK/single" "$dir"
echo "two hosts over TCP: same log and checkpoint as --micro-batches 2"
