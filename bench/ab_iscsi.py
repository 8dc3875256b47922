#!/usr/bin/python3
"""A/B of two Lacuna builds over iSCSI: one job, the builds alternated run by run.

On this shared 2-core machine the same binary can differ by a quarter between
minutes, so a change is judged by alternating it with its baseline, never by
comparing against a figure taken earlier. Each round starts every build on a fresh
4 GiB LUN (written end to end with 1 MiB writes, as in iscsi_compare.py) and runs
the job --reps times on it; the means per build are printed last.

usage: bench/ab_iscsi.py A_BINARY B_BINARY MODE BLOCK_BYTES QUEUE_DEPTH SECONDS
           [--rounds 2] [--reps 2] [--warmup "randwrite 4096 32 10"]
  MODE: read | write | randread | randwrite (the client of iscsi_compare.py)
Needs: what iscsi_compare.py needs (gcc, libiscsi-dev).
"""
import argparse
import os
import shutil
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import iscsi_compare as ic  # noqa: E402

GIB = 1 << 30
LUN_GIB = 4


def one_round(binary, client, args, tmp):
    """Fresh array of `binary`: fill, optional warm-up, then the job --reps times.
    Returns the IOPS of each run."""
    ic.LACUNA = binary
    lacuna = ic.Lacuna(tempfile.mkdtemp(dir=tmp), "16G")
    try:
        lacuna.create("ab", LUN_GIB)
        url = lacuna.url(0)
        client("fill", url, 0, LUN_GIB * GIB, 1)
        ic.wait_idle([lacuna])
        if args.warmup:
            mode, block, depth, secs = args.warmup.split()
            client("load", url, mode, int(block), int(depth), int(secs), LUN_GIB * GIB, 99)
            ic.wait_idle([lacuna])
        runs = []
        for rep in range(args.reps):
            r = client("load", url, args.mode, args.block, args.depth, args.seconds, LUN_GIB * GIB, 7 + rep)
            runs.append(r["iops"])
            ic.wait_idle([lacuna])
        return runs
    finally:
        lacuna.stop()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("a")
    ap.add_argument("b")
    ap.add_argument("mode", choices=["read", "write", "randread", "randwrite"])
    ap.add_argument("block", type=int)
    ap.add_argument("depth", type=int)
    ap.add_argument("seconds", type=int)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--reps", type=int, default=2)
    ap.add_argument("--warmup", help='a job run once before the measured ones, e.g. "randwrite 4096 32 10"')
    args = ap.parse_args()
    for binary in (args.a, args.b):
        if not os.access(binary, os.X_OK):
            sys.exit(f"{binary}: not an executable")
    if args.rounds < 1 or args.reps < 1 or args.seconds < 1:
        sys.exit("--rounds, --reps and the seconds must be at least 1")
    tmp = tempfile.mkdtemp(prefix="ab-iscsi-", dir=os.environ.get("BENCH_DIR", "/var/tmp"))
    results = {"A": [], "B": []}
    try:
        client = ic.Client(tmp)
        for round_number in range(args.rounds):
            # A then B in odd rounds, B then A in even ones: the host drifts
            # within a round, and whichever build ran first was favoured by it.
            order = (("A", args.a), ("B", args.b))
            for name, binary in order if round_number % 2 == 0 else order[::-1]:
                runs = one_round(binary, client, args, tmp)
                results[name] += runs
                shown = ", ".join(f"{iops:.0f}" for iops in runs)
                print(f"round {round_number + 1} {name}: {shown} IOPS", flush=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    mib = args.block / (1 << 20)
    for name, binary in (("A", args.a), ("B", args.b)):
        mean = sum(results[name]) / len(results[name])
        print(f"{name} {binary}: mean {mean:.0f} IOPS ({mean * mib:.0f} MiB/s) over {len(results[name])} runs")
    print(f"B / A: {sum(results['B']) / sum(results['A']):.3f}")


if __name__ == "__main__":
    main()
