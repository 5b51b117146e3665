#!/bin/sh
# Loads SoftRoCE and binds an rxe device to the NIC that holds the lab's data
# address, idempotently, then waits for PORT_ACTIVE.
# Usage: rxe-setup.sh DATA_ADDR [NAME [install|check]]
#   NAME: the name of the link to add when the NIC has none (default rxe0, rxe1, ...)
#   check: install no package (hosts labctl does not own); a missing one is an error
# Prints: netdev=<nic> device=<rdma device> created=<1 if this run added the link, else 0>
#
# `up` waits for this on every node, and each program it starts costs an
# emulated node a tenth of a second: on a node that needs nothing installed
# it starts four (ip, modprobe twice, rdma), and reads sysfs with built-ins.
set -u
addr=${1:?usage: rxe-setup.sh DATA_ADDR [NAME [install|check]]}
new_name=${2:-}
packages=${3:-install}
# `ip -o -4 addr show to ADDR`: "3: eth1    inet 10.77.0.1/24 ...".
# shellcheck disable=SC2046 # split into fields on purpose
set -- $(ip -o -4 addr show to "$addr")
netdev=${2:-}
[ -n "$netdev" ] || { echo "no interface holds the data address $addr" >&2; exit 10; }
# Debian-family cloud images: install what a lab image has built in (the
# verbs libraries for the agent, the rdma tool), once.
apt_install() {
    [ "$packages" = install ] || return 1
    command -v apt-get >/dev/null || return 1
    [ -n "${apt_updated:-}" ] || { DEBIAN_FRONTEND=noninteractive apt-get update -q >&2 && apt_updated=1; }
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "$@" >&2
}
verbs=
for lib in /usr/lib/*/libibverbs.so.1 /usr/lib64/libibverbs.so.1; do [ -e "$lib" ] && verbs=1; done
if [ -z "$verbs" ] || [ ! -d /etc/libibverbs.d ]; then
    if [ "$packages" = check ]; then
        echo "the verbs libraries are missing: install libibverbs1 librdmacm1 ibverbs-providers (Debian/Ubuntu names) on the host" >&2
        exit 15
    fi
    apt_install libibverbs1 librdmacm1 ibverbs-providers iproute2 ||
        echo "warning: could not install the verbs libraries (libibverbs1 librdmacm1 ibverbs-providers)" >&2
fi
if [ ! -d /sys/module/rdma_rxe ]; then
    if ! out=$(modprobe rdma_rxe 2>&1); then
        # Ubuntu's cloud kernels keep rdma_rxe in linux-modules-extra.
        if grep -qi ubuntu /etc/os-release 2>/dev/null &&
            apt_install "linux-modules-extra-$(uname -r)"; then
            out=$(modprobe rdma_rxe 2>&1) || {
                echo "cannot load rdma_rxe even after installing linux-modules-extra-$(uname -r): $out" >&2
                exit 11
            }
        else
            echo "cannot load the SoftRoCE module rdma_rxe: $out" >&2
            if grep -qi ubuntu /etc/os-release 2>/dev/null; then
                echo "hint: it ships in linux-modules-extra: apt-get install -y linux-modules-extra-$(uname -r)" >&2
            fi
            exit 11
        fi
    fi
fi
# rxe computes its ICRC with crc32; without crc32_generic `rdma link add` fails
# with a bare "No such file or directory".
modprobe -a crc32_generic rdma_ucm ib_uverbs 2>/dev/null
command -v rdma >/dev/null || { echo "the rdma tool is missing: install iproute2" >&2; exit 12; }
dev=
have_devices=
for d in /sys/class/infiniband/*; do [ -e "$d" ] && have_devices=1; done
# A node with no RDMA device yet (every freshly booted lab node) has no link
# to look for.
if [ -n "$have_devices" ]; then
    dev=$(rdma link show | awk -v n="$netdev" '{ for (i = 1; i < NF; i++) if ($i == "netdev" && $(i + 1) == n) { split($2, d, "/"); print d[1]; exit } }')
fi
created=0
if [ -z "$dev" ]; then
    if [ -n "$new_name" ]; then
        dev=$new_name
    else
        dev=rxe0
        i=0
        while [ -e "/sys/class/infiniband/$dev" ]; do i=$((i + 1)); dev=rxe$i; done
    fi
    out=$(rdma link add "$dev" type rxe netdev "$netdev" 2>&1) ||
        { echo "rdma link add $dev type rxe netdev $netdev failed: $out" >&2; exit 13; }
    created=1
fi
i=0
while :; do
    state=
    { read -r state <"/sys/class/infiniband/$dev/ports/1/state"; } 2>/dev/null
    case "$state" in *ACTIVE*) break ;; esac
    i=$((i + 1))
    [ $i -ge 100 ] && { echo "$dev on $netdev did not reach PORT_ACTIVE (state: ${state:-none})" >&2; exit 14; }
    sleep 0.2
done
echo "netdev=$netdev device=$dev created=$created"
