#!/usr/bin/python3
"""Seed 000, scaled to this machine: rate-controlled space reclamation.

Three storage containers with reclaim policies `low` (25 MB/s), a fixed rate
(default 2000 MB/s) and `unlimited`. Each holds several volumes filled with
unique data over NBD (fio); then most volumes of a container are deleted and
eradicated at once, and the container's counters are sampled from the API until
its backlog is empty. Bytes reclaimed are plotted against time for each policy
(PNG with gnuplot, plus the raw samples), and the script checks that the
counters agree with the plot: the final reclaimed bytes equal the data of the
deleted volumes, and the slope after the burst is the configured rate.

A last phase measures metadata-only reclaim: an unmap of a huge, sparsely
written thin volume in an unlimited container, reported as logical bytes of
unmapped range worked through per second.

usage: bench/reclaim_rate.py [--volume-gib 1] [--volumes 3] [--delete 2]
                             [--fixed-mb-s 2000] [--burst 256M] [--no-record]
Needs: fio (nbd engine), nbdsh, gnuplot (gnuplot-nox) for the PNG, and a
release build (cargo build --release). Listens on 127.0.0.1 only.
"""
import argparse
import datetime
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from serve_args import no_vasa_args  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LACUNA = os.path.join(os.environ.get("CARGO_TARGET_DIR", os.path.join(ROOT, "target")), "release", "lacuna")

MB = 1_000_000
# nbdsh is `python3 -m nbd`: run it with the system Python that has the libnbd
# binding (python3-libnbd), whatever python3 comes first in PATH.
NBDSH = ["/usr/bin/python3", "-m", "nbd"] if os.path.exists("/usr/bin/python3") else ["nbdsh"]
GIB = 1 << 30


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_port(port, timeout=60):
    deadline = time.time() + timeout
    while time.time() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"port {port} never opened")


class Lacuna:
    def __init__(self, tmp, capacity):
        self.data = os.path.join(tmp, "lacuna-data")
        self.nbd, self.api = free_port(), free_port()
        vasa_off = no_vasa_args(LACUNA)
        self.proc = subprocess.Popen([
            LACUNA, "serve", *vasa_off, "--data-dir", self.data, "--capacity", capacity,
            "--nbd-listen", f"127.0.0.1:{self.nbd}", "--api-listen", f"127.0.0.1:{self.api}", "--nbd-open-access",
            "--iscsi-listen", f"127.0.0.1:{free_port()}", "--destroy-retention", "1d",
        ], stdout=subprocess.DEVNULL, stderr=open(os.path.join(tmp, "lacuna.log"), "w"))
        wait_port(self.nbd)
        wait_port(self.api)
        with open(os.path.join(self.data, "api-token")) as f:
            self.token = f.read().strip()

    def cli(self, *args):
        return subprocess.run([LACUNA, "--api", f"http://127.0.0.1:{self.api}", "--data-dir", self.data, *args],
                              check=True, capture_output=True, text=True).stdout

    def get(self, path):
        request = urllib.request.Request(f"http://127.0.0.1:{self.api}{path}",
                                         headers={"Authorization": f"Bearer {self.token}"})
        with urllib.request.urlopen(request, timeout=30) as r:
            return json.loads(r.read())

    def cpu_s(self):
        with open(f"/proc/{self.proc.pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def stop(self):
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()


def fill(uri, gib):
    subprocess.run([
        "fio", "--name=fill", "--ioengine=nbd", f"--uri={uri}", "--rw=write", "--bs=1M",
        "--iodepth=8", f"--size={gib}G", "--refill_buffers", "--buffer_compress_percentage=0",
        "--randrepeat=0",
    ], check=True, capture_output=True)


def run_phase(lacuna, container, victims, dead_bytes, timeout_s):
    """Deletes and eradicates the victims, then samples the container until its
    backlog is empty. Returns [(t, reclaimed, backlog, current_bytes_per_s)]."""
    start_counter = lacuna.get(f"/v1/containers/{container}")["reclaim"]["reclaimed_bytes"]
    for v in victims:
        lacuna.cli("volume", "delete", v)
    t0 = time.time()
    for v in victims:
        lacuna.cli("volume", "eradicate", v)
    samples = []
    while True:
        info = lacuna.get(f"/v1/containers/{container}")["reclaim"]
        t = time.time() - t0
        samples.append((t, info["reclaimed_bytes"] - start_counter, info["backlog_bytes"],
                        info["current_bytes_per_s"]))
        if info["backlog_bytes"] == 0 and samples[-1][1] >= dead_bytes:
            break
        if t > timeout_s:
            raise RuntimeError(f"{container}: backlog not empty after {timeout_s} s: {info}")
        time.sleep(0.1 if t < 5 else 0.25)
    return samples


def slope_after_burst(samples, burst, dead):
    """Rate over the second half of the curve, past the burst (the last 10%
    excluded, where the sampling interval dominates): while the engine is faster
    than the rate, tokens accruing during the burst are spent at full speed too."""
    lo, hi = max(burst + 0.05 * dead, 0.5 * dead), 0.9 * dead
    inside = [(t, b) for t, b, _, _ in samples if lo <= b <= hi]
    if len(inside) < 2 or inside[-1][0] == inside[0][0]:
        return None
    return (inside[-1][1] - inside[0][1]) / (inside[-1][0] - inside[0][0])


def plot(tmp, series, out_png):
    if not shutil.which("gnuplot"):
        print("gnuplot not found (apt install gnuplot-nox): no PNG", file=sys.stderr)
        return False
    script = [
        "set terminal png size 1000,600",
        f"set output '{out_png}'",
        "set title 'Lacuna: bytes reclaimed after deleting volumes, per container reclaim policy'",
        "set xlabel 'seconds since eradication'", "set ylabel 'MiB reclaimed'",
        "set key left top", "set grid",
    ]
    plots = []
    for label, path in series:
        plots.append(f"'{path}' using 1:($2/1048576) with linespoints pt 7 ps 0.4 title '{label}'")
    script.append("plot " + ", ".join(plots))
    subprocess.run(["gnuplot"], input="\n".join(script), text=True, check=True)
    return True


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--volume-gib", type=int, default=1)
    ap.add_argument("--volumes", type=int, default=3, help="volumes per container")
    ap.add_argument("--delete", type=int, default=2, help="volumes deleted per container")
    ap.add_argument("--fixed-mb-s", default="400,2000", help="fixed-rate containers, MB/s, comma-separated")
    ap.add_argument("--burst", default="256M")
    ap.add_argument("--sparse-tib", type=int, default=16, help="size of the sparse volume of the metadata-only phase")
    ap.add_argument("--no-record", action="store_true")
    args = ap.parse_args()
    if not os.path.exists(LACUNA):
        sys.exit(f"{LACUNA} missing: run cargo build --release first")
    tmp = tempfile.mkdtemp(prefix="lacuna-reclaim-", dir=os.environ.get("BENCH_DIR", "/var/tmp"))
    fixed = [int(r) for r in args.fixed_mb_s.split(",") if r]
    policies = ([("unlimited", "unlimited")] + [(f"fixed{r}", f"{r}MB/s") for r in fixed]
                + [("low", "low")])
    dead = args.delete * args.volume_gib * GIB
    capacity = f"{len(policies) * args.volumes * args.volume_gib * 2 + 8}G"
    lacuna = Lacuna(tmp, capacity)
    rows, series, checks = [], [], []
    try:
        for container, policy in policies:
            lacuna.cli("container", "create", container, "--reclaim", policy, "--reclaim-burst", args.burst)
            for i in range(args.volumes):
                name = f"{container}{i}"
                lacuna.cli("volume", "create", name, "--size", f"{args.volume_gib}G", "--container", container)
                fill(f"nbd://127.0.0.1:{lacuna.nbd}/{name}", args.volume_gib)
            print(f"filled {container}: {args.volumes} x {args.volume_gib} GiB", flush=True)
        burst = lacuna.get("/v1/containers/low")["reclaim"]["burst_bytes"]  # the same for all
        for container, policy in policies:
            victims = [f"{container}{i}" for i in range(args.delete)]
            cpu0 = lacuna.cpu_s()
            timeout = 60 + dead / (25 * MB) * 2
            samples = run_phase(lacuna, container, victims, dead, timeout)
            cpu = lacuna.cpu_s() - cpu0
            path = os.path.join(tmp, f"{container}.dat")
            with open(path, "w") as f:
                for t, b, backlog, rate in samples:
                    f.write(f"{t:.3f} {b} {backlog} {rate:.0f}\n")
            series.append((f"{container} ({policy}, burst {args.burst})", path))
            final = lacuna.get(f"/v1/containers/{container}")["reclaim"]
            duration = samples[-1][0]
            slope = slope_after_burst(samples, burst, dead)
            configured = 25 * MB if container == "low" else (
                int(container[5:]) * MB if container.startswith("fixed") else None)
            agree = samples[-1][1] == dead and final["backlog_bytes"] == 0
            rate_ok = None
            if configured and slope:
                rate_ok = abs(slope - configured) / configured <= 0.10
            rows.append((container, policy, dead, duration, slope, configured, cpu, samples[-1][1], agree, rate_ok))
            checks.append(agree and rate_ok is not False)
            print(f"{container:10} {policy:10} reclaimed {samples[-1][1] / MB:8.0f} MB in {duration:7.2f} s; "
                  f"slope after burst {slope / MB if slope else float('nan'):8.1f} MB/s "
                  f"(configured {configured / MB if configured else 'unlimited'}); cpu {cpu:.1f} s; "
                  f"counters agree: {agree}", flush=True)
        # Metadata-only: unmap a huge sparse thin volume.
        lacuna.cli("volume", "create", "sparse", "--size", f"{args.sparse_tib}T", "--container", "unlimited")
        sparse_uri = f"nbd://127.0.0.1:{lacuna.nbd}/sparse"
        script = ("for i in range(256):\n    h.pwrite(b'\\x5a' * 65536, i * ((%d << 40) // 256))\nh.flush()\n"
                  % args.sparse_tib)
        subprocess.run([*NBDSH, "-u", sparse_uri, "-c", script], check=True)
        before = lacuna.get("/v1/containers/unlimited")["reclaim"]
        t0 = time.time()
        # NBD lengths are 32-bit: the unmap goes as commands of 4 GiB less a grain.
        step = (4 << 30) - 4096
        trims = ("end = %d << 40\noff = 0\nwhile off < end:\n    n = min(%d, end - off)\n    h.trim(n, off)\n"
                 "    off += n\n" % (args.sparse_tib, step))
        subprocess.run([*NBDSH, "-u", sparse_uri, "-c", trims], check=True)
        unmap_s = time.time() - t0
        while lacuna.get("/v1/containers/unlimited")["reclaim"]["backlog_bytes"] > 0:
            time.sleep(0.01)
        empty_s = time.time() - t0
        after = lacuna.get("/v1/containers/unlimited")["reclaim"]
        logical = args.sparse_tib << 40
        meta_rate = logical / empty_s
        print(f"metadata-only: UNMAP of {args.sparse_tib} TiB issued in {unmap_s * 1000:.1f} ms, backlog empty after "
              f"{empty_s * 1000:.1f} ms: {meta_rate / 1e12:.1f} TB/s of logical space; reclaimed "
              f"{after['reclaimed_bytes'] - before['reclaimed_bytes']} B of data", flush=True)
    finally:
        lacuna.stop()
    # Without a record, the data and plot stay out of the tree.
    out_dir = tempfile.mkdtemp(prefix="lacuna-bench-out-") if args.no_record else os.path.join(ROOT, "bench")
    png = os.path.join(out_dir, "reclaim_rate.png")
    plotted = plot(tmp, series, png)
    with open(os.path.join(out_dir, "reclaim_rate.dat"), "w") as out:
        out.write("# container seconds reclaimed_bytes backlog_bytes current_bytes_per_s\n")
        for (label, path), (container, _) in zip(series, policies):
            with open(path) as f:
                for line in f:
                    out.write(f"{container} {line}")
    if not args.no_record:
        cmd = "bench/reclaim_rate.py " + " ".join(sys.argv[1:])
        lines = [
            f"\n## Seed 000: rate-controlled reclaim ({datetime.date.today()})\n",
            f"Command: `{cmd}` (release build; {args.volumes} volumes x {args.volume_gib} GiB of unique data per "
            f"container, {args.delete} deleted and eradicated; burst {args.burst}).\n",
            "| container | policy | dead data | time to empty | rate after burst | configured | daemon CPU | counters agree | rate within 10% |",
            "|---|---|---|---|---|---|---|---|---|",
        ]
        for c, p, d, dur, slope, conf, cpu, got, agree, rate_ok in rows:
            lines.append(
                f"| {c} | {p} | {d / MB:.0f} MB | {dur:.2f} s | {slope / MB if slope else float('nan'):.1f} MB/s | "
                f"{conf / MB if conf else 'unlimited'} | {cpu:.1f} s | {'yes' if agree else 'NO'} ({got} B) | "
                f"{'-' if rate_ok is None else ('yes' if rate_ok else 'NO')} |")
        lines.append(
            f"\nMetadata-only reclaim: UNMAP of a {args.sparse_tib} TiB thin volume holding 256 x 64 KiB, issued over NBD in 4 GiB commands in "
            f"{unmap_s * 1000:.1f} ms; the backlog was empty after {empty_s * 1000:.1f} ms, i.e. "
            f"{meta_rate / 1e12:.1f} TB/s of logical space.\n")
        if plotted:
            lines.append("![bytes reclaimed against time](reclaim_rate.png)\n")
        with open(os.path.join(ROOT, "bench", "RESULTS.md"), "a") as f:
            f.write("\n".join(lines) + "\n")
    shutil.rmtree(tmp, ignore_errors=True)
    sys.exit(0 if all(checks) else 1)


if __name__ == "__main__":
    main()
