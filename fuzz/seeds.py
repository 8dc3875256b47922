#!/usr/bin/env python3
"""Writes the checked-in seed corpus of every fuzz target (fuzz/corpus/<target>/).

Seeds are valid protocol exchanges in each target's input format (see the doc comment at
the top of each fuzz_targets/*.rs), so the fuzzer starts from inputs that reach deep into
the parsers instead of having to discover magic numbers and framing. Deterministic: running
it again rewrites the same files. Python standard library only.

    python3 fuzz/seeds.py
"""

import os
import struct
import sys

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "corpus")


def write(target, name, data):
    directory = os.path.join(ROOT, target)
    os.makedirs(directory, exist_ok=True)
    with open(os.path.join(directory, "seed-" + name), "wb") as f:
        f.write(bytes(data))


# ---------------------------------------------------------------- NBD

IHAVEOPT = 0x49484156454F5054
REQUEST_MAGIC = 0x25609513
OPT = dict(EXPORT_NAME=1, ABORT=2, LIST=3, STARTTLS=5, INFO=6, GO=7, STRUCTURED_REPLY=8,
           LIST_META_CONTEXT=9, SET_META_CONTEXT=10, EXTENDED_HEADERS=11)
CMD = dict(READ=0, WRITE=1, DISC=2, FLUSH=3, TRIM=4, CACHE=5, WRITE_ZEROES=6, BLOCK_STATUS=7)


def nbd_option(code, data=b""):
    return struct.pack(">QII", IHAVEOPT, code, len(data)) + data


def nbd_string(text):
    return struct.pack(">I", len(text)) + text.encode()


def nbd_go(name, option="GO", infos=()):
    data = nbd_string(name) + struct.pack(">H", len(infos))
    data += b"".join(struct.pack(">H", info) for info in infos)
    return nbd_option(OPT[option], data)


def nbd_meta(option, name, queries):
    data = nbd_string(name) + struct.pack(">I", len(queries))
    data += b"".join(nbd_string(q) for q in queries)
    return nbd_option(OPT[option], data)


def nbd_request(command, offset, length, flags=0, handle=1, payload=None):
    out = struct.pack(">IHHQQI", REQUEST_MAGIC, flags, CMD[command], handle, offset, length)
    if command == "WRITE":
        out += payload if payload is not None else bytes([0xA5]) * length
    return out


def nbd_requests(size):
    """A mix of every command, in range, at the edges and past the end."""
    return [
        nbd_request("WRITE", 0, 4096, handle=1),
        nbd_request("READ", 0, 8192, handle=2),
        nbd_request("WRITE", 5000, 100, flags=1, handle=3),
        nbd_request("BLOCK_STATUS", 0, min(size, 65536), handle=4),
        nbd_request("BLOCK_STATUS", 0, size, flags=8, handle=5),
        nbd_request("TRIM", 0, 4096, handle=6),
        nbd_request("WRITE_ZEROES", 4096, 8192, flags=2, handle=7),
        nbd_request("WRITE_ZEROES", 0, 4096, flags=16, handle=8),
        nbd_request("CACHE", 0, 4096, handle=9),
        nbd_request("FLUSH", 0, 0, handle=10),
        nbd_request("READ", size - 512, 512, flags=4, handle=11),
        nbd_request("READ", size, 1, handle=12),
        nbd_request("READ", 0, 0, handle=13),
        nbd_request("DISC", 0, 0, handle=14),
    ]


def nbd_seeds():
    exports = {"disk": 1 << 20, "ro": 64 << 10, "odd": 12345}
    for name, size in exports.items():
        for structured in (False, True):
            hs = struct.pack(">I", 3)
            if structured:
                hs += nbd_option(OPT["STRUCTURED_REPLY"])
                hs += nbd_meta("SET_META_CONTEXT", name, ["base:allocation"])
            hs += nbd_go(name, infos=(0, 1, 2, 3))
            requests = nbd_requests(size)
            suffix = "structured" if structured else "simple"
            write("nbd_session", f"go-{name}-{suffix}", hs + b"".join(requests))
            for index, request in enumerate(requests):
                write("nbd_session", f"go-{name}-{suffix}-{index:02}", hs + request)
    # Old-style EXPORT_NAME, with and without the zero padding.
    for flags in (1, 3):
        hs = struct.pack(">I", flags) + nbd_option(OPT["EXPORT_NAME"], b"disk")
        write("nbd_session", f"export-name-{flags}", hs + b"".join(nbd_requests(1 << 20)))
    # Option haggling only.
    hs = struct.pack(">I", 1)
    write("nbd_session", "list-info-abort", hs + nbd_option(OPT["LIST"]) + nbd_go("odd", "INFO", (3,))
          + nbd_go("missing", "INFO") + nbd_option(OPT["ABORT"]))
    write("nbd_session", "list-meta", hs + nbd_option(OPT["STRUCTURED_REPLY"])
          + nbd_meta("LIST_META_CONTEXT", "disk", [])
          + nbd_meta("LIST_META_CONTEXT", "disk", ["base:", "qemu:dirty-bitmap:x"])
          + nbd_meta("SET_META_CONTEXT", "disk", ["base:allocation", "other:x"])
          + nbd_option(OPT["STARTTLS"]) + nbd_option(OPT["EXTENDED_HEADERS"])
          + nbd_option(99, b"junk") + nbd_go("disk"))
    write("nbd_session", "bad-client-flags", struct.pack(">I", 0x80))
    write("nbd_session", "bad-option-magic", hs + b"\0" * 16)
    write("nbd_session", "bad-request-magic", hs + nbd_go("disk") + b"\xff" * 28)


# ---------------------------------------------------------------- iSCSI

def crc32c(data, crc=0):
    crc ^= 0xFFFFFFFF
    for byte in data:
        crc ^= byte
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82F63B78 if crc & 1 else 0)
    return crc ^ 0xFFFFFFFF


def pad(data):
    return data + b"\0" * (-len(data) % 4)


def pdu(bhs, ahs=b"", data=b"", header_digest=False, data_digest=False):
    bhs = bytearray(bhs)
    assert len(bhs) == 48 and len(ahs) % 4 == 0
    bhs[4] = len(ahs) // 4
    bhs[5:8] = struct.pack(">I", len(data))[1:]
    out = bytes(bhs) + ahs
    if header_digest:
        out += struct.pack("<I", crc32c(bytes(bhs) + ahs))
    if data:
        out += pad(data)
        if data_digest:
            out += struct.pack("<I", crc32c(pad(data)))
    return out


def bhs(opcode, byte1, lun=0, itt=1, fields=None):
    out = bytearray(48)
    out[0] = opcode
    out[1] = byte1
    out[8:16] = struct.pack(">Q", lun << 48)
    out[16:20] = struct.pack(">I", itt)
    for offset, value in (fields or {}).items():
        out[offset:offset + len(value)] = value
    return bytes(out)


def text(*pairs):
    return b"".join(f"{k}={v}".encode() + b"\0" for k, v in pairs)


ISID = bytes([0x80, 0, 0, 0, 0, 1])
TARGET = "iqn.2024-01.org.lacuna:fuzz"
INITIATOR = "iqn.1994-05.com.example:fuzz"


def login_bhs(transit, cont, csg, nsg, itt=1, cmd_sn=1, tsih=0, version_min=0):
    byte1 = (0x80 if transit else 0) | (0x40 if cont else 0) | (csg << 2) | nsg
    return bhs(0x43, byte1, itt=itt, fields={
        2: b"\0", 3: bytes([version_min]), 8: ISID, 14: struct.pack(">H", tsih),
        20: struct.pack(">H", 1), 24: struct.pack(">I", cmd_sn), 28: struct.pack(">I", 0)})


OPERATIONAL = [("HeaderDigest", "None,CRC32C"), ("DataDigest", "None"),
               ("MaxConnections", "1"), ("InitialR2T", "No"), ("ImmediateData", "Yes"),
               ("MaxRecvDataSegmentLength", "262144"), ("MaxBurstLength", "16776192"),
               ("FirstBurstLength", "262144"), ("DefaultTime2Wait", "2"),
               ("DefaultTime2Retain", "0"), ("MaxOutstandingR2T", "1"),
               ("DataPDUInOrder", "Yes"), ("DataSequenceInOrder", "Yes"),
               ("ErrorRecoveryLevel", "0"), ("IFMarker", "No"), ("OFMarker", "No")]


def login_exchanges():
    """(name, policy byte, [pdus]) of logins the target should take to completion or refuse."""
    first = [("InitiatorName", INITIATOR), ("SessionType", "Normal"), ("TargetName", TARGET),
             ("AuthMethod", "None")]
    yield "two-step", 0, [pdu(login_bhs(True, False, 0, 1), data=text(*first)),
                          pdu(login_bhs(True, False, 1, 3, cmd_sn=1), data=text(*OPERATIONAL))]
    yield "one-step-to-ffp", 0, [pdu(login_bhs(True, False, 0, 3), data=text(*first))]
    yield "operational-first", 0, [pdu(login_bhs(True, False, 1, 3), data=text(*first[:3], *OPERATIONAL))]
    yield "discovery", 0, [pdu(login_bhs(True, False, 0, 1), data=text(
        ("InitiatorName", INITIATOR), ("SessionType", "Discovery"), ("AuthMethod", "None"))),
        pdu(login_bhs(True, False, 1, 3), data=text(("MaxRecvDataSegmentLength", "65536")))]
    whole = text(*first)
    yield "continue-bit", 0, [pdu(login_bhs(False, True, 0, 1), data=whole[:20]),
                              pdu(login_bhs(True, False, 0, 1), data=whole[20:]),
                              pdu(login_bhs(True, False, 1, 3), data=text(*OPERATIONAL))]
    yield "stay-in-security", 0, [pdu(login_bhs(False, False, 0, 0), data=text(*first)),
                                  pdu(login_bhs(True, False, 0, 3), data=b"")]
    for policy, name in ((1, "chap-one-way"), (2, "chap-mutual")):
        yield name, policy, [
            pdu(login_bhs(False, False, 0, 1), data=text(*first[:3], ("AuthMethod", "CHAP,None"))),
            pdu(login_bhs(False, False, 0, 1), data=text(("CHAP_A", "5"))),
            pdu(login_bhs(True, False, 0, 1), data=text(
                ("CHAP_N", "initiator"), ("CHAP_R", "0x" + "00" * 16),
                ("CHAP_I", "1"), ("CHAP_C", "0x" + "ab" * 16))),
        ]
    yield "unknown-initiator", 3, [pdu(login_bhs(True, False, 0, 3), data=text(*first))]
    yield "unknown-allowed", 0x83, [pdu(login_bhs(True, False, 0, 3), data=text(*first))]
    yield "wrong-target", 0, [pdu(login_bhs(True, False, 0, 3), data=text(
        ("InitiatorName", INITIATOR), ("TargetName", "iqn.x:other")))]
    yield "version", 0, [pdu(login_bhs(True, False, 0, 3, version_min=1), data=text(*first))]
    yield "bad-values", 0, [pdu(login_bhs(True, False, 0, 1), data=text(*first)),
                            pdu(login_bhs(True, False, 1, 3), data=text(
                                ("MaxRecvDataSegmentLength", "1"), ("MaxBurstLength", "0x"),
                                ("FirstBurstLength", "99999999999"), ("HeaderDigest", "MD5"),
                                ("InitialR2T", "Maybe"), ("X-com.example.key", "v"),
                                ("MaxConnections", "0"), ("ErrorRecoveryLevel", "2")))]


def iscsi_seeds():
    for name, policy, pdus in login_exchanges():
        write("iscsi_login", name, bytes([policy]) + b"".join(pdus))
        data = b"".join(pdus)
        # Text keys on their own, for the text target (limit byte 2: 8192 bytes).
        for index, one in enumerate(pdus):
            length = struct.unpack(">I", b"\0" + one[5:8])[0]
            if length:
                write("iscsi_text", f"{name}-{index}", b"\x02" + one[48:48 + length])
    write("iscsi_text", "binary-values", b"\x02" + text(
        ("CHAP_C", "0x" + "0f" * 16), ("CHAP_R", "0bAAECAwQFBgcICQoLDA0ODw=="),
        ("CHAP_I", "255"), ("Number", "0xffffffffffffffff"), ("Bool", "Yes"),
        ("List", "CRC32C,None"), ("Empty", "")))
    write("iscsi_text", "send-targets", b"\x01" + text(("SendTargets", "All")))

    cdb_read = struct.pack(">BBIBHB", 0x28, 0, 0, 0, 8, 0) + b"\0" * 6
    cdb_write = struct.pack(">BBIBHB", 0x2A, 0, 0, 0, 1, 0) + b"\0" * 6
    requests = {
        "nop-out": bhs(0x40, 0x80, fields={20: b"\xff" * 4, 24: struct.pack(">I", 1)}),
        "scsi-read": bhs(0x01, 0xC1, fields={20: struct.pack(">I", 4096), 24: b"\0\0\0\2", 32: cdb_read}),
        "task-management": bhs(0x42, 0x81, fields={20: struct.pack(">I", 7), 24: b"\0\0\0\3"}),
        "text": bhs(0x04, 0x80, fields={20: b"\xff" * 4, 24: b"\0\0\0\4"}),
        "data-out": bhs(0x05, 0x80, fields={20: b"\0\0\0\x09", 36: b"\0\0\0\0", 40: b"\0\0\x02\0"}),
        "logout": bhs(0x46, 0x80, fields={20: b"\0\1", 24: b"\0\0\0\5"}),
        "snack": bhs(0x10, 0x80, fields={20: b"\xff" * 4, 36: b"\0\0\0\1"}),
        "login": login_bhs(True, False, 0, 1),
    }
    responses = {
        "nop-in": bhs(0x20, 0x80), "scsi-response": bhs(0x21, 0x80), "tmf-response": bhs(0x22, 0x80),
        "login-response": bhs(0x23, 0x87), "text-response": bhs(0x24, 0x80),
        "data-in": bhs(0x25, 0x81), "logout-response": bhs(0x26, 0x80), "r2t": bhs(0x31, 0x80),
        "async": bhs(0x32, 0x80), "reject": bhs(0x3F, 0x80),
    }
    payloads = {"nop-out": b"ping", "text": text(("SendTargets", "All")), "data-out": b"\x5a" * 512,
                "login": text(("InitiatorName", INITIATOR), ("AuthMethod", "None"))}
    for flags in (0x08, 0x0B, 0x04):
        digests = dict(header_digest=bool(flags & 1), data_digest=bool(flags & 2))
        for name, header in {**requests, **responses}.items():
            write("iscsi_pdu", f"{name}-{flags:02x}",
                  bytes([flags]) + pdu(header, data=payloads.get(name, b""), **digests))
        stream = b"".join(pdu(h, data=payloads.get(n, b""), **digests) for n, h in requests.items())
        write("iscsi_pdu", f"stream-{flags:02x}", bytes([flags]) + stream)
    # A 32-byte CDB in an extended-CDB AHS, with immediate write data.
    ext = struct.pack(">HBB", 17, 1, 0) + bytes(range(16))
    ext = pad(ext)
    write("iscsi_pdu", "extended-cdb", b"\x08" + pdu(
        bhs(0x01, 0xA1, fields={20: struct.pack(">I", 512), 32: cdb_write}), ahs=ext, data=b"\1" * 512))
    write("iscsi_pdu", "oversized-skip", b"\x00" + pdu(requests["data-out"], data=b"\0" * 1024)
          + pdu(requests["nop-out"]))


# ---------------------------------------------------------------- SCSI

def cdb10(opcode, lba=0, blocks=0, byte1=0):
    return struct.pack(">BBIBHB", opcode, byte1, lba, 0, blocks, 0)


def cdb16(opcode, lba=0, blocks=0, byte1=0):
    return struct.pack(">BBQIBB", opcode, byte1, lba, blocks, 0, 0)


def command(cdb, data=b"", lun=0, second=False):
    header = (lun if lun < 3 else 3) | (4 if second else 0)
    out = bytes([header])
    if lun >= 3:
        out += bytes([lun])
    return out + bytes([len(cdb)]) + cdb + struct.pack(">H", len(data)) + data


def tmf(selector, lun=0):
    return bytes([0x08 | lun, selector])


def unmap_list(extents):
    descriptors = b"".join(struct.pack(">QII", lba, blocks, 0) for lba, blocks in extents)
    return struct.pack(">HH", 6 + len(descriptors), len(descriptors)) + b"\0" * 4 + descriptors


def xcopy_list(luns, segments, list_id=1):
    targets = b""
    for lun in luns:
        descriptor = bytearray(32)
        descriptor[0] = 0xE4
        descriptor[4:8] = b"@LU" + bytes([lun])
        descriptor[29:32] = b"\0\2\0"
        targets += bytes(descriptor)
    segs = b""
    for source, destination, blocks, source_lba, destination_lba in segments:
        segs += struct.pack(">BBHHHHHQQ", 0x02, 0, 24, source, destination, 0, blocks,
                            source_lba, destination_lba)
    header = bytes([list_id, 0x18]) + struct.pack(">H", len(targets)) + b"\0" * 4 + struct.pack(">I", len(segs)) + b"\0" * 4
    return header + targets + segs


def pr_out_list(key=0, service_key=0, flags=0, extra=b""):
    return struct.pack(">QQIBBH", key, service_key, 0, flags, 0, 0) + extra


def scsi_cdb_seeds():
    block = b"\x5a" * 512
    singles = {
        "test-unit-ready": command(b"\0" * 6),
        "request-sense": command(bytes([0x03, 0, 0, 0, 252, 0])),
        "inquiry": command(bytes([0x12, 0, 0, 0, 255, 0])),
        "inquiry-vpd-00": command(bytes([0x12, 1, 0x00, 0, 255, 0])),
        "inquiry-vpd-80": command(bytes([0x12, 1, 0x80, 0, 255, 0])),
        "inquiry-vpd-83": command(bytes([0x12, 1, 0x83, 0, 255, 0])),
        "inquiry-vpd-b0": command(bytes([0x12, 1, 0xB0, 0, 255, 0])),
        "inquiry-vpd-b1": command(bytes([0x12, 1, 0xB1, 0, 255, 0])),
        "inquiry-vpd-b2": command(bytes([0x12, 1, 0xB2, 0, 255, 0])),
        "mode-sense-6": command(bytes([0x1A, 0, 0x3F, 0, 255, 0])),
        "mode-sense-10": command(bytes([0x5A, 0, 0x3F, 0xFF, 0, 0, 0, 0x10, 0, 0])),
        "read-capacity-10": command(cdb10(0x25)),
        "read-capacity-16": command(bytes([0x9E, 0x10]) + b"\0" * 10 + b"\0\0\0\x20\0\0"),
        "get-lba-status": command(bytes([0x9E, 0x12]) + b"\0" * 10 + b"\0\0\x10\0\0\0"),
        "report-luns": command(bytes([0xA0, 0, 0, 0, 0, 0, 0, 0, 0x10, 0, 0, 0])),
        "report-opcodes": command(bytes([0xA3, 0x0C, 0, 0, 0, 0, 0, 0, 0x10, 0, 0, 0])),
        "report-opcode-one": command(bytes([0xA3, 0x0C, 0x01, 0x28, 0, 0, 0, 0, 0x10, 0, 0, 0])),
        "report-tmf": command(bytes([0xA3, 0x0D, 0, 0, 0, 0, 0, 0, 0, 0x10, 0, 0])),
        "read-6": command(bytes([0x08, 0, 0, 0, 1, 0])),
        "read-10": command(cdb10(0x28, 0, 8)),
        "read-12": command(struct.pack(">BBIIBB", 0xA8, 0, 0, 8, 0, 0)),
        "read-16": command(cdb16(0x88, 0, 8)),
        "write-6": command(bytes([0x0A, 0, 0, 0, 1, 0]), block),
        "write-10-fua": command(cdb10(0x2A, 8, 1, 0x08), block),
        "write-12": command(struct.pack(">BBIIBB", 0xAA, 0, 0, 1, 0, 0), block),
        "write-16": command(cdb16(0x8A, 0, 1), block),
        "write-verify-10": command(cdb10(0x2E, 0, 1, 0x02), block),
        "verify-10": command(cdb10(0x2F, 0, 1, 0x02), block),
        "verify-16": command(cdb16(0x8F, 0, 1)),
        "sync-cache-10": command(cdb10(0x35)),
        "sync-cache-16": command(cdb16(0x91)),
        "write-same-10": command(cdb10(0x41, 0, 16), block),
        "write-same-16-unmap": command(cdb16(0x93, 0, 16, 0x08), b"\0" * 512),
        "write-same-16-ndob": command(cdb16(0x93, 0, 0, 0x09)),
        "compare-and-write": command(struct.pack(">BBQIBBB", 0x89, 0, 0, 0, 0, 1, 0)[:16].ljust(16, b"\0"), b"\0" * 1024),
        "unmap": command(cdb10(0x42, 0, 24), unmap_list([(0, 8), (100, 4)])),
        "reserve-6": command(bytes([0x16, 0, 0, 0, 0, 0])),
        "release-6": command(bytes([0x17, 0, 0, 0, 0, 0])),
        "prevent-removal": command(bytes([0x1E, 0, 0, 0, 1, 0]), lun=2),
        "start-stop-eject": command(bytes([0x1B, 0, 0, 0, 0x02, 0]), lun=2),
        "pr-in-read-keys": command(bytes([0x5E, 0, 0, 0, 0, 0, 0, 0x10, 0, 0])),
        "pr-in-capabilities": command(bytes([0x5E, 2, 0, 0, 0, 0, 0, 0x10, 0, 0])),
        "pr-in-full-status": command(bytes([0x5E, 3, 0, 0, 0, 0, 0, 0x10, 0, 0])),
        "receive-copy-results": command(bytes([0x84, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x10, 0, 0, 0])),
        "receive-copy-operating": command(bytes([0x84, 3, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x10, 0, 0, 0])),
        "sanitize-block-erase": command(bytes([0x48, 0x02, 0, 0, 0, 0, 0, 0, 0, 0])),
        "sanitize-overwrite": command(bytes([0x48, 0x81, 0, 0, 0, 0, 0, 0, 8, 0]), b"\x01\0\0\x04\xaa\xbb\xcc\xdd"),
        "format-unit": command(bytes([0x04, 0, 0, 0, 0, 0])),
        "lun-unmapped": command(bytes([0x12, 0, 0, 0, 36, 0]), lun=1, second=True),
        "lun-bad": command(b"\0" * 6, lun=200),
        "read-only-write": command(cdb10(0x2A, 0, 1), block, lun=2),
        "thick-write-4k": command(cdb10(0x2A, 0, 1), b"\1" * 4096, lun=1),
        "variable-length": command(bytes([0x7F, 0, 0, 0, 0, 0, 0, 0x18, 0x00, 0x0B]) + b"\0" * 22),
    }
    for name, record in singles.items():
        write("scsi_cdb", name, record)
    sequences = {
        "write-read-compare": [
            command(cdb10(0x2A, 0, 2), b"\x11" * 1024),
            command(cdb10(0x28, 0, 2)),
            command(struct.pack(">BBQIBBB", 0x89, 0, 0, 0, 0, 1, 0)[:16].ljust(16, b"\0"), b"\x11" * 512 + b"\x22" * 512),
        ],
        "reservations": [
            command(bytes([0x5F, 0, 0, 0, 0, 0, 0, 0, 24, 0]), pr_out_list(0, 7)),
            command(bytes([0x5F, 1, 0x03, 0, 0, 0, 0, 0, 24, 0]), pr_out_list(7)),
            command(cdb10(0x2A, 0, 1), b"\0" * 512, second=True),
            command(bytes([0x5F, 2, 0x03, 0, 0, 0, 0, 0, 24, 0]), pr_out_list(7)),
        ],
        "reset-then-read": [tmf(4), command(cdb10(0x28, 0, 1)), tmf(6), command(b"\0" * 6)],
        "mode-select-dsense": [
            command(bytes([0x55, 0x10, 0, 0, 0, 0, 0, 0, 20, 0]),
                    b"\0" * 8 + bytes([0x0A, 10, 0x04, 0, 0, 0, 0, 0, 0, 0, 0, 0])),
            command(cdb10(0x28, 0xFFFFFFF, 1)),
        ],
    }
    for name, records in sequences.items():
        write("scsi_cdb", name, b"".join(records))


def scsi_params_seeds():
    seeds = {
        "unmap": (0, 0, unmap_list([(0, 8)])),
        "unmap-anchor-many": (0, 1, unmap_list([(i * 16, 8) for i in range(16)])),
        "unmap-past-end": (0, 0, unmap_list([(0xFFFFFFFF, 8)])),
        "xcopy-within": (1, 0, xcopy_list([0], [(0, 0, 8, 0, 64)])),
        "xcopy-across": (1, 0, xcopy_list([0, 1], [(0, 1, 8, 0, 8)])),
        "xcopy-read-only-target": (1, 0, xcopy_list([0, 2], [(0, 1, 8, 0, 0)])),
        "xcopy-hidden-lun": (5, 0, xcopy_list([0, 1], [(0, 1, 8, 0, 8)])),
        "xcopy-many-segments": (1, 0, xcopy_list([0], [(0, 0, 1, i, 100 + i) for i in range(8)])),
        "mode-select-6-caching": (3, 0, b"\0" * 4 + bytes([0x08, 18, 0x04] + [0] * 17)),
        "mode-select-6-control": (3, 1, b"\0" * 4 + bytes([0x0A, 10, 0x04, 0x10, 0, 0, 0, 0, 0, 0, 0, 0])),
        "mode-select-10-block-descriptor": (4, 0, b"\0" * 6 + b"\0\x08" + struct.pack(">II", 0, 512)),
        "mode-select-10-control-swp": (4, 0, b"\0" * 8 + bytes([0x0A, 10, 0, 0x08, 0, 0, 0, 0, 0, 0, 0, 0])),
    }
    for action, scope_type in ((0, 0), (1, 0x02), (2, 0x02), (3, 0x02), (4, 0x02), (5, 0x02), (6, 0)):
        options = action | (scope_type << 5 & 0x60)
        seeds[f"pr-out-{action}"] = (2, options, pr_out_list(0x1122334455667788, 0x99))
    # REGISTER with SPEC_I_PT and a transport ID, REGISTER AND MOVE to the second initiator.
    port = b"iqn.b,i,0x000000000002\0\0"
    transport_id = bytes([0x45, 0]) + struct.pack(">H", len(port)) + port
    seeds["pr-out-spec-i-pt"] = (2, 0, pr_out_list(0, 0x55, 0x08, struct.pack(">I", len(transport_id)) + transport_id))
    seeds["pr-out-register-and-move"] = (2, 7, struct.pack(">QQBBHI", 0x1122334455667788, 0x66, 0, 0, 1, len(transport_id)) + transport_id)
    seeds["unmap-length-skew"] = (0, 0x80, b"\x07" + unmap_list([(0, 8)]))
    for name, (kind, options, data) in seeds.items():
        write("scsi_params", name, bytes([kind, options]) + data)


# ---------------------------------------------------------------- VASA

SOAP11 = "http://schemas.xmlsoap.org/soap/envelope/"
VASA = "http://com.vmware.vim.vasa/2.0/xsd"
XSI = "http://www.w3.org/2001/XMLSchema-instance"


def vasa_envelope(body, header=""):
    return (f'<?xml version="1.0" encoding="UTF-8"?><soapenv:Envelope xmlns:soapenv="{SOAP11}" '
            f'xmlns:vasa="{VASA}" xmlns:xsi="{XSI}" xmlns:xsd="http://www.w3.org/2001/XMLSchema" '
            f'xmlns:vvol="http://vvol.data.vasa.vim.vmware.com/xsd" '
            f'xmlns:data="http://data.vasa.vim.vmware.com/xsd">{header}'
            f'<soapenv:Body>{body}</soapenv:Body></soapenv:Envelope>').encode()


def vasa_seeds():
    pair = ("<vasa:metadata><vasa:parameterName>VMW_VmID</vasa:parameterName>"
            "<vasa:parameterValue>vm1</vasa:parameterValue></vasa:metadata>")
    handle = ("<vasa:vvolHandle><data:uniqueIdentifier>rfc4122.6b1e</data:uniqueIdentifier>"
              "<vvol:peInBandId><vvol:lunId>naa.60</vvol:lunId>"
              "<vvol:protocolEndpointType>SCSI</vvol:protocolEndpointType></vvol:peInBandId>"
              "<vvol:vvolSecondaryId>0xe20000000001</vvol:vvolSecondaryId></vasa:vvolHandle>")
    seeds = {
        "set-context": (0, "<vasa:setContext><vasa:usageContext><data:hostGuid>h1</data:hostGuid>"
                           "<data:hostInitiator><data:iscsiIdentifier>iqn.1998-01.com.vmware:e"
                           "</data:iscsiIdentifier></data:hostInitiator></vasa:usageContext>"
                           "</vasa:setContext>"),
        "create": (0, "<vasa:createVirtualVolume><vasa:containerId>default</vasa:containerId>"
                      "<vasa:vvolType>Data</vasa:vvolType><vasa:sizeInMB>4096</vasa:sizeInMB>"
                      + pair + "</vasa:createVirtualVolume>"),
        "bind": (0, "<vasa:bindVirtualVolume><vasa:vvolId>rfc4122.1</vasa:vvolId>"
                    "<vasa:vvolId>rfc4122.2</vasa:vvolId><vasa:bindContext>Normal"
                    "</vasa:bindContext></vasa:bindVirtualVolume>"),
        "unbind": (0, "<vasa:unbindVirtualVolume>" + handle
                      + "<vasa:unbindContext>Normal</vasa:unbindContext></vasa:unbindVirtualVolume>"),
        "snapshot": (0, "<vasa:snapshotVirtualVolume><vasa:snapshotInfo><vvol:metadata>"
                        "<vasa:parameterName>a</vasa:parameterName></vvol:metadata>"
                        "<vvol:vvolId>rfc4122.3</vvol:vvolId></vasa:snapshotInfo>"
                        "<vasa:timeoutMS>1000</vasa:timeoutMS></vasa:snapshotVirtualVolume>"),
        "events": (0, "<vasa:getEvents><vasa:lastEventId>-1</vasa:lastEventId></vasa:getEvents>"),
        "nil": (0, '<vasa:getAlarms><vasa:lastAlarmId xsi:nil="true"/></vasa:getAlarms>'),
        "register": (0, "<vasa:registerVASACertificate><vasa:userName>vasa</vasa:userName>"
                        "<vasa:password>p&amp;w&#x41;</vasa:password></vasa:registerVASACertificate>"),
        "empty-body": (1, ""),
        "must-understand": (0, "<vasa:queryArrays/>"),
    }
    for name, (action, body) in seeds.items():
        header = ('<soapenv:Header><x:t xmlns:x="urn:x" soapenv:mustUnderstand="1"/>'
                  '</soapenv:Header>') if name == "must-understand" else ""
        write("vasa_request", name, bytes([action]) + vasa_envelope(body, header))


def main():
    nbd_seeds()
    iscsi_seeds()
    scsi_cdb_seeds()
    scsi_params_seeds()
    vasa_seeds()
    total = sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(ROOT) for f in fs)
    print(f"seed corpus: {total} bytes", file=sys.stderr)


if __name__ == "__main__":
    main()
