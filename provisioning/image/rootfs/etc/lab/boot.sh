#!/bin/sh
# Runs once at boot (busybox init sysinit): mounts, identity, networking, host key.
# Identity comes from /etc/lab/node.env, carried by the per-node initramfs labctl appends.
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev 2>/dev/null
mkdir -p /dev/pts /dev/shm
mount -t devpts devpts /dev/pts
mount -t tmpfs tmpfs /dev/shm
mount -t tmpfs tmpfs /run
mkdir -p /run/sshd /var/log /tmp
chmod 1777 /tmp

. /etc/lab/node.env
hostname "$LAB_HOSTNAME"
echo "$LAB_HOSTNAME" >/etc/hostname

modprobe virtio_pci
modprobe virtio_net

# NICs are found by the MACs labctl assigned, not by probe order.
nic_by_mac() {
    for d in /sys/class/net/*; do
        [ "$(cat "$d/address" 2>/dev/null)" = "$1" ] && { basename "$d"; return; }
    done
}
i=0
while [ -z "$(nic_by_mac "$LAB_MGMT_MAC")" ] || [ -z "$(nic_by_mac "$LAB_DATA_MAC")" ]; do
    i=$((i + 1)); [ $i -gt 50 ] && { echo "lab-boot: NICs not found"; break; }; sleep 0.1
done
mgmt=$(nic_by_mac "$LAB_MGMT_MAC")
data=$(nic_by_mac "$LAB_DATA_MAC")
ip link set lo up
ip link set "$mgmt" up
ip addr add 10.0.2.15/24 dev "$mgmt"
ip route add default via 10.0.2.2
ip link set "$data" up
ip addr add "$LAB_DATA_ADDR/$LAB_DATA_PREFIX" dev "$data"
echo "LAB_DATA_NETDEV=$data" >/run/lab-data-netdev

[ -f /etc/ssh/ssh_host_ed25519_key ] || ssh-keygen -q -t ed25519 -N '' -f /etc/ssh/ssh_host_ed25519_key
echo "lab-boot: $LAB_HOSTNAME up: mgmt=$mgmt data=$data $LAB_DATA_ADDR/$LAB_DATA_PREFIX"
