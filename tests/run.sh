#!/usr/bin/env bash
# The whole test suite, on a fresh machine: installs what it needs, builds
# once (release: the agent that runs in the VMs is the one users get), runs
# the format and architecture checks, then the end-to-end suite that boots a
# real two-node QEMU lab, runs against it and tears it down, and beside it
# the fuzz targets' replay, lint and the unit and in-process tests.
#
# It builds into the same ./target as the README's main command (cargo's
# default), so after that command nothing is rebuilt but the test-only
# crates, and target/release/labctl is the labctl just tested. CI, which
# starts from a fresh clone each time, points CARGO_TARGET_DIR at a
# directory that survives between runs (.ci/run). The node image is cached
# under ~/.cache/labctl/images.
set -euo pipefail
cd "$(dirname "$0")/.."

bash tests/install-test-deps.sh packages
export CARGO_TERM_COLOR=never

# Each step's header says how long the suite has run so far, so that a CI
# log shows where its time went.
step() { echo; echo "=== $* === ($(date -u +%H:%M:%S), ${SECONDS} s into the suite)"; }

step "format"
cargo fmt --all --check

step "build"
cargo build --release --locked -p labctl -p rdma-agent

step "architecture: no import cycles between the modules of a crate"
python3 -m unittest discover -s tests/tools -p 'test_*.py'
python3 tests/tools/module_cycles.py

step "build: the build, unit tests and end-to-end tests agree on dependency features"
python3 tests/tools/feature_sets.py

step "end-to-end: build the suite"
e2e_bin=$(cargo test --release --locked -p lab-tests --no-run --message-format=json-render-diagnostics |
    python3 -c 'import json, sys
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") == "compiler-artifact" and m["target"]["name"] == "lab" and m["profile"]["test"]:
        print(m["executable"])')
test -x "$e2e_bin"

# The fuzz targets, lint and the unit tests run beside the end-to-end
# suite: its VMs leave about a third of the two cores idle (waiting on SSH,
# RPCs and timeouts), and these steps are about 9 minutes on a fresh
# machine. Their compiles (and moto's install) run at the lowest priority,
# so that the VMs keep the CPU they ask for; the unit tests themselves at
# normal priority (some time their own waits). Their output follows the
# end-to-end suite's; a failure is also announced when it happens.
side_log=$(mktemp)
side_rc=$(mktemp)
set -m # the side job in a process group of its own, so that an interrupted suite stops it all
(
    side_step() { echo; echo "=== $* === ($(date -u +%H:%M:%S), beside the end-to-end suite)"; }
    rc=0
    {
        side_step "fuzz targets: build on stable and replay their corpus"
        # Built in one command with the build, so that cargo gives the
        # dependencies they share the build's features and reuses its
        # artifacts: only libFuzzer and the targets compile. Without
        # cargo-fuzz's instrumentation libFuzzer just runs every input once.
        target_dir=${CARGO_TARGET_DIR:-$PWD/target}
        nice -n 19 cargo build --release --locked -p labctl -p rdma-agent -p labctl-fuzz || rc=1
        for fuzz_target in agent_request labs_yaml; do
            "$target_dir/release/$fuzz_target" -runs=0 "fuzz/corpus/$fuzz_target" || rc=1
        done
        side_step "moto, the EC2 emulator the unit tests start"
        nice -n 19 bash tests/install-test-deps.sh moto || rc=1
        side_step "lint"
        nice -n 19 cargo clippy --release --locked --workspace --all-targets -- -D warnings || rc=1
        side_step "unit and in-process tests: build"
        nice -n 19 cargo test --release --locked --workspace --exclude lab-tests --no-run || rc=1
        side_step "unit and in-process tests"
        cargo test --release --locked --workspace --exclude lab-tests || rc=1
        side_step "fuzz targets, lint and unit tests done"
    } >"$side_log" 2>&1
    echo "$rc" >"$side_rc"
    if [ "$rc" != 0 ]; then
        echo "tests/run.sh: the fuzz targets, lint or unit tests FAILED (running beside the end-to-end suite; their output follows it)" >&2
    fi
) &
side_pid=$!
set +m
trap 'kill -- "-$side_pid" 2>/dev/null || true' EXIT

step "end-to-end: real QEMU lab"
e2e_rc=0
(cd tests && "$e2e_bin") || e2e_rc=$?

step "fuzz targets, lint and unit tests (ran beside the end-to-end suite)"
wait "$side_pid" || true
trap - EXIT
cat "$side_log"
lint_unit_rc=$(cat "$side_rc")
rm -f "$side_log" "$side_rc"
if [ "$e2e_rc" != 0 ] || [ "$lint_unit_rc" != 0 ]; then
    echo "tests/run.sh: end-to-end exit $e2e_rc; fuzz targets, lint and unit tests: $([ "$lint_unit_rc" = 0 ] && echo passed || echo FAILED)" >&2
    exit 1
fi

step "done"
