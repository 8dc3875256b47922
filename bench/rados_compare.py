#!/usr/bin/python3
"""Lacuna on Ceph RADOS beside Lacuna on its data directory and beside RBD itself,
on one one-node cluster (scripts/ceph-cluster.sh: one memstore OSD on 127.0.0.1),
over NBD with fio, side by side in one run (issue 50, docs/SCALE-OUT.md).

usage: bench/rados_compare.py [--runtime 8] [--size-gib 1] [--rounds 2] [--no-record]

Targets: "lacuna-rados" (`lacuna serve --store rados`), "lacuna-local" (`lacuna
serve` on a data directory) and "rbd" (an RBD image of the same pool through
`qemu-nbd` with qemu's rbd driver, `--cache=writeback`: librbd's write-back
cache, qemu's default for RBD). Each round starts every target fresh, prefills it
(1 MiB writes, the fio data of nbd_compare.py), then runs 4 KiB random writes and
reads at QD32 and 1 MiB writes and reads at QD4; then the FLUSH latency (a 4 KiB
write and a FLUSH, 200 times, median and p99 of the FLUSH). Medians over rounds.
Last, the failover time under load: two Lacuna gateways, fio writing through the
owner, the owner SIGKILLed, the time until the standby serves NBD.
Needs: fio, qemu-nbd (qemu-block-extra), ceph (the test command installs them).
"""
import argparse
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import nbd_compare as nc  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
POOL = "lacuna"
JOBS = [("randwrite", "4k", 32), ("randread", "4k", 32), ("write", "1M", 4), ("read", "1M", 4)]


class Cluster:
    def __init__(self, tmp):
        self.dir = os.path.join(tmp, "ceph")
        env = dict(os.environ, MON_PORT=str(nc.free_port()))
        out = subprocess.run(["bash", os.path.join(ROOT, "scripts/ceph-cluster.sh"), "start", self.dir, POOL],
                             check=True, capture_output=True, text=True, env=env)
        self.conf = out.stdout.strip()

    def new_pool(self, name):
        """A pool of one replica (each Lacuna array on RADOS is a pool of its own)."""
        for cmd in (["osd", "pool", "create", name, "8"],
                    ["osd", "pool", "set", name, "size", "1", "--yes-i-really-mean-it"],
                    ["osd", "pool", "application", "enable", name, "lacuna"]):
            subprocess.run(["ceph", "-c", self.conf, *cmd], check=True, capture_output=True)
        return name

    def stop(self):
        subprocess.run(["bash", os.path.join(ROOT, "scripts/ceph-cluster.sh"), "stop", self.dir], check=False)


class LacunaGateway:
    """`lacuna serve`, on the pool (rados) or on a data directory (local)."""

    def __init__(self, tmp, name, size_gib, conf=None, pool=POOL, gateway="gw-a", create=True):
        self.name = name
        self.data = os.path.join(tempfile.mkdtemp(prefix=f"{name}-{gateway}-", dir=tmp), "data")
        self.nbd, self.api = nc.free_port(), nc.free_port()
        store = ["--store", "rados", "--ceph-conf", conf, "--pool", pool, "--gateway-id", gateway,
                 "--lease-s", "3"] if conf else []
        self.proc = subprocess.Popen([
            nc.LACUNA, "serve", "--no-vasa", *store, "--data-dir", self.data, "--capacity", "64G",
            "--nbd-listen", f"127.0.0.1:{self.nbd}", "--api-listen", f"127.0.0.1:{self.api}",
            "--iscsi-listen", f"127.0.0.1:{nc.free_port()}", "--nbd-open-access",
        ], stdout=subprocess.DEVNULL, stderr=open(self.data + ".log", "w"))
        self.uri = f"nbd://127.0.0.1:{self.nbd}/bench"
        if create:
            nc.wait_port(self.nbd)
            nc.wait_port(self.api)
            subprocess.run([nc.LACUNA, "--api", f"http://127.0.0.1:{self.api}", "--data-dir", self.data,
                            "volume", "create", "bench", "--size", f"{size_gib}G"],
                           check=True, capture_output=True)

    def stop(self):
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


class Rbd:
    name = "rbd"

    def __init__(self, tmp, size_gib, conf, image):
        subprocess.run(["rbd", "-c", conf, "create", f"{POOL}/{image}", "--size", f"{size_gib}G"],
                       check=True, capture_output=True)
        self.sock = os.path.join(tmp, f"{image}.sock")
        self.proc = subprocess.Popen([
            "qemu-nbd", "-f", "raw", "--cache=writeback", "-t", "-k", self.sock,
            f"rbd:{POOL}/{image}:conf={conf}",
        ], stdout=subprocess.DEVNULL, stderr=open(os.path.join(tmp, f"{image}.log"), "w"))
        deadline = time.time() + 30
        while not os.path.exists(self.sock) and time.time() < deadline:
            time.sleep(0.05)
        self.uri = f"nbd+unix:///?socket={self.sock}"

    def stop(self):
        self.proc.terminate()
        self.proc.wait(20)


def flush_latency_ms(uri, count=200):
    script = (
        "import nbd, sys, time\n"
        "h = nbd.NBD(); h.connect_uri(sys.argv[1]); out = []\n"
        f"for i in range({count}):\n"
        "    h.pwrite(bytes([i % 251]) * 4096, (i * 7919 % 4096) * 4096)\n"
        "    t = time.perf_counter(); h.flush(); out.append(time.perf_counter() - t)\n"
        "h.shutdown(); print(' '.join(str(x * 1000) for x in out))\n"
    )
    out = subprocess.run(["/usr/bin/python3", "-c", script, uri], check=True, capture_output=True, text=True,
                         env=dict(os.environ, LIBNBD_DEBUG="0")).stdout
    times = sorted(float(x) for x in out.split())
    return statistics.median(times), times[int(len(times) * 0.99) - 1]


def one_round(tmp, cluster, args, round_no):
    results = {}
    targets = [
        lambda: LacunaGateway(tmp, "lacuna-rados", args.size_gib, conf=cluster.conf,
                              pool=cluster.new_pool(f"lacuna-r{round_no}")),
        lambda: LacunaGateway(tmp, "lacuna-local", args.size_gib),
        lambda: Rbd(tmp, args.size_gib, cluster.conf, f"img{round_no}"),
    ]
    for make in targets:
        target = make()
        try:
            nc.prefill(target.uri, args.size_gib)
            for rw, bs, depth in JOBS:
                iops, mib_s = nc.fio(target.uri, rw, bs, depth, args.runtime, args.size_gib)
                results[(target.name, f"{bs} {rw} QD{depth}")] = (iops, mib_s)
                print(f"round {round_no} {target.name:13} {bs} {rw} QD{depth}: {iops:9.0f} IOPS {mib_s:8.1f} MiB/s",
                      flush=True)
            results[(target.name, "flush")] = flush_latency_ms(target.uri)
            print(f"round {round_no} {target.name:13} FLUSH: median {results[(target.name, 'flush')][0]:.2f} ms",
                  flush=True)
        finally:
            target.stop()
    return results


def failover_s(tmp, cluster, size_gib):
    """Two gateways on a pool of their own; fio writes through the
    owner; the owner is SIGKILLed; seconds until the standby's NBD port answers."""
    pool = cluster.new_pool("lacuna-failover")
    owner = LacunaGateway(tmp, "failover", size_gib, conf=cluster.conf, pool=pool, gateway="fo-a")
    standby = LacunaGateway(tmp, "failover", size_gib, conf=cluster.conf, pool=pool, gateway="fo-b",
                            create=False)
    load = subprocess.Popen(["fio", "--name=load", "--ioengine=nbd", f"--uri={owner.uri}", "--rw=randwrite",
                             "--bs=4k", "--iodepth=8", f"--size={size_gib}G", "--runtime=60", "--time_based"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    time.sleep(3)
    owner.proc.kill()
    killed = time.time()
    owner.proc.wait()
    nc.wait_port(standby.nbd, timeout=60)
    took = time.time() - killed
    load.kill()
    load.wait()
    standby.stop()
    return took


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--runtime", type=int, default=8)
    ap.add_argument("--size-gib", type=int, default=1)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--no-record", action="store_true")
    args = ap.parse_args()
    for tool in ("fio", "qemu-nbd", "rbd", "ceph-mon"):
        if shutil.which(tool) is None:
            sys.exit(f"{tool} missing (./scripts/test.sh installs what this needs)")
    tmp = tempfile.mkdtemp(prefix="lacuna-rados-bench-")
    cluster = Cluster(tmp)
    try:
        rounds = [one_round(tmp, cluster, args, r + 1) for r in range(args.rounds)]
        fo = failover_s(tmp, cluster, args.size_gib)
    finally:
        cluster.stop()
        shutil.rmtree(tmp, ignore_errors=True)
    med = {key: tuple(statistics.median(r[key][i] for r in rounds) for i in range(2)) for key in rounds[0]}
    commit = subprocess.run(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"], capture_output=True,
                            text=True).stdout.strip()
    lines = [
        f"## {time.strftime('%Y-%m-%d')} — `bench/rados_compare.py --runtime {args.runtime} --size-gib "
        f"{args.size_gib} --rounds {args.rounds}` on `{commit}`",
        "",
        f"Machine: {os.cpu_count()} cores, {os.uname().release}; one-node Ceph cluster (memstore OSD) on "
        "127.0.0.1, client and servers on the same cores. Medians of the rounds.",
        "",
        "| job | lacuna-rados | lacuna-local | rbd (qemu-nbd, writeback) | rados ÷ rbd | target |",
        "|---|---|---|---|---|---|",
    ]
    for rw, bs, depth in JOBS:
        key = f"{bs} {rw} QD{depth}"
        col = 0 if bs == "4k" else 1
        unit = "IOPS" if col == 0 else "MiB/s"
        vals = [med[(t, key)][col] for t in ("lacuna-rados", "lacuna-local", "rbd")]
        ratio = vals[0] / vals[2] if vals[2] else float("nan")
        lines.append(f"| {key} | {vals[0]:.0f} {unit} | {vals[1]:.0f} {unit} | {vals[2]:.0f} {unit} | "
                     f"{ratio:.2f} | ≥ 1.0 {'met' if ratio >= 1.0 else '**not met**'} |")
    fl = [med[(t, "flush")] for t in ("lacuna-rados", "lacuna-local", "rbd")]
    lines.append(f"| FLUSH after a 4 KiB write (median / p99) | {fl[0][0]:.2f} / {fl[0][1]:.2f} ms | "
                 f"{fl[1][0]:.2f} / {fl[1][1]:.2f} ms | {fl[2][0]:.2f} / {fl[2][1]:.2f} ms | "
                 f"{fl[2][0] / fl[0][0]:.2f} (speed) | — |")
    lines.append(f"| failover under 4 KiB writes (owner SIGKILLed → standby serving), lease 3 s | {fo:.1f} s | — | — "
                 f"| — | < 10 s {'met' if fo < 10 else '**not met**'} |")
    record = "\n".join(lines) + "\n"
    print(record)
    if not args.no_record:
        with open(os.path.join(ROOT, "bench", "RESULTS.md"), "a") as f:
            f.write("\n" + record)


if __name__ == "__main__":
    main()
