#!/usr/bin/python3
"""Versions benchmark (issue 3): provisioning types, new writes versus overwrites,
range copy, snapshot / clone / group-snapshot commit time, and read cost at
snapshot depth, all through a real `lacuna serve` (REST API, CLI, fio
--ioengine=nbd, nbdsh), with qemu-img as the peer where one exists. Reproduces
the figures of seed 004 (thin 0.15 s, zeroedthick 0.55 s, eagerzeroedthick 24 s to
create 100 GiB; 17-23% fewer IOPS on new writes to thin/zeroedthick) and checks
the issue's targets. Prints one table per part and appends them to
bench/RESULTS.md.

usage: bench/versions.py [--size-gib 100] [--region-mib 1024] [--rounds 4] [--copy-gib 50]
                         [--stages 1,16,64] [--repeat 5] [--read-runtime 15]
                         [--overwrite-mib 8] [--capacity 1T] [--parts 1,2,3,4,5] [--no-record]
A run at --copy-gib 32 --stages 1,16,32 takes about 17 minutes on a 2-core VM.

Parts (each on a fresh data directory and daemon):
  1 create    time to create a SIZE volume of each type (API and CLI); peers
              qemu-img create raw (preallocation=off, falloc), qcow2
              (preallocation=metadata)
  2 writes    fio 4k randwrite QD1 and QD16 over a never-written REGION (each
              block once), then the same region again: IOPS, mean/p99 latency;
              in ROUNDS slices, the types interleaved, each pass on an idle daemon
  3 copy      write COPY GiB at the start of a SIZE volume of each type (same fio
              seed each time, so it dedups), then POST /v1/volumes/{v}/copy of it
              to the second half, and to another volume; nbdsh checks the copies
  4 versions  snapshot, clone (of the volume and of a snapshot) and a group
              snapshot of 16 volumes at each STAGE GiB written: commit_window_us
              and request wall time (each on an idle daemon) and the background
              work left behind; peer qemu-img snapshot -c on qcow2 with the same
              amount written
  5 depth     4k randread QD16 over a 1 GiB written region at snapshot depth 0, 8
              and 64, with OVERWRITE MiB of random 4k overwrites between snapshots

Needs: fio, nbdsh (python3-libnbd), qemu-img, qemu-io and a release build
(CARGO_TARGET_DIR=... cargo build --release -p lacuna; the binary is taken from
$CARGO_TARGET_DIR/release/lacuna, else target/release/lacuna; $LACUNA_REV, if set, is
recorded as what it was built from). Work files go to a
temporary directory under $BENCH_DIR (default /var/tmp), removed on exit.
Everything listens on 127.0.0.1 only. Any tool error aborts the run.
"""
import argparse
import datetime
import http.client
import json
import os
import shlex
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from serve_args import no_vasa_args  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LACUNA = os.path.join(os.environ.get("CARGO_TARGET_DIR", os.path.join(ROOT, "target")), "release", "lacuna")

TYPES = ("thin", "zeroedthick", "eagerzeroedthick")
GiB = 1 << 30
MiB = 1 << 20
# nbdsh is `python3 -m nbd`: the system python3 has the libnbd bindings.
SYS_ENV = {**os.environ, "PATH": "/usr/bin:/bin:" + os.environ.get("PATH", "")}
# Realistic data for fills: ~2:1 compressible, ~30% duplicate blocks (as bench/nbd_compare.py).
FILL_DATA = ["--buffer_compress_percentage=50", "--dedupe_percentage=30", "--refill_buffers"]


def log(msg):
    print(msg, flush=True)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_port(port, proc, timeout=60):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"lacuna serve exited with {proc.returncode} before port {port} opened")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"port {port} never opened")


def run(cmd, env=None, timeout=None):
    """Run a tool; any failure raises with its stderr."""
    r = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=timeout)
    if r.returncode != 0:
        raise RuntimeError(f"{shlex.join(cmd)} failed ({r.returncode}):\n{r.stdout[-2000:]}\n{r.stderr[-4000:]}")
    return r.stdout


def timed(cmd, env=None):
    start = time.perf_counter()
    run(cmd, env=env)
    return time.perf_counter() - start


class Daemon:
    """One `lacuna serve` on a fresh data directory, ephemeral loopback ports."""

    def __init__(self, tmp, tag, capacity):
        self.dir = os.path.join(tmp, tag)
        self.data = os.path.join(self.dir, "data")
        os.makedirs(self.dir)
        self.nbd, self.api_port, self.iscsi = free_port(), free_port(), free_port()
        self.log_path = os.path.join(self.dir, "lacuna.log")
        self.log_file = open(self.log_path, "w")
        vasa_off = no_vasa_args(LACUNA)
        self.proc = subprocess.Popen([
            LACUNA, "serve", *vasa_off, "--data-dir", self.data, "--capacity", capacity,
            "--nbd-listen", f"127.0.0.1:{self.nbd}", "--api-listen", f"127.0.0.1:{self.api_port}", "--nbd-open-access",
            "--iscsi-listen", f"127.0.0.1:{self.iscsi}",
        ], stdout=subprocess.DEVNULL, stderr=self.log_file)
        wait_port(self.nbd, self.proc)
        wait_port(self.api_port, self.proc)
        with open(os.path.join(self.data, "api-token")) as f:
            self.token = f.read().strip()

    def cpu_s(self):
        """CPU seconds (user + system) the daemon has used so far."""
        with open(f"/proc/{self.proc.pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def wait_idle(self, timeout=900):
        """Wait until the daemon has used < 5% of a core over 0.5 s (background work done: durability
        commits, reclaim, settling the data bits of reference ranges). Returns (seconds until that quiet
        window began, daemon CPU seconds used meanwhile)."""
        start, c0 = time.perf_counter(), self.cpu_s()
        hist = [(start, c0)]
        while True:
            time.sleep(0.1)
            self.check_alive()
            now, c = time.perf_counter(), self.cpu_s()
            hist.append((now, c))
            while len(hist) > 1 and hist[1][0] <= now - 0.5:
                hist.pop(0)
            if hist[0][0] <= now - 0.5 and c - hist[0][1] < 0.025:
                return hist[0][0] - start, hist[0][1] - c0
            if now - start > timeout:
                raise RuntimeError(f"daemon still busy after {timeout} s")

    def uri(self, export):
        return f"nbd://127.0.0.1:{self.nbd}/{export}"

    def check_alive(self):
        if self.proc.poll() is not None:
            raise RuntimeError(f"lacuna serve died ({self.proc.returncode}); log tail:\n{self.log_tail()}")

    def log_tail(self):
        try:
            with open(self.log_path) as f:
                return "".join(f.readlines()[-30:])
        except OSError:
            return ""

    def api(self, method, path, body=None):
        """One REST request on a new connection; returns (JSON, wall seconds incl. connect)."""
        self.check_alive()
        headers = {"Authorization": f"Bearer {self.token}"}
        data = None
        if body is not None:
            data = json.dumps(body).encode()
            headers["Content-Type"] = "application/json"
        start = time.perf_counter()
        conn = http.client.HTTPConnection("127.0.0.1", self.api_port, timeout=600)
        try:
            conn.request(method, path, body=data, headers=headers)
            resp = conn.getresponse()
            raw = resp.read()
        finally:
            conn.close()
        wall = time.perf_counter() - start
        if resp.status >= 300:
            raise RuntimeError(f"{method} {path} {body} -> {resp.status}: {raw.decode(errors='replace')}")
        return (json.loads(raw) if raw else None), wall

    def cli(self, *args):
        self.check_alive()
        return run([LACUNA, "--api", f"http://127.0.0.1:{self.api_port}", "--data-dir", self.data, *args])

    def create(self, name, size, typ="thin"):
        info, wall = self.api("POST", "/v1/volumes", {"name": name, "size_bytes": size, "provisioning": typ})
        if info["provisioning"] != typ or info["size_bytes"] != size:
            raise RuntimeError(f"created {info}, asked {typ} {size}")
        return info, wall

    def destroy(self, name):
        self.api("DELETE", f"/v1/volumes/{name}")
        self.api("POST", f"/v1/volumes/{name}/eradicate")

    def stop(self):
        if self.proc.poll() is not None:
            print(f"lacuna serve had exited with {self.proc.returncode}; log tail:\n{self.log_tail()}",
                  file=sys.stderr, flush=True)
        else:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log_file.close()


def fio(*args):
    """Run fio --output-format=json; returns its jobs; a job error raises."""
    out = run(["fio", "--ioengine=nbd", "--output-format=json", *args])
    jobs = json.loads(out[out.index("{"):])["jobs"]
    for job in jobs:
        if job["error"]:
            raise RuntimeError(f"fio job {job['jobname']} error {job['error']}: {shlex.join(args)}")
    return jobs


def fio_stats(side):
    clat = side["clat_ns"]
    return {"iops": side["iops"], "ios": side["total_ios"], "mean_us": clat["mean"] / 1000.0,
            "p99_us": clat["percentile"]["99.000000"] / 1000.0}


def fill(uri, offset, length, seed):
    """Sequential 1 MiB writes of fio's seeded data (same seed: same bytes), then FLUSH."""
    if length <= 0:
        return 0.0
    start = time.perf_counter()
    fio("--name=fill", f"--uri={uri}", "--rw=write", "--bs=1M", "--iodepth=4", f"--offset={offset}",
        f"--size={length}", f"--randseed={seed}", "--end_fsync=1", *FILL_DATA)
    return time.perf_counter() - start


def nbdsh(uri, script):
    return run(["nbdsh", "-u", uri, "-c", script], env=SYS_ENV)


def med(xs):
    return statistics.median(xs)


def disk_free(path):
    st = os.statvfs(path)
    return st.f_bavail * st.f_frsize


# ---------------------------------------------------------------------------- part 1
def part_create(tmp, args):
    log("== part 1: create a volume of each type")
    size = args.size_gib * GiB
    d = Daemon(tmp, "create", args.capacity)
    rows = []
    try:
        for typ in TYPES:
            api_walls, cli_walls, reserved = [], [], 0
            for i in range(args.repeat):
                info, wall = d.create(f"{typ}-{i}", size, typ)
                reserved = info["reserved_bytes"]
                api_walls.append(wall)
                d.destroy(f"{typ}-{i}")
            for i in range(args.repeat):
                start = time.perf_counter()
                d.cli("volume", "create", f"{typ}-cli-{i}", f"{args.size_gib}G", "--type", typ)
                cli_walls.append(time.perf_counter() - start)
                d.destroy(f"{typ}-cli-{i}")
            rows.append((f"lacuna {typ}", args.size_gib, api_walls, cli_walls, f"reserves {reserved / GiB:.2f} GiB"))
            log(f"lacuna {typ:18} API {med(api_walls)*1000:8.2f} ms  CLI {med(cli_walls)*1000:8.2f} ms")
    finally:
        d.stop()
        shutil.rmtree(d.dir, ignore_errors=True)
    img = os.path.join(tmp, "create.img")
    free = disk_free(tmp)
    falloc_gib = args.size_gib if free >= (args.size_gib + 8) * GiB else max(1, int(free / GiB / 2))
    peers = [
        ("qemu-img raw preallocation=off", ["-f", "raw", "-o", "preallocation=off"], args.size_gib, "sparse file"),
        ("qemu-img raw preallocation=falloc", ["-f", "raw", "-o", "preallocation=falloc"], falloc_gib,
         "fallocate: blocks reserved, reads as zero" + ("" if falloc_gib == args.size_gib else
                                                       f"; at {falloc_gib} GiB: {free / GiB:.0f} GiB free on the disk")),
        ("qemu-img qcow2 preallocation=metadata", ["-f", "qcow2", "-o", "preallocation=metadata"], args.size_gib,
         "L1/L2 tables written"),
    ]
    for name, opts, gib, note in peers:
        walls = []
        for _ in range(args.repeat):
            walls.append(timed(["qemu-img", "create", "-q", *opts, img, f"{gib}G"]))
            os.unlink(img)
        rows.append((name, gib, walls, None, note))
        log(f"{name:40} {gib} GiB {med(walls)*1000:8.2f} ms")
    return rows


# ---------------------------------------------------------------------------- part 2
def part_writes(tmp, args):
    log("== part 2: new writes versus overwrites")
    region = args.region_mib * MiB
    sub = region // args.rounds
    if sub % 4096 or sub == 0:
        raise SystemExit(f"--region-mib {args.region_mib} does not split into {args.rounds} rounds of whole 4 KiB blocks")
    d = Daemon(tmp, "writes", args.capacity)
    res = {}
    try:
        for typ in TYPES:
            d.create(f"w-{typ}", args.size_gib * GiB, typ)
        seed = 200
        # Rounds interleave the types, so drift over the run (daemon state, page cache, the other
        # tenants of the VM) falls on all of them alike; each round writes its own slice of the region.
        for r in range(args.rounds):
            for typ in TYPES:
                uri = d.uri(f"w-{typ}")
                for qd, base in ((1, 0), (16, region)):
                    for phase in ("new", "overwrite"):
                        seed += 1
                        d.wait_idle()
                        # Unique random data every pass (own seed, refilled per I/O): no dedup hits.
                        job = fio("--name=w", f"--uri={uri}", "--rw=randwrite", "--bs=4k", f"--iodepth={qd}",
                                  f"--offset={base + r * sub}", f"--size={sub}", f"--randseed={seed}",
                                  "--refill_buffers")[0]
                        st = fio_stats(job["write"])
                        st["runtime_ms"] = job["write"]["runtime"]
                        if st["ios"] != sub // 4096:
                            raise RuntimeError(f"fio wrote {st['ios']} blocks, expected {sub // 4096}")
                        res.setdefault((typ, qd, phase), []).append(st)
                        log(f"round {r} {typ:17} QD{qd:<2} {phase:9} {st['iops']:8.0f} IOPS  "
                            f"mean {st['mean_us']:7.1f} us  p99 {st['p99_us']:7.1f} us")
        for typ in TYPES:
            info, _ = d.api("GET", f"/v1/volumes/w-{typ}")
            if info["written_bytes"] != 2 * region:
                raise RuntimeError(f"w-{typ} written_bytes {info['written_bytes']}, expected {2 * region}")
    finally:
        d.stop()
        shutil.rmtree(d.dir, ignore_errors=True)
    return res


def combine(rounds):
    """Rounds of one (type, QD, phase): total I/Os over total time; latency mean weighted by I/Os;
    p99 as the median of the rounds' p99."""
    ios = sum(st["ios"] for st in rounds)
    return {"iops": ios / (sum(st["runtime_ms"] for st in rounds) / 1000.0),
            "mean_us": sum(st["mean_us"] * st["ios"] for st in rounds) / ios,
            "p99_us": med([st["p99_us"] for st in rounds])}


# ---------------------------------------------------------------------------- part 3
VERIFY_COPY = r"""
import json, random
src, dst, n, doff, size, seed = %r, %r, %d, %d, %d, %d
h2 = nbd.NBD()
h2.connect_uri(dst)
MiB = 1 << 20
rng = random.Random(seed)
offs = [0, n - MiB] + [rng.randrange(0, n // MiB) * MiB for _ in range(30)]
bad, zero = [], 0
for o in offs:
    a = h.pread(MiB, o)
    if a != h2.pread(MiB, doff + o):
        bad.append(o)
    zero += a.count(0) == len(a)
tail_zero = None
if doff + n + MiB <= size:
    t = h2.pread(MiB, doff + n)
    tail_zero = t.count(0) == len(t)
print(json.dumps({"checked": len(offs), "bad": bad, "zero_chunks": zero, "tail_zero": tail_zero}))
"""


def verify_copy(d, src, dst, n, doff, size):
    out = json.loads(nbdsh(d.uri(src), VERIFY_COPY % (d.uri(src), d.uri(dst), n, doff, size, 3)))
    if out["bad"]:
        raise RuntimeError(f"copy {src} -> {dst}@{doff}: MiB at source offsets {out['bad']} differ")
    if out["zero_chunks"] == out["checked"]:
        raise RuntimeError(f"copy check of {src}: every sampled MiB of the source is zero, nothing was written")
    if out["tail_zero"] is False:
        raise RuntimeError(f"copy {src} -> {dst}@{doff}: data past the copied range")
    return out


def part_copy(tmp, args):
    log("== part 3: range copy of written data")
    size = args.size_gib * GiB
    n = args.copy_gib * GiB
    half = size // 2
    if n > half:
        raise SystemExit(f"--copy-gib {args.copy_gib} does not fit in the second half of {args.size_gib} GiB")
    d = Daemon(tmp, "copy", args.capacity)
    rows = []
    try:
        for typ in TYPES:
            src, other = f"c-{typ}", f"c-{typ}-dst"
            d.create(src, size, typ)
            d.create(other, size, typ)
            fill_s = fill(d.uri(src), 0, n, seed=3)
            d.wait_idle()
            within, w_wall = d.api("POST", f"/v1/volumes/{src}/copy", {
                "destination": src, "offset_bytes": 0, "length_bytes": n, "destination_offset_bytes": half})
            w_bg = d.wait_idle()
            across, a_wall = d.api("POST", f"/v1/volumes/{src}/copy", {
                "destination": other, "offset_bytes": 0, "length_bytes": n, "destination_offset_bytes": half})
            a_bg = d.wait_idle()
            v1 = verify_copy(d, src, src, n, half, size)
            v2 = verify_copy(d, src, other, n, half, size)
            rows.append((typ, fill_s, w_wall, within, a_wall, across, v1["checked"] + v2["checked"], w_bg, a_bg))
            log(f"{typ:17} fill {n / MiB / fill_s:6.0f} MiB/s  copy within {w_wall*1000:7.2f} ms "
                f"({within['referenced_bytes'] / GiB:.1f} GiB by reference, {within['data_bytes']} B as data; "
                f"background {w_bg[0]:.1f} s)  to another volume {a_wall*1000:7.2f} ms (background {a_bg[0]:.1f} s); "
                f"verified")
    finally:
        d.stop()
        shutil.rmtree(d.dir, ignore_errors=True)
    return rows


# ---------------------------------------------------------------------------- part 4
def part_versions(tmp, args):
    log("== part 4: snapshot, clone and group-snapshot commit time")
    size = args.size_gib * GiB
    d = Daemon(tmp, "versions", args.capacity)
    qcow = os.path.join(tmp, "versions.qcow2")
    members = [f"g{i:02}" for i in range(16)]
    rows = []
    try:
        d.create("solo", size)
        for m in members:
            d.create(m, size)
        run(["qemu-img", "create", "-q", "-f", "qcow2", qcow, f"{args.size_gib}G"])
        solo_w = group_w = qcow_w = 0
        qcow_ok = True
        for stage in args.stages:
            target = stage * GiB
            per_member = target // 16
            t0 = time.perf_counter()
            fill(d.uri("solo"), solo_w, target - solo_w, seed=4)
            for m in members:
                fill(d.uri(m), group_w, per_member - group_w, seed=4)
            solo_w, group_w = target, per_member
            log(f"stage {stage} GiB: filled lacuna in {time.perf_counter() - t0:.0f} s")
            if qcow_ok and disk_free(tmp) < (target - qcow_w) + 8 * GiB:
                qcow_ok = False
                log(f"stage {stage} GiB: not enough free disk for the qcow2 peer; skipped from here on")
            if qcow_ok:
                t0 = time.perf_counter()
                cmds = []
                for off in range(qcow_w, target, 64 * MiB):
                    cmds += ["-c", f"write -q -P {0x41 + (off // GiB) % 64} {off} {min(64 * MiB, target - off)}"]
                if cmds:
                    run(["qemu-io", "-t", "none", "-f", "qcow2", *cmds, qcow])
                qcow_w = target
                log(f"stage {stage} GiB: filled qcow2 in {time.perf_counter() - t0:.0f} s")
            settle = d.wait_idle()
            solo_info, _ = d.api("GET", "/v1/volumes/solo")
            group_bytes = sum(d.api("GET", f"/v1/volumes/{m}")[0]["written_bytes"] for m in members)
            r = {"stage": stage, "solo_written": solo_info["written_bytes"], "group_written": group_bytes,
                 "fill_settle": settle, "qemu_snap": [], "qemu_list": []}
            # Every operation starts on an idle daemon; the background work it leaves (time until the
            # daemon is idle again) is recorded next to it.
            for i in range(args.repeat):
                snap, wall = d.api("POST", "/v1/snapshots", {"volumes": ["solo"], "name": f"s{stage}-{i}"})
                r.setdefault("snap_window", []).append(snap["commit_window_us"])
                r.setdefault("snap_wall", []).append(wall)
                r.setdefault("snap_bg", []).append(d.wait_idle()[0])
            for i in range(args.repeat):
                grp, wall = d.api("POST", "/v1/snapshots", {"volumes": members, "name": f"cg{stage}-{i}",
                                                            "group": f"cg{stage}-{i}"})
                if len(grp["snapshots"]) != 16:
                    raise RuntimeError(f"group snapshot returned {len(grp['snapshots'])} snapshots")
                r.setdefault("group_window", []).append(grp["commit_window_us"])
                r.setdefault("group_wall", []).append(wall)
                r.setdefault("group_bg", []).append(d.wait_idle()[0])
            for i in range(args.repeat):
                info, wall = d.api("POST", "/v1/volumes", {"name": f"clone{stage}-{i}", "source": "solo"})
                if info["written_bytes"] != solo_info["written_bytes"]:
                    raise RuntimeError(f"clone of solo has written_bytes {info['written_bytes']}")
                r.setdefault("clone_wall", []).append(wall)
                r.setdefault("clone_bg", []).append(d.wait_idle()[0])
            for i in range(args.repeat):
                _, wall = d.api("POST", "/v1/volumes", {"name": f"sclone{stage}-{i}", "source": f"solo@s{stage}-{i}"})
                r.setdefault("clone_snap_wall", []).append(wall)
                r.setdefault("clone_snap_bg", []).append(d.wait_idle()[0])
            if qcow_ok:
                for i in range(args.repeat):
                    r["qemu_snap"].append(timed(["qemu-img", "snapshot", "-c", f"s{stage}-{i}", qcow]))
                    r["qemu_list"].append(timed(["qemu-img", "snapshot", "-l", qcow]))
            rows.append(r)
            log(f"stage {stage} GiB: snapshot window {med(r['snap_window'])} us wall {med(r['snap_wall'])*1000:.2f} ms; "
                f"clone {med(r['clone_wall'])*1000:.2f} ms (then busy {med(r['clone_bg']):.1f} s), of a snapshot "
                f"{med(r['clone_snap_wall'])*1000:.2f} ms (then busy {med(r['clone_snap_bg']):.1f} s); group of 16 window {med(r['group_window'])} us "
                f"wall {med(r['group_wall'])*1000:.2f} ms"
                + (f"; qemu-img snapshot -c {med(r['qemu_snap'])*1000:.1f} ms" if r["qemu_snap"] else ""))
    finally:
        d.stop()
        shutil.rmtree(d.dir, ignore_errors=True)
        if os.path.exists(qcow):
            os.unlink(qcow)
    return rows


# ---------------------------------------------------------------------------- part 5
def part_depth(tmp, args):
    log("== part 5: read IOPS at snapshot depth")
    region = GiB
    d = Daemon(tmp, "depth", args.capacity)
    res = []
    try:
        d.create("deep", args.size_gib * GiB)
        fill(d.uri("deep"), 0, region, seed=5)

        def measure(label, export, depth):
            # Warm the page cache over the region so every depth reads from memory alike.
            fio("--name=warm", f"--uri={d.uri(export)}", "--rw=read", "--bs=1M", "--iodepth=4", f"--size={region}")
            d.wait_idle()
            job = fio("--name=r", f"--uri={d.uri(export)}", "--rw=randread", "--bs=4k", "--iodepth=16",
                      f"--size={region}", f"--runtime={args.read_runtime}", "--time_based", "--randseed=55")[0]
            st = fio_stats(job["read"])
            res.append((label, depth, st))
            log(f"{label:28} depth {depth:3}  {st['iops']:8.0f} IOPS  mean {st['mean_us']:7.1f} us  p99 {st['p99_us']:7.1f} us")

        measure("volume deep", "deep", 0)
        depth = 0
        for target in (8, 64):
            while depth < target:
                depth += 1
                fio("--name=ow", f"--uri={d.uri('deep')}", "--rw=randwrite", "--bs=4k", "--iodepth=16",
                    f"--size={region}", f"--io_size={args.overwrite_mib * MiB}", f"--randseed={500 + depth}",
                    "--refill_buffers", "--end_fsync=1")
                d.api("POST", "/v1/snapshots", {"volumes": ["deep"], "name": f"d{depth:02}"})
            measure("volume deep", "deep", depth)
        measure("oldest snapshot deep@d01", "deep@d01", depth)
        info, _ = d.api("GET", "/v1/volumes/deep")
        if info["snapshot_count"] != depth:
            raise RuntimeError(f"deep has {info['snapshot_count']} snapshots, expected {depth}")
    finally:
        d.stop()
        shutil.rmtree(d.dir, ignore_errors=True)
    return res


# ---------------------------------------------------------------------------- report
def ms(s):
    return f"{s * 1000:.2f} ms"


def source_rev():
    """What the binary was built from: $LACUNA_REV if the caller knows (e.g. a clean export of a
    commit), else the work tree's `git describe --dirty`."""
    if os.environ.get("LACUNA_REV"):
        return os.environ["LACUNA_REV"]
    try:
        return run(["git", "-C", ROOT, "describe", "--always", "--dirty"]).strip()
    except RuntimeError:
        return "?"


def report(args, argv, rev, created, writes, copies, versions, depth, elapsed):
    L = []
    L.append(f"\n## {datetime.date.today().isoformat()} — `bench/versions.py {' '.join(argv)}`\n")
    L.append(f"Machine: {os.cpu_count()} cores, {os.uname().release}, "
             f"{os.sysconf('SC_PAGE_SIZE') * os.sysconf('SC_PHYS_PAGES') / GiB:.0f} GiB RAM; client (fio, nbdsh, "
             f"qemu-img) and `lacuna serve` share the cores; work files on ext4 under $BENCH_DIR. "
             f"Lacuna built from `{rev}`. Each part runs on a fresh data directory and daemon "
             f"(`--capacity {args.capacity}`, a limit: nothing is preallocated). Run time {elapsed / 60:.1f} min. "
             f"Scale: volumes {args.size_gib} GiB, write region {args.region_mib} MiB, copy {args.copy_gib} GiB, "
             f"stages {','.join(map(str, args.stages))} GiB, {args.repeat} repetitions (medians shown).\n")
    targets = []
    if created:
        L.append(f"### Create a {args.size_gib} GiB volume (seed 004: thin 0.15 s, zeroedthick 0.55 s, eagerzeroedthick 24 s)\n")
        L.append("Lacuna: `POST /v1/volumes` wall time (new connection each time) and `lacuna volume create` "
                 "(whole CLI process); peers: `qemu-img create` process. Median (min–max) of "
                 f"{args.repeat}; each volume deleted and eradicated between runs. `preallocation=full` is not run: "
                 "it writes every byte of zeroes, so it times the disk's write bandwidth rather than the format (the "
                 "analogue of the seed's 24 s eagerzeroedthick, which Lacuna does with one range record), and "
                 "100 GiB does not fit on this VM's free disk.\n")
        L.append("| what | size | API request | CLI / process | note |")
        L.append("|---|---|---|---|---|")
        for name, gib, api_w, cli_w, note in created:
            span = lambda w: f"{ms(med(w))} ({min(w)*1000:.2f}–{max(w)*1000:.2f})"
            if cli_w is None:
                L.append(f"| {name} | {gib} GiB | — | {span(api_w)} | {note} |")
            else:
                L.append(f"| {name} | {gib} GiB | {span(api_w)} | {span(cli_w)} | {note} |")
        lac = {n.split()[1]: med(a) for n, _, a, _, _ in created if n.startswith("lacuna")}
        L.append("")
        targets.append(("eagerzeroedthick created as fast as thin (metadata only)",
                        f"thin {ms(lac['thin'])}, zeroedthick {ms(lac['zeroedthick'])}, eagerzeroedthick "
                        f"{ms(lac['eagerzeroedthick'])} (API medians; seed 0.15 s / 0.55 s / 24 s)",
                        lac["eagerzeroedthick"] <= 2 * lac["thin"]))
    if writes:
        W = {k: combine(v) for k, v in writes.items()}
        L.append(f"### New writes versus overwrites (fio 4k randwrite over a {args.region_mib} MiB region)\n")
        L.append(f"Per type, a {args.size_gib} GiB volume; QD1 on [0, {args.region_mib} MiB), QD16 on the next "
                 f"{args.region_mib} MiB, each written in {args.rounds} rounds of {args.region_mib // args.rounds} MiB "
                 "slices; the rounds interleave the types (round 1: thin, zeroedthick, eagerzeroedthick; round 2: ...). "
                 "\"new\": first pass over a never-written slice (fio's random map writes each block exactly once); "
                 "\"overwrite\": the same slice again right after. Every pass waits for an idle daemon, has its own "
                 "seed and `--refill_buffers` (all data unique: no dedup hits). IOPS: all I/Os of the rounds over "
                 "their total time; latency: fio's completion latency, mean over all I/Os, p99 the median of the "
                 "rounds'. Seed 004: thin/zeroedthick new writes 17–23% fewer IOPS than eagerzeroedthick; "
                 "target: within 5%.\n")
        L.append("| type | QD | new IOPS | new mean / p99 | overwrite IOPS | overwrite mean / p99 | new ÷ overwrite "
                 "(rounds min–max) | new ÷ eagerzeroedthick new |")
        L.append("|---|---|---|---|---|---|---|---|")
        for typ in TYPES:
            for qd in (1, 16):
                n, o, e = W[(typ, qd, "new")], W[(typ, qd, "overwrite")], W[("eagerzeroedthick", qd, "new")]
                per = [a["iops"] / b["iops"] for a, b in zip(writes[(typ, qd, "new")], writes[(typ, qd, "overwrite")])]
                L.append(f"| {typ} | {qd} | {n['iops']:.0f} | {n['mean_us']:.0f} / {n['p99_us']:.0f} µs | "
                         f"{o['iops']:.0f} | {o['mean_us']:.0f} / {o['p99_us']:.0f} µs | {n['iops'] / o['iops']:.3f} "
                         f"({min(per):.2f}–{max(per):.2f}) | {n['iops'] / e['iops']:.3f} |")
        L.append("")
        worst = min(W[(t, q, "new")]["iops"] / W[(t, q, "overwrite")]["iops"] for t in TYPES for q in (1, 16))
        worst_e = min(W[(t, q, "new")]["iops"] / W[("eagerzeroedthick", q, "new")]["iops"]
                      for t in TYPES[:2] for q in (1, 16))
        targets.append(("new writes within 5% of overwrites (IOPS), every type and QD",
                        f"worst new ÷ overwrite {worst:.3f}", worst >= 0.95))
        targets.append(("thin/zeroedthick new writes within 5% of eagerzeroedthick new writes",
                        f"worst ratio {worst_e:.3f}", worst_e >= 0.95))
    if copies:
        L.append(f"### Range copy of {args.copy_gib} GiB of written data in a {args.size_gib} GiB volume (target < 100 ms)\n")
        L.append(f"fio writes [0, {args.copy_gib} GiB) with 1 MiB writes (same seed for every type, ~2:1 compressible, "
                 "~30% duplicate blocks) and FLUSHes; then `POST /v1/volumes/{v}/copy` of that range to offset "
                 f"{args.size_gib // 2} GiB of the same volume, and to offset {args.size_gib // 2} GiB of a second "
                 "volume of the same type, each on an idle daemon; \"then background\" is how long the daemon stayed "
                 "busy afterwards (settling the data bits of the new reference range: see the part 4 notes), "
                 "with its CPU time. nbdsh then compares 32 samples of 1 MiB of the source with each copy "
                 "(first, last and 30 random MiB; the source samples must not all be zero) and checks that the "
                 "MiB after each copy reads as zero.\n")
        L.append("| type | fill | copy within the volume | then background | copy to another volume | then background "
                 "| by reference / as data | samples checked |")
        L.append("|---|---|---|---|---|---|---|---|")
        for typ, fill_s, w_wall, within, a_wall, across, checked, w_bg, a_bg in copies:
            L.append(f"| {typ} | {args.copy_gib * 1024 / fill_s:.0f} MiB/s | {ms(w_wall)} | {w_bg[0]:.1f} s "
                     f"({w_bg[1]:.1f} s CPU) | {ms(a_wall)} | {a_bg[0]:.1f} s ({a_bg[1]:.1f} s CPU) | "
                     f"{within['referenced_bytes'] / GiB:.2f} GiB / {within['data_bytes']} B | {checked} equal |")
        L.append("")
        worst = max(max(r[2], r[4]) for r in copies)
        targets.append((f"range copy of {args.copy_gib} GiB written < 100 ms", f"slowest {ms(worst)}", worst < 0.1))
    if versions:
        L.append("### Snapshot, clone and group-snapshot commit time versus data written (target: flat; group of 16 < 1 ms)\n")
        L.append("`solo`: one thin volume written to the stage's size; group: 16 thin volumes holding the stage's "
                 "size between them (1/16 each). Fills are fio 1 MiB writes of one seeded stream (they dedup "
                 "against each other, which spares the disk but not the per-grain mappings). At each stage, once the "
                 f"daemon is idle: {args.repeat}× snapshot of `solo`, {args.repeat}× consistency-group snapshot of the "
                 f"16, {args.repeat}× clone of `solo` (the live volume), {args.repeat}× clone of one of its snapshots "
                 "(`POST /v1/volumes` with `source`); each request starts on an idle daemon (< 5% of a core over "
                 "0.5 s) and \"bg\" is how long the daemon then stayed busy (median). Snapshots and clones "
                 "accumulate across stages. \"window\" is the API's `commit_window_us` (writes held), median "
                 "(max); \"wall\" the request as a client sees it, median. Peer: `qemu-img snapshot -c` (whole "
                 "process) on a qcow2 (64 KiB clusters) with the same amount written by `qemu-io`; `qemu-img "
                 "snapshot -l` on the same image shows the process's fixed cost.\n")
        L.append("| written | snapshot window | snapshot wall | group of 16: window | group wall | clone of volume: wall "
                 "/ bg | clone of snapshot: wall / bg | qemu-img snapshot -c | qemu-img snapshot -l |")
        L.append("|---|---|---|---|---|---|---|---|---|")
        for r in versions:
            q = (ms(med(r["qemu_snap"])), ms(med(r["qemu_list"]))) if r["qemu_snap"] else ("skipped (disk)", "—")
            L.append(f"| {r['stage']} GiB (solo {r['solo_written'] / GiB:.2f}, group {r['group_written'] / GiB:.2f}) | "
                     f"{med(r['snap_window']):.0f} µs ({max(r['snap_window'])}) | {ms(med(r['snap_wall']))} | "
                     f"{med(r['group_window']):.0f} µs ({max(r['group_window'])}) | {ms(med(r['group_wall']))} | "
                     f"{ms(med(r['clone_wall']))} / {med(r['clone_bg']):.1f} s | "
                     f"{ms(med(r['clone_snap_wall']))} / {med(r['clone_snap_bg']):.1f} s | {q[0]} | {q[1]} |")
        L.append("")
        first, last = versions[0], versions[-1]
        growth = lambda k: med(last[k]) / max(med(first[k]), 1e-9)
        data_growth = last["stage"] / first["stage"]
        keys = ("snap_window", "snap_wall", "group_window", "group_wall", "clone_wall", "clone_snap_wall")
        flat = all(growth(k) < 2 for k in keys)
        targets.append((f"snapshot / clone / group commit flat from {first['stage']} to {last['stage']} GiB "
                        f"(×{data_growth:.0f} data; counted flat if every median grows < ×2)",
                        ", ".join(f"{k} ×{growth(k):.2f}" for k in keys), flat))
        bg = ("clone_bg", "clone_snap_bg")
        targets.append(("(not a target) background work a clone leaves behind",
                        ", ".join(f"{k} {med(first[k]):.1f} s at {first['stage']} GiB, {med(last[k]):.1f} s at "
                                  f"{last['stage']} GiB" for k in bg), None))
        gmax = max(max(r["group_window"]) for r in versions)
        gmed = max(med(r["group_window"]) for r in versions)
        targets.append(("group snapshot of 16 volumes: commit < 1 ms",
                        f"median ≤ {gmed:.0f} µs at every stage, max {gmax} µs; request wall ≤ "
                        f"{ms(max(med(r['group_wall']) for r in versions))} (median)", gmed < 1000))
    if depth:
        L.append("### Read IOPS versus snapshot depth (target: flat)\n")
        L.append(f"A thin volume with 1 GiB written (fio 1 MiB, seeded, ~2:1 compressible); between snapshots fio "
                 f"overwrites {args.overwrite_mib} MiB of random 4 KiB blocks of that GiB (unique data, then FLUSH). "
                 f"Each row: a sequential read of the GiB to warm the page cache, then 4k randread QD16 for "
                 f"{args.read_runtime} s, same seed every time.\n")
        L.append("| read from | snapshots | IOPS | mean latency | p99 latency | ÷ depth 0 |")
        L.append("|---|---|---|---|---|---|")
        base = depth[0][2]["iops"]
        for label, dep, st in depth:
            L.append(f"| {label} | {dep} | {st['iops']:.0f} | {st['mean_us']:.0f} µs | {st['p99_us']:.0f} µs | "
                     f"{st['iops'] / base:.3f} |")
        L.append("")
        worst = min(st["iops"] for _, _, st in depth) / base
        targets.append(("read IOPS flat with snapshot depth (counted flat if within 10% of depth 0)",
                        f"worst {worst:.3f} of depth 0", worst >= 0.9))
    L.append("### Targets\n")
    L.append("| target | measured | met |")
    L.append("|---|---|---|")
    for name, measured, ok in targets:
        L.append(f"| {name} | {measured} | {'—' if ok is None else '**met**' if ok else '**not met**'} |")
    return "\n".join(L) + "\n"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--size-gib", type=int, default=100, help="volume size (parts 1-4)")
    ap.add_argument("--region-mib", type=int, default=1024, help="part 2: region written per QD")
    ap.add_argument("--copy-gib", type=int, default=50, help="part 3: GiB written and copied")
    ap.add_argument("--stages", default="1,16,64", help="part 4: GiB written at each measurement")
    ap.add_argument("--repeat", type=int, default=5, help="repetitions of each timed operation")
    ap.add_argument("--rounds", type=int, default=4, help="part 2: interleaved rounds, each on 1/ROUNDS of the region")
    ap.add_argument("--read-runtime", type=int, default=15, help="part 5: seconds per randread run")
    ap.add_argument("--overwrite-mib", type=int, default=8, help="part 5: MiB overwritten between snapshots")
    ap.add_argument("--capacity", default="1T", help="lacuna serve --capacity (a limit; nothing is preallocated)")
    ap.add_argument("--parts", default="1,2,3,4,5")
    ap.add_argument("--no-record", action="store_true")
    argv = sys.argv[1:]
    args = ap.parse_args()
    args.stages = [int(s) for s in args.stages.split(",")]
    parts = {int(p) for p in args.parts.split(",")}
    if not os.path.exists(LACUNA):
        sys.exit(f"{LACUNA} missing: run cargo build --release -p lacuna first")
    for tool in ("fio", "nbdsh", "qemu-img", "qemu-io"):
        if not shutil.which(tool, path=SYS_ENV["PATH"]):
            sys.exit(f"{tool} missing")

    def on_signal(signum, _frame):
        raise SystemExit(f"interrupted by signal {signum}")

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGHUP, on_signal)
    tmp = tempfile.mkdtemp(prefix="lacuna-versions-", dir=os.environ.get("BENCH_DIR", "/var/tmp"))
    started = time.time()
    rev = source_rev()
    try:
        created = part_create(tmp, args) if 1 in parts else None
        writes = part_writes(tmp, args) if 2 in parts else None
        copies = part_copy(tmp, args) if 3 in parts else None
        versions = part_versions(tmp, args) if 4 in parts else None
        depth = part_depth(tmp, args) if 5 in parts else None
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    text = report(args, argv, rev, created, writes, copies, versions, depth, time.time() - started)
    print(text)
    if not args.no_record:
        with open(os.path.join(ROOT, "bench", "RESULTS.md"), "a") as f:
            f.write(text)


if __name__ == "__main__":
    main()
