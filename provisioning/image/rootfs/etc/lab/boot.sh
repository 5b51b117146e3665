#!/bin/sh
# Runs once at boot (busybox init sysinit): mounts, identity, networking, host key.
# Identity comes from /etc/lab/node.env, carried by the per-node initramfs labctl appends.
#
# `labctl up` waits for this script, and on an emulated CPU every program it
# starts costs the node 50-150 ms (exec and dynamic linking). So it starts
# three (mount, modprobe, ip) and does the rest with shell built-ins.
mount -a

. /etc/lab/node.env
echo "$LAB_HOSTNAME" >/proc/sys/kernel/hostname
echo "$LAB_HOSTNAME" >/etc/hostname

modprobe -a virtio_pci virtio_net

# NICs are found by the MACs labctl assigned, not by probe order.
find_nics() {
    mgmt= data=
    for d in /sys/class/net/*; do
        read -r mac <"$d/address" 2>/dev/null || continue
        case $mac in
        "$LAB_MGMT_MAC") mgmt=${d##*/} ;;
        "$LAB_DATA_MAC") data=${d##*/} ;;
        esac
    done
}
i=0
find_nics
while [ -z "$mgmt" ] || [ -z "$data" ]; do
    i=$((i + 1)); [ $i -gt 50 ] && { echo "lab-boot: NICs not found"; break; }
    sleep 0.1
    find_nics
done
# -force: a failed line does not stop the ones after it.
ip -force -batch - <<LINKS
link set lo up
link set $mgmt up
address add 10.0.2.15/24 dev $mgmt
route add default via 10.0.2.2
link set $data up
address add $LAB_DATA_ADDR/$LAB_DATA_PREFIX dev $data
LINKS
echo "LAB_DATA_NETDEV=$data" >/run/lab-data-netdev

[ -f /etc/ssh/ssh_host_ed25519_key ] || ssh-keygen -q -t ed25519 -N '' -f /etc/ssh/ssh_host_ed25519_key
echo "lab-boot: $LAB_HOSTNAME up: mgmt=$mgmt data=$data $LAB_DATA_ADDR/$LAB_DATA_PREFIX"
