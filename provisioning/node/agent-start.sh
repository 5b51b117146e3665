#!/bin/sh
# Starts (or restarts) /usr/local/bin/rdma-agent under the node's supervisor:
# a systemd unit where systemd runs, busybox init's respawn on lab images.
# Usage: agent-start.sh PORT           Prints: supervisor=<systemd|busybox-init>
set -eu
port=${1:?usage: agent-start.sh PORT}
mkdir -p /etc/lab
echo "AGENT_PORT=$port" >/etc/lab/agent.env
if [ -d /run/systemd/system ]; then
    cat >/etc/systemd/system/rdma-agent.service <<UNIT
[Unit]
Description=rdma-agent (labctl)
After=network-online.target

[Service]
ExecStart=/usr/local/bin/rdma-agent --listen 127.0.0.1:$port
Restart=always
RestartSec=1
LimitMEMLOCK=infinity

[Install]
WantedBy=multi-user.target
UNIT
    systemctl daemon-reload
    systemctl enable rdma-agent >/dev/null 2>&1 || true
    systemctl restart rdma-agent
    echo supervisor=systemd
elif grep -q agent-run /etc/inittab 2>/dev/null; then
    # busybox init respawns agent-run, which execs the new binary. Wait for the
    # old process to go, so nobody talks to it after this script returns.
    for old in $(pgrep -x rdma-agent); do
        kill "$old" 2>/dev/null || continue
        i=0
        while kill -0 "$old" 2>/dev/null && [ $i -lt 50 ]; do sleep 0.1; i=$((i + 1)); done
    done
    echo supervisor=busybox-init
else
    echo "no supervisor for rdma-agent on this node (needs systemd or the lab image's init)" >&2
    exit 20
fi
