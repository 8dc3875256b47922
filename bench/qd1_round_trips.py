#!/usr/bin/python3
"""Where a queue-depth-1 read's round trip goes, seen from the daemon's system calls.

Runs one 4 KiB random read job at QD1 against a Lacuna build (fresh 4 GiB LUN,
written end to end as in iscsi_compare.py) while `perf record` notes the
daemon's system calls that matter: each `recvfrom` that returned bytes (a
command arriving: the connection polls its socket, so it sees a command as it
lands), `preadv2` (a record read from a segment) and the writes of answers.
The interval from one command's arrival to the next is one round trip as the
target sees it. Prints the intervals' spread for commands that read a record
and for those that did not (served from the grains kept in memory), and a
histogram.

Why: on these 2-vCPU machines an idle vCPU halts at once
(`haltpoll.guest_halt_poll_ns=0`), and waking a halted vCPU costs ~18 µs. When
the target answers within a few µs of the client's send, the client has not
yet gone to sleep in poll() and the round trip takes ~21 µs; answered later,
it takes ~40 µs. This shows which side of that line each kind of read lands.

usage: bench/qd1_round_trips.py LACUNA_BINARY [--seconds 4]
Needs: what iscsi_compare.py needs, and perf.
"""
import argparse
import collections
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import iscsi_compare as ic  # noqa: E402

GIB = 1 << 30
LUN_GIB = 4
FAST_US = 30


def trace(binary, seconds, tmp):
    """Runs the job under perf; returns (perf script lines, the job's result)."""
    ic.LACUNA = binary
    client = ic.Client(tmp)
    lacuna = ic.Lacuna(tempfile.mkdtemp(dir=tmp), "16G")
    data = os.path.join(tmp, "perf.data")
    try:
        lacuna.create("qd1", LUN_GIB)
        url = lacuna.url(0)
        client("fill", url, 0, LUN_GIB * GIB, 1)
        ic.wait_idle([lacuna])
        events = ["-e", "syscalls:sys_exit_recvfrom", "--filter", "ret > 0",
                  "-e", "syscalls:sys_enter_preadv2", "-e", "syscalls:sys_enter_write",
                  "-e", "syscalls:sys_enter_writev"]
        perf = subprocess.Popen(["perf", "record", "-q", "-o", data, "-p", str(lacuna.proc.pid)] + events,
                                stderr=subprocess.DEVNULL)
        time.sleep(1)
        result = client("load", url, "randread", 4096, 1, seconds, LUN_GIB * GIB, 7)
        perf.send_signal(signal.SIGINT)
        perf.wait()
    finally:
        lacuna.stop()
    script = subprocess.run(["perf", "script", "-i", data, "-F", "time,event"],
                            capture_output=True, text=True, check=True).stdout
    return script.splitlines(), result


def round_trips(lines):
    """Intervals between command arrivals (µs), split by whether a record was read."""
    read_record, from_memory = [], []
    last, pread = None, False
    for line in lines:
        fields = line.split()
        if len(fields) < 2:
            continue
        at_us = float(fields[0].rstrip(":")) * 1e6
        if "exit_recvfrom" in fields[1]:
            if last is not None:
                (read_record if pread else from_memory).append(at_us - last)
            last, pread = at_us, False
        elif "preadv2" in fields[1]:
            pread = True
    return read_record, from_memory


def describe(name, intervals):
    if not intervals:
        print(f"{name}: none")
        return
    ordered = sorted(intervals)
    n = len(ordered)
    fast = sum(1 for x in ordered if x < FAST_US) / n
    print(f"{name}: {n} round trips, p10 {ordered[n // 10]:.0f} µs, p50 {ordered[n // 2]:.0f} µs, "
          f"p90 {ordered[n * 9 // 10]:.0f} µs, mean {statistics.mean(ordered):.1f} µs, "
          f"under {FAST_US} µs {100 * fast:.0f}%")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("binary")
    ap.add_argument("--seconds", type=int, default=4)
    args = ap.parse_args()
    if not os.access(args.binary, os.X_OK):
        sys.exit(f"{args.binary}: not an executable")
    if args.seconds < 1:
        sys.exit("--seconds must be at least 1")
    tmp = tempfile.mkdtemp(prefix="qd1-", dir=os.environ.get("BENCH_DIR", "/var/tmp"))
    try:
        lines, result = trace(args.binary, args.seconds, tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print(f"job (traced): {result['iops']:.0f} IOPS, mean latency {result['mean_lat_us']:.1f} µs")
    read_record, from_memory = round_trips(lines)
    describe("reads of a record (preadv2)", read_record)
    describe("reads from kept grains", from_memory)
    every = read_record + from_memory
    histogram = collections.Counter(min(int(x), 60) // 4 * 4 for x in every)
    print("histogram (µs: % of round trips): " + " ".join(
        f"{k}:{100 * histogram[k] / len(every):.0f}" for k in sorted(histogram) if histogram[k] / len(every) >= 0.005))


if __name__ == "__main__":
    main()
