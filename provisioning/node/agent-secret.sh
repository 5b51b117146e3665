#!/bin/sh
# Installs the lab's agent secret, read from stdin, as a root-only file the
# agent reads at start ($1, default /etc/labctl/agent.secret, mode 0600). The secret
# never appears on a command line. Prints `changed` when the file is new or
# differs (the running agent must restart to use it), else `same`.
set -eu
umask 077
file=${1:-/etc/labctl/agent.secret}
mkdir -p "$(dirname "$file")"
cat >"$file.new"
if [ -f "$file" ] && cmp -s "$file.new" "$file"; then
    rm -f "$file.new"
    echo same
else
    mv -f "$file.new" "$file"
    echo changed
fi
