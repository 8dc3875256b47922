#!/usr/bin/python3
"""Seed 001, scaled to this machine: a host-side UNMAP of a whole, fully
written volume in commands of N 1-MiB blocks, over NBD, while a 4 KiB random
write workload runs on another volume over its own connection.

For each N the volume is written in full with unique data, then unmapped from
start to end in commands of N MiB. Reported: how long the commands took (host
side), how long until the array's reclaim backlog was empty, the daemon's CPU
time, and the concurrent workload's IOPS and p99 latency against the same
workload without the unmap (target: less than 10% worse). N runs up to the
largest one NBD allows on this volume (request lengths are 32-bit: 4095 MiB).

On a shared 2-core VM one 10 s run varies by 15-30% from the next, more than
the 10% to be resolved, so each N gets several pairs (`--pairs`) of a baseline
run and a measured run, both after the same unmap, reclaim, refill and sync of
the big volume, and both polling the reclaim backlog every 50 ms throughout;
the ratios are taken within each pair and reported as medians.

usage: bench/unmap_impact.py [--volume-gib 4] [--blocks 200,1000,2000,4095]
                             [--runtime 10] [--work-gib 1] [--pairs 3]
                             [--no-record]
Needs: fio (nbd engine), nbdsh, gnuplot for the PNG, a release build.
"""
import argparse
import datetime
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from reclaim_rate import LACUNA, NBDSH, ROOT, Lacuna, fill  # noqa: E402

MIB = 1 << 20
# How often both kinds of run poll the reclaim backlog (its resolution).
POLL_S = 0.05


def randwrite(uri, runtime, size_gib, result):
    out = subprocess.run([
        "fio", "--name=work", "--ioengine=nbd", f"--uri={uri}", "--rw=randwrite", "--bs=4k",
        "--iodepth=16", f"--size={size_gib}G", f"--runtime={runtime}", "--time_based",
        "--refill_buffers", "--randrepeat=0", "--output-format=json",
    ], check=True, capture_output=True, text=True).stdout
    job = json.loads(out[out.index("{"):])["jobs"][0]["write"]
    result["iops"] = job["iops"]
    result["p99_us"] = job["clat_ns"]["percentile"]["99.000000"] / 1000.0


def unmap_whole(uri, volume_bytes, block_mib):
    step = block_mib * MIB
    script = ("import time\nt=time.time()\noff=0\nn=0\nwhile off < %d:\n    k=min(%d, %d-off)\n"
              "    h.trim(k, off)\n    off+=k\n    n+=1\nprint(time.time()-t, n)\n"
              % (volume_bytes, step, volume_bytes))
    out = subprocess.run([*NBDSH, "-u", uri, "-c", script], check=True, capture_output=True, text=True).stdout
    seconds, commands = out.split()
    return float(seconds), int(commands)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--volume-gib", type=int, default=4)
    ap.add_argument("--blocks", default="200,1000,2000,4095")
    ap.add_argument("--runtime", type=int, default=10)
    ap.add_argument("--work-gib", type=int, default=1)
    ap.add_argument("--pairs", type=int, default=3,
                    help="baseline/unmap pairs per N; the ratios reported are the medians over the pairs")
    ap.add_argument("--no-record", action="store_true")
    args = ap.parse_args()
    if not os.path.exists(LACUNA):
        sys.exit(f"{LACUNA} missing: run cargo build --release first")
    blocks = [int(b) for b in args.blocks.split(",")]
    volume_bytes = args.volume_gib << 30
    assert max(blocks) * MIB < 1 << 32, "NBD request lengths are 32-bit"
    tmp = tempfile.mkdtemp(prefix="lacuna-unmap-", dir=os.environ.get("BENCH_DIR", "/var/tmp"))
    lacuna = Lacuna(tmp, f"{args.volume_gib * 3 + args.work_gib * 3 + 4}G")
    rows = []
    try:
        lacuna.cli("volume", "create", "big", "--size", f"{args.volume_gib}G")
        lacuna.cli("volume", "create", "work", "--size", f"{args.work_gib}G")
        big = f"nbd://127.0.0.1:{lacuna.nbd}/big"
        work = f"nbd://127.0.0.1:{lacuna.nbd}/work"
        fill(work, args.work_gib)

        def fill_big():
            # The big volume is rewritten before each run; its dirty pages are
            # pushed to disk first so that no run pays for the previous fill.
            fill(big, args.volume_gib)
            subprocess.run([*NBDSH, "-u", big, "-c", "h.flush()"], check=True)
            subprocess.run(["sync"], check=True)
            time.sleep(3)

        def empty_big():
            # Unmapped and reclaimed outside the measurement, so that every fill
            # writes into an empty volume and leaves no overwritten data behind.
            unmap_whole(big, volume_bytes, max(blocks))
            while lacuna.get("/v1/array/space")["reclaim_backlog_bytes"] > 0:
                time.sleep(0.05)
            subprocess.run([*NBDSH, "-u", big, "-c", "h.flush()"], check=True)

        # Each N is compared with a baseline run just before it, after the same
        # emptying, fill and sync: one baseline for all would fold the machine's
        # drift over the whole run into the ratios. A first fill, emptied before
        # the first baseline, gives every run the same past.
        def run(n):
            """One run of the workload; with an unmap of the big volume in
            commands of n MiB when n is given. Both kinds poll the array's
            backlog at the same rate for the whole run, so that they differ in
            the unmap alone (polling only during the unmap, at 50 Hz, had cost
            the measured runs alone a few percent of the CPU)."""
            during = {}
            worker = threading.Thread(target=randwrite, args=(work, args.runtime, args.work_gib, during))
            worker.start()
            time.sleep(1)
            cpu0 = lacuna.cpu_s()
            t0 = time.time()
            unmap_s, commands = unmap_whole(big, volume_bytes, n) if n else (0.0, 0)
            reclaim_s = None
            while worker.is_alive() or reclaim_s is None:
                if lacuna.get("/v1/array/space")["reclaim_backlog_bytes"] == 0 and reclaim_s is None:
                    reclaim_s = time.time() - t0
                time.sleep(POLL_S)
            cpu = lacuna.cpu_s() - cpu0
            worker.join()
            return during, unmap_s, commands, reclaim_s, cpu

        fill_big()
        for n in blocks:
            pairs = []
            for _ in range(args.pairs):
                empty_big()
                fill_big()
                baseline = run(None)[0]
                empty_big()
                fill_big()
                during, unmap_s, commands, reclaim_s, cpu = run(n)
                pair = (unmap_s, reclaim_s, cpu, baseline["iops"], baseline["p99_us"], during["iops"],
                        during["p99_us"], during["iops"] / baseline["iops"], during["p99_us"] / baseline["p99_us"])
                pairs.append(pair)
                print(f"N={n:5} MiB: baseline {baseline['iops']:.0f} IOPS, p99 {baseline['p99_us']:.0f} us; "
                      f"{commands:5} commands in {unmap_s * 1000:8.1f} ms, backlog empty after "
                      f"{reclaim_s:6.2f} s, daemon CPU {cpu:5.2f} s; workload {during['iops']:.0f} IOPS "
                      f"({pair[7]:.2f}x), p99 {during['p99_us']:.0f} us ({pair[8]:.2f}x)", flush=True)
            medians = [statistics.median(column) for column in zip(*pairs)]
            rows.append((n, commands, *medians))
            print(f"N={n:5} MiB: medians over {len(pairs)} pairs: IOPS {medians[7]:.2f}x, p99 {medians[8]:.2f}x",
                  flush=True)
    finally:
        lacuna.stop()
    # Without a record, the data and plot stay out of the tree.
    out_dir = tempfile.mkdtemp(prefix="lacuna-bench-out-") if args.no_record else os.path.join(ROOT, "bench")
    dat = os.path.join(out_dir, "unmap_impact.dat")
    with open(dat, "w") as f:
        f.write("# N_mib commands unmap_s reclaim_s cpu_s base_iops base_p99_us iops p99_us iops_ratio p99_ratio\n")
        for row in rows:
            f.write(" ".join(f"{x:.6g}" if isinstance(x, float) else str(x) for x in row) + "\n")
    png = os.path.join(out_dir, "unmap_impact.png")
    if shutil.which("gnuplot"):
        subprocess.run(["gnuplot"], text=True, check=True, input="\n".join([
            "set terminal png size 1000,600", f"set output '{png}'",
            f"set title 'Lacuna: UNMAP of a fully written {args.volume_gib} GiB volume in commands of N MiB (NBD)'",
            "set xlabel 'N (MiB per UNMAP command)'", "set ylabel 'milliseconds'", "set logscale x", "set grid",
            "set key left top",
            f"plot '{dat}' using 1:($3*1000) with linespoints pt 7 title 'UNMAP commands (host side)', "
            f"'{dat}' using 1:($4*1000) with linespoints pt 5 title 'until the reclaim backlog is empty'",
        ]))
    if not args.no_record:
        cmd = "bench/unmap_impact.py " + " ".join(sys.argv[1:])
        lines = [
            f"\n## Seed 001: UNMAP of a whole volume vs a concurrent workload ({datetime.date.today()})\n",
            f"Command: `{cmd}` (release build; {args.volume_gib} GiB volume fully written with unique data, unmapped "
            f"in commands of N MiB over NBD while fio 4k randwrite QD16 runs {args.runtime} s on another volume, "
            f"the UNMAP starting 1 s in; each N gets {args.pairs} pairs of a baseline run without the unmap and a "
            f"measured run, each run after the same unmap, reclaim, refill and sync of the big volume and both "
            f"polling the backlog every {POLL_S * 1000:.0f} ms throughout; every "
            f"figure below is the median over the pairs, the ratios taken within each pair).\n",
            "| N (MiB) | commands | UNMAP time | backlog empty after | daemon CPU | baseline IOPS / p99 | workload IOPS | vs baseline | p99 | vs baseline | < 10% worse |",
            "|---|---|---|---|---|---|---|---|---|---|---|",
        ]
        for n, c, u, r, cpu, biops, bp99, iops, p99, ir, pr in rows:
            ok = ir >= 0.9 and pr <= 1.1
            lines.append(f"| {n} | {c} | {u * 1000:.1f} ms | {r:.2f} s | {cpu:.2f} s | {biops:.0f} / {bp99:.0f} us | "
                         f"{iops:.0f} | {ir:.2f} | {p99:.0f} us | {pr:.2f} | {'yes' if ok else 'NO'} |")
        if os.path.exists(png):
            lines.append("\n![UNMAP duration against N](unmap_impact.png)\n")
        with open(os.path.join(ROOT, "bench", "RESULTS.md"), "a") as f:
            f.write("\n".join(lines) + "\n")
    shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
