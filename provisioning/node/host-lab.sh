#!/bin/sh
# What labctl changes on a host it does not own (provider ssh), and how it
# undoes it. Everything of one lab lives in ONE directory, DIR
# (/var/lib/labctl/<lab>-<id>), plus the host lock naming the lab that holds
# the host. Run as root; values come as positional parameters.
#
#   host-lab.sh claim   LOCK DIR HOLDER   take the host lock (or find it ours) and make DIR
#   host-lab.sh start   DIR PORT UNIT     (re)start DIR/rdma-agent on 127.0.0.1:PORT
#   host-lab.sh running DIR UNIT          exit 0 when the agent runs under its supervisor
#   host-lab.sh release LOCK DIR UNIT HOLDER RXE NETEM
#                                         stop the agent, remove DIR, delete the root
#                                         netem qdisc `impair` set on netdev NETEM ("-":
#                                         none; only while it is still netem), delete the
#                                         rxe link RXE the lab added ("-": none), drop the
#                                         lock if ours
#
# HOLDER is one line `lab=<lab> id=<lab id> controller=<host>`; the lock file
# holds it. start prints `supervisor=systemd unit=UNIT` where systemd is PID 1,
# else `supervisor=watchdog pid=N` (a shell loop that restarts the agent,
# DIR/watchdog.sh, its pid in DIR/watchdog.pid, the agent's in DIR/agent.pid).
set -eu
cmd=${1:?usage: host-lab.sh claim|start|running|release ...}
shift

case_dir() {
    # Refuse anything outside labctl's own directory: release runs rm -rf.
    case $1 in
        /var/lib/labctl/?*) ;;
        *) echo "refusing directory $1: not under /var/lib/labctl/" >&2; exit 21 ;;
    esac
}

# The pids (and command lines) holding rxe device $1 open: the kernel does
# not let an rxe link go while a process has it open (rdma link delete then
# blocks, uninterruptibly), and any process that used librdmacm opens every
# device of the host and keeps it open.
holders_of() {
    uv=
    for d in /sys/class/infiniband_verbs/uverbs*; do
        [ "$(cat "$d/ibdev" 2>/dev/null)" = "$1" ] && uv=/dev/infiniband/${d##*/}
    done
    [ -n "$uv" ] || return 0
    for p in /proc/[0-9]*; do
        for f in "$p"/fd/*; do
            case $(readlink "$f" 2>/dev/null) in
            "$uv" | "$uv (deleted)")
                echo "${p#/proc/} $(tr '\0' ' ' <"$p/cmdline" 2>/dev/null)"
                break
                ;;
            esac
        done
    done
}

systemd_here() { [ -d /run/systemd/system ] && command -v systemd-run >/dev/null 2>&1; }

# Kills pid $1 if its command line mentions $2 (never a reused pid); waits up to 5 s.
kill_ours() {
    pid=$1 mark=$2
    [ -n "$pid" ] && [ -r "/proc/$pid/cmdline" ] || return 0
    tr '\0' ' ' <"/proc/$pid/cmdline" | grep -qF -- "$mark" || return 0
    kill "$pid" 2>/dev/null || return 0
    i=0
    while kill -0 "$pid" 2>/dev/null && [ $i -lt 50 ]; do sleep 0.1; i=$((i + 1)); done
    kill -9 "$pid" 2>/dev/null || :
}

stop_agent() {
    dir=$1 unit=$2
    if systemd_here && systemctl list-units --all --plain --no-legend "$unit.service" 2>/dev/null | grep -q .; then
        systemctl stop "$unit.service" 2>/dev/null || :
        systemctl reset-failed "$unit.service" 2>/dev/null || :
    fi
    # The watchdog first, so it does not restart the agent killed next.
    [ -f "$dir/watchdog.pid" ] && kill_ours "$(cat "$dir/watchdog.pid")" "$dir"
    [ -f "$dir/agent.pid" ] && kill_ours "$(cat "$dir/agent.pid")" "$dir/rdma-agent"
    rm -f "$dir/watchdog.pid" "$dir/agent.pid"
}

case $cmd in
claim)
    lock=$1 dir=$2 holder=$3
    case_dir "$dir"
    mkdir -p "$(dirname "$lock")"
    if ! (set -C; printf '%s\n' "$holder" >"$lock") 2>/dev/null; then
        held=$(cat "$lock" 2>/dev/null || :)
        if [ "$held" != "$holder" ]; then
            echo "held by: $held" >&2
            exit 22
        fi
    fi
    mkdir -p -m 0700 "$dir"
    chmod 0700 "$dir"
    ;;
start)
    dir=$1 port=$2 unit=$3
    case_dir "$dir"
    stop_agent "$dir" "$unit"
    if systemd_here; then
        # systemd-run's own words on failure (a unit of that name still
        # loaded, a refused property), instead of a health check that
        # later finds no agent and cannot say why.
        if ! said=$(systemd-run --unit="$unit" --description="rdma-agent of labctl ($dir)" \
            --property=Restart=always --property=RestartSec=1 --property=LimitMEMLOCK=infinity \
            "$dir/rdma-agent" --listen "127.0.0.1:$port" --secret-file "$dir/agent.secret" 2>&1); then
            echo "systemd-run could not start the agent's unit $unit: $said" >&2
            exit 1
        fi
        echo "supervisor=systemd unit=$unit"
    else
        ulimit -l unlimited 2>/dev/null || :
        # The watchdog (a file of the lab's directory, so `ps` names it):
        # restarts the agent a second after it exits, until killed.
        cat >"$dir/watchdog.sh" <<'WATCHDOG'
dir=$(dirname "$0") port=$1
trap 'kill $(cat "$dir/agent.pid" 2>/dev/null) 2>/dev/null; exit 0' TERM INT
while :; do
    "$dir/rdma-agent" --listen "127.0.0.1:$port" --secret-file "$dir/agent.secret" >>"$dir/agent.log" 2>&1 &
    echo $! >"$dir/agent.pid"
    wait $! || :
    sleep 1
done
WATCHDOG
        setsid sh "$dir/watchdog.sh" "$port" </dev/null >/dev/null 2>&1 &
        echo $! >"$dir/watchdog.pid"
        echo "supervisor=watchdog pid=$!"
    fi
    ;;
running)
    dir=$1 unit=$2
    if systemd_here; then
        systemctl is-active --quiet "$unit.service"
    else
        [ -f "$dir/agent.pid" ] && kill -0 "$(cat "$dir/agent.pid")" 2>/dev/null
    fi
    ;;
release)
    lock=$1 dir=$2 unit=$3 holder=$4 rxe=${5:--} netem=${6:--}
    case_dir "$dir"
    [ -d "$dir" ] && stop_agent "$dir" "$unit"
    rm -rf "$dir"
    # The root qdisc `labctl impair` set, and only while it is still a
    # netem one: a qdisc someone put there since is theirs.
    if [ "$netem" != - ] && tc qdisc show dev "$netem" 2>/dev/null | grep -q '^qdisc netem [0-9a-f]*: root'; then
        tc qdisc del dev "$netem" root
    fi
    # Only the link this lab added, by its lab-id name, and only an rxe one,
    # and not while another process holds it (the lock then stays, and the
    # next `down` tries again).
    if [ "$rxe" != - ] && [ -e "/sys/class/infiniband/$rxe" ]; then
        case $(readlink -f "/sys/class/infiniband/$rxe") in
        */virtual/*) ;;
        *) echo "refusing to delete $rxe: not a software (rxe) device" >&2; exit 23 ;;
        esac
        i=0
        while held=$(holders_of "$rxe") && [ -n "$held" ] && [ $i -lt 50 ]; do sleep 0.1; i=$((i + 1)); done
        if [ -n "$held" ]; then
            echo "the rxe link $rxe this lab added is open in:" >&2
            echo "$held" | sed 's/^/  pid /' >&2
            exit 24
        fi
        rdma link delete "$rxe"
    fi
    rmdir /var/lib/labctl 2>/dev/null || :
    if [ -f "$lock" ] && [ "$(cat "$lock")" = "$holder" ]; then
        rm -f "$lock"
        rmdir "$(dirname "$lock")" 2>/dev/null || :
    fi
    echo released
    ;;
*)
    echo "unknown command $cmd" >&2
    exit 2
    ;;
esac
