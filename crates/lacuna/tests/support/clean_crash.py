"""Workload and verifier for tests/clean_crash.rs (run with Debian's python3,
which has the libnbd binding).

  fill URI BLOCKS STATE          write version 0 of every 64 KiB block, flush,
                                 write the state file (version per 4 KiB grain)
  work URI BLOCKS SEED BASE      random 64 KiB overwrites, version BASE+i for the
                                 i-th; flush every 32 and print "F i" after it
  verify URI BLOCKS SEED BASE FLUSHED STATE
                                 every grain holds its state version or a
                                 version of this round: the last one at or
                                 before FLUSHED, or any later one; then writes
                                 the new state

Every block version's bytes derive from (block, version), so a grain read back
names exactly which write it came from, or none (garbage).
"""
import json
import random
import sys

import nbd

BLOCK = 65536
GRAIN = 4096
GRAINS_PER_BLOCK = BLOCK // GRAIN
SLACK = 256  # writes issued after the last printed flush, at most


def content(block, version):
    return random.Random(block * 1_000_003 + version * 7_919 + 17).randbytes(BLOCK)


def sequence(seed, count):
    rng = random.Random(seed)
    return [rng.randrange(BLOCKS) for _ in range(count)]


def connect(uri):
    h = nbd.NBD()
    h.connect_uri(uri)
    return h


def fill(uri, state_path):
    h = connect(uri)
    for b in range(BLOCKS):
        h.pwrite(content(b, 0), b * BLOCK)
    h.flush()
    with open(state_path, "w") as f:
        json.dump([0] * (BLOCKS * GRAINS_PER_BLOCK), f)


def work(uri, seed, base):
    h = connect(uri)
    rng = random.Random(seed)
    i = 0
    while True:
        i += 1
        b = rng.randrange(BLOCKS)
        h.pwrite(content(b, base + i), b * BLOCK)
        if i % 32 == 0:
            h.flush()
            print(f"F {i}", flush=True)


def verify(uri, seed, base, flushed, state_path):
    with open(state_path) as f:
        state = json.load(f)
    versions = {}  # block -> [(i, version)] in order
    for i, b in enumerate(sequence(seed, flushed + SLACK), start=1):
        versions.setdefault(b, []).append((i, base + i))
    h = connect(uri)
    bad = []
    for b in range(BLOCKS):
        data = h.pread(BLOCK, b * BLOCK)
        history = versions.get(b, [])
        durable = [v for i, v in history if i <= flushed]
        later = [v for i, v in history if i > flushed]
        cache = {}

        def bytes_of(v):
            if v not in cache:
                cache[v] = content(b, v)
            return cache[v]

        for g in range(GRAINS_PER_BLOCK):
            index = b * GRAINS_PER_BLOCK + g
            floor = durable[-1] if durable else state[index]
            allowed = [floor] + later
            got = data[g * GRAIN:(g + 1) * GRAIN]
            match = [v for v in allowed if bytes_of(v)[g * GRAIN:(g + 1) * GRAIN] == got]
            if not match:
                bad.append(f"block {b} grain {g}: none of versions {allowed} (flushed up to {flushed})")
            else:
                state[index] = match[0]
    if bad:
        print("\n".join(bad[:20]), file=sys.stderr)
        sys.exit(1)
    with open(state_path, "w") as f:
        json.dump(state, f)


if __name__ == "__main__":
    command, uri, BLOCKS = sys.argv[1], sys.argv[2], int(sys.argv[3])
    if command == "fill":
        fill(uri, sys.argv[4])
    elif command == "work":
        work(uri, int(sys.argv[4]), int(sys.argv[5]))
    elif command == "verify":
        verify(uri, int(sys.argv[4]), int(sys.argv[5]), int(sys.argv[6]), sys.argv[7])
    else:
        sys.exit(f"unknown command {command}")
