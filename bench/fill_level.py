#!/usr/bin/python3
"""Random overwrites at 10% and at 90% full: 4 KiB random-write IOPS over NBD
with the array 10% full against 90% full (target: at 90% at least half of the
10% figure), and the write amplification (media bytes / host bytes) of each
phase, with the cleaner running as it must near full.

The array gets a small capacity; one thin volume is filled with unique data to
the fill level (of capacity), then fio overwrites that region at random for a
fixed time. Figures come from the array's own counters (`/v1/array/space`).

Each of --reps runs (default 3) starts a fresh array and measures both levels; the
ratio of each run is taken and the median run is the result (the 10% figure alone
moved by a third between single runs of the same code).

usage: bench/fill_level.py [--capacity-gib 8] [--runtime 30] [--reps 3] [--no-record]
Needs: fio (nbd engine), a release build.
"""
import argparse
import datetime
import json
import os
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from reclaim_rate import LACUNA, ROOT, Lacuna  # noqa: E402

MIB = 1 << 20


def fio(uri, rw, bs, depth, size_mib, offset_mib=0, runtime=None):
    cmd = ["fio", "--name=job", "--ioengine=nbd", f"--uri={uri}", f"--rw={rw}", f"--bs={bs}",
           f"--iodepth={depth}", f"--size={size_mib}M", f"--offset={offset_mib}M", "--refill_buffers",
           "--buffer_compress_percentage=0", "--randrepeat=0", "--output-format=json"]
    if runtime:
        cmd += [f"--runtime={runtime}", "--time_based"]
    run = subprocess.run(cmd, capture_output=True, text=True)
    if run.returncode != 0:
        sys.exit(f"fio failed ({run.returncode}): {' '.join(cmd)}\n{run.stderr[-2000:]}{run.stdout[-2000:]}")
    out = run.stdout
    job = json.loads(out[out.index("{"):])["jobs"][0]["write"]
    return job["iops"], job["clat_ns"]["percentile"]["99.000000"] / 1000.0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--capacity-gib", type=int, default=8)
    ap.add_argument("--runtime", type=int, default=30)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--no-record", action="store_true")
    args = ap.parse_args()
    if not os.path.exists(LACUNA):
        sys.exit(f"{LACUNA} missing: run cargo build --release first")
    if args.reps < 1:
        sys.exit("--reps must be at least 1")
    runs = []
    for run in range(args.reps):
        print(f"run {run + 1} of {args.reps}", flush=True)
        rows = one_run(args)
        runs.append((rows[1][2] / rows[0][2], rows))
        print(f"IOPS at 90% / at 10%: {runs[-1][0]:.2f}", flush=True)
    ratio, rows = sorted(runs, key=lambda r: r[0])[(len(runs) - 1) // 2]
    print(f"median run: IOPS at 90% / at 10%: {ratio:.2f} (target >= 0.5; runs: "
          f"{', '.join(f'{r:.2f}' for r, _ in runs)})")
    if not args.no_record:
        record(args, ratio, rows, runs)


def one_run(args):
    """A fresh array: overwrites at 10% full, then at 90% full; one row a level."""
    tmp = tempfile.mkdtemp(prefix="lacuna-fill-", dir=os.environ.get("BENCH_DIR", "/var/tmp"))
    capacity_mib = args.capacity_gib * 1024
    lacuna = Lacuna(tmp, f"{args.capacity_gib}G")
    rows = []
    try:
        lacuna.cli("volume", "create", "v", "--size", f"{args.capacity_gib * 2}G")
        uri = f"nbd://127.0.0.1:{lacuna.nbd}/v"
        filled_mib = 0
        for percent in (10, 90):
            target_mib = capacity_mib * percent // 100
            fio(uri, "write", "1M", 8, target_mib - filled_mib, offset_mib=filled_mib)
            filled_mib = target_mib
            before = lacuna.get("/v1/array/space")
            iops, p99 = fio(uri, "randwrite", "4k", 16, filled_mib, runtime=args.runtime)
            after = lacuna.get("/v1/array/space")
            host = after["host_written_bytes"] - before["host_written_bytes"]
            media = after["media_written_bytes"] - before["media_written_bytes"]
            wa = media / host if host else float("nan")
            fill = after["live_physical_bytes"] / (capacity_mib * MIB)
            cleaned = after["cleaned_segments"] - before["cleaned_segments"]
            waits = after["writer_cleans"] - before["writer_cleans"]
            rows.append((percent, fill, iops, p99, wa, cleaned, waits, after["physical_used_bytes"] / (capacity_mib * MIB)))
            print(f"{percent}% full (live {fill:.0%}): {iops:.0f} IOPS, p99 {p99:.0f} us, write amplification "
                  f"{wa:.2f}, {cleaned} segments cleaned, {waits} writer cleaning passes", flush=True)
    finally:
        lacuna.stop()
        shutil.rmtree(tmp, ignore_errors=True)
    return rows


def record(args, ratio, rows, runs):
    """Appends the median run, and every run's figures, to bench/RESULTS.md."""
    cmd = "bench/fill_level.py " + " ".join(sys.argv[1:])
    lines = [
        f"\n## Random overwrites at 10% and 90% full ({datetime.date.today()})\n",
        f"Command: `{cmd}` (release build; capacity {args.capacity_gib} GiB, one thin volume filled with unique "
        f"data to the level, then fio 4k randwrite QD16 over the filled region for {args.runtime} s over NBD; "
        f"{args.reps} runs, each on a fresh array; the median run by its ratio).\n",
        "| fill | live after | IOPS | p99 | write amplification | segments cleaned | writer cleaning passes | physical used |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for percent, fill, iops, p99, wa, cleaned, waits, used in rows:
        lines.append(f"| {percent}% | {fill:.0%} | {iops:.0f} | {p99:.0f} us | {wa:.2f} | {cleaned} | {waits} | {used:.0%} |")
    lines.append(f"\nIOPS at 90% / at 10%: **{ratio:.2f}** (target ≥ 0.5: {'met' if ratio >= 0.5 else 'NOT met'}).\n")
    lines.append("| run | IOPS at 10% | IOPS at 90% | ratio |")
    lines.append("|---|---|---|---|")
    for n, (r, run_rows) in enumerate(runs, 1):
        lines.append(f"| {n} | {run_rows[0][2]:.0f} | {run_rows[1][2]:.0f} | {r:.2f} |")
    with open(os.path.join(ROOT, "bench", "RESULTS.md"), "a") as f:
        f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
