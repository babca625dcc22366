#!/bin/bash
# Powers the sandbox off, removes its cgroup and (with UPPER_ON_DISK) its upper layer. Usage: down.sh BASE
set -u
BASE=$(realpath -m "$1")
P=$(cat "$BASE/systemd.pid" 2>/dev/null) U=$(cat "$BASE/unshare.pid" 2>/dev/null)
[ -n "$P" ] && timeout 10 nsenter -t "$P" -m -p systemctl poweroff --no-block 2>/dev/null
for _ in $(seq 1 150); do [ -n "$U" ] && kill -0 "$U" 2>/dev/null || break; sleep 0.1; done
[ -n "$U" ] && kill -0 "$U" 2>/dev/null && [ -n "$P" ] && kill -KILL "$P"
for _ in $(seq 1 50); do [ -n "$U" ] && kill -0 "$U" 2>/dev/null || break; sleep 0.1; done
CG=$(cat "$BASE/cgroup.path" 2>/dev/null)
[ -n "$CG" ] && find "$CG" -depth -type d -exec rmdir {} \; 2>/dev/null
exit 0
