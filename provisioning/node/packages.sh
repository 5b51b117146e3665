#!/bin/sh
# Makes sure the lab's `packages:` (labs.yaml) are installed on this node.
# Usage: packages.sh check|install PACKAGE...
#   check    the node image should have them (QEMU bakes them in): exit 30
#            naming the missing ones
#   install  apt-get installs the missing ones, non-interactively, without
#            recommends (as the QEMU image does)
# Progress goes to stdout as `packages: ...` lines (labctl shows them); apt's
# own output goes to stderr, where labctl finds apt's `E:` lines on failure.
set -u
mode=${1:?usage: packages.sh check|install PACKAGE...}
shift
missing=
for p in "$@"; do
    case $(dpkg-query -W -f='${Status}' "$p" 2>/dev/null) in
    *" ok installed") ;;
    *) missing="$missing $p" ;;
    esac
done
if [ -z "$missing" ]; then
    echo "packages: all $# installed"
    exit 0
fi
if [ "$mode" = check ]; then
    echo "not installed:$missing" >&2
    exit 30
fi
command -v apt-get >/dev/null || {
    echo "apt-get is missing: packages: needs a Debian or Ubuntu image" >&2
    exit 31
}
export DEBIAN_FRONTEND=noninteractive
# On a cloud image, cloud-init may still be installing its own packages at
# first boot, holding apt's lock: wait for it, and for the lock after that.
if command -v cloud-init >/dev/null 2>&1; then
    echo "packages: waiting for cloud-init to finish"
    cloud-init status --wait </dev/null >/dev/null 2>&1 || :
fi
echo "packages: apt-get update"
apt-get -q -y -o DPkg::Lock::Timeout=300 update </dev/null >&2 || exit 32
echo "packages: apt-get install$missing"
# $missing is word-split on purpose: labctl checked every name (lowercase
# letters, digits, + - .), so no word holds a space or a glob character.
# shellcheck disable=SC2086
apt-get -q -y -o DPkg::Lock::Timeout=300 -o Dpkg::Use-Pty=0 install --no-install-recommends $missing </dev/null >&2 || exit 33
echo "packages: installed$missing"
