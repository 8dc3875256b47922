#!/usr/bin/python3
"""Side-by-side NBD benchmark: Lacuna vs qemu-nbd (raw file) vs nbdkit (file
plugin), driven by fio --ioengine=nbd in one run, on ~2:1 compressible data with
~30% duplicate blocks. Prints ratios Lacuna / peer and appends them to
bench/RESULTS.md.

Each round starts fresh servers; the jobs run after a sequential prefill, then
a 1.1 GB ext4 image (real files from /usr) is imported into an empty target of
each server with `qemu-img convert -n` and with `nbdcopy --flush`. Medians of
the rounds are reported.

usage: bench/nbd_compare.py [--runtime SECONDS] [--size GIB] [--unmap-gib N] [--rounds N]
                            [--reduction inline|adaptive|background] [--no-record]
Needs: fio, qemu-nbd, nbdkit, nbdcopy, nbdsh, mke2fs, and a release build
(cargo build --release). Everything listens on 127.0.0.1 only.
"""
import argparse
import datetime
import json
import os
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


JOBS = [
    # name, rw, bs, iodepth
    ("4k randwrite QD32", "randwrite", "4k", 32),
    ("4k randread QD32", "randread", "4k", 32),
    ("4k randwrite QD1", "randwrite", "4k", 1),
    ("4k randread QD1", "randread", "4k", 1),
    ("1M write QD4", "write", "1M", 4),
    ("1M read QD4", "read", "1M", 4),
]


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


def fio(uri, rw, bs, depth, runtime, size_gib):
    cmd = [
        "fio", "--name=job", "--ioengine=nbd", f"--uri={uri}", f"--rw={rw}", f"--bs={bs}",
        f"--iodepth={depth}", f"--size={size_gib}G", f"--runtime={runtime}", "--time_based",
        "--buffer_compress_percentage=50", "--dedupe_percentage=30", "--refill_buffers",
        "--randrepeat=0", "--output-format=json",
    ]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    job = json.loads(out[out.index("{"):])["jobs"][0]
    side = job["write"] if "write" in rw else job["read"]
    return side["iops"], side["bw"] / 1024.0  # IOPS, MiB/s


def prefill(uri, size_gib):
    subprocess.run([
        "fio", "--name=fill", "--ioengine=nbd", f"--uri={uri}", "--rw=write", "--bs=1M",
        "--iodepth=4", f"--size={size_gib}G", "--buffer_compress_percentage=50",
        "--dedupe_percentage=30", "--refill_buffers",
    ], check=True, capture_output=True)


class Lacuna:
    name = "lacuna"

    def __init__(self, tmp, size_gib, reduction="inline"):
        self.data = os.path.join(tmp, "lacuna-data")
        self.nbd, self.api = free_port(), free_port()
        vasa_off = no_vasa_args(LACUNA)
        # Only named when not the default, so builds before --reduction still run.
        reduction_args = [] if reduction == "inline" else ["--reduction", reduction]
        self.proc = subprocess.Popen([
            LACUNA, "serve", *vasa_off, *reduction_args, "--data-dir", self.data, "--capacity", "64G",
            "--nbd-listen", f"127.0.0.1:{self.nbd}", "--api-listen", f"127.0.0.1:{self.api}", "--nbd-open-access",
        ], stdout=subprocess.DEVNULL, stderr=open(os.path.join(tmp, "lacuna.log"), "w"))
        wait_port(self.nbd)
        wait_port(self.api)
        self.cli("volume", "create", "bench", "--size", f"{size_gib}G")
        self.uri = f"nbd://127.0.0.1:{self.nbd}/bench"

    def cli(self, *args):
        return subprocess.run([LACUNA, "--api", f"http://127.0.0.1:{self.api}", "--data-dir", self.data, *args],
                              check=True, capture_output=True, text=True).stdout

    def rss_mib(self):
        with open(f"/proc/{self.proc.pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024.0
        return float("nan")

    def stop(self):
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()


class QemuNbd:
    name = "qemu-nbd"

    def __init__(self, tmp, size, unit="G"):
        img = os.path.join(tmp, "qemu.raw")
        subprocess.run(["truncate", "-s", f"{size}{unit}", img], check=True)
        self.sock = os.path.join(tmp, "qemu.sock")
        self.proc = subprocess.Popen(["qemu-nbd", "-f", "raw", "--cache=none", "--aio=native", "-t", "-k", self.sock,
                                      "--discard=unmap", img], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.time() + 30
        while not os.path.exists(self.sock) and time.time() < deadline:
            time.sleep(0.05)
        self.uri = f"nbd+unix:///?socket={self.sock}"

    def stop(self):
        self.proc.kill()
        self.proc.wait()


class NbdkitFile(QemuNbd):
    name = "nbdkit-file"

    def __init__(self, tmp, size, unit="G"):
        img = os.path.join(tmp, "nbdkit.raw")
        subprocess.run(["truncate", "-s", f"{size}{unit}", img], check=True)
        self.sock = os.path.join(tmp, "nbdkit.sock")
        self.proc = subprocess.Popen(["nbdkit", "-f", "-U", self.sock, "file", f"file={img}"],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.time() + 30
        while not os.path.exists(self.sock) and time.time() < deadline:
            time.sleep(0.05)
        self.uri = f"nbd+unix:///?socket={self.sock}"


def disk_image(tmp):
    """A realistic 1.1 GB ext4 image holding real files: a copy of /usr (as much as fits)."""
    img = os.path.join(tmp, "usr.ext4")
    subprocess.run(["truncate", "-s", "1100M", img], check=True)
    src = os.path.join(tmp, "usr-src")
    os.makedirs(src)
    subprocess.run(f"cd /usr && tar cf - --exclude=./src lib share bin 2>/dev/null | head -c 900000000 | (cd {src} && tar xf - 2>/dev/null); true",
                   shell=True)
    subprocess.run(["mke2fs", "-q", "-F", "-t", "ext4", "-d", src, img], check=True)
    shutil.rmtree(src)
    return img


def import_image(method, img, uri):
    """Seconds to import `img` into the empty target `uri`, its FLUSH included:
    `qemu-img convert -n` (which flushes) or `nbdcopy --flush`."""
    cmd = (["qemu-img", "convert", "-n", "-f", "raw", "-O", "raw", img, uri] if method == "qemu-img convert"
           else ["nbdcopy", "--flush", img, uri])
    started = time.time()
    subprocess.run(cmd, check=True)
    return time.time() - started


IMPORTS = ["qemu-img convert", "nbdcopy"]
NAMES = ("lacuna", "qemu-nbd", "nbdkit-file")


def one_round(tmp, args, img, last):
    """One round on fresh servers: the fio jobs after a prefill, then each image
    import into a fresh empty target. Returns {(job, server): (IOPS, MiB/s)},
    {(import, server): seconds} and, in the last round, Lacuna's figures."""
    results, imports, extra = {}, {}, {}
    targets = [Lacuna(tmp, args.size, args.reduction), QemuNbd(tmp, args.size), NbdkitFile(tmp, args.size)]
    try:
        for t in targets:
            prefill(t.uri, args.size)
        for name, rw, bs, depth in JOBS:
            for t in targets:
                results[(name, t.name)] = fio(t.uri, rw, bs, depth, args.runtime, args.size)
                print(f"{name:20} {t.name:12} {results[(name, t.name)][0]:10.0f} IOPS {results[(name, t.name)][1]:8.1f} MiB/s", flush=True)
        lacuna = targets[0]
        extra["rss_after_fio"] = lacuna.rss_mib()
        extra["space_fio"] = json.loads(lacuna.cli("--json", "array", "space"))
        for t in targets[1:]:
            t.stop()
        for n, method in enumerate(IMPORTS):
            lacuna.cli("volume", "create", f"image{n}", "--size", "1200M")
            uri = f"nbd://127.0.0.1:{lacuna.nbd}/image{n}"
            imports[(method, "lacuna")] = import_image(method, img, uri)
            for cls in (QemuNbd, NbdkitFile):
                peer_dir = tempfile.mkdtemp(dir=tmp)
                peer = cls(peer_dir, 1200, unit="M")
                try:
                    imports[(method, peer.name)] = import_image(method, img, peer.uri)
                finally:
                    peer.stop()
                    shutil.rmtree(peer_dir, ignore_errors=True)
            for name in NAMES:
                print(f"{method:20} {name:12} {imports[(method, name)]:.2f} s", flush=True)
        extra["image_info"] = json.loads(lacuna.cli("--json", "volume", "show", "image0"))
        if last:
            # UNMAP of a fully written volume (metadata-only).
            lacuna.cli("volume", "create", "big", "--size", f"{args.unmap_gib}G")
            big = f"nbd://127.0.0.1:{lacuna.nbd}/big"
            prefill(big, args.unmap_gib)
            extra["rss_big"] = lacuna.rss_mib()
            # Flush first so the trims are not charged for the prefill's durable commit.
            script = ("import time\nh.flush()\nstart=time.time()\nfor i in range(%d):\n    h.trim(1<<30, i<<30)\n"
                      "mid=time.time()\nh.flush()\nprint(mid-start, time.time()-mid)\n" % args.unmap_gib)
            out = subprocess.run(["nbdsh", "-u", big, "-c", script], check=True, capture_output=True, text=True,
                                 env={**os.environ, "PATH": "/usr/bin:" + os.environ["PATH"]}).stdout.split()
            extra["unmap_s"], extra["unmap_flush_s"] = float(out[0]), float(out[1])
            print(f"UNMAP of fully written {args.unmap_gib} GiB: {extra['unmap_s']*1000:.1f} ms + flush "
                  f"{extra['unmap_flush_s']*1000:.1f} ms; RSS {extra['rss_big']:.0f} MiB", flush=True)
    finally:
        for t in targets:
            t.stop()
    return results, imports, extra


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--runtime", type=int, default=10)
    ap.add_argument("--size", type=int, default=2, help="GiB per target")
    ap.add_argument("--unmap-gib", type=int, default=16)
    ap.add_argument("--rounds", type=int, default=3, help="rounds on fresh servers; medians are reported")
    ap.add_argument("--reduction", choices=["inline", "adaptive", "background"], default="inline",
                    help="lacuna serve --reduction")
    ap.add_argument("--no-record", action="store_true")
    args = ap.parse_args()
    if not os.path.exists(LACUNA):
        sys.exit(f"{LACUNA} missing: run cargo build --release first")
    if args.rounds < 1:
        sys.exit("--rounds must be at least 1")
    tmp = tempfile.mkdtemp(prefix="lacuna-bench-", dir=os.environ.get("BENCH_DIR", "/var/tmp"))
    rounds = []
    try:
        img = disk_image(tmp)
        for n in range(args.rounds):
            round_dir = tempfile.mkdtemp(prefix=f"round{n}-", dir=tmp)
            rounds.append(one_round(round_dir, args, img, last=n == args.rounds - 1))
            shutil.rmtree(round_dir, ignore_errors=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)

    def median(key, which):
        return statistics.median(r[which][key] for r in rounds)

    results = {key: tuple(statistics.median(r[0][key][i] for r in rounds) for i in (0, 1)) for key in rounds[0][0]}
    imports = {key: median(key, 1) for key in rounds[0][1]}
    extra = rounds[-1][2]
    commit = subprocess.run(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"], capture_output=True,
                            text=True).stdout.strip()
    lines = []
    lines.append(f"\n## {datetime.date.today().isoformat()} — `bench/nbd_compare.py --runtime {args.runtime} "
                 f"--size {args.size} --unmap-gib {args.unmap_gib} --rounds {args.rounds} --reduction {args.reduction}` "
                 f"on `{commit}`\n")
    lines.append(f"Machine: {os.cpu_count()} cores, {os.uname().release}. Client and servers share the cores. "
                 f"Medians of {args.rounds} round{'s' if args.rounds > 1 else ''}, fresh servers each round.\n")
    lines.append("| job | lacuna | qemu-nbd | nbdkit-file | lacuna/qemu-nbd | lacuna/nbdkit | lacuna/best |")
    lines.append("|---|---|---|---|---|---|---|")
    for name, *_ in JOBS:
        l, q, k = (results[(name, n)] for n in NAMES)
        unit = 1 if "4k" in name else 0
        fmt = (lambda r: f"{r[0]:.0f} IOPS") if unit else (lambda r: f"{r[1]:.0f} MiB/s")
        idx = 0 if unit else 1
        lines.append(f"| {name} | {fmt(l)} | {fmt(q)} | {fmt(k)} | {l[idx]/q[idx]:.2f} | {l[idx]/k[idx]:.2f} "
                     f"| {l[idx]/max(q[idx], k[idx]):.2f} |")
    for method in IMPORTS:
        l, q, k = (imports[(method, n)] for n in NAMES)
        lines.append(f"| {method} of a 1.1 GB ext4 image (s, speed ratios) | {l:.2f} | {q:.2f} | {k:.2f} "
                     f"| {q/l:.2f} | {k/l:.2f} | {min(q, k)/l:.2f} |")
    lines.append("")
    lines.append(f"- Data reduction of the imported image: {extra['image_info']['data_reduction_ratio']:.2f}:1; "
                 f"of the fio data: {extra['space_fio']['data_reduction_ratio']:.2f}:1")
    lines.append(f"- UNMAP of a fully written {args.unmap_gib} GiB volume ({args.unmap_gib} trims of 1 GiB via nbdsh): "
                 f"{extra['unmap_s']*1000:.1f} ms, then FLUSH {extra['unmap_flush_s']*1000:.1f} ms")
    lines.append(f"- Daemon RSS: {extra['rss_after_fio']:.0f} MiB after the fio runs, {extra['rss_big']:.0f} MiB "
                 f"with {args.unmap_gib} GiB more written")
    text = "\n".join(lines) + "\n"
    print(text)
    if not args.no_record:
        with open(os.path.join(ROOT, "bench", "RESULTS.md"), "a") as f:
            f.write(text)


if __name__ == "__main__":
    main()
