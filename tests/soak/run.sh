#!/usr/bin/env bash
# Soak: many mixed runs on the default lab, watching for what a long life
# leaks. Every pair workload of the catalogue (verbs, libfabric, bulk) in
# turn, every tenth run with an injected fault (so it fails its verdict, as
# it must), and every SAMPLE_EVERY runs a sample of:
#   - each node's agent: resident memory, open file descriptors, threads;
#   - the controller: files left in its temporary directory, the size of the
#     lab's state directory (logs included), the saved results.
# At the end it checks the bounds below against the first sample (taken after
# one full round of the workloads, so that every code path has been
# allocated once) and exits 1 if one was crossed, or if a run failed that
# should have verified, or verified when a fault was injected.
#
# Not part of tests/run.sh (1000 runs take about an hour on two TCG nodes).
# Usage, after the README's main command:
#   tests/soak/run.sh [RUNS]            (RUNS default 1000)
# Prints a Markdown table (docs/reliability.md shows one) and keeps its log
# under $SOAK_DIR (default: a new /tmp/labctl-soak.XXXXXX).
set -euo pipefail
cd "$(dirname "$0")/../.."
target=${CARGO_TARGET_DIR:-target}
labctl="$PWD/$target/release/labctl"
[[ $target = /* ]] && labctl="$target/release/labctl"
[ -x "$labctl" ] || { echo "build first: cargo build --release -p labctl -p rdma-agent" >&2; exit 1; }

runs=${1:-1000}
sample_every=${SAMPLE_EVERY:-50}
# Bounds, against the first sample: agent RSS may grow by 2 MiB (allocator
# caches), nothing else may grow at all (but the saved results, one file a run,
# and the state directory's logs, by at most 1 MiB over the soak).
rss_bound_kib=2048
state_bound_kib=1024

soak=${SOAK_DIR:-$(mktemp -d /tmp/labctl-soak.XXXXXX)}
mkdir -p "$soak/tmp" "$soak/state"
export LABCTL_STATE_DIR="$soak/state"
# The controller's temporary files land here, where they can be counted.
export TMPDIR="$soak/tmp"
log="$soak/runs.log"
lab=(--lab local)
trap '"$labctl" "${lab[@]}" down >/dev/null 2>&1 || true' EXIT

# Each workload small enough that a run takes seconds under emulation.
declare -A args=(
    [write-read]="-n 16" [write-imm]="" [send-recv]="-n 16" [read]="-n 16" [atomic]="-n 32"
    [write-bw]="-n 50" [read-bw]="-n 50" [send-bw]="-n 50" [atomic-bw]="-n 100"
    [write-lat]="-n 50" [read-lat]="-n 50" [send-lat]="-n 50" [atomic-lat]="-n 50"
    [fabric-write]="-s 4096 -n 16" [fabric-bw]="-s 4096 -n 50" [fabric-lat]="-s 64 -n 50"
    [mr-cache]="" [param-server]="" [inference-ring]=""
    [bulk-rdma]="--total 1MiB" [bulk-tcp]="--total 1MiB"
)
workloads=(write-read write-imm send-recv read atomic write-bw read-bw send-bw atomic-bw
    write-lat read-lat send-lat atomic-lat fabric-write fabric-bw fabric-lat
    mr-cache param-server inference-ring bulk-rdma bulk-tcp)
# The fault each workload takes (the catalogue's: corrupt where it can).
fault_of() {
    case $1 in
        atomic|atomic-bw|atomic-lat|fabric-bw) echo skip ;;
        *) echo corrupt ;;
    esac
}

echo "soak: $runs runs on lab local, samples every $sample_every, log $log" >&2
"$labctl" "${lab[@]}" up >"$soak/up.log" 2>&1 || { cat "$soak/up.log" >&2; exit 1; }

agent_sample() {
    "$labctl" "${lab[@]}" exec "$1" -- \
        'p=$(pgrep -xo rdma-agent); echo $(awk "/^VmRSS/{print \$2}" /proc/$p/status) $(ls /proc/$p/fd | wc -l) $(ls /proc/$p/task | wc -l)'
}
kib() { du -sk "$1" 2>/dev/null | cut -f1; }
# Every file of the lab's state directory with its size, for the list of
# what grew at the end.
state_files() { find "$LABCTL_STATE_DIR/local" -type f -printf '%s %P\n' 2>/dev/null | sort -k2; }

printf '| runs | server agent RSS KiB / fds / threads | client agent RSS KiB / fds / threads | controller temp files | lab state dir KiB | saved results (files, KiB) |\n'
printf '|---:|---|---|---:|---:|---|\n'
first=""
sample() {
    local s c tmp state results_files results_kib
    s=$(agent_sample server); c=$(agent_sample client)
    tmp=$(find "$TMPDIR" -mindepth 1 | wc -l)
    state=$(kib "$LABCTL_STATE_DIR/local")
    results_files=$(find "$LABCTL_STATE_DIR/.results" -type f 2>/dev/null | wc -l)
    results_kib=$(kib "$LABCTL_STATE_DIR/.results" || echo 0)
    printf '| %s | %s | %s | %s | %s | %s, %s |\n' "$1" "${s// / \/ }" "${c// / \/ }" "$tmp" "$state" \
        "$results_files" "${results_kib:-0}"
    last="$s $c $tmp $state"
    [ -n "$first" ] || { first=$last; state_files >"$soak/state-files.first"; }
}

unexpected=0; faulted=0; failed_as_injected=0
for ((i = 1; i <= runs; i++)); do
    w=${workloads[$(( (i - 1) % ${#workloads[@]} ))]}
    extra=()
    if (( i % 10 == 0 )); then
        extra=(--inject-fault "$(fault_of "$w")")
        faulted=$((faulted + 1))
    fi
    # shellcheck disable=SC2086 # the workload's arguments are words
    if "$labctl" "${lab[@]}" run "$w" ${args[$w]} "${extra[@]}" >>"$log" 2>&1; then
        if (( ${#extra[@]} )); then
            echo "run $i ($w ${extra[*]}): verified although a fault was injected" | tee -a "$log" >&2
            unexpected=$((unexpected + 1))
        fi
    else
        if (( ${#extra[@]} )) && tail -n 40 "$log" | grep -q 'verified    NO'; then
            failed_as_injected=$((failed_as_injected + 1))
        else
            echo "run $i ($w ${extra[*]}): failed" | tee -a "$log" >&2
            unexpected=$((unexpected + 1))
        fi
    fi
    if (( i == ${#workloads[@]} || i % sample_every == 0 || i == runs )); then
        sample "$i"
    fi
done

read -r s_rss s_fd s_thr c_rss c_fd c_thr tmp state <<<"$first"
read -r s_rss2 s_fd2 s_thr2 c_rss2 c_fd2 c_thr2 tmp2 state2 <<<"$last"
bad=0
bound() { # what, grown, limit
    if (( $2 > $3 )); then echo "BOUND CROSSED: $1 grew by $2 (bound $3)"; bad=1; else echo "held: $1 grew by $2 (bound $3)"; fi
}
echo
bound "server agent RSS KiB" $((s_rss2 - s_rss)) $rss_bound_kib
bound "client agent RSS KiB" $((c_rss2 - c_rss)) $rss_bound_kib
bound "server agent fds" $((s_fd2 - s_fd)) 0
bound "client agent fds" $((c_fd2 - c_fd)) 0
bound "server agent threads" $((s_thr2 - s_thr)) 0
bound "client agent threads" $((c_thr2 - c_thr)) 0
bound "controller temp files" $((tmp2 - tmp)) 0
bound "lab state dir KiB" $((state2 - state)) $state_bound_kib
# Which files the state directory's growth is in (bytes, since the first sample).
state_files >"$soak/state-files.last"
join -1 2 -2 2 -a 2 -e 0 -o '0,1.1,2.1' "$soak/state-files.first" "$soak/state-files.last" |
    awk '$3 != $2 { printf "grew: %s by %d bytes (%d -> %d)\n", $1, $3 - $2, $2, $3 }'
echo "runs: $runs, faults injected: $faulted (failed their verdict: $failed_as_injected), unexpected outcomes: $unexpected"
(( unexpected == 0 && bad == 0 ))
