#!/usr/bin/env bash
# The whole test suite, on a fresh machine: installs what it needs, builds
# once (release: the agent that runs in the VMs is the one users get), runs
# format and lint checks, the unit and in-process tests, then the end-to-end
# suite that boots a real two-node QEMU lab, runs against it and tears it down.
#
# It builds into the same ./target as the README's main command (cargo's
# default), so after that command nothing is rebuilt but the test-only
# crates, and target/release/labctl is the labctl just tested. CI, which
# starts from a fresh clone each time, points CARGO_TARGET_DIR at a
# directory that survives between runs (.ci/run). The node image is cached
# under ~/.cache/labctl/images.
set -euo pipefail
cd "$(dirname "$0")/.."

bash tests/install-test-deps.sh
export CARGO_TERM_COLOR=never

# Each step's header says how long the suite has run so far, so that a CI
# log shows where its time went.
step() { echo; echo "=== $* === ($(date -u +%H:%M:%S), ${SECONDS} s into the suite)"; }

step "format"
cargo fmt --all --check

step "build"
cargo build --release --locked -p labctl -p rdma-agent

step "lint"
cargo clippy --release --locked --workspace --all-targets -- -D warnings

step "architecture: no import cycles between the modules of a crate"
python3 -m unittest discover -s tests/tools -p 'test_*.py'
python3 tests/tools/module_cycles.py

step "build: the build, unit tests and end-to-end tests agree on dependency features"
python3 tests/tools/feature_sets.py

step "fuzz targets: build on stable and replay their corpus"
# Built in one command with the build, so that cargo gives the dependencies
# they share the build's features and reuses its artifacts: only libFuzzer
# and the targets compile. Without cargo-fuzz's instrumentation libFuzzer
# just runs every input once.
target_dir=${CARGO_TARGET_DIR:-$PWD/target}
cargo build --release --locked -p labctl -p rdma-agent -p labctl-fuzz
for fuzz_target in agent_request labs_yaml; do
    "$target_dir/release/$fuzz_target" -runs=0 "fuzz/corpus/$fuzz_target"
done

step "unit and in-process tests"
cargo test --release --locked --workspace --exclude lab-tests

step "end-to-end: real QEMU lab"
cargo test --release --locked -p lab-tests

step "done"
