#!/usr/bin/python3
"""Crash-test workload: drives a Lacuna NBD export with libnbd (a client nobody
here wrote) and journals every operation so the test can tell, after the daemon
is SIGKILLed, what each grain may hold.

usage: crash_workload.py URI JOURNAL WORKER WORKERS GRAINS SEED

Each worker owns the grains g with g % WORKERS == WORKER and runs strictly
sequential operations on its own connection, so its journal is a total order:
  I <op> <first_grain> <count> <tag>   written before the request is sent
  D                                   written after it completed
  F                                   after a FLUSH it sent completed
A grain written with tag t holds a 16-byte header (magic, grain, tag) and then
bytes derived from (grain, tag): the verifier recognises every value and can
tell garbage from data. Tag 0 means zeroes (trimmed or never written).
"""
import os
import random
import struct
import sys

import nbd

GRAIN = 4096
MAGIC = 0x4C41435553484B54


def grain_bytes(grain, tag):
    """16-byte header, then 510 words derived from (grain, tag); the Rust
    verifier computes the same words."""
    header = struct.pack("<QII", MAGIC, grain & 0xFFFFFFFF, tag & 0xFFFFFFFF)
    base = ((grain & 0xFFFFFFFF) << 32) | (tag & 0xFFFFFFFF)
    mask = (1 << 64) - 1
    words = [((base * (i + 1)) + 0x9E3779B97F4A7C15) & mask for i in range(510)]
    return header + struct.pack("<510Q", *words)


def main():
    uri, journal_path, worker, workers, grains, seed = sys.argv[1:7]
    worker, workers, grains, seed = int(worker), int(workers), int(grains), int(seed)
    rng = random.Random(seed * 7919 + worker)
    journal = os.open(journal_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    h = nbd.NBD()
    h.connect_uri(uri)
    mine = list(range(worker, grains, workers))
    tag = (seed % 4000) * 1_000_000 + worker * 100_000
    while True:
        choice = rng.random()
        if choice < 0.08:
            h.flush()
            os.write(journal, b"F\n")
            continue
        # A run of consecutive owned grains is not contiguous on the device when
        # workers > 1, so every op covers one grain, sometimes a few in a batch.
        grain = rng.choice(mine)
        if choice < 0.18:
            os.write(journal, f"I trim {grain} 1 0\n".encode())
            h.trim(GRAIN, grain * GRAIN)
        elif choice < 0.24:
            os.write(journal, f"I zero {grain} 1 0\n".encode())
            h.zero(GRAIN, grain * GRAIN)
        else:
            tag += 1
            os.write(journal, f"I write {grain} 1 {tag}\n".encode())
            h.pwrite(grain_bytes(grain, tag), grain * GRAIN)
        os.write(journal, b"D\n")


if __name__ == "__main__":
    main()
