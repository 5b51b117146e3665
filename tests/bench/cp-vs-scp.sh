#!/usr/bin/env bash
# `labctl cp` to two nodes in parallel against `scp` to the same two nodes in
# parallel, side by side on one lab (a benchmark, not a test: it reports the
# ratio, it does not fail). Target: labctl cp >= 0.8 x scp's throughput.
# Both copy the same random file to /tmp on both nodes; rounds alternate so
# drift in the machine's load hits both alike; the median of each is compared.
# Usage: tests/bench/cp-vs-scp.sh [MIB] [ROUNDS]   (after cargo build --release)
set -euo pipefail
cd "$(dirname "$0")/../.."
target=${CARGO_TARGET_DIR:-target}
labctl="$PWD/$target/release/labctl"
[ -x "$labctl" ] || labctl="$target/release/labctl"
[ -x "$labctl" ] || { echo "build first: cargo build --release -p labctl -p rdma-agent" >&2; exit 1; }
mib=${1:-50}
rounds=${2:-3}
work=$(mktemp -d /tmp/labctl-cp-bench.XXXXXX)
cp tests/labs/e2e.yaml "$work/labs.yaml"
sed -i 's/name: e2e/name: cpbench/' "$work/labs.yaml"
cd "$work"
trap '"$labctl" down >/dev/null 2>&1 || true; cd /; rm -rf "$work"' EXIT
"$labctl" up >/dev/null 2>&1
head -c $((mib << 20)) /dev/urandom > payload
state=.labctl/cpbench
ssh_opts=(-q -i "$state/id_ed25519" -o "UserKnownHostsFile=$state/known_hosts" -o StrictHostKeyChecking=yes -o IdentitiesOnly=yes)
# `up` wrote known_hosts with the host keys labctl made for the nodes.
ports=$(python3 -c "import json; s=json.load(open('$state/state.json')); print(' '.join(str(n['ssh_port']) for n in s['nodes']))")

now() { date +%s.%N; }
median() { sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
labctl_runs=(); scp_runs=()
for round in $(seq "$rounds"); do
    t0=$(now); "$labctl" cp -q payload @all:/tmp/payload.labctl >/dev/null 2>&1; t1=$(now)
    labctl_runs+=("$(echo "$t1 - $t0" | bc -l)")
    t0=$(now)
    for port in $ports; do scp "${ssh_opts[@]}" -P "$port" payload "root@127.0.0.1:/tmp/payload.scp" & done
    wait
    t1=$(now)
    scp_runs+=("$(echo "$t1 - $t0" | bc -l)")
done
"$labctl" exec --all -- 'cmp /tmp/payload.labctl /tmp/payload.scp && echo same bytes' >/dev/null
ours=$(printf '%s\n' "${labctl_runs[@]}" | median)
theirs=$(printf '%s\n' "${scp_runs[@]}" | median)
bytes=$((2 * mib))
printf 'cp of %d MiB to 2 nodes in parallel, median of %d rounds (%d cores)\n' "$mib" "$rounds" "$(nproc)"
printf '  labctl cp   %6.2f s  %6.1f MiB/s   rounds: %s\n' "$ours" "$(echo "$bytes / $ours" | bc -l)" "${labctl_runs[*]}"
printf '  scp         %6.2f s  %6.1f MiB/s   rounds: %s\n' "$theirs" "$(echo "$bytes / $theirs" | bc -l)" "${scp_runs[*]}"
printf '  throughput ratio labctl/scp: %.2f (target >= 0.80)\n' "$(echo "$theirs / $ours" | bc -l)"
