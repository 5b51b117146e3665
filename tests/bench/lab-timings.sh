#!/usr/bin/env bash
# Lab orchestration timings against the local lab's targets (a benchmark, not
# a test: timings on a shared 2-core machine are noisy, so it reports, it does
# not fail). Measures, in one run:
#   image build from scratch (target <= 180 s)
#   up, 2 nodes, image cached (target <= 60 s)
#   up, 4 nodes, image cached (target <= 1.5 x the 2-node time)
#   down (target <= 5 s)
# Usage: tests/bench/lab-timings.sh [--skip-image]   (after cargo build --release)
set -euo pipefail
cd "$(dirname "$0")/../.."
target=${CARGO_TARGET_DIR:-target}
labctl="$target/release/labctl"
[ -x "$labctl" ] || { echo "build first: cargo build --release -p labctl -p rdma-agent" >&2; exit 1; }
export LABCTL_STATE_DIR=$(mktemp -d /tmp/labctl-bench.XXXXXX)
trap '"$labctl" --lab local down >/dev/null 2>&1 || true; "$labctl" --lab quad down >/dev/null 2>&1 || true; rm -rf "$LABCTL_STATE_DIR"' EXIT

now() { date +%s.%N; }
secs() { echo "$2 - $1" | bc -l | xargs printf '%.1f'; }
row() { printf '%-34s %8s s   %s\n' "$1" "$2" "$3"; }

echo "labctl lab timings ($(nproc) cores)"
if [ "${1:-}" != "--skip-image" ]; then
    cache=$(mktemp -d /tmp/labctl-bench-cache.XXXXXX)
    t0=$(now)
    LABCTL_CACHE_DIR=$cache "$labctl" --lab local up >/dev/null 2>"$cache.log" || { cat "$cache.log"; exit 1; }
    t1=$(now)
    image=$(grep -o 'image done ([0-9.]*s)' "$cache.log" | grep -o '[0-9.]*' || echo "?")
    LABCTL_CACHE_DIR=$cache "$labctl" --lab local down >/dev/null
    rm -rf "$cache" "$cache.log"
    row "image build from scratch" "$image" "target <= 180"
    row "up 2 nodes, cold cache (total)" "$(secs "$t0" "$t1")" ""
fi
t0=$(now); "$labctl" --lab local up >/dev/null 2>&1; t1=$(now)
up2=$(secs "$t0" "$t1")
accel=$("$labctl" --lab local status --json | grep -o '"accel": "[a-z]*"' | cut -d'"' -f4)
row "up 2 nodes, image cached" "$up2" "target <= 60 (accelerator: $accel)"
t0=$(now); "$labctl" --lab local up >/dev/null 2>&1; t1=$(now)
row "second up (verify only)" "$(secs "$t0" "$t1")" ""
t0=$(now); "$labctl" --lab local down >/dev/null; t1=$(now)
row "down 2 nodes" "$(secs "$t0" "$t1")" "target <= 5"
t0=$(now); "$labctl" --lab quad up >/dev/null 2>&1; t1=$(now)
up4=$(secs "$t0" "$t1")
row "up 4 nodes, image cached" "$up4" "target <= $(echo "$up2 * 1.5" | bc -l | xargs printf '%.1f') (1.5 x 2 nodes); ratio $(echo "$up4 / $up2" | bc -l | xargs printf '%.2f')"
t0=$(now); "$labctl" --lab quad down >/dev/null; t1=$(now)
row "down 4 nodes" "$(secs "$t0" "$t1")" "target <= 5"
