#!/usr/bin/python3
"""vVol benchmark (seed 003): the VM workflows of VMware's "vVols – Performance Evolution
and Future" through a real `lacuna serve` and its REST API (the calls a VASA provider
would make on the array), with fio --ioengine=nbd and libnbd writing the vVols' data. It
measures the array side only: the seed's figures are ESXi + VASA provider + array, so
they are shown beside ours, not compared one to one. Prints one table per part, with the
issue's targets met / not met, and appends the record to bench/RESULTS.md.

usage: bench/vvols.py [--vms 120] [--concurrency 16] [--data-gib 40] [--swap-mib 4096]
                      [--swap-write-mib 4] [--disk-gib 2] [--fill-pct 40] [--disk-counts 4,16]
                      [--depths 1,2,4] [--snap-reps 5] [--snap-gap 1] [--io-iops 100]
                      [--io-baseline-s 10] [--browse-counts 16,64,256,1024] [--browse-reps 9]
                      [--bitmap-gib 500] [--dense-gib 8] [--sparse-every-mib 512]
                      [--sparse-kib 64] [--segment-gib 2] [--svm-chunk-kib 64] [--full-chunk-kib 4,16]
                      [--scan-reps 5] [--capacity 2T] [--parts 1,2,3,4] [--no-record]
With the defaults a run takes about 5 minutes on a 2-core VM.

Parts (each on a fresh data directory and daemon; one host `esx1` with a protocol endpoint):
  1 power     VMS VMs (1 Config, 2 Data, 1 Swap vVol each) powered on and off together,
              CONCURRENCY at a time (ESXi: 120 queued, 16 served; the array answers a 17th
              request of a host Busy): first power-on = create Config, 2 Data, Swap, then one
              batch bind of the 4; power-off = one batch unbind (the Swap vVol is emptied, and
              kept); second power-on = one batch bind. Between power-on and power-off the guest
              writes SWAP_WRITE MiB into each Swap vVol over NBD (untimed). Then the old
              (vSphere 7.0 U3) pattern on the same array for the ratios: power-on = create
              Swap + 4 single binds, power-off = 4 single unbinds + delete Swap. Per VM: time
              from its first call to its last answer, and the calls it made
  2 snapshot  a VM of each DISK_COUNTS Data vVols of DISK_GIB, FILL_PCT written (fio, unique
              data); snapshots at depth 1..max(DEPTHS): one prepare call per disk, then one
              batch commit; prepare time (sum of the calls), commit request, the daemon's
              commit window (writes held = the stun). SNAP_REPS chains idle, then SNAP_REPS
              under moderate I/O: fio 4k randwrite at IO_IOPS on every disk over its written
              part (overwrites of shared data once a snapshot exists), whose latency is also
              taken for IO_BASELINE_S with no snapshot; snapshot vVols deleted between chains
  3 browser   BROWSE_COUNTS VMs (a Config and a Data vVol each, ESXi-like metadata):
              queryVirtualVolume for Config vVols, then queryVirtualVolumeInfo of them (1024
              ids a call); median of BROWSE_REPS, on one kept-alive connection
  4 bitmap    three thin vVols of BITMAP_GIB: empty, sparse (SPARSE_KIB every SPARSE_EVERY
              MiB) and dense (the first DENSE_GIB written). Each scanned with
              allocatedBitmapVirtualVolume: storage vMotion (SEGMENT_GIB segments at
              SVM_CHUNK, following the next-allocated hint, and every segment without it) and
              full scans (each FULL_CHUNK, calls of at most a 4 MiB bitmap); every bitmap and
              hint checked against what was written; median of SCAN_REPS

Needs: fio, nbdsh / python3-libnbd (Debian's /usr/bin/python3) and a release build
(CARGO_TARGET_DIR=... cargo build --release -p lacuna; the binary is taken from
$CARGO_TARGET_DIR/release/lacuna, else target/release/lacuna; $LACUNA_REV, if set, is
recorded as what it was built from, else `git rev-parse --short HEAD`). Work files go to a
temporary directory under $BENCH_DIR (default /var/tmp), removed on exit. Everything
listens on 127.0.0.1 only. Any tool or API error, a Busy answer (the benchmark never has
more than CONCURRENCY requests of a host in flight) or a wrong bitmap aborts the run.
"""
import argparse
import base64
import concurrent.futures
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
import threading
import time
from serve_args import no_vasa_args  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LACUNA = os.path.join(os.environ.get("CARGO_TARGET_DIR", os.path.join(ROOT, "target")), "release", "lacuna")

GiB = 1 << 30
MiB = 1 << 20
KiB = 1 << 10
# nbdsh is `python3 -m nbd`: the system python3 has the libnbd bindings.
SYS_ENV = {**os.environ, "PATH": "/usr/bin:/bin:" + os.environ.get("PATH", "")}
HOST = "esx1"
HOST_IQN = "iqn.1998-01.com.vmware:esx1"
MAX_BITMAP_BYTES = 4 * MiB  # VASA's limit, and the array's
MAX_BATCH = 1024  # most ids a batch call takes


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


def run(cmd, env=None, timeout=None, stdin=None):
    """Run a tool; any failure raises with its stderr."""
    r = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=timeout, input=stdin)
    if r.returncode != 0:
        raise RuntimeError(f"{shlex.join(cmd)} failed ({r.returncode}):\n{r.stdout[-2000:]}\n{r.stderr[-4000:]}")
    return r.stdout


class ApiError(RuntimeError):
    def __init__(self, status, msg):
        super().__init__(msg)
        self.status = status


class Conn:
    """One kept-alive HTTP/1.1 connection to the API (a host keeps its VASA session open).
    call() answers (JSON, wall seconds of the round trip incl. reading the body, seconds
    spent decoding the JSON on the client)."""

    def __init__(self, daemon):
        self.d = daemon
        self.http = None

    def call(self, method, path, body=None):
        self.d.check_alive()
        headers = {"Authorization": f"Bearer {self.d.token}", "Connection": "keep-alive"}
        data = None
        if body is not None:
            data = json.dumps(body).encode()
            headers["Content-Type"] = "application/json"
        for attempt in (0, 1):
            if self.http is None:
                self.http = http.client.HTTPConnection("127.0.0.1", self.d.api_port, timeout=600)
                self.http.connect()
                self.http.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            start = time.perf_counter()
            try:
                self.http.request(method, path, body=data, headers=headers)
                resp = self.http.getresponse()
                raw = resp.read()
            except (http.client.RemoteDisconnected, BrokenPipeError, ConnectionResetError):
                # The server closed an idle kept-alive connection before taking the request.
                self.close()
                if attempt:
                    raise
                continue
            wall = time.perf_counter() - start
            break
        if resp.getheader("Connection", "").lower() == "close":
            self.close()
        if resp.status >= 300:
            raise ApiError(resp.status, f"{method} {path} {json.dumps(body)[:300] if body else ''} -> "
                                        f"{resp.status}: {raw.decode(errors='replace')[:2000]}")
        t0 = time.perf_counter()
        obj = json.loads(raw) if raw else None
        return obj, wall, time.perf_counter() - t0

    def close(self):
        if self.http is not None:
            self.http.close()
            self.http = None


class Daemon:
    """One `lacuna serve` on a fresh data directory, ephemeral loopback ports, anonymous NBD
    allowed (so fio and nbdsh can write the vVols' volumes, `vvol-<uuid>`)."""

    def __init__(self, tmp, tag, capacity, vasa=False):
        self.dir = os.path.join(tmp, tag)
        self.data = os.path.join(self.dir, "data")
        os.makedirs(self.dir)
        self.nbd, self.api_port, self.iscsi = free_port(), free_port(), free_port()
        self.log_path = os.path.join(self.dir, "lacuna.log")
        self.log_file = open(self.log_path, "w")
        # The VASA provider only for a benchmark that speaks to it (bench/vasa.py).
        self.vasa_port = free_port() if vasa else None
        vasa_args = ["--vasa-listen", f"127.0.0.1:{self.vasa_port}"] if vasa else no_vasa_args(LACUNA)
        self.cmd = [LACUNA, "serve", *vasa_args, "--data-dir", self.data, "--capacity", capacity,
                    "--nbd-listen", f"127.0.0.1:{self.nbd}", "--api-listen", f"127.0.0.1:{self.api_port}",
                    "--nbd-open-access", "--iscsi-listen", f"127.0.0.1:{self.iscsi}"]
        self.proc = subprocess.Popen(self.cmd, stdout=subprocess.DEVNULL, stderr=self.log_file)
        wait_port(self.nbd, self.proc)
        wait_port(self.api_port, self.proc)
        if vasa:
            wait_port(self.vasa_port, self.proc)
        with open(os.path.join(self.data, "api-token")) as f:
            self.token = f.read().strip()
        self.local = threading.local()
        self.conns = []
        self.conns_lock = threading.Lock()
        # Requests of the host in flight, counted by the client (bind and unbind are the calls
        # the array admits per host).
        self.flight_lock = threading.Lock()
        self.in_flight = 0
        self.max_in_flight = 0

    def conn(self):
        """This thread's kept-alive connection."""
        c = getattr(self.local, "conn", None)
        if c is None:
            c = self.local.conn = Conn(self)
            with self.conns_lock:
                self.conns.append(c)
        return c

    def api(self, method, path, body=None):
        """One request on this thread's connection; returns (JSON, wall seconds)."""
        obj, wall, _ = self.conn().call(method, path, body)
        return obj, wall

    def host_call(self, method, path, body):
        """A request the array counts against the host's 16 in flight; Busy aborts the run."""
        with self.flight_lock:
            self.in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self.in_flight)
        try:
            return self.api(method, path, body)
        except ApiError as e:
            if e.status == 429:
                raise RuntimeError(f"the array answered Busy with at most {self.max_in_flight} of the host's "
                                   f"requests in flight (limit 16): {e}") from e
            raise
        finally:
            with self.flight_lock:
                self.in_flight -= 1

    def cpu_s(self):
        """CPU seconds (user + system) the daemon has used so far."""
        with open(f"/proc/{self.proc.pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def wait_idle(self, timeout=900):
        """Wait until the daemon has used < 5% of a core over 0.5 s (background work done)."""
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
                return hist[0][0] - start
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

    def add_host(self):
        self.api("POST", "/v1/hosts", {"name": HOST, "iqns": [HOST_IQN]})
        self.api("PUT", f"/v1/hosts/{HOST}/protocol-endpoint", {})

    def create_vvol(self, vvol_type, size_mib, metadata):
        info, wall = self.api("POST", "/v1/vvols", {"container": "default", "vvol_type": vvol_type,
                                                    "size_mib": size_mib, "provisioning": "thin",
                                                    "metadata": metadata})
        if info["size_bytes"] != size_mib * MiB or info["vvol_type"] != vvol_type:
            raise RuntimeError(f"created {info}, asked {vvol_type} {size_mib} MiB")
        return info["id"], wall

    def stop(self):
        for c in self.conns:
            c.close()
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


def export_of(vvol_id):
    """The engine volume (and NBD export) holding a vVol's data."""
    return "vvol-" + vvol_id.removeprefix("rfc4122.")


def items_ok(answer, ids, what):
    """A batch answer: one item per id, in order, each a result."""
    if [a["id"] for a in answer] != list(ids):
        raise RuntimeError(f"{what}: answer ids {[a['id'] for a in answer][:4]}… do not match the request")
    faults = [a for a in answer if a.get("fault") is not None or a.get("result") is None]
    if faults:
        raise RuntimeError(f"{what}: {len(faults)} items faulted, first {faults[0]}")
    return [a["result"] for a in answer]


def fio(*args):
    """Run fio --output-format=json; returns its jobs; a job error raises."""
    out = run(["fio", "--ioengine=nbd", "--output-format=json", *args])
    return fio_jobs(out, args)


def fio_jobs(out, args, err=""):
    if "{" not in out:
        raise RuntimeError(f"fio printed no results: {shlex.join(args)}\n{out[-2000:]}\n{err[-2000:]}")
    jobs = json.loads(out[out.index("{"):])["jobs"]
    for job in jobs:
        if job["error"]:
            raise RuntimeError(f"fio job {job['jobname']} error {job['error']}: {shlex.join(args)}")
    return jobs


def fill(uri, length, seed):
    """Sequential 1 MiB writes of unique random data (fio, seeded), then FLUSH."""
    fio("--name=fill", f"--uri={uri}", "--rw=write", "--bs=1M", "--iodepth=8", f"--size={length}",
        f"--randseed={seed}", "--refill_buffers", "--end_fsync=1")


def med(xs):
    return statistics.median(xs)


def pct(xs, p):
    """The p-th percentile (nearest rank) of xs."""
    s = sorted(xs)
    return s[min(len(s) - 1, max(0, int(-(-p * len(s) // 100)) - 1))]


def ms(s):
    return f"{s * 1000:.2f} ms"


def pool_map(n, fn, items):
    """fn over items on n threads (n requests in flight at most); any error raises."""
    with concurrent.futures.ThreadPoolExecutor(n) as ex:
        return list(ex.map(fn, items))


# ---------------------------------------------------------------------------- part 1
NBD_WRITER = r"""
import json, os, sys, nbd
spec = json.load(sys.stdin)
buf_len = 1 << 20
for uri in spec["uris"]:
    h = nbd.NBD()
    h.connect_uri(uri)
    for off in range(0, spec["bytes"], buf_len):
        h.pwrite(os.urandom(min(buf_len, spec["bytes"] - off)), off)
    h.flush()
    h.shutdown()
"""


def write_swaps(d, vms, nbytes):
    """The guests' swap use: NBYTES of random data at the start of each Swap vVol (untimed)."""
    if nbytes <= 0:
        return
    uris = [d.uri(export_of(vm["swap"])) for vm in vms]
    run(["/usr/bin/python3", "-c", NBD_WRITER], env=SYS_ENV, stdin=json.dumps({"uris": uris, "bytes": nbytes}))
    for vm in vms[:: max(1, len(vms) // 8)]:
        sp, _ = d.api("GET", f"/v1/vvols/{vm['swap']}/space")
        if sp["written_bytes"] < nbytes:
            raise RuntimeError(f"swap {vm['swap']} written_bytes {sp['written_bytes']} after writing {nbytes}")


def part_power(tmp, args):
    log("== part 1: power cycles")
    d = Daemon(tmp, "power", args.capacity)
    phases = []
    swap_checks = {}
    try:
        d.add_host()
        vms = [{"n": i, "vm": f"vm{i:04}"} for i in range(args.vms)]

        def md(vm, typ, name):
            return {"VMW_VmID": vm["vm"], "VMW_VVolType": typ, "VMW_VVolName": name,
                    "VMW_ContainerId": "default"}

        def the4(vm):
            return [vm["config"], vm["data0"], vm["data1"], vm["swap"]]

        def bind(vm):
            ans, _ = d.host_call("POST", "/v1/vvols/bind", {"host": HOST, "ids": the4(vm)})
            for b in items_ok(ans, the4(vm), "bind"):
                if b["host"] != HOST or not b["protocol_endpoint"]["in_band_id"]:
                    raise RuntimeError(f"bind answered {b}")
            return 1

        def unbind(vm):
            ans, _ = d.host_call("POST", "/v1/vvols/unbind", {"host": HOST, "ids": the4(vm)})
            if items_ok(ans, the4(vm), "unbind") != [True] * 4:
                raise RuntimeError(f"unbind answered {ans}")
            return 1

        def power_on_first(vm):
            vm["config"], _ = d.create_vvol("Config", args.config_mib, md(vm, "Config", f"{vm['vm']}.vmx"))
            for k in (0, 1):
                vm[f"data{k}"], _ = d.create_vvol("Data", args.data_gib * 1024, md(vm, "Data", f"{vm['vm']}_{k}.vmdk"))
            vm["swap"], _ = d.create_vvol("Swap", args.swap_mib, md(vm, "Swap", f"{vm['vm']}.vswp"))
            return 4 + bind(vm)

        def power_on_legacy(vm):
            # vSphere 7.0 U3: a new Swap vVol every power-on, each vVol bound on its own.
            vm["swap"], _ = d.create_vvol("Swap", args.swap_mib, md(vm, "Swap", f"{vm['vm']}.vswp"))
            for i in the4(vm):
                ans, _ = d.host_call("POST", "/v1/vvols/bind", {"host": HOST, "ids": [i]})
                items_ok(ans, [i], "single bind")
            return 5

        def power_off_legacy(vm):
            for i in the4(vm):
                ans, _ = d.host_call("POST", "/v1/vvols/unbind", {"host": HOST, "ids": [i]})
                items_ok(ans, [i], "single unbind")
            d.api("DELETE", f"/v1/vvols/{vm['swap']}")
            return 5

        def phase(name, fn):
            def one(vm):
                t0 = time.perf_counter()
                calls = fn(vm)
                return time.perf_counter() - t0, calls
            d.max_in_flight = 0
            t0 = time.perf_counter()
            res = pool_map(args.concurrency, one, vms)
            wall = time.perf_counter() - t0
            times = [r[0] for r in res]
            calls = {r[1] for r in res}
            if len(calls) != 1:
                raise RuntimeError(f"{name}: VMs made different numbers of calls {calls}")
            p = {"name": name, "times": times, "wall": wall, "calls": calls.pop(), "max_in_flight": d.max_in_flight}
            phases.append(p)
            log(f"{name:34} {p['calls']} calls/VM  median {ms(med(times))}  p99 {ms(pct(times, 99))}  "
                f"total {wall:.3f} s  ({d.max_in_flight} host requests in flight at most)")

        def swaps_emptied(tag):
            """After a power-off: each Swap vVol kept, bound nowhere, holding nothing."""
            written = []
            for vm in vms:
                sp, _ = d.api("GET", f"/v1/vvols/{vm['swap']}/space")
                info, _ = d.api("GET", f"/v1/vvols/{vm['swap']}")
                if info["bound_hosts"]:
                    raise RuntimeError(f"{tag}: swap {vm['swap']} still bound to {info['bound_hosts']}")
                written.append(sp["written_bytes"])
            swap_checks[tag] = max(written)
            if max(written) != 0:
                raise RuntimeError(f"{tag}: a Swap vVol unbound from its last host still holds "
                                   f"{max(written)} bytes (written_bytes of GET /v1/vvols/ID/space)")

        phase("first power-on", power_on_first)
        write_swaps(d, vms, args.swap_write_mib * MiB)
        phase("first power-off", unbind)
        swaps_emptied("first power-off")
        phase("second power-on", bind)
        write_swaps(d, vms, args.swap_write_mib * MiB)
        phase("second power-off", unbind)
        swaps_emptied("second power-off")
        # The old pattern on the same array and vVols: the kept Swap vVols go first (untimed).
        for vm in vms:
            d.api("DELETE", f"/v1/vvols/{vm['swap']}")
        phase("old pattern power-on", power_on_legacy)
        write_swaps(d, vms, args.swap_write_mib * MiB)
        phase("old pattern power-off", power_off_legacy)
        count, _ = d.api("POST", "/v1/vvols/query", {"container": "default"})
        if len(count["ids"]) != 3 * args.vms:
            raise RuntimeError(f"{len(count['ids'])} vVols left, expected {3 * args.vms}")
    finally:
        d.stop()
        shutil.rmtree(d.dir, ignore_errors=True)
    return {"phases": phases, "swap_checks": swap_checks}


# ---------------------------------------------------------------------------- part 2
def io_stats(jobs):
    """The background writes of every disk together: IOPS, median of the disks' p99, worst p99.9 and max."""
    w = [j["write"] for j in jobs]
    return {"iops": sum(x["iops"] for x in w), "ios": sum(x["total_ios"] for x in w),
            "p50_us": med([x["clat_ns"]["percentile"]["50.000000"] for x in w]) / 1000,
            "p99_us": med([x["clat_ns"]["percentile"]["99.000000"] for x in w]) / 1000,
            "p999_us": max(x["clat_ns"]["percentile"]["99.900000"] for x in w) / 1000,
            "max_us": max(x["clat_ns"]["max"] for x in w) / 1000}


def in_flight_during_commits(rows, logs):
    """For each commit of ROWS: the slowest background write in flight during its request (started before
    the answer, completed after the request was sent): what the host saw of the stun."""
    writes = []
    for path in logs:
        with open(path) as f:
            for line in f:
                end_ms, clat_ns = line.split(",")[:2]
                writes.append((int(end_ms) / 1000, int(clat_ns) / 1e9))
    if not writes:
        raise RuntimeError(f"fio logged no writes in {logs}")
    for r in rows:
        t0, t1 = r["epoch"]
        # fio logs in whole ms: widen the request by 1 ms each side.
        hit = [lat for end, lat in writes if end >= t0 - 0.001 and end - lat <= t1 + 0.001]
        r["writes_in_flight"] = len(hit)
        r["slowest_write_s"] = max(hit, default=0.0)
        r["median_write_s"] = med(hit) if hit else 0.0


def snapshot_chains(d, args, vmname, disks, cond, res):
    """SNAP_REPS chains of max(DEPTHS) snapshots of all DISKS; one row in RES per snapshot."""
    for rep in range(args.snap_reps):
        chain = []
        for depth in range(1, max(args.depths) + 1):
            prep_walls, prepared = [], []
            for disk in disks:
                p, wall = d.api("POST", f"/v1/vvols/{disk}/prepare-snapshot", {"kind": "ReadOnly"})
                if p["base"] != disk:
                    raise RuntimeError(f"prepare of {disk} answered {p}")
                prep_walls.append(wall)
                prepared.append(p["snapshot_id"])
            body = {"snapshots": [{"snapshot_id": s, "metadata": {"VMW_VmID": vmname,
                                                                  "VMW_SnapshotLevel": str(depth)}}
                                  for s in prepared], "timeout_ms": 10000}
            t_start = time.time()
            commit, wall = d.api("POST", "/v1/vvols/snapshot", body)
            t_end = time.time()
            snaps = items_ok(commit["results"], prepared, "snapshot commit")
            for snap, disk in zip(snaps, disks):
                if snap["parent"] != disk or snap["snapshot"]["base"] != disk:
                    raise RuntimeError(f"snapshot vVol {snap['id']} is not of {disk}: {snap}")
            chain.append(prepared)
            res.append({"disks": len(disks), "cond": cond, "depth": depth, "rep": rep,
                        "prepare_sum": sum(prep_walls), "commit_wall": wall,
                        "daemon_prepare_us": commit["prepare_us"], "window_us": commit["commit_window_us"],
                        "epoch": (t_start, t_end)})
            log(f"{len(disks):2} disks {cond:8} depth {depth} rep {rep}: prepare {ms(sum(prep_walls))}, "
                f"commit {ms(wall)}, window {commit['commit_window_us']} us")
            time.sleep(args.snap_gap)
        # Back to depth 0 for the next chain (untimed): newest snapshots first.
        for prepared in reversed(chain):
            for snap in prepared:
                d.api("DELETE", f"/v1/vvols/{snap}")


def part_snapshots(tmp, args):
    log("== part 2: snapshots, idle and under moderate I/O")
    d = Daemon(tmp, "snapshots", args.capacity)
    res, io = [], {}
    try:
        d.add_host()
        disk_bytes = args.disk_gib * GiB
        fill_bytes = disk_bytes * args.fill_pct // 100 // MiB * MiB
        seed = 3000
        for ndisks in args.disk_counts:
            vmname = f"snapvm{ndisks}"
            config, _ = d.create_vvol("Config", args.config_mib, {"VMW_VmID": vmname, "VMW_VVolType": "Config"})
            disks = [d.create_vvol("Data", args.disk_gib * 1024, {"VMW_VmID": vmname, "VMW_VVolType": "Data",
                                                                  "VMW_VVolName": f"{vmname}_{k}.vmdk"})[0]
                     for k in range(ndisks)]
            t0 = time.perf_counter()
            for disk in disks:
                seed += 1
                fill(d.uri(export_of(disk)), fill_bytes, seed)
            settle = d.wait_idle()
            written = [d.api("GET", f"/v1/vvols/{x}/space")[0]["written_bytes"] for x in disks]
            if min(written) < fill_bytes:
                raise RuntimeError(f"disks hold {min(written)} bytes after writing {fill_bytes}")
            log(f"{ndisks} disks: {fill_bytes / MiB:.0f} MiB written to each in {time.perf_counter() - t0:.1f} s "
                f"(+{settle:.1f} s settling)")
            ans, _ = d.host_call("POST", "/v1/vvols/bind", {"host": HOST, "ids": [config, *disks]})
            items_ok(ans, [config, *disks], "bind")
            # Idle first: the commit with no write in flight.
            snapshot_chains(d, args, vmname, disks, "idle", res)
            d.wait_idle()
            # Moderate I/O on every disk: 4k random overwrites of the written part, at a fixed rate.
            seed += 1
            lat_prefix = os.path.join(d.dir, f"lat{ndisks}")

            def io_cmd(runtime, lat_log=False):
                # Global options first: what follows a --name is that job's alone.
                cmd = ["fio", "--ioengine=nbd", "--output-format=json", "--thread", "--rw=randwrite", "--bs=4k", "--iodepth=1",
                       f"--rate_iops={args.io_iops}", "--time_based", f"--runtime={runtime}", f"--size={fill_bytes}",
                       "--refill_buffers", f"--randseed={seed}", "--percentile_list=50:99:99.9"]
                if lat_log:
                    # Every write's completion (Unix ms) and latency (ns), to find those in flight during a commit.
                    cmd += [f"--write_lat_log={lat_prefix}", "--log_unix_epoch=1"]
                for k, disk in enumerate(disks):
                    cmd += [f"--name=io{k}", f"--uri={d.uri(export_of(disk))}"]
                return cmd
            # The same I/O with no snapshot taken, for its latency alone.
            base = io_cmd(args.io_baseline_s)
            io[(ndisks, "no snapshots")] = io_stats(fio_jobs(run(base), base))
            io_run = io_cmd(3600, lat_log=True)
            first_row = len(res)
            proc = subprocess.Popen(io_run, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            try:
                time.sleep(2)
                if proc.poll() is not None:
                    raise RuntimeError(f"fio ended early: {proc.stderr.read()[-2000:]}")
                snapshot_chains(d, args, vmname, disks, "under I/O", res)
            finally:
                if proc.poll() is None:
                    proc.send_signal(signal.SIGINT)  # fio stops its jobs and prints their results
                out, err = proc.communicate(timeout=120)
            io[(ndisks, "snapshots")] = io_stats(fio_jobs(out, io_run, err))
            in_flight_during_commits(res[first_row:], [f"{lat_prefix}_clat.{k + 1}.log" for k in range(ndisks)])
            for k in ("no snapshots", "snapshots"):
                st = io[(ndisks, k)]
                log(f"{ndisks:2} disks: background I/O with {k:12}: {st['iops']:.0f} IOPS, p50 {st['p50_us']:.0f} us, "
                    f"p99 {st['p99_us']:.0f} us, p99.9 {st['p999_us']:.0f} us, max {st['max_us']:.0f} us")
            ans, _ = d.host_call("POST", "/v1/vvols/unbind", {"host": HOST, "ids": [config, *disks]})
            items_ok(ans, [config, *disks], "unbind")
    finally:
        d.stop()
        shutil.rmtree(d.dir, ignore_errors=True)
    return {"rows": res, "io": io}


# ---------------------------------------------------------------------------- part 3
def part_browser(tmp, args):
    log("== part 3: datastore browser")
    d = Daemon(tmp, "browser", args.capacity)
    rows = []
    try:
        made = []

        def make_vm(i):
            vm = f"{i:08x}-7b3a-4c1e-9f00-{i:012x}"
            meta = {"VMW_VmID": vm, "VMW_VVolType": "Config", "VMW_VVolName": f"browse-vm-{i:04}",
                    "VMW_VVolNamespace": f"/vmfs/volumes/vvol:default/browse-vm-{i:04}",
                    "VMW_GosType": "otherLinux64Guest", "VMW_ContainerId": "default"}
            config, _ = d.create_vvol("Config", args.config_mib, meta)
            d.create_vvol("Data", args.data_gib * 1024, {"VMW_VmID": vm, "VMW_VVolType": "Data",
                                                         "VMW_VVolName": f"browse-vm-{i:04}.vmdk"})
            return config

        conn = Conn(d)
        for n in sorted(args.browse_counts):
            made += pool_map(args.concurrency, make_vm, range(len(made), n))
            d.wait_idle()
            expect = set(made)
            r = {"n": n, "query": [], "info": [], "decode": [], "calls": 0}
            for _ in range(args.browse_reps):
                q, wq, dq = conn.call("POST", "/v1/vvols/query",
                                      {"container": "default", "metadata": {"VMW_VVolType": "Config"}})
                ids = q["ids"]
                if set(ids) != expect or len(ids) != n:
                    raise RuntimeError(f"query answered {len(ids)} Config vVols, {n} exist")
                wi = di = 0.0
                calls = 1
                for at in range(0, len(ids), MAX_BATCH):
                    batch = ids[at:at + MAX_BATCH]
                    info, w, dd = conn.call("POST", "/v1/vvols/info", {"ids": batch})
                    calls += 1
                    wi, di = wi + w, di + dd
                    for rec in items_ok(info, batch, "info"):
                        if rec["metadata"].get("VMW_VVolType") != "Config" or "VMW_VVolName" not in rec["metadata"]:
                            raise RuntimeError(f"info answered {rec}")
                r["query"].append(wq)
                r["info"].append(wi)
                r["decode"].append(dq + di)
                r["calls"] = calls
            r["total"] = [a + b for a, b in zip(r["query"], r["info"])]
            r["vvols"] = 2 * n
            rows.append(r)
            log(f"{n:5} Config vVols ({2 * n} in the container): query {ms(med(r['query']))}, info "
                f"{ms(med(r['info']))} ({r['calls'] - 1} calls), both {ms(med(r['total']))}; client JSON decode "
                f"{ms(med(r['decode']))}")
        conn.close()
    finally:
        d.stop()
        shutil.rmtree(d.dir, ignore_errors=True)
    return rows


# ---------------------------------------------------------------------------- part 4
NBD_SPARSE = r"""
import json, os, sys, nbd
spec = json.load(sys.stdin)
h = nbd.NBD()
h.connect_uri(spec["uri"])
for off in spec["offsets"]:
    h.pwrite(os.urandom(spec["length"]), off)
h.flush()
h.shutdown()
"""


def expected_bitmap(runs, offset, length, chunk):
    """The bitmap the array must answer: a bit per chunk touched by a written run, MSB first."""
    nchunks = -(-length // chunk)
    bits = bytearray(-(-nchunks // 8))
    end = offset + length
    for a, n in runs:
        lo, hi = max(a, offset), min(a + n, end)
        if lo >= hi:
            continue
        c, e = (lo - offset) // chunk, -(-(hi - offset) // chunk)
        while c < e and c % 8:
            bits[c // 8] |= 0x80 >> (c % 8)
            c += 1
        whole = (e - c) // 8
        if whole:
            bits[c // 8:c // 8 + whole] = b"\xff" * whole
            c += whole * 8
        while c < e:
            bits[c // 8] |= 0x80 >> (c % 8)
            c += 1
    return bytes(bits)


def expected_next(runs, end, size):
    """The next-allocated hint after a segment ending at END: the first written byte at or after it."""
    if end >= size:
        return None
    starts = [max(a, end) for a, n in runs if a + n > end]
    return min(starts) if starts else None


def scan(conn, vvol, runs, size, mode, seg, chunk):
    """One scan of VVOL: 'hint' (SEG segments, skipping to the segment of the next-allocated hint),
    'nohint' (every SEG segment) or 'full' (calls of the largest segment whose bitmap fits 4 MiB).
    Checks every bitmap and hint; answers (calls, seconds in round trips, client decode seconds,
    bytes of bitmap received)."""
    if mode == "full":
        seg = MAX_BITMAP_BYTES * 8 * chunk
    at, calls, wall, dec, got = 0, 0, 0.0, 0.0, 0
    while at < size:
        length = min(seg, size - at)
        ans, w, dd = conn.call("POST", f"/v1/vvols/{vvol}/allocated-bitmap",
                               {"offset_bytes": at, "length_bytes": length, "chunk_bytes": chunk})
        t0 = time.perf_counter()
        bitmap = base64.b64decode(ans["bitmap"])
        dec += dd + time.perf_counter() - t0
        calls, wall, got = calls + 1, wall + w, got + len(bitmap)
        if bitmap != expected_bitmap(runs, at, length, chunk):
            raise RuntimeError(f"allocated-bitmap of {vvol} at {at}+{length} chunk {chunk}: the bitmap differs "
                               f"from what was written ({bin(int.from_bytes(bitmap, 'big')).count('1')} bits set, "
                               f"expected {bin(int.from_bytes(expected_bitmap(runs, at, length, chunk), 'big')).count('1')})")
        want = expected_next(runs, at + length, size)
        nxt = ans["next_allocated_offset_bytes"]
        if nxt != want:
            raise RuntimeError(f"allocated-bitmap of {vvol} at {at}+{length}: next_allocated_offset_bytes {nxt}, "
                               f"expected {want}")
        if mode == "hint":
            if nxt is None:
                break
            at = max(at + length, nxt // seg * seg)
        else:
            at += length
    return calls, wall, dec, got


def part_bitmap(tmp, args):
    log("== part 4: allocated bitmaps")
    d = Daemon(tmp, "bitmap", args.capacity)
    size = args.bitmap_gib * GiB
    rows = []
    try:
        layouts = {}
        vvols = {}
        for kind in ("empty", "sparse", "dense"):
            vvols[kind], _ = d.create_vvol("Data", args.bitmap_gib * 1024, {"VMW_VmID": "bitmapvm",
                                                                            "VMW_VVolType": "Data",
                                                                            "VMW_VVolName": f"{kind}.vmdk"})
        layouts["empty"] = []
        every, length = args.sparse_every_mib * MiB, args.sparse_kib * KiB
        offsets = list(range(0, size - length + 1, every))
        layouts["sparse"] = [(o, length) for o in offsets]
        t0 = time.perf_counter()
        run(["/usr/bin/python3", "-c", NBD_SPARSE], env=SYS_ENV,
            stdin=json.dumps({"uri": d.uri(export_of(vvols["sparse"])), "offsets": offsets, "length": length}))
        log(f"sparse: {len(offsets)} writes of {args.sparse_kib} KiB every {args.sparse_every_mib} MiB in "
            f"{time.perf_counter() - t0:.1f} s")
        t0 = time.perf_counter()
        dense = args.dense_gib * GiB
        fill(d.uri(export_of(vvols["dense"])), dense, 4004)
        layouts["dense"] = [(0, dense)]
        log(f"dense: first {args.dense_gib} GiB written in {time.perf_counter() - t0:.1f} s")
        d.wait_idle()
        for kind, runs in layouts.items():
            sp, _ = d.api("GET", f"/v1/vvols/{vvols[kind]}/space")
            if sp["written_bytes"] != sum(n for _, n in runs):
                raise RuntimeError(f"{kind}: written_bytes {sp['written_bytes']}, wrote {sum(n for _, n in runs)}")
        conn = Conn(d)
        seg = args.segment_gib * GiB
        # What a scan with the hint must cost: segment 0, then each other segment holding data.
        hint_calls = {}
        for kind, runs in layouts.items():
            held = {s for a, n in runs for s in range(a // seg, (a + n - 1) // seg + 1)}
            hint_calls[kind] = len(held | {0})
        scans = [("hint", seg, args.svm_chunk_kib * KiB), ("nohint", seg, args.svm_chunk_kib * KiB)]
        scans += [("full", None, c * KiB) for c in args.full_chunk_kib]
        for kind in ("empty", "sparse", "dense"):
            for mode, sg, chunk in scans:
                walls, decs = [], []
                for _ in range(args.scan_reps):
                    calls, wall, dec, got = scan(conn, vvols[kind], layouts[kind], size, mode, sg, chunk)
                    walls.append(wall)
                    decs.append(dec)
                r = {"kind": kind, "mode": mode, "seg": sg if mode != "full" else min(size, MAX_BITMAP_BYTES * 8 * chunk),
                     "chunk": chunk, "calls": calls, "walls": walls, "decode": decs, "bitmap_bytes": got,
                     "extents": len(layouts[kind]), "hint_calls": hint_calls[kind]}
                rows.append(r)
                log(f"{kind:6} {mode:6} chunk {chunk // KiB:3} KiB: {calls:4} calls, {ms(med(walls))} "
                    f"(bitmaps {got / KiB:.0f} KiB; client decode + check {ms(med(decs))})")
        conn.close()
    finally:
        d.stop()
        shutil.rmtree(d.dir, ignore_errors=True)
    return rows


# ---------------------------------------------------------------------------- report
def source_rev():
    """What the binary was built from: $LACUNA_REV if the caller knows, else the work tree's HEAD."""
    if os.environ.get("LACUNA_REV"):
        return os.environ["LACUNA_REV"]
    try:
        rev = run(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"]).strip()
        dirty = run(["git", "-C", ROOT, "status", "--porcelain", "--untracked-files=no", "--", "crates"]).strip()
        return rev + ("-dirty" if dirty else "")
    except RuntimeError:
        return "?"


def mark(ok):
    return "—" if ok is None else "**met**" if ok else "**not met**"


def report(args, argv, rev, power, snaps, browser, bitmaps, elapsed):
    L = []
    L.append(f"\n## {datetime.date.today().isoformat()} — `bench/vvols.py {' '.join(argv)}`\n")
    L.append(f"Machine: {os.cpu_count()} cores, kernel {os.uname().release}, "
             f"{os.sysconf('SC_PAGE_SIZE') * os.sysconf('SC_PHYS_PAGES') / GiB:.0f} GiB RAM; the client (this "
             f"script's threads, fio, libnbd) and `lacuna serve` share the cores. Lacuna built from `{rev}`. Each "
             f"part on a fresh data directory and daemon (`--capacity {args.capacity}`, thin: nothing preallocated), "
             f"REST calls on kept-alive HTTP/1.1 connections to 127.0.0.1 (one per client thread). Times are the "
             f"client's round trips (request sent to answer read), so they include HTTP and JSON on both sides but "
             f"not ESXi's own work: the seed's figures are ESXi + VASA provider + array. Run time "
             f"{elapsed / 60:.1f} min.\n")
    targets = []
    if power:
        ph = {p["name"]: p for p in power["phases"]}
        L.append(f"### Power cycles: {args.vms} VMs, {args.concurrency} at a time on one host\n")
        L.append(f"Each VM: a Config vVol ({args.config_mib} MiB), 2 Data vVols ({args.data_gib} GiB), a Swap vVol "
                 f"({args.swap_mib} MiB), all thin. {args.vms} VMs queued, {args.concurrency} client threads (at most "
                 f"{max(p['max_in_flight'] for p in power['phases'])} of the host's bind/unbind requests were in "
                 f"flight; none was answered Busy). Between each power-on and power-off the guest writes "
                 f"{args.swap_write_mib} MiB of random data into its Swap vVol over NBD (untimed); after each "
                 f"power-off every Swap vVol is still there, bound nowhere and holds 0 bytes. \"Old pattern\" is "
                 f"vSphere 7.0 U3's sequence on the same array: a Swap vVol created at each power-on and deleted at "
                 f"power-off, each vVol bound and unbound by a call of its own. Per VM: from its first call to its "
                 f"last answer (not the time queued behind the other VMs).\n")
        L.append("| operation | calls per VM | per-VM median | per-VM p99 | total wall |")
        L.append("|---|---|---|---|---|")
        what = {"first power-on": "first power-on (create Config, 2 Data, Swap; 1 batch bind)",
                "first power-off": "first power-off (1 batch unbind; Swap emptied, kept)",
                "second power-on": "second power-on (1 batch bind; Swap kept)",
                "second power-off": "second power-off (1 batch unbind)",
                "old pattern power-on": "old pattern power-on (create Swap; 4 single binds)",
                "old pattern power-off": "old pattern power-off (4 single unbinds; delete Swap)"}
        for p in power["phases"]:
            L.append(f"| {what[p['name']]} | {p['calls']} | {ms(med(p['times']))} | {ms(pct(p['times'], 99))} | "
                     f"{p['wall'] * 1000:.0f} ms |")
        on2 = med(ph["old pattern power-on"]["times"]) / med(ph["second power-on"]["times"])
        off = med(ph["old pattern power-off"]["times"]) / med(ph["second power-off"]["times"])
        on2w = ph["old pattern power-on"]["wall"] / ph["second power-on"]["wall"]
        offw = ph["old pattern power-off"]["wall"] / ph["second power-off"]["wall"]
        L.append("")
        L.append(f"Gains of the new pattern over the old on this array (per-VM medians; total walls in brackets): "
                 f"second power-on **{on2:.1f}×** ({on2w:.1f}×), power-off **{off:.1f}×** ({offw:.1f}×). The seed "
                 f"reports 2× and 8× for ESXi 7.0 P06 over 7.0 U3 end to end (ESXi's own bookkeeping included, "
                 f"which this cannot see); ours is only the array's share of that change.\n")
        targets.append(("second power-on ≥ 2× faster than the old pattern (seed: 2×; array side only)",
                        f"{on2:.1f}× per VM, {on2w:.1f}× total wall", on2 >= 2))
        targets.append(("power-off ≥ 8× faster than the old pattern (seed: 8×; array side only)",
                        f"{off:.1f}× per VM, {offw:.1f}× total wall", off >= 8))
        targets.append(("at most 16 of the host's requests in flight, never Busy; Swap vVols kept and emptied at "
                        "power-off", f"{max(p['max_in_flight'] for p in power['phases'])} in flight at most; swaps "
                        f"hold {max(power['swap_checks'].values())} bytes after power-off", True))
    if snaps:
        rows, io = snaps["rows"], snaps["io"]
        L.append(f"### Snapshots: VMs of {' and '.join(map(str, args.disk_counts))} disks, depth "
                 f"{', '.join(map(str, args.depths))}\n")
        L.append(f"Data vVols of {args.disk_gib} GiB, {args.fill_pct}% written first (fio 1 MiB, unique random "
                 f"data), bound to the host. Each snapshot: one `prepare-snapshot` call per disk, in turn "
                 f"(\"prepare\": the sum of their round trips), then one `POST /v1/vvols/snapshot` of all the VM's "
                 f"disks (\"commit request\": its round trip; \"commit window\": its `commit_window_us`, how long "
                 f"writes to the disks were held — the stun), {args.snap_gap} s apart. A chain of "
                 f"{max(args.depths)} snapshots (depth 1 to {max(args.depths)}; the table shows depths "
                 f"{', '.join(map(str, args.depths))}), {args.snap_reps} chains, the snapshot vVols deleted between "
                 f"them; median (max) over the chains. \"idle\": nothing else running; \"under I/O\" (the seed's "
                 f"condition, and the target's): fio 4k randwrite QD1 at {args.io_iops} IOPS on every disk over its "
                 f"written part, all the while.\n")
        L.append("| disks | depth | condition | prepare (sum) | commit request | daemon checks (`prepare_us`) | "
                 "commit window | slowest background write in flight during the commit | latency added to "
                 "the writes in flight |")
        L.append("|---|---|---|---|---|---|---|---|---|")
        worst16, seen16, added16 = [], [], []
        for nd in args.disk_counts:
            for cond in ("idle", "under I/O"):
                for depth in args.depths:
                    rs = [r for r in rows if r["depth"] == depth and r["disks"] == nd and r["cond"] == cond]
                    win = [r["window_us"] for r in rs]
                    seen = [r["slowest_write_s"] for r in rs if "slowest_write_s" in r]
                    # The writes' own latency with no snapshot at all, taken off theirs during the commit.
                    base_s = io[(nd, "no snapshots")]["p50_us"] / 1e6 if (nd, "no snapshots") in io else 0.0
                    added = [max(0.0, r["median_write_s"] - base_s) for r in rs if "median_write_s" in r]
                    if nd == 16 and cond == "under I/O":
                        worst16.append((med(win), max(win)))
                        seen16.append((med(seen), max(seen)))
                        added16.append((med(added), max(added)))
                    seentxt = (f"{ms(med(seen))} ({ms(max(seen))}; {med([r['writes_in_flight'] for r in rs]):.0f} "
                               f"writes)" if seen else "—")
                    addedtxt = f"{ms(med(added))} ({ms(max(added))})" if added else "—"
                    L.append(f"| {nd} | {depth} | {cond} | {ms(med([r['prepare_sum'] for r in rs]))} "
                             f"({ms(max(r['prepare_sum'] for r in rs))}) | {ms(med([r['commit_wall'] for r in rs]))} "
                             f"({ms(max(r['commit_wall'] for r in rs))}) | "
                             f"{med([r['daemon_prepare_us'] for r in rs]):.0f} µs | **{med(win):.0f} µs** "
                             f"({max(win)} µs) | {seentxt} | {addedtxt} |")
        L.append("")
        L.append("\"Slowest background write in flight\": from fio's per-write log (completion time, latency), the "
                 "longest latency of the writes that were in flight at some point of the commit request (median "
                 "over the chains, max, and how many writes that was): how long the host's writes were actually "
                 "held, to compare with the daemon's `commit_window_us`. It includes the writes' own latency: "
                 "the slowest of several writes is near their p99 whether or not anything holds them. \"Latency "
                 "added\": the median latency of the writes in flight during the commit request less the same "
                 "I/O's median with no snapshot (below): how much longer the commit made them take (median over "
                 "the chains, max).\n")
        L.append(f"The background I/O (all disks together; latency: fio's completion latency, p99 the median of "
                 f"the disks', p99.9 and max the worst disk's), alone for {args.io_baseline_s} s and while the "
                 f"snapshots were taken:\n")
        L.append("| disks | while | IOPS | p50 | p99 | p99.9 | max |")
        L.append("|---|---|---|---|---|---|---|")
        for nd in args.disk_counts:
            for k in ("no snapshots", "snapshots"):
                st = io[(nd, k)]
                L.append(f"| {nd} | {k} | {st['iops']:.0f} | {st['p50_us']:.0f} µs | {st['p99_us']:.0f} µs | "
                         f"{st['p999_us']:.0f} µs | {st['max_us'] / 1000:.1f} ms |")
        L.append("")
        if worst16:
            wmed, wmax = max(m for m, _ in worst16), max(x for _, x in worst16)
            idle16 = [r["window_us"] for r in rows if r["disks"] == 16 and r["cond"] == "idle"]
            targets.append(("16-disk snapshot under moderate I/O: commit window < 1 ms",
                            f"median up to {wmed:.0f} µs (by depth), max {wmax} µs; idle: median "
                            f"{med(idle16):.0f} µs, max {max(idle16)} µs", wmed < 1000))
            smed, smax = max(m for m, _ in seen16), max(x for _, x in seen16)
            amed, amax = max(m for m, _ in added16), max(x for _, x in added16)
            targets.append(("16-disk snapshot under moderate I/O: the host's writes held < 1 ms (latency the commit "
                            "added to the writes in flight)", f"median up to {ms(amed)} (by depth), max {ms(amax)}; "
                            f"slowest write in flight median up to {ms(smed)}, max {ms(smax)}", amed < 0.001))
        cw = max(r["commit_wall"] for r in rows)
        targets.append(("whole commit request < 1 s (the seed: sub-second stun)", f"max {ms(cw)}", cw < 1))
    if browser:
        L.append("### Datastore browser: queryVirtualVolume + queryVirtualVolumeInfo of the Config vVols\n")
        L.append(f"Each VM a Config vVol (6 metadata pairs, ESXi's keys) and a Data vVol, so the query filters half "
                 f"of the container. A browse: `POST /v1/vvols/query` `{{\"container\":\"default\",\"metadata\":"
                 f"{{\"VMW_VVolType\":\"Config\"}}}}`, then `POST /v1/vvols/info` of every id (1024 a call), each "
                 f"answer checked. Median of {args.browse_reps} browses on one kept-alive connection. \"client "
                 f"decode\" is this script's JSON parsing, shown apart and not counted. Target: under 10 ms at 1,024 "
                 f"VMs and flat in the count (counted flat if 1,024 VMs take ≤ 2× the smallest count's time). ESXi "
                 f"7.0 P06 caches the metadata, so after the first browse it sends the query only: the \"query "
                 f"only\" column.\n")
        L.append("| Config vVols | vVols in the container | calls | query only | info | browse (both) | per VM | "
                 "client decode |")
        L.append("|---|---|---|---|---|---|---|---|")
        for r in browser:
            L.append(f"| {r['n']} | {r['vvols']} | {r['calls']} | {ms(med(r['query']))} | {ms(med(r['info']))} | "
                     f"**{ms(med(r['total']))}** | {med(r['total']) / r['n'] * 1e6:.1f} µs | {ms(med(r['decode']))} |")
        L.append("")
        big = next((r for r in browser if r["n"] == 1024), browser[-1])
        small = browser[0]
        targets.append((f"datastore browse of {big['n']} VMs < 10 ms (seed: a few ms, from ESXi's cache)",
                        f"{ms(med(big['total']))} (query {ms(med(big['query']))} + info {ms(med(big['info']))})",
                        med(big["total"]) < 0.010))
        ratio = med(big["total"]) / med(small["total"])
        qratio = med(big["query"]) / med(small["query"])
        targets.append((f"browse flat in the count ({big['n']} VMs ≤ 2× {small['n']} VMs)",
                        f"{ratio:.1f}× (query only: {qratio:.1f}×)", ratio <= 2))
    if bitmaps:
        L.append(f"### allocatedBitmapVirtualVolume scans of a {args.bitmap_gib} GiB thin vVol\n")
        sp = args.sparse_every_mib
        L.append(f"Three thin vVols of {args.bitmap_gib} GiB: empty; sparse, {args.sparse_kib} KiB of random data "
                 f"every {sp} MiB ({args.bitmap_gib * 1024 // sp} extents, written with libnbd); dense, the first "
                 f"{args.dense_gib} GiB written (fio, unique data). Storage vMotion: {args.segment_gib} GiB "
                 f"segments, {args.svm_chunk_kib} KiB chunks; \"with hint\" jumps to the {args.segment_gib} GiB "
                 f"segment holding `next_allocated_offset_bytes` and stops when it is null, \"without\" asks for "
                 f"every segment. Full scan: each call the largest segment whose bitmap fits 4 MiB at that chunk "
                 f"(4 KiB is the array's grain; {max(args.full_chunk_kib)} KiB the smallest chunk that covers "
                 f"{args.bitmap_gib} GiB in one call). Every bitmap and hint is checked against what was written. "
                 f"Time: sum of the calls' round trips (the JSON answer carries the bitmap in hex, twice its size); "
                 f"median of {args.scan_reps}; the client's hex decoding and checking not counted.\n")
        L.append("| vVol | scan | chunk | calls | bitmap received | time | per call |")
        L.append("|---|---|---|---|---|---|---|")
        label = {"hint": f"sVMotion {args.segment_gib} GiB segments, with hint",
                 "nohint": f"sVMotion {args.segment_gib} GiB segments, without hint", "full": "full scan"}
        for r in bitmaps:
            t = med(r["walls"])
            L.append(f"| {r['kind']} | {label[r['mode']]} | {r['chunk'] // KiB} KiB | {r['calls']} | "
                     f"{r['bitmap_bytes'] / KiB:,.0f} KiB | **{ms(t)}** | {t / r['calls'] * 1000:.3f} ms |")
        L.append("")
        by = {(r["kind"], r["mode"], r["chunk"]): r for r in bitmaps}
        svm = args.svm_chunk_kib * KiB
        hs, ns = by[("sparse", "hint", svm)], by[("sparse", "nohint", svm)]
        he, hd = by[("empty", "hint", svm)], by[("dense", "hint", svm)]
        L.append(f"Hint gain (without ÷ with): sparse {med(ns['walls']) / med(hs['walls']):.2f}×, dense "
                 f"{med(by[('dense', 'nohint', svm)]['walls']) / med(hd['walls']):.1f}×, empty "
                 f"{med(by[('empty', 'nohint', svm)]['walls']) / med(he['walls']):.0f}× (seed, ESXi end to end: 3× "
                 f"for a sparse disk, 35% for one dense at the start, 15% for one with data every 512 MB — where "
                 f"every segment holds data and the hint skips nothing)."
                 + (f" For the sparse vVol both sVMotion scans send the same {hs['calls']} requests (every segment "
                    f"holds data), so their difference is run-to-run spread." if hs["calls"] == ns["calls"] else "")
                 + "\n")
        targets.append((f"sparse {args.bitmap_gib} GiB scanned < 100 ms: sVMotion with hint",
                        f"{ms(med(hs['walls']))} ({hs['calls']} calls)", med(hs["walls"]) < 0.100))
        for c in args.full_chunk_kib:
            fs = by[("sparse", "full", c * KiB)]
            targets.append((f"sparse {args.bitmap_gib} GiB scanned < 100 ms: full scan at {c} KiB",
                            f"{ms(med(fs['walls']))} ({fs['calls']} calls, {fs['bitmap_bytes'] / MiB:.1f} MiB of "
                            f"bitmap)", med(fs["walls"]) < 0.100))
        prop = all(r["calls"] == r["hint_calls"] for r in (he, hd, hs))
        targets.append(("cost follows the allocated extents (with the hint: one call per segment holding data, "
                        "and segment 0)",
                        f"empty {he['calls']} call, {ms(med(he['walls']))}; dense {args.dense_gib} GiB "
                        f"{hd['calls']} calls, {ms(med(hd['walls']))}; sparse {hs['calls']} calls, "
                        f"{ms(med(hs['walls']))}", prop))
    L.append("### Targets\n")
    L.append("| target | measured | met |")
    L.append("|---|---|---|")
    for name, measured, ok in targets:
        L.append(f"| {name} | {measured} | {mark(ok)} |")
    return "\n".join(L) + "\n"


def int_list(text):
    return [int(x) for x in text.split(",") if x]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--vms", type=int, default=120, help="part 1: VMs powered on and off together")
    ap.add_argument("--concurrency", type=int, default=16, help="parts 1, 3: requests in flight (ESXi: 16)")
    ap.add_argument("--config-mib", type=int, default=4096, help="Config vVol size")
    ap.add_argument("--data-gib", type=int, default=40, help="parts 1, 3: Data vVol size (thin, not written)")
    ap.add_argument("--swap-mib", type=int, default=4096, help="part 1: Swap vVol size")
    ap.add_argument("--swap-write-mib", type=int, default=4, help="part 1: MiB each guest writes to its swap")
    ap.add_argument("--disk-gib", type=int, default=2, help="part 2: Data vVol size")
    ap.add_argument("--fill-pct", type=int, default=40, help="part 2: percent of each disk written first")
    ap.add_argument("--disk-counts", type=int_list, default=[4, 16], help="part 2: disks per VM")
    ap.add_argument("--depths", type=int_list, default=[1, 2, 4], help="part 2: snapshot depths reported")
    ap.add_argument("--snap-reps", type=int, default=5, help="part 2: snapshot chains per VM")
    ap.add_argument("--snap-gap", type=float, default=1.0, help="part 2: seconds between snapshots")
    ap.add_argument("--io-iops", type=int, default=100, help="part 2: background 4k writes a second per disk")
    ap.add_argument("--io-baseline-s", type=int, default=10, help="part 2: seconds of the I/O with no snapshots")
    ap.add_argument("--browse-counts", type=int_list, default=[16, 64, 256, 1024], help="part 3: VMs")
    ap.add_argument("--browse-reps", type=int, default=9, help="part 3: browses per count")
    ap.add_argument("--bitmap-gib", type=int, default=500, help="part 4: vVol size")
    ap.add_argument("--dense-gib", type=int, default=8, help="part 4: GiB written at the start of the dense vVol")
    ap.add_argument("--sparse-every-mib", type=int, default=512, help="part 4: sparse vVol's write spacing")
    ap.add_argument("--sparse-kib", type=int, default=64, help="part 4: sparse vVol's write size")
    ap.add_argument("--segment-gib", type=int, default=2, help="part 4: storage vMotion segment")
    ap.add_argument("--svm-chunk-kib", type=int, default=64, help="part 4: storage vMotion chunk")
    ap.add_argument("--full-chunk-kib", type=int_list, default=[4, 16], help="part 4: full scan chunks")
    ap.add_argument("--scan-reps", type=int, default=5, help="part 4: repetitions of each scan")
    ap.add_argument("--capacity", default="2T", help="lacuna serve --capacity (a limit; nothing is preallocated)")
    ap.add_argument("--parts", type=int_list, default=[1, 2, 3, 4])
    ap.add_argument("--no-record", action="store_true")
    argv = sys.argv[1:]
    args = ap.parse_args()
    if not os.path.exists(LACUNA):
        sys.exit(f"{LACUNA} missing: run cargo build --release -p lacuna first")
    for tool in ("fio", "nbdsh"):
        if not shutil.which(tool, path=SYS_ENV["PATH"]):
            sys.exit(f"{tool} missing")
    if args.concurrency > 16:
        sys.exit("--concurrency over 16: the array answers a host's 17th request in flight Busy")
    if max(args.browse_counts) * 2 + 16 > 100_000:
        sys.exit("--browse-counts: the array keeps at most 100,000 vVols")

    def on_signal(signum, _frame):
        raise SystemExit(f"interrupted by signal {signum}")

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGHUP, on_signal)
    tmp = tempfile.mkdtemp(prefix="lacuna-vvols-", dir=os.environ.get("BENCH_DIR", "/var/tmp"))
    started = time.time()
    rev = source_rev()
    try:
        power = part_power(tmp, args) if 1 in args.parts else None
        snaps = part_snapshots(tmp, args) if 2 in args.parts else None
        browser = part_browser(tmp, args) if 3 in args.parts else None
        bitmaps = part_bitmap(tmp, args) if 4 in args.parts else None
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    text = report(args, argv, rev, power, snaps, browser, bitmaps, time.time() - started)
    print(text)
    if not args.no_record:
        with open(os.path.join(ROOT, "bench", "RESULTS.md"), "a") as f:
            f.write(text)


if __name__ == "__main__":
    main()
