#!/usr/bin/env python3
"""Rewriting a LUN with the data it already holds (a copy or restore run twice, an image
converted again): what each Lacuna build appends to its segments for it, and how fast.

usage: python3 bench/rewrite_same.py BINARY [BINARY ...] [--gib N]

For each build: a fresh daemon, a LUN of N GiB (default 2) filled over iSCSI with 1 MiB
writes of ~2:1 compressible data with duplicates (iscsi_compare.py's load generator), then
filled again with the same data. Prints the second fill's rate, the daemon's CPU seconds
for it and the read system calls it made, and the media bytes appended and stale bytes left once background work settles.
Needs what bench/iscsi_compare.py needs (libiscsi-dev, gcc)."""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import iscsi_compare as ic  # noqa: E402


def space(binary, daemon):
    out = subprocess.run(
        [binary, "--api", f"http://127.0.0.1:{daemon.api}", "--data-dir", daemon.data,
         "--json", "array", "space"],
        capture_output=True, text=True, check=True).stdout
    return json.loads(out)


def read_calls(pid):
    """Read system calls the process has made (/proc/PID/io's syscr)."""
    with open(f"/proc/{pid}/io") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("syscr"))


def measure(binary, gib):
    tmp = tempfile.mkdtemp(prefix="rewrite-same-", dir="/var/tmp")
    try:
        client = ic.Client(tmp)
        ic.LACUNA = binary
        daemon = ic.Lacuna(tempfile.mkdtemp(dir=tmp), "1T")
        try:
            daemon.create("v", gib)
            url = daemon.url(0)
            client("fill", url, 0, gib << 30, 1)
            ic.wait_idle([daemon])
            before = space(binary, daemon)
            started, cpu_before = time.time(), ic.cpu_s(daemon.pid)
            reads_before = read_calls(daemon.pid)
            client("fill", url, 0, gib << 30, 1)
            seconds, cpu_s = time.time() - started, ic.cpu_s(daemon.pid) - cpu_before
            reads = read_calls(daemon.pid) - reads_before
            ic.wait_idle([daemon])
            after = space(binary, daemon)
        finally:
            daemon.stop()
    finally:
        subprocess.run(["rm", "-rf", tmp], check=False)
    appended = after["media_written_bytes"] - before["media_written_bytes"]
    print(f"{binary}: second fill of {gib} GiB {(gib << 10) / seconds:.0f} MiB/s, "
          f"daemon CPU {cpu_s:.1f} s, {reads} read calls, appended {appended} bytes "
          f"(first fill {before['media_written_bytes']}), stale after {after['stale_bytes']}, "
          f"live {before['live_physical_bytes']} -> {after['live_physical_bytes']}")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("binaries", nargs="+")
    parser.add_argument("--gib", type=int, default=2)
    args = parser.parse_args()
    for binary in args.binaries:
        measure(os.path.abspath(binary), args.gib)


if __name__ == "__main__":
    main()
