"""load-nbd: NBD connections (python3-libnbd), one thread each, doing verified I/O
on their own region of an export for a bounded time (crates/lacuna/tests/load.rs).

usage: load_nbd.py SECONDS REGION-SECTORS SEED SPEC...
  SPEC = CONN,URI,FIRST-SECTOR — one connection per SPEC.

All connections are made first; then `ready` is printed and the run starts when
a line arrives on stdin (every client of the test starts at once, and connecting
and interpreter start-up are not in the measured latencies).

The workload and the sector layout are those of support/load_iscsi.c: every
512-byte sector written carries (conn, sector, generation) as three 64-bit words
and a 64-bit mix of them repeated; a connection fills its region, then until the
deadline writes 1-128 sectors at any sector offset, reads any range (checked
against the generation it last wrote there, 0 = zeroes), writes zeroes and
flushes; at the end it reads the whole region back. libnbd releases the GIL
while a request is in flight, so the threads' requests overlap.

Output, one line per connection: `nbd conn=N ops=.. writes=.. reads=.. zeroes=..
flushes=.. written_bytes=.. read_bytes=.. max_latency_us=.. max_KIND_us=..
max_fill_us=..`: the slowest request after the fill, overall and per kind, and
the slowest of the fill (its writes and flush) apart. Any failed request
or wrong byte prints the reason and exits with status 2.
"""

import os
import random
import struct
import sys
import threading
import time

import nbd

SECTOR_BYTES = 512
MAX_OP_SECTORS = 128
MAGIC = 0x4C4F41445445535F
MASK = (1 << 64) - 1
# Requests slower than this are reported on stderr as they happen (with the time
# since start), so a stall can be placed in the run and matched across connections.
SLOW_US = 250_000
START = time.monotonic()
# print() writes the text and the newline apart, so two threads' summaries can
# share a line; every stdout line goes out whole under this lock.
STDOUT_LOCK = threading.Lock()
ZERO_SECTOR = bytes(SECTOR_BYTES)


def mix(conn, sector, gen):
    z = ((conn * 0x9E3779B97F4A7C15) ^ (sector * 0xBF58476D1CE4E5B9) ^ (gen * 0x94D049BB133111EB)) & MASK
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK
    return z ^ (z >> 31)


def sector_bytes(conn, sector, gen):
    if gen == 0:
        return ZERO_SECTOR
    return struct.pack("<QQQ", MAGIC ^ conn, sector, gen) + struct.pack("<Q", mix(conn, sector, gen)) * 61


def fail(conn, message):
    sys.stderr.write(f"load-nbd conn {conn}: {message}\n")
    sys.stderr.flush()
    os._exit(2)


class Connection:
    def __init__(self, conn, uri, first_sector, region_sectors, seed):
        self.conn = conn
        self.first = first_sector
        self.region = region_sectors
        self.gens = [0] * region_sectors
        self.rng = random.Random(seed * 1000003 + conn)
        self.handle = nbd.NBD()
        self.handle.connect_uri(uri)
        self.stats = dict(writes=0, reads=0, zeroes=0, flushes=0, written_bytes=0, read_bytes=0)
        self.max_latency_us = 0
        self.max_kind_us = dict(write=0, read=0, zero=0, flush=0)
        # The first pass over the region (every connection writing at once), timed apart.
        self.filling = False
        self.max_fill_us = 0

    def timed(self, what, call, *args):
        start = time.monotonic()
        try:
            result = call(*args)
        except nbd.Error as error:
            fail(self.conn, f"{what}: {error}")
        elapsed_us = int((time.monotonic() - start) * 1e6)
        phase = "fill" if self.filling else "run"
        if elapsed_us > SLOW_US:
            sys.stderr.write(
                f"slow: nbd conn={self.conn} {what} at_s={start - START:.2f} "
                f"latency_ms={elapsed_us // 1000} phase={phase}\n"
            )
        if self.filling:
            self.max_fill_us = max(self.max_fill_us, elapsed_us)
        else:
            self.max_latency_us = max(self.max_latency_us, elapsed_us)
            self.max_kind_us[what] = max(self.max_kind_us[what], elapsed_us)
        return result

    def offset(self, at):
        return (self.first + at) * SECTOR_BYTES

    def write(self, at, count, gen):
        data = b"".join(sector_bytes(self.conn, at + i, gen) for i in range(count))
        self.gens[at:at + count] = [gen] * count
        self.timed("write", self.handle.pwrite, data, self.offset(at))
        self.stats["writes"] += 1
        self.stats["written_bytes"] += len(data)

    def read(self, at, count):
        data = self.timed("read", self.handle.pread, count * SECTOR_BYTES, self.offset(at))
        for i in range(count):
            got = data[i * SECTOR_BYTES:(i + 1) * SECTOR_BYTES]
            if got != sector_bytes(self.conn, at + i, self.gens[at + i]):
                fail(self.conn, f"sector {at + i} of the region (generation {self.gens[at + i]}) reads wrong bytes")
        self.stats["reads"] += 1
        self.stats["read_bytes"] += len(data)

    def zero(self, at, count):
        self.timed("zero", self.handle.zero, count * SECTOR_BYTES, self.offset(at))
        self.gens[at:at + count] = [0] * count
        self.stats["zeroes"] += 1

    def flush(self):
        self.timed("flush", self.handle.flush)
        self.stats["flushes"] += 1

    def run(self, deadline):
        gen = 1
        self.filling = True
        for at in range(0, self.region, MAX_OP_SECTORS):
            self.write(at, min(MAX_OP_SECTORS, self.region - at), gen)
        self.flush()
        self.filling = False
        while time.monotonic() < deadline:
            count = min(self.rng.randint(1, MAX_OP_SECTORS), self.region)
            at = self.rng.randint(0, self.region - count)
            pick = self.rng.randrange(100)
            if pick < 45:
                gen += 1
                self.write(at, count, gen)
            elif pick < 92:
                self.read(at, count)
            elif pick < 96:
                self.zero(at, count)
            else:
                self.flush()
        self.flush()
        for at in range(0, self.region, MAX_OP_SECTORS):
            self.read(at, min(MAX_OP_SECTORS, self.region - at))
        self.handle.shutdown()
        s = self.stats
        ops = s["writes"] + s["reads"] + s["zeroes"] + s["flushes"]
        fields = " ".join(f"{k}={v}" for k, v in s.items())
        kinds = " ".join(f"max_{k}_us={v}" for k, v in self.max_kind_us.items())
        line = (
            f"nbd conn={self.conn} ops={ops} {fields} max_latency_us={self.max_latency_us} {kinds} "
            f"max_fill_us={self.max_fill_us}\n"
        )
        with STDOUT_LOCK:
            sys.stdout.write(line)
            sys.stdout.flush()


def main():
    seconds, region_sectors, seed = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
    connections = []
    for spec in sys.argv[4:]:
        conn, uri, first = spec.split(",")
        connections.append(Connection(int(conn), uri, int(first), region_sectors, seed))
    # Every connection is up: the test starts all clients at once.
    print("ready", flush=True)
    sys.stdin.readline()
    global START
    START = time.monotonic()
    deadline = START + seconds

    def guarded(connection):
        try:
            connection.run(deadline)
        except Exception as error:  # any surprise fails the run, never a silent thread death
            fail(connection.conn, repr(error))

    threads = [threading.Thread(target=guarded, args=(c,)) for c in connections]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()


if __name__ == "__main__":
    main()
