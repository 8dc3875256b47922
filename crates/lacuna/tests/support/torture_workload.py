#!/usr/bin/python3
"""Crash-torture workload: one worker of the mixed load tests/torture.rs runs
against `lacuna serve` while it SIGKILLs the daemon at random moments.

usage:
  torture_workload.py nbd     JOURNAL WORKER SEED ITERATION NBD-URI  FIRST-SECTOR SECTORS VOLUME
  torture_workload.py iscsi   JOURNAL WORKER SEED ITERATION CLIENT ISCSI-URL IQN FIRST-SECTOR SECTORS VOLUME
  torture_workload.py control JOURNAL WORKER SEED ITERATION LACUNA API DATA-DIR STATE-JSON

All workers append to one journal (O_APPEND, one write per line, so lines of all
workers form one total order that respects real time):
  I <worker> <op> <kind> <args...>   written before the request is sent
  D <worker> <op>                    written after it completed successfully
I/O kinds (sectors of 512 bytes): w/wf (write, wf with FUA) VOL SECTOR COUNT WRITE_ID,
t (trim) and z (write zeroes) VOL SECTOR COUNT, f (flush).
Control kinds: snap VOL NAME, clone SOURCE NEW, copy SRC SSECTOR COUNT DST DSECTOR,
resize VOL SECTORS, delvol NAME, delsnap VOL NAME, erase (eradicate) NAME.

Every written sector is self-describing: 8 bytes magic, 8 bytes stamp (write id
<< 12 | sector index within the write), then 496 bytes derived from the stamp, so
the verifier can name the write any sector came from and tell garbage from data.
Each I/O worker owns a stripe of one volume and runs one request at a time, so the
requests touching a grain are totally ordered.
"""
import json
import os
import random
import struct
import subprocess
import sys

import nbd

SECTOR = 512
GRAIN_SECTORS = 8
MAGIC = 0x4C41435554525455
BODY_BYTES = SECTOR - 16
MASK = (1 << (8 * BODY_BYTES)) - 1


def splitmix64(x):
    x = (x + 0x9E3779B97F4A7C15) & 0xFFFFFFFFFFFFFFFF
    z = x
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & 0xFFFFFFFFFFFFFFFF
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & 0xFFFFFFFFFFFFFFFF
    return z ^ (z >> 31)


# The body multiplier: 62 limbs of splitmix64(i), made odd (the Rust verifier
# builds the same number).
BODY_FACTOR = sum(splitmix64(i) << (64 * i) for i in range(BODY_BYTES // 8)) | 1


def sector_bytes(stamp):
    return struct.pack("<QQ", MAGIC, stamp) + ((stamp * BODY_FACTOR) & MASK).to_bytes(
        BODY_BYTES, "little"
    )


def write_data(write_id, count):
    return b"".join(sector_bytes((write_id << 12) | i) for i in range(count))


class Journal:
    def __init__(self, path, worker):
        self.fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        self.worker = worker
        self.op = 0

    def issue(self, *fields):
        self.op += 1
        line = " ".join(["I", str(self.worker), str(self.op)] + [str(f) for f in fields])
        os.write(self.fd, (line + "\n").encode())

    def done(self):
        os.write(self.fd, f"D {self.worker} {self.op}\n".encode())


def pick_range(rng, first, sectors):
    """A request of many sizes and alignments inside [first, first + sectors)."""
    roll = rng.random()
    if roll < 0.15:
        count = 1
    elif roll < 0.35:
        count = rng.randint(2, 15)
    elif roll < 0.6:
        count = GRAIN_SECTORS * rng.randint(1, 4)
    elif roll < 0.9:
        count = rng.randint(16, 256)
    else:
        count = rng.randint(257, 2048)
    count = min(count, sectors)
    start = rng.randint(0, sectors - count)
    if rng.random() < 0.5:
        start -= start % GRAIN_SECTORS
    return first + start, count


class NbdDevice:
    def __init__(self, uri):
        self.h = nbd.NBD()
        self.h.connect_uri(uri)

    def write(self, sector, data, fua):
        self.h.pwrite(data, sector * SECTOR, nbd.CMD_FLAG_FUA if fua else 0)

    def trim(self, sector, count):
        self.h.trim(count * SECTOR, sector * SECTOR)

    def zero(self, sector, count):
        self.h.zero(count * SECTOR, sector * SECTOR)

    def flush(self):
        self.h.flush()


class IscsiDevice:
    """Talks to the libiscsi client (support/torture_iscsi.c) over its pipes."""

    def __init__(self, client, url, iqn):
        self.p = subprocess.Popen([client, url, iqn], stdin=subprocess.PIPE, stdout=subprocess.PIPE)

    def request(self, op, sector, count, data=b"", fua=False):
        header = struct.pack("<BBHIQ", ord(op), 1 if fua else 0, 0, count, sector)
        self.p.stdin.write(header + data)
        self.p.stdin.flush()
        if self.p.stdout.read(1) != b"\0":
            sys.exit(f"iSCSI {op} failed (daemon gone?)")

    def write(self, sector, data, fua):
        self.request("W", sector, len(data) // SECTOR, data, fua)

    def trim(self, sector, count):
        self.request("U", sector, count)

    def zero(self, sector, count):
        self.request("Z", sector, count)

    def flush(self):
        self.request("F", 0, 0)


def io_worker(journal, rng, iteration, device, first, sectors, volume):
    counter = 0
    while True:
        roll = rng.random()
        if roll < 0.05:
            journal.issue("f")
            device.flush()
        elif roll < 0.15:
            sector, count = pick_range(rng, first, sectors)
            journal.issue("t", volume, sector, count)
            device.trim(sector, count)
        elif roll < 0.22:
            sector, count = pick_range(rng, first, sectors)
            journal.issue("z", volume, sector, count)
            device.zero(sector, count)
        else:
            counter += 1
            write_id = (iteration << 30) | (journal.worker << 24) | counter
            sector, count = pick_range(rng, first, sectors)
            fua = rng.random() < 0.06
            data = write_data(write_id, count)
            journal.issue("wf" if fua else "w", volume, sector, count, write_id)
            device.write(sector, data, fua)
        journal.done()


def control_worker(journal, rng, iteration, lacuna, api, data_dir, state_path):
    """Snapshots, clones, range copies, resizes of clones and deletes through
    the CLI while I/O runs."""
    with open(state_path) as f:
        state = json.load(f)
    bases = state["bases"]  # name -> {"sectors", "worker_sectors"}
    clones = dict(state["clones"])  # name -> current size in sectors
    snapshots = list(state["snapshots"])  # "VOL@SNAP"
    # Clones are made of base volumes or their snapshots: at most this large.
    full_sectors = max(b["sectors"] for b in bases.values())
    made = 0

    def cli(*args):
        out = subprocess.run([lacuna, "--api", api, "--data-dir", data_dir] + list(args),
                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        if out.returncode != 0:
            sys.exit(f"lacuna {args} failed: {out.stderr.decode()}")

    while True:
        made += 1
        roll = rng.random()
        base = rng.choice(sorted(bases))
        if len(snapshots) > 4 or (roll < 0.08 and snapshots):
            full = snapshots.pop(0 if len(snapshots) > 4 else rng.randrange(len(snapshots)))
            vol, snap = full.split("@")
            journal.issue("delsnap", vol, snap)
            cli("snapshot", "delete", full)
            journal.done()
            journal.issue("erase", full)
            cli("snapshot", "eradicate", full)
        elif len(clones) > 3 or (roll < 0.16 and clones):
            names = sorted(clones)
            name = names[0 if len(names) > 3 else rng.randrange(len(names))]
            del clones[name]
            journal.issue("delvol", name)
            cli("volume", "delete", name)
            journal.done()
            journal.issue("erase", name)
            cli("volume", "eradicate", name)
        elif roll < 0.4:
            name = f"s{iteration}x{made}"
            journal.issue("snap", base, name)
            cli("snapshot", "create", base, "--name", name)
            snapshots.append(f"{base}@{name}")
        elif roll < 0.55:
            source = rng.choice(snapshots) if snapshots and rng.random() < 0.5 else base
            name = f"c{iteration}x{made}"
            journal.issue("clone", source, name)
            cli("volume", "clone", source, name)
            clones[name] = full_sectors
        elif roll < 0.63 and clones:
            # Shrink (cutting what lies past the new end) or grow back, in
            # whole grains; copies land within the current size only.
            name = rng.choice(sorted(clones))
            grains, full_grains = clones[name] // GRAIN_SECTORS, full_sectors // GRAIN_SECTORS
            if grains < full_grains and rng.random() < 0.6:
                grains = rng.randint(grains + 1, full_grains)
            else:
                grains = rng.randint(1, full_grains - 1)
            journal.issue("resize", name, grains * GRAIN_SECTORS)
            cli("volume", "resize", name, "--size", str(grains * GRAIN_SECTORS * SECTOR))
            clones[name] = grains * GRAIN_SECTORS
        else:
            # Source: the workers' stripes of a base volume (under concurrent
            # writes); destination: a clone, or a base volume's control region.
            worker_sectors = bases[base]["worker_sectors"]
            count = min(rng.choice([1, 7, 8, 64, 200, 1024, 4096]), worker_sectors)
            src = rng.randint(0, worker_sectors - count)
            if rng.random() < 0.5:
                src -= src % GRAIN_SECTORS
            if clones and rng.random() < 0.6:
                dst_vol = rng.choice(sorted(clones))
                low, high = 0, clones[dst_vol]
            else:
                dst_vol = rng.choice(sorted(bases))
                low, high = bases[dst_vol]["worker_sectors"], bases[dst_vol]["sectors"]
            count = min(count, high - low)
            dst = rng.randint(low, high - count)
            if rng.random() < 0.5:
                dst -= (dst - low) % GRAIN_SECTORS
            journal.issue("copy", base, src, count, dst_vol, dst)
            cli("volume", "copy", base, dst_vol, "--offset", str(src * SECTOR),
                "--length", str(count * SECTOR), "--to", str(dst * SECTOR))
        journal.done()


def main():
    mode, journal_path, worker, seed, iteration = sys.argv[1:6]
    rest = sys.argv[6:]
    worker, seed, iteration = int(worker), int(seed), int(iteration)
    rng = random.Random(seed * 1_000_003 + worker)
    journal = Journal(journal_path, worker)
    if mode == "nbd":
        uri, first, sectors, volume = rest
        io_worker(journal, rng, iteration, NbdDevice(uri), int(first), int(sectors), volume)
    elif mode == "iscsi":
        client, url, iqn, first, sectors, volume = rest
        device = IscsiDevice(client, url, iqn)
        io_worker(journal, rng, iteration, device, int(first), int(sectors), volume)
    elif mode == "control":
        lacuna, api, data_dir, state_path = rest
        control_worker(journal, rng, iteration, lacuna, api, data_dir, state_path)
    else:
        sys.exit(f"unknown mode {mode}")


if __name__ == "__main__":
    main()
