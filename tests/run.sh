#!/usr/bin/env bash
# The whole test suite, on a fresh machine: installs what it needs, builds
# once (release: the agent that runs in the VMs is the one users get), runs
# format and lint checks, the unit and in-process tests, then the end-to-end
# suite that boots a real two-node QEMU lab, runs against it and tears it down.
#
# The cargo target directory defaults to ~/.cache/labctl/cargo-target so
# repeated runs on one machine (CI included) reuse the build; the node image
# is cached under ~/.cache/labctl/images the same way.
set -euo pipefail
cd "$(dirname "$0")/.."

bash provisioning/host/install-deps.sh
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$HOME/.cache/labctl/cargo-target}
export CARGO_TERM_COLOR=never

step() { echo; echo "=== $* ==="; }

step "format"
cargo fmt --all --check

step "build"
cargo build --release --locked -p labctl -p rdma-agent

step "lint"
cargo clippy --release --locked --workspace --all-targets -- -D warnings

step "unit and in-process tests"
cargo test --release --locked --workspace --exclude lab-tests

step "end-to-end: real QEMU lab"
cargo test --release --locked -p lab-tests
