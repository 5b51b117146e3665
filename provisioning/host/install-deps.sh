#!/usr/bin/env bash
# Installs what the controller host needs, from Debian packages: QEMU (the
# local provider), mmdebstrap/cpio (the node image), cmake/clang (sideway's
# build), protoc (the agent contract), openssh-client (`labctl ssh`).
# Safe to re-run; installs only what is missing. Needs root (or sudo).
set -euo pipefail
packages=(bc qemu-system-x86 mmdebstrap cpio gzip cmake clang libclang-dev protobuf-compiler pkg-config openssh-client libfabric-dev libfabric-bin python3 python3-venv)
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
# moto (PyPI `moto[server]`), in a venv of its own so the system Python is
# left alone; the AWS provider's tests start `moto_server` from here.
venv=${XDG_CACHE_HOME:-$HOME/.cache}/labctl/venv
if [ ! -x "$venv/bin/moto_server" ]; then
    echo "install-deps: installing moto[server] into $venv"
    python3 -m venv "$venv"
    "$venv/bin/pip" install -q 'moto[server]>=5.1,<6'
fi
