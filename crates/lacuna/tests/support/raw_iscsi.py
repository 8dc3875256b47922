#!/usr/bin/env python3
"""A small raw iSCSI initiator (RFC 7143), standard library only, for tests.

Why raw: the initiators a test can run (libiscsi, open-iscsi) address LUNs by
number and never send a LUN field a test chose. This one sends any 8-byte LUN
with any CDB, which is what addressing a vVol's two-level LUN beneath its
protocol endpoint takes. It was written from RFC 7143, not from Lacuna's
target, so a misreading of the RFC there is not repeated here.

What it does: one connection of a normal session; login with an optional
one-way CHAP (MD5) in the security stage, then the operational stage
(HeaderDigest and DataDigest None, ImmediateData=Yes, InitialR2T=Yes,
ErrorRecoveryLevel 0); one command at a time, Data-In gathered by buffer
offset, Data-Out as immediate data and then as solicited by R2Ts; task
management; logout. No digests, no multiple connections, no bidirectional
commands, no error recovery: whatever breaks raises IscsiError.

As a library:

    with Session(port, target, initiator) as session:   # logs in
        result = session.command(bytes.fromhex("0001e200000000a6"),
                                 bytes.fromhex("12000000ff00"), data_in_length=255)
        result.status, result.sense, result.data

As a command (prints JSON {"status", "sense_hex", "data_hex"}):

    raw_iscsi.py --port P --target IQN --initiator IQN --lun 0001e200000000a6 \\
        --cdb 12000000ff00 [--data-in-length N] [--data-out-hex HEX] \\
        [--clear-unit-attentions] [--chap-user U --chap-secret S]
    raw_iscsi.py ... --lun L --tmf lun-reset           # prints {"response": N}

The exit status is 0 whenever the target answered (any SCSI status), 1 when
the exchange itself failed.
"""

import argparse
import base64
import dataclasses
import hashlib
import json
import os
import socket
import struct
import sys

BHS_BYTES = 48

# Opcodes (RFC 7143 11.1.1.1).
NOP_OUT = 0x00
SCSI_COMMAND = 0x01
TASK_MANAGEMENT_REQUEST = 0x02
LOGIN_REQUEST = 0x03
SCSI_DATA_OUT = 0x05
LOGOUT_REQUEST = 0x06
NOP_IN = 0x20
SCSI_RESPONSE = 0x21
TASK_MANAGEMENT_RESPONSE = 0x22
LOGIN_RESPONSE = 0x23
SCSI_DATA_IN = 0x25
LOGOUT_RESPONSE = 0x26
READY_TO_TRANSFER = 0x31
ASYNC_MESSAGE = 0x32
REJECT = 0x3F

IMMEDIATE = 0x40
FINAL = 0x80
RESERVED_TAG = 0xFFFFFFFF

# Target PDUs whose StatSN is taken (so ExpStatSN moves past it), besides a
# Data-In carrying status; a NOP-In's is only the next one (RFC 7143 11.19).
STATUS_OPCODES = {
    SCSI_RESPONSE,
    TASK_MANAGEMENT_RESPONSE,
    LOGIN_RESPONSE,
    LOGOUT_RESPONSE,
    ASYNC_MESSAGE,
    REJECT,
}

# Login stages (RFC 7143 11.12.3).
SECURITY_NEGOTIATION = 0
OPERATIONAL_NEGOTIATION = 1
FULL_FEATURE_PHASE = 3

# Task management functions (RFC 7143 11.5.1), by the names the CLI takes.
TASK_MANAGEMENT_FUNCTIONS = {
    "abort-task": 1,
    "abort-task-set": 2,
    "clear-aca": 3,
    "clear-task-set": 4,
    "lun-reset": 5,
    "target-warm-reset": 6,
    "target-cold-reset": 7,
}

# What this initiator can take in one Data-In PDU, and asks as burst limits.
MAX_RECV_DATA_SEGMENT_BYTES = 262144
MAX_BURST_BYTES = 1048576
FIRST_BURST_BYTES = 262144
# The target's MaxRecvDataSegmentLength until it declares one (RFC 7143 13.12).
DEFAULT_MAX_RECV_DATA_SEGMENT_BYTES = 8192
# Data-In arriving beyond what the command asked for is a target bug; bound it.
MAX_DATA_IN_BYTES = 64 << 20
# CDBs longer than 16 bytes travel in an Extended CDB AHS (RFC 7143 11.3.5).
AHS_EXTENDED_CDB = 1
MAX_CDB_BYTES = 260


CHECK_CONDITION = 0x02
UNIT_ATTENTION = 0x6
# More unit attentions than a nexus can have queued on one LU.
MAX_UNIT_ATTENTIONS = 32


def sense_key(sense):
    """The sense key of fixed (70h/71h) or descriptor (72h/73h) sense data."""
    if not sense:
        return None
    return sense[1] & 0x0F if sense[0] & 0x7F in (0x72, 0x73) else sense[2] & 0x0F


def additional_sense(sense):
    """(ASC, ASCQ) of fixed or descriptor sense data."""
    if sense[0] & 0x7F in (0x72, 0x73):
        return sense[2], sense[3]
    return sense[12], sense[13]


class IscsiError(Exception):
    """The exchange failed: a refused login, a Reject, a protocol violation."""


@dataclasses.dataclass
class Result:
    """What the target answered for one SCSI command."""

    status: int
    sense: bytes
    data: bytes
    residual_bytes: int = 0


def padded(data):
    return data + b"\0" * (-len(data) % 4)


def encode_text(pairs):
    return b"".join(f"{key}={value}".encode() + b"\0" for key, value in pairs)


def decode_text(data):
    pairs = {}
    for item in data.split(b"\0"):
        if item:
            key, _, value = item.decode().partition("=")
            pairs[key] = value
    return pairs


def chap_binary(value):
    """A CHAP binary value: 0x hex or 0b base64 (RFC 7143 6.1)."""
    if value[:2] in ("0x", "0X"):
        return bytes.fromhex(value[2:])
    if value[:2] in ("0b", "0B"):
        return base64.b64decode(value[2:])
    raise IscsiError(f"not a CHAP binary value: {value!r}")


def chap_response(identifier, secret, challenge):
    """CHAP MD5 (RFC 1994): MD5 of the identifier byte, the secret, the challenge."""
    return hashlib.md5(bytes([identifier]) + secret + challenge).digest()


class Session:
    """One connection, one normal session; `login` in the constructor's order."""

    def __init__(
        self,
        port,
        target,
        initiator,
        host="127.0.0.1",
        chap_user=None,
        chap_secret=None,
        isid=None,
        timeout_seconds=10.0,
    ):
        self.host = host
        self.port = port
        self.target = target
        self.initiator = initiator
        self.chap_user = chap_user
        self.chap_secret = chap_secret
        # Random ISID format (T = 10b), unless the caller names one.
        self.isid = isid if isid is not None else bytes([0x80]) + os.urandom(3) + b"\0\0"
        if len(self.isid) != 6:
            raise ValueError("an ISID is 6 bytes")
        self.timeout_seconds = timeout_seconds
        self.sock = None
        self.tsih = 0
        self.cmd_sn = 1
        self.exp_stat_sn = 0
        self.next_itt = 1
        # Every Login Request of one login phase carries the same tag (RFC 7143 11.12.7).
        self.login_itt = self._tag()
        self.target_max_recv_bytes = DEFAULT_MAX_RECV_DATA_SEGMENT_BYTES
        self.first_burst_bytes = FIRST_BURST_BYTES
        self.max_burst_bytes = MAX_BURST_BYTES
        self.immediate_data = True
        self.initial_r2t = True
        self.negotiated = {}

    def __enter__(self):
        self.login()
        return self

    def __exit__(self, *exc):
        try:
            if exc[0] is None:
                self.logout()
        finally:
            self.close()

    # -- PDUs -----------------------------------------------------------------

    def _send(self, bhs, data=b"", ahs=b""):
        assert len(bhs) == BHS_BYTES and len(ahs) % 4 == 0
        bhs = bytearray(bhs)
        bhs[4] = len(ahs) // 4
        bhs[5:8] = len(data).to_bytes(3, "big")
        self.sock.sendall(bytes(bhs) + ahs + padded(data))

    def _receive_exactly(self, count):
        chunks = []
        while count:
            chunk = self.sock.recv(count)
            if not chunk:
                raise IscsiError("the target closed the connection")
            chunks.append(chunk)
            count -= len(chunk)
        return b"".join(chunks)

    def _receive(self):
        """The next PDU as (opcode, bhs, data); answers the target's pings itself."""
        while True:
            bhs = self._receive_exactly(BHS_BYTES)
            ahs_bytes = bhs[4] * 4
            data_bytes = int.from_bytes(bhs[5:8], "big")
            self._receive_exactly(ahs_bytes)
            data = self._receive_exactly(data_bytes + (-data_bytes % 4))[:data_bytes]
            opcode = bhs[0] & 0x3F
            stat_sn = struct.unpack(">I", bhs[24:28])[0]
            if opcode in STATUS_OPCODES or (opcode == SCSI_DATA_IN and bhs[1] & 0x01):
                self.exp_stat_sn = (stat_sn + 1) & 0xFFFFFFFF
            if opcode == NOP_IN:
                self.exp_stat_sn = stat_sn
                self._answer_ping(bhs)
                continue
            if opcode == ASYNC_MESSAGE:
                continue
            if opcode == REJECT:
                raise IscsiError(f"the target rejected a PDU: reason {bhs[2]:#04x}")
            return opcode, bhs, data

    def _answer_ping(self, nop_in):
        target_transfer_tag = struct.unpack(">I", nop_in[20:24])[0]
        if target_transfer_tag == RESERVED_TAG:
            return  # an answer to a ping of ours, or a plain StatSN update
        bhs = bytearray(BHS_BYTES)
        bhs[0] = IMMEDIATE | NOP_OUT
        bhs[1] = FINAL
        bhs[8:16] = nop_in[8:16]
        struct.pack_into(">IIII", bhs, 16, RESERVED_TAG, target_transfer_tag,
                         self.cmd_sn, self.exp_stat_sn)
        self._send(bhs)

    def _tag(self):
        itt = self.next_itt
        self.next_itt = itt % 0xFFFFFFFE + 1  # never the reserved tag
        return itt

    # -- Login ----------------------------------------------------------------

    def _login_pdu(self, current_stage, next_stage, transit, pairs):
        """One Login Request and the whole answer to it (following C bits)."""
        received = b""
        text = encode_text(pairs)
        while True:
            bhs = bytearray(BHS_BYTES)
            bhs[0] = IMMEDIATE | LOGIN_REQUEST
            bhs[1] = (FINAL if transit else 0) | current_stage << 2 | (next_stage if transit else 0)
            bhs[8:14] = self.isid
            struct.pack_into(">H", bhs, 14, self.tsih)
            struct.pack_into(">IHH", bhs, 16, self.login_itt, 0, 0)  # CID 0
            struct.pack_into(">II", bhs, 24, self.cmd_sn, self.exp_stat_sn)
            self._send(bhs, text)
            opcode, answer, data = self._receive()
            if opcode != LOGIN_RESPONSE:
                raise IscsiError(f"expected a Login Response, got opcode {opcode:#04x}")
            status_class, status_detail = answer[36], answer[37]
            if status_class != 0:
                raise IscsiError(
                    f"login refused: status class {status_class}, detail {status_detail:#04x}"
                )
            received += data
            self.cmd_sn = struct.unpack(">I", answer[28:32])[0]  # ExpCmdSN
            if not answer[1] & 0x40:  # C: the text goes on in another response
                break
            text, transit = b"", False  # an empty request asks for the rest
        self.tsih = struct.unpack(">H", answer[14:16])[0]
        flags = answer[1]
        return bool(flags & FINAL), flags >> 2 & 0x03, flags & 0x03, decode_text(received)

    def _operational_keys(self):
        return [
            ("HeaderDigest", "None"),
            ("DataDigest", "None"),
            ("ImmediateData", "Yes"),
            ("InitialR2T", "Yes"),
            ("MaxRecvDataSegmentLength", MAX_RECV_DATA_SEGMENT_BYTES),
            ("MaxBurstLength", MAX_BURST_BYTES),
            ("FirstBurstLength", FIRST_BURST_BYTES),
            ("MaxOutstandingR2T", 1),
            ("MaxConnections", 1),
            ("DataPDUInOrder", "Yes"),
            ("DataSequenceInOrder", "Yes"),
            ("ErrorRecoveryLevel", 0),
            ("DefaultTime2Wait", 0),
            ("DefaultTime2Retain", 0),
        ]

    def login(self):
        self.sock = socket.create_connection((self.host, self.port), self.timeout_seconds)
        self.sock.settimeout(self.timeout_seconds)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        leading = [
            ("InitiatorName", self.initiator),
            ("TargetName", self.target),
            ("SessionType", "Normal"),
            ("AuthMethod", "CHAP" if self.chap_user is not None else "None"),
        ]
        transit, _, next_stage, answer = self._login_pdu(
            SECURITY_NEGOTIATION, OPERATIONAL_NEGOTIATION, self.chap_user is None, leading
        )
        self.negotiated.update(answer)
        if self.chap_user is not None:
            if answer.get("AuthMethod") != "CHAP":
                raise IscsiError(f"the target does not take CHAP: {answer}")
            self._chap()
        elif not transit or next_stage != OPERATIONAL_NEGOTIATION:
            raise IscsiError(f"the target wants authentication: {answer}")
        self._operational()

    def _chap(self):
        _, _, _, answer = self._login_pdu(
            SECURITY_NEGOTIATION, OPERATIONAL_NEGOTIATION, False, [("CHAP_A", 5)]
        )
        if answer.get("CHAP_A") != "5":
            raise IscsiError(f"the target offers no CHAP MD5: {answer}")
        identifier = int(answer["CHAP_I"])
        challenge = chap_binary(answer["CHAP_C"])
        response = chap_response(identifier, self.chap_secret.encode(), challenge)
        transit, _, next_stage, answer = self._login_pdu(
            SECURITY_NEGOTIATION,
            OPERATIONAL_NEGOTIATION,
            True,
            [("CHAP_N", self.chap_user), ("CHAP_R", "0x" + response.hex())],
        )
        if not transit or next_stage != OPERATIONAL_NEGOTIATION:
            raise IscsiError(f"CHAP did not complete: {answer}")

    def _operational(self):
        keys = self._operational_keys()
        for _ in range(8):
            transit, _, next_stage, answer = self._login_pdu(
                OPERATIONAL_NEGOTIATION, FULL_FEATURE_PHASE, True, keys
            )
            self.negotiated.update(answer)
            if transit and next_stage == FULL_FEATURE_PHASE:
                break
            keys = []  # everything was offered; let the target finish
        else:
            raise IscsiError("the operational stage did not end")
        for key, wanted in (("HeaderDigest", "None"), ("DataDigest", "None")):
            if self.negotiated.get(key, "None") != wanted:
                raise IscsiError(f"{key} negotiated to {self.negotiated[key]}")
        self.target_max_recv_bytes = int(
            self.negotiated.get("MaxRecvDataSegmentLength", DEFAULT_MAX_RECV_DATA_SEGMENT_BYTES)
        )
        self.first_burst_bytes = int(self.negotiated.get("FirstBurstLength", 65536))
        self.max_burst_bytes = int(self.negotiated.get("MaxBurstLength", 262144))
        self.immediate_data = self.negotiated.get("ImmediateData", "Yes") == "Yes"
        self.initial_r2t = self.negotiated.get("InitialR2T", "Yes") == "Yes"
        if not self.initial_r2t:
            raise IscsiError("the target turned InitialR2T off, which was not offered")

    # -- Full feature phase -----------------------------------------------------

    def command(self, lun, cdb, data_out=b"", data_in_length=0):
        """Sends one SCSI command to the 8-byte `lun` and waits for its answer."""
        if len(lun) != 8:
            raise ValueError("a LUN field is 8 bytes")
        if not 1 <= len(cdb) <= MAX_CDB_BYTES:
            raise ValueError(f"a CDB is 1 to {MAX_CDB_BYTES} bytes")
        if data_out and data_in_length:
            raise ValueError("bidirectional commands are not supported")
        itt = self._tag()
        expected_bytes = len(data_out) or data_in_length
        immediate = b""
        if data_out and self.immediate_data:
            immediate = data_out[: min(self.first_burst_bytes, self.target_max_recv_bytes)]
        bhs = bytearray(BHS_BYTES)
        bhs[0] = SCSI_COMMAND
        # F: no unsolicited Data-Out follows (InitialR2T=Yes); ATTR 1: simple.
        bhs[1] = FINAL | (0x40 if data_in_length else 0) | (0x20 if data_out else 0) | 0x01
        bhs[8:16] = lun
        struct.pack_into(">IIII", bhs, 16, itt, expected_bytes, self.cmd_sn, self.exp_stat_sn)
        bhs[32:32 + min(len(cdb), 16)] = cdb[:16]
        ahs = b""
        if len(cdb) > 16:
            rest = cdb[16:]
            ahs = padded(struct.pack(">HBB", len(rest) + 1, AHS_EXTENDED_CDB, 0) + rest)
        self.cmd_sn = (self.cmd_sn + 1) & 0xFFFFFFFF
        self._send(bhs, immediate, ahs)
        data_in = bytearray()
        while True:
            opcode, answer, data = self._receive()
            if struct.unpack(">I", answer[16:20])[0] != itt:
                raise IscsiError(f"a PDU (opcode {opcode:#04x}) for another task")
            if opcode == READY_TO_TRANSFER:
                self._solicited_data_out(answer, lun, itt, data_out)
            elif opcode == SCSI_DATA_IN:
                offset = struct.unpack(">I", answer[40:44])[0]
                if offset + len(data) > min(expected_bytes, MAX_DATA_IN_BYTES):
                    raise IscsiError("Data-In beyond the expected transfer length")
                data_in.extend(b"\0" * (offset + len(data) - len(data_in)))
                data_in[offset:offset + len(data)] = data
                if answer[1] & 0x01:  # S: the status came with the data
                    return Result(answer[3], b"", bytes(data_in), self._residual(answer))
            elif opcode == SCSI_RESPONSE:
                if answer[2] != 0:
                    raise IscsiError(f"the target failed the command: response {answer[2]:#04x}")
                sense = b""
                if len(data) >= 2:
                    sense_bytes = struct.unpack(">H", data[:2])[0]
                    sense = data[2:2 + sense_bytes]
                return Result(answer[3], sense, bytes(data_in), self._residual(answer))
            else:
                raise IscsiError(f"unexpected opcode {opcode:#04x} during a command")

    def clear_unit_attentions(self, lun):
        """Sends TEST UNIT READY to `lun` while it reports a unit attention (a new
        nexus meets POWER ON first); the (ASC, ASCQ) of each, in order."""
        seen = []
        for _ in range(MAX_UNIT_ATTENTIONS):
            result = self.command(lun, bytes(6))
            if result.status != CHECK_CONDITION or sense_key(result.sense) != UNIT_ATTENTION:
                return seen
            seen.append(additional_sense(result.sense))
        raise IscsiError(f"unit attentions never cleared: {seen}")

    @staticmethod
    def _residual(answer):
        residual = struct.unpack(">I", answer[44:48])[0]
        if answer[1] & 0x02:  # U: underflow
            return residual
        if answer[1] & 0x04:  # O: overflow
            return -residual
        return 0

    def _solicited_data_out(self, r2t, lun, itt, data_out):
        target_transfer_tag, _ = struct.unpack(">II", r2t[20:28])
        offset, desired_bytes = struct.unpack(">II", r2t[40:48])
        if offset + desired_bytes > len(data_out) or desired_bytes > self.max_burst_bytes:
            raise IscsiError(f"an R2T for bytes {offset}+{desired_bytes} of {len(data_out)}")
        end = offset + desired_bytes
        data_sn = 0
        while offset < end:
            piece = data_out[offset:min(end, offset + self.target_max_recv_bytes)]
            bhs = bytearray(BHS_BYTES)
            bhs[0] = SCSI_DATA_OUT
            bhs[1] = FINAL if offset + len(piece) == end else 0
            bhs[8:16] = lun
            struct.pack_into(">II", bhs, 16, itt, target_transfer_tag)
            struct.pack_into(">I", bhs, 28, self.exp_stat_sn)
            struct.pack_into(">II", bhs, 36, data_sn, offset)
            self._send(bhs, piece)
            offset += len(piece)
            data_sn += 1

    def task_management(self, function, lun, referenced_task_tag=RESERVED_TAG):
        """Sends a task management function for the 8-byte `lun`; its response code."""
        if len(lun) != 8:
            raise ValueError("a LUN field is 8 bytes")
        itt = self._tag()
        bhs = bytearray(BHS_BYTES)
        bhs[0] = IMMEDIATE | TASK_MANAGEMENT_REQUEST
        bhs[1] = FINAL | function
        bhs[8:16] = lun
        struct.pack_into(">IIII", bhs, 16, itt, referenced_task_tag, self.cmd_sn, self.exp_stat_sn)
        self._send(bhs)
        opcode, answer, _ = self._receive()
        if opcode != TASK_MANAGEMENT_RESPONSE or struct.unpack(">I", answer[16:20])[0] != itt:
            raise IscsiError(f"expected a Task Management Response, got opcode {opcode:#04x}")
        return answer[2]

    def logout(self):
        """Closes the session (reason 0) and waits for the target's answer."""
        itt = self._tag()
        bhs = bytearray(BHS_BYTES)
        bhs[0] = IMMEDIATE | LOGOUT_REQUEST
        bhs[1] = FINAL | 0
        struct.pack_into(">IHH", bhs, 16, itt, 0, 0)
        struct.pack_into(">II", bhs, 24, self.cmd_sn, self.exp_stat_sn)
        self._send(bhs)
        opcode, answer, _ = self._receive()
        if opcode != LOGOUT_RESPONSE or answer[2] != 0:
            raise IscsiError(f"logout failed: opcode {opcode:#04x}, response {answer[2]}")

    def close(self):
        if self.sock is not None:
            self.sock.close()
            self.sock = None


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--target", required=True, help="target IQN")
    parser.add_argument("--initiator", required=True, help="initiator IQN")
    parser.add_argument("--lun", required=True, help="the 8-byte LUN field, 16 hex digits")
    parser.add_argument("--cdb", help="CDB in hex")
    parser.add_argument("--data-in-length", type=int,
                        help="expected Data-In bytes (default: 65536, or 0 with --data-out-hex)")
    parser.add_argument("--data-out-hex", default="", help="Data-Out bytes in hex")
    parser.add_argument("--tmf", choices=sorted(TASK_MANAGEMENT_FUNCTIONS),
                        help="send this task management function instead of a CDB")
    parser.add_argument("--clear-unit-attentions", action="store_true",
                        help="first send TEST UNIT READY to the LUN while it reports a unit "
                        "attention (every run is a new nexus: POWER ON comes first)")
    parser.add_argument("--chap-user")
    parser.add_argument("--chap-secret", default=os.environ.get("RAW_ISCSI_CHAP_SECRET"),
                        help="or RAW_ISCSI_CHAP_SECRET")
    parser.add_argument("--timeout", type=float, default=10.0, help="seconds per socket wait")
    args = parser.parse_args(argv)
    try:
        lun = bytes.fromhex(args.lun)
        cdb = bytes.fromhex(args.cdb) if args.cdb is not None else None
        data_out = bytes.fromhex(args.data_out_hex)
    except ValueError as error:
        parser.error(f"not hex: {error}")
    if len(lun) != 8:
        parser.error("--lun takes exactly 16 hex digits")
    if (args.cdb is None) == (args.tmf is None):
        parser.error("give --cdb or --tmf")
    if (args.chap_user is None) != (args.chap_secret is None):
        parser.error("CHAP takes both --chap-user and --chap-secret")
    data_in_length = args.data_in_length
    if data_in_length is None:
        data_in_length = 0 if data_out else 65536
    try:
        with Session(args.port, args.target, args.initiator, host=args.host,
                     chap_user=args.chap_user, chap_secret=args.chap_secret,
                     timeout_seconds=args.timeout) as session:
            if args.tmf is not None:
                response = session.task_management(TASK_MANAGEMENT_FUNCTIONS[args.tmf], lun)
                print(json.dumps({"response": response}))
                return 0
            if args.clear_unit_attentions:
                session.clear_unit_attentions(lun)
            result = session.command(lun, cdb, data_out, data_in_length)
    except (IscsiError, OSError) as error:
        print(f"raw_iscsi: {error}", file=sys.stderr)
        return 1
    print(json.dumps({
        "status": result.status,
        "sense_hex": result.sense.hex(),
        "data_hex": result.data.hex(),
    }))
    return 0


if __name__ == "__main__":
    sys.exit(main())
