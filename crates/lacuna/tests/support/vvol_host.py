#!/usr/bin/env python3
"""A VMware host's storage side for the vVol lifecycle test (vvol_lifecycle.rs):
its iSCSI initiator, driven line by line, while the test makes the API calls.

The test starts it with the portal and the host's initiator name; it logs in
one session (one I_T nexus, as an ESXi HBA keeps for the life of the host)
and then reads one JSON request a line on stdin and answers one JSON line on
stdout, until stdin closes (then it logs out). Any failure answers
{"error": ...} and the test fails. A LUN is [PE] or [PE, second-level id].

Requests ("op" and its arguments):

  command      lun, cdb (hex), data_out (hex) or data_in_length
               -> status ("good" or "STATUS KEY/ASC/ASCQ"), data (hex)
  clear_ua     lun -> the unit attentions cleared, as "KEY/ASC/ASCQ"
  report_luns  lun, select -> the LUN fields (hex) REPORT LUNS lists
  capacity     lun -> bytes, by READ CAPACITY (16)

The data requests (capacity and on) first clear the LUN's unit attentions:
a nexus meets each newly bound vVol with POWER ON.
  write_file   lun, path, offset -> the file written at offset, WRITE (16)s of 1 MiB
  read_file    lun, path, offset, length -> read into path, READ (16)s of 1 MiB
  sync         lun -> SYNCHRONIZE CACHE (16) of the whole LU
  blocks       lun, offset, count -> the value of each 4 KiB block of the
               writer's pattern (i), 0 for zeroes, -1 for anything else
  writer_start lun_a, lun_b, offset, count: a second session (another nexus)
               writes block i of A, then block i of B, for i = 1..count,
               each after the one before completed, in a thread
  writer_progress -> done (pairs written), running, failure (null or why)
  writer_stop  -> the same, once the thread has stopped after a whole pair
"""

import json
import os
import struct
import sys
import threading

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from raw_iscsi import Session, additional_sense, sense_key  # noqa: E402

LOGICAL_BLOCK_BYTES = 512
CHUNK_BYTES = 1 << 20
PATTERN_BLOCK_BYTES = 4096


def lun_field(lun):
    """The 8-byte LUN of [first] or [first, second-level id] (SAM-5 4.7)."""
    first = lun[0]
    head = bytes([0, first]) if first < 256 else bytes([0x40 | (first >> 8), first & 0xFF])
    if len(lun) == 1:
        return head + bytes(6)
    # Long extended flat space addressing of the subsidiary (SAM-5 4.7.7.3).
    return head + bytes([0xE2]) + lun[1].to_bytes(5, "big")


def status_text(result):
    if result.status == 0:
        return "good"
    if not result.sense:
        return "%d" % result.status
    return "%d %02x/%02x/%02x" % (
        (result.status, sense_key(result.sense)) + additional_sense(result.sense)
    )


def rw16(opcode, offset, length):
    assert offset % LOGICAL_BLOCK_BYTES == 0 and length % LOGICAL_BLOCK_BYTES == 0
    return struct.pack(
        ">BBQIBB", opcode, 0, offset // LOGICAL_BLOCK_BYTES, length // LOGICAL_BLOCK_BYTES, 0, 0
    )


def pattern(tag, i):
    """Block i of disk `tag` as the writer writes it: 16 bytes repeated."""
    unit = struct.pack(">8sQ", ("LIFE-%s" % tag).encode(), i)
    return unit * (PATTERN_BLOCK_BYTES // len(unit))


ZERO_BLOCK = bytes(PATTERN_BLOCK_BYTES)


def block_value(block):
    if block == ZERO_BLOCK:
        return 0
    tag, i = struct.unpack(">8sQ", block[:16])
    if tag[:5] == b"LIFE-" and block == pattern(tag[5:].rstrip(b"\0").decode(), i):
        return i
    return -1


class Failed(Exception):
    pass


def checked(result, what):
    if result.status != 0:
        raise Failed("%s: %s" % (what, status_text(result)))
    return result


class Writer:
    """Dependent writes across two disks: B's block i only after A's."""

    def __init__(self, port, target, initiator, lun_a, lun_b, offset, count):
        self.session = Session(port, target, initiator)
        self.lun_a, self.lun_b = lun_field(lun_a), lun_field(lun_b)
        self.offset, self.count = offset, count
        self.done = 0
        self.error = None
        self.stop = threading.Event()
        self.session.login()
        self.session.clear_unit_attentions(self.lun_a)
        self.session.clear_unit_attentions(self.lun_b)
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.thread.start()

    def write(self, lun, tag, i):
        at = self.offset + (i - 1) * PATTERN_BLOCK_BYTES
        cdb = rw16(0x8A, at, PATTERN_BLOCK_BYTES)
        checked(self.session.command(lun, cdb, data_out=pattern(tag, i)), "write %s %d" % (tag, i))

    def run(self):
        try:
            for i in range(1, self.count + 1):
                if self.stop.is_set():
                    break
                self.write(self.lun_a, "A", i)
                self.write(self.lun_b, "B", i)
                self.done = i
            self.session.logout()
        except Exception as error:  # reported to the test, which fails
            self.error = "%s: %s" % (type(error).__name__, error)
        finally:
            self.session.close()

    def progress(self):
        return {"done": self.done, "running": self.thread.is_alive(), "failure": self.error}


class Host:
    def __init__(self, port, target, initiator):
        self.port, self.target, self.initiator = port, target, initiator
        self.session = Session(port, target, initiator)
        self.session.login()
        self.writer = None

    def command(self, lun, cdb, data_out="", data_in_length=0):
        r = self.session.command(
            lun_field(lun), bytes.fromhex(cdb), bytes.fromhex(data_out), data_in_length
        )
        return {"status": status_text(r), "data": r.data.hex()}

    def clear_ua(self, lun):
        seen = self.session.clear_unit_attentions(lun_field(lun))
        return {"cleared": ["06/%02x/%02x" % pair for pair in seen]}

    def report_luns(self, lun, select):
        cdb = struct.pack(">BBB3sIBB", 0xA0, 0, select, bytes(3), 65536, 0, 0)
        r = checked(self.session.command(lun_field(lun), cdb, data_in_length=65536), "REPORT LUNS")
        length = struct.unpack(">I", r.data[:4])[0]
        body = r.data[8:8 + length]
        return {"luns": [body[i:i + 8].hex() for i in range(0, len(body), 8)]}

    def capacity(self, lun):
        field = lun_field(lun)
        self.session.clear_unit_attentions(field)
        cdb = bytes([0x9E, 0x10]) + bytes(8) + struct.pack(">I", 32) + bytes(2)
        r = checked(self.session.command(field, cdb, data_in_length=32), "READ CAPACITY")
        last_lba, block_bytes = struct.unpack(">QI", r.data[:12])
        return {"bytes": (last_lba + 1) * block_bytes, "block_bytes": block_bytes}

    def write_file(self, lun, path, offset):
        field = lun_field(lun)
        self.session.clear_unit_attentions(field)
        written = 0
        with open(path, "rb") as f:
            while True:
                data = f.read(CHUNK_BYTES)
                if not data:
                    break
                at = offset + written
                r = self.session.command(field, rw16(0x8A, at, len(data)), data_out=data)
                checked(r, "WRITE (16) at %d" % at)
                written += len(data)
        return {"written": written}

    def read_file(self, lun, path, offset, length):
        field = lun_field(lun)
        self.session.clear_unit_attentions(field)
        with open(path, "wb") as f:
            done = 0
            while done < length:
                n = min(CHUNK_BYTES, length - done)
                at = offset + done
                r = checked(
                    self.session.command(field, rw16(0x88, at, n), data_in_length=n),
                    "READ (16) at %d" % at,
                )
                if len(r.data) != n:
                    raise Failed("READ (16) at %d: %d bytes of %d" % (at, len(r.data), n))
                f.write(r.data)
                done += n
        return {"read": length}

    def sync(self, lun):
        cdb = bytes([0x91, 0]) + bytes(14)
        return {"status": status_text(self.session.command(lun_field(lun), cdb))}

    def blocks(self, lun, offset, count):
        field = lun_field(lun)
        self.session.clear_unit_attentions(field)
        values = []
        per_chunk = CHUNK_BYTES // PATTERN_BLOCK_BYTES
        for first in range(0, count, per_chunk):
            n = min(per_chunk, count - first)
            at = offset + first * PATTERN_BLOCK_BYTES
            length = n * PATTERN_BLOCK_BYTES
            r = checked(
                self.session.command(field, rw16(0x88, at, length), data_in_length=length),
                "READ (16) at %d" % at,
            )
            for k in range(0, length, PATTERN_BLOCK_BYTES):
                values.append(block_value(r.data[k:k + PATTERN_BLOCK_BYTES]))
        return {"values": values}

    def writer_start(self, lun_a, lun_b, offset, count):
        if self.writer is not None:
            raise Failed("a writer is running")
        self.writer = Writer(self.port, self.target, self.initiator, lun_a, lun_b, offset, count)
        return {}

    def writer_progress(self):
        return self.writer.progress()

    def writer_stop(self):
        self.writer.stop.set()
        self.writer.thread.join(60)
        progress = self.writer.progress()
        self.writer = None
        return progress


def main():
    port, target, initiator = int(sys.argv[1]), sys.argv[2], sys.argv[3]
    host = Host(port, target, initiator)
    print(json.dumps({"ready": True}), flush=True)
    for line in sys.stdin:
        request = json.loads(line)
        op = request.pop("op")
        try:
            answer = getattr(host, op)(**request)
        except Exception as error:
            answer = {"error": "%s: %s: %s" % (op, type(error).__name__, error)}
        print(json.dumps(answer), flush=True)
    if host.writer is not None:
        host.writer_stop()
    host.session.logout()
    host.session.close()


if __name__ == "__main__":
    main()
