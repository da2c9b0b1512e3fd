#!/bin/sh
# Runs a command as an unprivileged user (nobody, uid 65534: no capabilities, no cgroup rights), from this checkout:
#   sudo tests/as_unprivileged.sh python3 -m pytest -q -p no:cacheprovider tests/test_confinement.py
# The checker's confinement differs there (no memory or cpu cgroup: the watchdog and a lower priority instead; the
# PID namespace's init is what ends everything). Needs root, unshare and setpriv (util-linux). Where the Python
# interpreter lives under /root (pyenv installed as root), a private mount namespace shows /root with only that
# installation in it, so that nobody can run it; nothing changes outside that namespace.
set -eu
if [ "$(id -u)" != 0 ]; then echo "run as root: it becomes nobody itself" >&2; exit 2; fi
python=$(command -v "$1" || true)
[ -n "$python" ] || { echo "no $1 on PATH" >&2; exit 2; }
real=$("$python" -c 'import sys; print(sys.executable)')
shift
checkout=$(cd "$(dirname "$0")/.." && pwd)
exec unshare --mount --propagation private sh -s "$real" "$checkout" "$@" <<'INNER'
set -eu
real=$1 checkout=$2
shift 2
case "$real" in
/root/*)
    view=$(mktemp -d)
    mount -t tmpfs tmpfs "$view"
    top=$(echo "$real" | cut -d/ -f3)
    mkdir "$view/$top"
    mount --rbind "/root/$top" "$view/$top"
    chmod 755 "$view"
    mount --rbind "$view" /root
    ;;
esac
home=$(mktemp -d)
chmod 777 "$home"
cd "$checkout"
exec setpriv --reuid=65534 --regid=65534 --clear-groups --inh-caps=-all --bounding-set=-all \
    env -i PATH=/usr/bin:/bin HOME="$home" PYTHONDONTWRITEBYTECODE=1 "$real" "$@"
INNER
