#!/usr/bin/python3
"""A/B of two Lacuna builds over NBD: one fio job, the builds alternated run by run.

The NBD counterpart of ab_iscsi.py, for the same reason: on this shared 2-core
machine the same binary can differ by a quarter between minutes, so a change is
judged by alternating it with its baseline, never against a figure taken earlier
(nbd_compare.py runs each server once). Each round starts every build on a fresh
volume, prefilled as in nbd_compare.py (1 MiB writes, ~2:1 compressible, ~30%
duplicates), and runs the job --reps times on it; the means per build are printed
last.

usage: bench/ab_nbd.py A_BINARY B_BINARY RW BS QUEUE_DEPTH SECONDS
           [--rounds 2] [--reps 2] [--size-gib 2]
  RW: read | write | randread | randwrite (fio's --rw); BS: fio's --bs (4k, 1M)
Needs: fio (with its nbd engine), as nbd_compare.py.
"""
import argparse
import os
import shutil
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import nbd_compare as nc  # noqa: E402


def one_round(binary, args, tmp):
    """Fresh array of `binary`: prefill, then the job --reps times. Returns the
    IOPS and MiB/s of each run."""
    nc.LACUNA = binary
    lacuna = nc.Lacuna(tempfile.mkdtemp(dir=tmp), args.size_gib)
    try:
        nc.prefill(lacuna.uri, args.size_gib)
        return [
            nc.fio(lacuna.uri, args.rw, args.bs, args.depth, args.seconds, args.size_gib)
            for _ in range(args.reps)
        ]
    finally:
        lacuna.stop()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("a")
    ap.add_argument("b")
    ap.add_argument("rw", choices=["read", "write", "randread", "randwrite"])
    ap.add_argument("bs")
    ap.add_argument("depth", type=int)
    ap.add_argument("seconds", type=int)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--reps", type=int, default=2)
    ap.add_argument("--size-gib", type=int, default=2)
    args = ap.parse_args()
    for binary in (args.a, args.b):
        if not os.access(binary, os.X_OK):
            sys.exit(f"{binary}: not an executable")
    if min(args.rounds, args.reps, args.seconds, args.depth, args.size_gib) < 1:
        sys.exit("--rounds, --reps, --size-gib, the depth and the seconds must be at least 1")
    if shutil.which("fio") is None:
        sys.exit("fio missing (apt-get install -y fio)")
    tmp = tempfile.mkdtemp(prefix="ab-nbd-", dir=os.environ.get("BENCH_DIR", "/var/tmp"))
    results = {"A": [], "B": []}
    try:
        for round_number in range(args.rounds):
            # A then B in odd rounds, B then A in even ones: the host drifts
            # within a round, and whichever build ran first was favoured by it.
            order = (("A", args.a), ("B", args.b))
            for name, binary in order if round_number % 2 == 0 else order[::-1]:
                runs = one_round(binary, args, tmp)
                results[name] += runs
                shown = ", ".join(f"{iops:.0f} IOPS ({mib_s:.0f} MiB/s)" for iops, mib_s in runs)
                print(f"round {round_number + 1} {name}: {shown}", flush=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    for name, binary in (("A", args.a), ("B", args.b)):
        runs = results[name]
        iops = sum(r[0] for r in runs) / len(runs)
        mib_s = sum(r[1] for r in runs) / len(runs)
        print(f"{name} {binary}: mean {iops:.0f} IOPS ({mib_s:.0f} MiB/s) over {len(runs)} runs")
    print(f"B / A: {sum(r[0] for r in results['B']) / sum(r[0] for r in results['A']):.3f}")


if __name__ == "__main__":
    main()
