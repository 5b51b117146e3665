#!/usr/bin/env bash
# Installs what the controller host needs, from Debian packages: QEMU (the
# local provider), mmdebstrap/cpio (the node image), cmake/clang (sideway's
# build), protoc (the agent contract), openssh-client (`labctl ssh`).
# Safe to re-run; installs only what is missing. Needs root (or sudo).
# Extra Debian packages may be named as arguments (tests/install-test-deps.sh
# adds the test suite's).
set -euo pipefail
packages=(bc qemu-system-x86 mmdebstrap cpio xz-utils cmake clang libclang-dev protobuf-compiler pkg-config openssh-client libfabric-dev libfabric-bin "$@")
missing=()
for p in "${packages[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
    echo "install-deps: installing ${missing[*]}"
    sudo=""
    [ "$(id -u)" -eq 0 ] || sudo=sudo
    $sudo apt-get update -q
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -q --no-install-recommends "${missing[@]}"
fi
command -v cargo >/dev/null || {
    echo "install-deps: cargo is missing; install Rust with rustup (https://rustup.rs)" >&2
    exit 1
}
