#!/usr/bin/env bash
# Installs what only the test suite needs, on top of what the controller
# needs (provisioning/host/install-deps.sh, which this runs with the extra
# Debian packages): python3 (the module-cycle check); gcc, make and
# libibverbs-dev (the C verbs example in examples/, built on the host and run
# on the nodes); and moto (PyPI `moto[server]`, the EC2 emulator the AWS
# provider's tests start), in a venv of its own so the system Python is left
# alone; chromium and chromium-driver (the headless browser that opens
# `labctl report html`'s page in tests/lab/html_report.rs).
# Safe to re-run; installs only what is missing. Needs root (or sudo).
#
# Usage: install-test-deps.sh [packages] [moto]   (both when none is named;
# tests/run.sh installs moto beside the end-to-end suite, which needs only
# the packages)
set -euo pipefail
cd "$(dirname "$0")/.."
parts=${*:-packages moto}
for part in $parts; do
    case $part in
    packages)
        bash provisioning/host/install-deps.sh python3 python3-venv gcc make libibverbs-dev chromium chromium-driver
        ;;
    moto)
        venv=${XDG_CACHE_HOME:-$HOME/.cache}/labctl/venv
        if [ ! -x "$venv/bin/moto_server" ]; then
            echo "install-test-deps: installing moto[server] into $venv"
            python3 -m venv "$venv"
            "$venv/bin/pip" install -q 'moto[server]>=5.1,<6'
        fi
        ;;
    *)
        echo "install-test-deps.sh: unknown part '$part' (packages, moto)" >&2
        exit 2
        ;;
    esac
done
