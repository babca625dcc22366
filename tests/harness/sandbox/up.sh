#!/bin/bash
# Boots a sandboxed systemd; prints the host PID of its PID 1. Run as root.
# Usage: up.sh BASE SHARE UNITS     (BASE must not be under /tmp)
set -eu
BASE=$(realpath -m "$1") SHARE=$(realpath "$2") UNITS=$(realpath "$3")
case "$BASE/" in /tmp/*) echo "BASE must not be under /tmp" >&2; exit 2;; esac
[ "$(id -u)" = 0 ] || { echo "the sandbox needs root (namespaces, mounts)" >&2; exit 2; }
HERE=$(dirname "$(realpath "$0")")
CG=/sys/fs/cgroup/unified/sandbox-$(basename "$BASE")
[ -d /sys/fs/cgroup/unified ] || CG=/sys/fs/cgroup/sandbox-$(basename "$BASE")
mkdir -p "$BASE" "$CG"
echo "$CG" > "$BASE/cgroup.path"
setsid sh -c "echo \$\$ > $CG/cgroup.procs; exec unshare --pid --fork --mount --uts --ipc --cgroup --kill-child ${UNSHARE_EXTRA:-} $HERE/boot.sh $BASE $SHARE $UNITS" </dev/null >"$BASE/unshare.log" 2>&1 &
echo $! > "$BASE/unshare.pid"
for _ in $(seq 1 300); do
  SPID=$(pgrep -P "$(cat "$BASE/unshare.pid")" 2>/dev/null | head -1 || true)
  st=
  [ -n "$SPID" ] && st=$(timeout 5 nsenter -t "$SPID" -m -p systemctl is-system-running 2>/dev/null || true)
  case "$st" in running|degraded) echo "$SPID" > "$BASE/systemd.pid"; echo "$SPID"; exit 0;; esac
  sleep 0.1
done
echo "sandbox did not boot; see $BASE/unshare.log" >&2; exit 1
