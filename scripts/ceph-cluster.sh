#!/usr/bin/env bash
# A one-node Ceph cluster for the tests (docs/SCALE-OUT.md): one monitor, one
# manager and one memstore OSD on 127.0.0.1, everything under DIR, no
# authentication, pools of one replica.
#
#   scripts/ceph-cluster.sh start DIR [POOL]   # prints DIR/ceph.conf when healthy
#   scripts/ceph-cluster.sh stop DIR           # stops the daemons by their PIDs
#
# MON_PORT (default 13300) picks the monitor's port. Needs ceph-mon, ceph-osd,
# ceph-mgr and ceph-common (Debian packages, 16.2).
set -euo pipefail
command="${1:?usage: $0 start|stop DIR [POOL]}"
dir="${2:?usage: $0 start|stop DIR [POOL]}"
pool="${3:-lacuna}"
port="${MON_PORT:-13300}"

stop() {
    local pids=()
    for pidfile in "$dir"/run/*.pid; do
        [[ -f "$pidfile" ]] && pids+=("$(cat "$pidfile")")
    done
    ((${#pids[@]})) || return 0
    kill "${pids[@]}" 2>/dev/null || true
    for _ in $(seq 50); do
        kill -0 "${pids[@]}" 2>/dev/null || return 0
        sleep 0.1
    done
    kill -9 "${pids[@]}" 2>/dev/null || true
}

start() {
    rm -rf "$dir"
    mkdir -p "$dir"/{mon/a,osd/0,mgr/x,run,log}
    local fsid osd_uuid conf
    fsid="$(cat /proc/sys/kernel/random/uuid)"
    conf="$dir/ceph.conf"
    cat >"$conf" <<CONF
[global]
fsid = $fsid
mon host = v2:127.0.0.1:$port
public addr = 127.0.0.1
auth cluster required = none
auth service required = none
auth client required = none
osd pool default size = 1
osd pool default min size = 1
mon allow pool size one = true
mon allow pool delete = true
mon warn on pool no redundancy = false
mon data avail warn = 1
osd objectstore = memstore
memstore device bytes = 4294967296
memstore page set = true
osd crush chooseleaf type = 0
run dir = $dir/run
admin socket = $dir/run/\$name.asok
pid file = $dir/run/\$name.pid
log file = $dir/log/\$name.log
mon data = $dir/mon/\$id
osd data = $dir/osd/\$id
mgr data = $dir/mgr/\$id
CONF
    local c=(-c "$conf")
    monmaptool --create --addv a "[v2:127.0.0.1:$port]" --fsid "$fsid" "$dir/monmap" >/dev/null
    ceph-mon "${c[@]}" --mkfs -i a --monmap "$dir/monmap"
    ceph-mon "${c[@]}" -i a
    osd_uuid="$(cat /proc/sys/kernel/random/uuid)"
    local id
    id="$(ceph "${c[@]}" osd new "$osd_uuid")"
    ceph-osd "${c[@]}" -i "$id" --mkfs --osd-uuid "$osd_uuid" >"$dir/log/osd-mkfs.out" 2>&1
    ceph-osd "${c[@]}" -i "$id" >"$dir/log/osd-start.out" 2>&1
    ceph-mgr "${c[@]}" -i x
    ceph "${c[@]}" osd pool create "$pool" 8 >/dev/null 2>&1
    ceph "${c[@]}" osd pool set "$pool" size 1 --yes-i-really-mean-it >/dev/null 2>&1
    ceph "${c[@]}" osd pool application enable "$pool" lacuna >/dev/null 2>&1
    # Healthy enough for the tests once an object goes in and comes back.
    for _ in $(seq 300); do
        if echo probe | rados "${c[@]}" -p "$pool" put probe - 2>/dev/null &&
            rados "${c[@]}" -p "$pool" rm probe 2>/dev/null; then
            echo "$conf"
            return 0
        fi
        sleep 0.2
    done
    echo "the cluster in $dir never took a write; logs in $dir/log" >&2
    stop
    return 1
}

case "$command" in
start) start ;;
stop) stop ;;
*)
    echo "usage: $0 start|stop DIR [POOL]" >&2
    exit 2
    ;;
esac
