#!/bin/sh
# PID 1 of fresh pid/mount/uts/ipc/cgroup namespaces: builds a throw-away overlay of / and execs systemd.
# Every write systemd or a test makes (/etc, /var, /run, /tmp, packages) lands in the overlay's upper
# layer, never on the host. Each step below exists because a boot without it once damaged the host
# (an unprivate /tmp was emptied by systemd-tmpfiles; the host's cgroup fs was remounted read-only).
# Args: BASE (not under /tmp) SHARE (bound at /srv/share) UNITS (copied to /run/systemd/system).
# Env: UPPER_ON_DISK=1 keeps the upper layer on disk under BASE; EXTRA_RO / EXTRA_RW="SRC:DST ..." binds.
set -eu
BASE=$1 SHARE=$2 UNITS=$3
R=$BASE/root
mount --make-rprivate /
mkdir -p "$BASE/ovl" "$R"
if [ "${UPPER_ON_DISK:-0}" = 1 ]; then mkdir -p "$BASE/ovl"; else mount -t tmpfs -o mode=755 tmpfs "$BASE/ovl"; fi
mkdir -p "$BASE/ovl/upper" "$BASE/ovl/work"
mount -t overlay overlay -o "lowerdir=/,upperdir=$BASE/ovl/upper,workdir=$BASE/ovl/work" "$R"
mount -t proc proc "$R/proc"
mount --bind /proc/sys "$R/proc/sys" && mount -o remount,bind,ro "$R/proc/sys"
mount --rbind /sys "$R/sys"
umount -R "$R/sys/fs/cgroup" 2>/dev/null || umount -l "$R/sys/fs/cgroup"
mount -t cgroup2 cgroup2 "$R/sys/fs/cgroup"
mount -o remount,bind,ro "$R/sys"
mount -t tmpfs -o mode=755,nosuid tmpfs "$R/dev"
for n in null zero full random urandom tty; do touch "$R/dev/$n"; mount --bind "/dev/$n" "$R/dev/$n"; done
mkdir "$R/dev/pts" "$R/dev/shm"
mount -t devpts -o newinstance,ptmxmode=0666,mode=620 devpts "$R/dev/pts"
ln -s pts/ptmx "$R/dev/ptmx"; ln -s /proc/self/fd "$R/dev/fd"
ln -s /proc/self/fd/0 "$R/dev/stdin"; ln -s /proc/self/fd/1 "$R/dev/stdout"; ln -s /proc/self/fd/2 "$R/dev/stderr"
mount -t tmpfs -o mode=1777 tmpfs "$R/dev/shm"
touch "$R/dev/console"; : > "$BASE/console.log"; mount --bind "$BASE/console.log" "$R/dev/console"
mount -t tmpfs -o mode=755 tmpfs "$R/run"
mount -t tmpfs -o mode=1777 tmpfs "$R/tmp"
mkdir -p "$R/srv/share"; mount --bind "$SHARE" "$R/srv/share"
# Read-only binds of host paths (a venv, a model folder) at another path inside.
for b in ${EXTRA_RO:-}; do src=${b%%:*} dst=${b#*:}; mkdir -p "$R$dst"; mount --bind "$src" "$R$dst"; mount -o remount,bind,ro "$R$dst"; done
# Writable binds of a path OF THE OVERLAY (writes go to the upper layer, the host copy stays untouched).
for b in ${EXTRA_RW:-}; do src=${b%%:*} dst=${b#*:}; mkdir -p "$R$dst"; mount --bind "$R$src" "$R$dst"; done
mkdir -p "$R/run/systemd/system"
cp -r "$UNITS"/. "$R/run/systemd/system/"   # an empty UNITS is fine (site.yml installs them)
# systemd-tmpfiles empties /tmp: a unit with PrivateTmp= pulls systemd-tmpfiles-setup in, which wiped
# files in use under the sandbox's /tmp (Ansible's module payloads). Masked here, in the sandbox only.
for u in systemd-tmpfiles-setup.service systemd-tmpfiles-clean.service systemd-tmpfiles-clean.timer; do
  ln -sf /dev/null "$R/run/systemd/system/$u"
done
cat > "$R/run/systemd/system/sandbox.target" <<'T'
[Unit]
Description=Minimal boot target of the test sandbox (never multi-user: that would start the host's services)
AllowIsolate=yes
T
cd "$R"; mkdir -p oldroot; pivot_root . oldroot; umount -l /oldroot; rmdir /oldroot 2>/dev/null || true
cd /
export container=sandbox
exec /lib/systemd/systemd --system --unit=sandbox.target --log-color=no
