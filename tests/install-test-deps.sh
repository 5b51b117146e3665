#!/usr/bin/env bash
# Installs what only the test suite needs, on top of
# provisioning/host/install-deps.sh: python3 (the module-cycle check) and
# moto (PyPI `moto[server]`, the EC2 emulator the AWS provider's tests
# start), in a venv of its own so the system Python is left alone.
# Safe to re-run; installs only what is missing. Needs root (or sudo).
set -euo pipefail
packages=(python3 python3-venv)
missing=()
for p in "${packages[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
    echo "install-test-deps: installing ${missing[*]}"
    sudo=""
    [ "$(id -u)" -eq 0 ] || sudo=sudo
    $sudo apt-get update -q
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -q --no-install-recommends "${missing[@]}"
fi
venv=${XDG_CACHE_HOME:-$HOME/.cache}/labctl/venv
if [ ! -x "$venv/bin/moto_server" ]; then
    echo "install-test-deps: installing moto[server] into $venv"
    python3 -m venv "$venv"
    "$venv/bin/pip" install -q 'moto[server]>=5.1,<6'
fi
