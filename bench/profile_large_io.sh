#!/usr/bin/env bash
# Profiles one large-I/O job of issue 47 against a fresh `lacuna serve` (NBD on
# 127.0.0.1), the way bench/RESULTS.md's "Diagnostics" records it:
#
#   bench/profile_large_io.sh overwrite|read|convert|nbdcopy [IMAGE]
#
# overwrite / read: a 4 GiB volume, prefilled with 1 MiB writes (QD8), 20 s of
# 4 KiB random writes (QD32), then 20 s of 1 MiB writes or reads (QD4), all fio
# --ioengine=nbd on the issue's data (50% compressible, 30% duplicates).
# convert / nbdcopy: `qemu-img convert -n` or `nbdcopy --flush` of IMAGE (a raw
# disk image; default /var/tmp/lacuna-profile-image.raw, made from /usr as
# bench/nbd_compare.py makes its image) into an empty 1200 MiB volume.
# PERF=1 records `perf record -g` of the daemon during the measured job
# (PERF_CALL_GRAPH="--call-graph dwarf,16384" for user-space callers) into
# $OUT/PHASE.data. NO_COMPRESSION=1 puts the image volume in a container with
# compression off (what an import costs without inline compression).
set -euo pipefail
phase="${1:?usage: $0 overwrite|read|convert|nbdcopy [IMAGE]}"
image="${2:-/var/tmp/lacuna-profile-image.raw}"
root="$(cd "$(dirname "$0")/.." && pwd)"
bin="${CARGO_TARGET_DIR:-$root/target}/release/lacuna"
out="${OUT:-$PWD}"
work="$(mktemp -d /var/tmp/lacuna-profile-XXXXXX)"
nbd_port=20809 api_port=20880
api=(--api "http://127.0.0.1:$api_port" --data-dir "$work/data")
"$bin" serve --no-vasa --data-dir "$work/data" --capacity 64G --nbd-open-access \
    --nbd-listen "127.0.0.1:$nbd_port" --api-listen "127.0.0.1:$api_port" >"$work/log" 2>&1 &
daemon=$!
trap 'kill $daemon 2>/dev/null; wait $daemon 2>/dev/null; rm -rf "$work"' EXIT
for _ in $(seq 100); do curl -sf "127.0.0.1:$api_port/healthz" >/dev/null && break; sleep 0.1; done

profile() { # seconds: perf of the daemon in the background, if asked for
    [[ -n "${PERF:-}" ]] || return 0
    perf record -F 999 ${PERF_CALL_GRAPH:--g} -p "$daemon" -o "$out/$phase.data" -- sleep "$1" \
        >/dev/null 2>&1 &
    perf_pid=$!
}
fio_job() {
    fio --name=job --ioengine=nbd --uri="nbd://127.0.0.1:$nbd_port/bench" --size=4G \
        --buffer_compress_percentage=50 --dedupe_percentage=30 --refill_buffers --randrepeat=0 \
        --output-format=json "$@" | python3 -c '
import json, sys
text = sys.stdin.read(); job = json.loads(text[text.index("{"):])["jobs"][0]
side = job["write"] if job["write"]["io_bytes"] else job["read"]
print("%s: %.0f MiB/s, %.0f IOPS" % (sys.argv[1], side["bw"] / 1024, side["iops"]))' "$*"
}

case "$phase" in
overwrite | read)
    "$bin" "${api[@]}" volume create bench --size 4G >/dev/null
    fio_job --rw=write --bs=1M --iodepth=8
    fio_job --rw=randwrite --bs=4k --iodepth=32 --runtime=20 --time_based
    rw=write; [[ "$phase" == read ]] && rw=read
    profile 15
    fio_job --rw="$rw" --bs=1M --iodepth=4 --runtime=20 --time_based
    ;;
convert | nbdcopy)
    if [[ ! -f "$image" ]]; then
        src="$work/image-src"; mkdir -p "$src"
        (cd /usr && tar cf - --exclude=./src lib share bin 2>/dev/null | head -c 900000000 |
            (cd "$src" && tar xf - 2>/dev/null)) || true
        truncate -s 1100M "$image"; mke2fs -q -F -t ext4 -d "$src" "$image"; rm -rf "$src"
    fi
    container=()
    if [[ -n "${NO_COMPRESSION:-}" ]]; then
        "$bin" "${api[@]}" container create raw --compression off >/dev/null
        container=(--container raw)
    fi
    "$bin" "${api[@]}" volume create image --size 1200M "${container[@]}" >/dev/null
    profile 30
    started=$(date +%s.%N)
    if [[ "$phase" == convert ]]; then
        qemu-img convert -n -f raw -O raw "$image" "nbd://127.0.0.1:$nbd_port/image"
    else
        nbdcopy --flush "$image" "nbd://127.0.0.1:$nbd_port/image"
    fi
    echo "$phase: $(python3 -c "import time; print(round(time.time() - $started, 2))") s"
    [[ -n "${PERF:-}" ]] && kill -INT "$perf_pid"
    ;;
*) echo "unknown job $phase" >&2; exit 2 ;;
esac
[[ -n "${PERF:-}" ]] && wait "$perf_pid" || true
