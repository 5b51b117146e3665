#!/usr/bin/env bash
# Builds the lab's node image from Debian packages only:
#   OUT/vmlinux        the Debian kernel, decompressed (an ELF that QEMU boots
#                      through its PVH entry: no firmware, no self-decompression)
#   OUT/base.cpio      the whole root filesystem as an uncompressed initramfs
#   OUT/image.env      what was built (kernel release, suite, package list)
#
# The VM runs entirely from RAM; per-node identity rides on a second small
# cpio archive that labctl appends at boot (the kernel unpacks both).
#
# Usage: build.sh OUT_DIR      (as root: the node files are set up with chroot)
# Env:   LAB_SUITE (bookworm), LAB_MIRROR (Debian default), LAB_EXTRA_PACKAGES
set -euo pipefail

out=${1:?usage: build.sh OUT_DIR}
here=$(cd "$(dirname "$0")" && pwd)
suite=${LAB_SUITE:-bookworm}
mirror=${LAB_MIRROR:-}

[ "$(id -u)" -eq 0 ] || {
    echo "build.sh: building the node image needs root (it chroots into the new root filesystem); run the first labctl up as root or with sudo" >&2
    exit 3
}
for tool in mmdebstrap cpio xz; do
    command -v "$tool" >/dev/null || {
        echo "build.sh: '$tool' is missing; install it with: apt-get install -y mmdebstrap cpio xz-utils" >&2
        exit 3
    }
done

# Runtime packages of the node: the RDMA userspace, the reference tools
# (perftest, ibverbs-utils, rdmacm-utils, libfabric-bin), tcpdump for captures,
# iproute2 for `rdma link` and tc netem, busybox as PID 1 (init with respawn).
packages=busybox,kmod,iproute2,iputils-ping,procps,openssh-server,rdma-core,ibverbs-providers,ibverbs-utils,rdmacm-utils,perftest,libfabric1,libfabric-bin,tcpdump,iptables
[ -n "${LAB_EXTRA_PACKAGES:-}" ] && packages="$packages,$LAB_EXTRA_PACKAGES"

# Kernel modules a node needs. crc32_generic is easy to miss: without it
# `rdma link add ... type rxe` fails with "No such file or directory".
# nf_tables, nft_compat and xt_tcpudp let the node's iptables (the nft
# backend) filter, as a real host's firewall does: rxe's RoCE packets cross
# it, and `labctl doctor` probes that UDP 4791 gets through.
modules="virtio_pci virtio_net crc32_generic rdma_rxe rdma_ucm ib_uverbs ib_umad sch_netem sch_tbf nf_tables nft_compat xt_tcpudp"

work=$(mktemp -d "${TMPDIR:-/tmp}/labctl-image.XXXXXX")
trap 'rm -rf "$work"' EXIT
root=$work/root

# Merged /usr set up by mmdebstrap's own hook, which installs usr-is-merged
# (maybe-merged-usr: only on suites that have that package). Left to apt,
# init-system-helpers' `usrmerge | usr-is-merged` pulls in the usrmerge
# converter and with it perl: 50 MB of a 170 MB root file system that every
# boot unpacks, for a conversion done once at build time.
merged_usr=/usr/share/mmdebstrap/hooks/maybe-merged-usr
[ -x "$merged_usr/setup00.sh" ] || {
    echo "build.sh: mmdebstrap's maybe-merged-usr hook is missing ($merged_usr); install mmdebstrap 1.0 or later" >&2
    exit 3
}

echo "image: mmdebstrap $suite ($packages)"
mmdebstrap --variant=minbase --include="$packages" \
    --hook-dir="$merged_usr" \
    --skip=cleanup/apt/lists \
    --dpkgopt='path-exclude=/usr/share/man/*' \
    --dpkgopt='path-exclude=/usr/share/doc/*' \
    --dpkgopt='path-exclude=/usr/share/locale/*' \
    --dpkgopt='path-exclude=/usr/share/info/*' \
    "$suite" "$root" ${mirror:+"$mirror"}

echo "image: kernel"
kpkg=$(chroot "$root" apt-cache show linux-image-amd64 | sed -n 's/^Depends: \(linux-image-[^ ,]*\).*/\1/p' | head -n1)
[ -n "$kpkg" ] || { echo "build.sh: cannot resolve the kernel package behind linux-image-amd64" >&2; exit 4; }
chroot "$root" sh -c "cd /tmp && apt-get download -q $kpkg" >/dev/null
chroot "$root" sh -c 'dpkg-deb -x /tmp/linux-image-*.deb /tmp/kernel'
kver=$(ls "$root/tmp/kernel/lib/modules")
# Under TCG the bzImage's own xz decompression took ~3.5 s of every boot;
# the ELF inside it is booted directly instead (Debian builds it with a PVH
# entry note, which QEMU's -kernel needs for an ELF).
bz="$root/tmp/kernel/boot/vmlinuz-$kver"
xz_at=$(LC_ALL=C grep -obUaP '\xfd7zXZ\x00' "$bz" | head -n1 | cut -d: -f1)
[ -n "$xz_at" ] || { echo "build.sh: $bz holds no xz-compressed kernel" >&2; exit 4; }
tail -c +"$((xz_at + 1))" "$bz" | xz -dc >"$work/vmlinux" 2>/dev/null || true
[ "$(head -c 4 "$work/vmlinux" | od -An -tx1 | tr -d ' ')" = 7f454c46 ] ||
    { echo "build.sh: the kernel in $bz did not decompress to an ELF" >&2; exit 4; }

# Keep only the modules the node needs (and what they depend on), resolved by
# the node's own kmod against the kernel's module tree.
mkdir -p "$root/lib/modules"
mv "$root/tmp/kernel/lib/modules/$kver" "$root/lib/modules/$kver"
chroot "$root" depmod "$kver"
keep=$(chroot "$root" sh -c "for m in $modules; do modprobe -S $kver --show-depends \$m; done" \
    | awk '$1 == "insmod" { print $2 }' | sort -u)
for m in $modules; do
    chroot "$root" modprobe -S "$kver" --show-depends "$m" >/dev/null 2>&1 ||
        { echo "build.sh: kernel $kver has no module $m" >&2; exit 4; }
done
find "$root/lib/modules/$kver/kernel" -type f | while read -r f; do
    rel=${f#"$root"}
    grep -qxF "$rel" <<<"$keep" || rm -f "$f"
done
find "$root/lib/modules/$kver/kernel" -type d -empty -delete
chroot "$root" depmod "$kver"

echo "image: node files"
cp -a "$here/rootfs/." "$root/"
chmod 0755 "$root/etc/lab/boot.sh" "$root/usr/local/lib/lab/agent-run"
# An sshd without -r (see etc/inittab) is started as it comes.
sshd_probe=$(chroot "$root" /usr/sbin/sshd -r -t -f /dev/null -h /nonexistent 2>&1 || true)
case $sshd_probe in
*"unknown option -- r"*) sed -i 's|^::respawn:/usr/sbin/sshd -D -e -r$|::respawn:/usr/sbin/sshd -D -e|' "$root/etc/inittab" ;;
esac
ln -sf /bin/busybox "$root/init"
ln -sf /bin/busybox "$root/sbin/init"
# Host keys are generated per node at boot; a shared key would defeat pinning.
rm -f "$root"/etc/ssh/ssh_host_*
mkdir -p "$root/root/.ssh" "$root/run/sshd"
chmod 0700 "$root/root/.ssh"

# Prune what a RAM-only node never uses.
rm -rf "$root/tmp/"* "$root/var/cache/apt/"* "$root/var/lib/apt/lists/"* \
    "$root/usr/share/man" "$root/usr/share/doc" "$root/usr/share/locale" \
    "$root/usr/share/info" "$root/var/log/"* \
    "$root/usr/lib/udev/hwdb.d" "$root/usr/lib/udev/hwdb.bin"

echo "image: pack"
# Uncompressed: under TCG the kernel's gunzip of the archive took ~4 s of
# every boot, copying it takes less than that (and the host reads it from
# the page cache).
(cd "$root" && find . -print0 | cpio --null -o -H newc --quiet) >"$work/base.cpio"

mkdir -p "$out"
mv "$work/vmlinux" "$work/base.cpio" "$out/"
cat >"$out/image.env" <<EOF
LAB_IMAGE_SUITE=$suite
LAB_IMAGE_KERNEL=$kver
LAB_IMAGE_PACKAGES=$packages
EOF
echo "image: done: kernel $kver, $(du -h "$out/base.cpio" | cut -f1) initramfs"
