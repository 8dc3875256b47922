#!/usr/bin/python3
"""Side-by-side NBD benchmark: Lacuna vs qemu-nbd (raw file) vs nbdkit (file
plugin), driven by fio --ioengine=nbd in one run, on ~2:1 compressible data with
~30% duplicate blocks. Prints ratios Lacuna / peer and appends them to
bench/RESULTS.md.

usage: bench/nbd_compare.py [--runtime SECONDS] [--size GIB] [--unmap-gib N] [--no-record]
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

    def __init__(self, tmp, size_gib):
        self.data = os.path.join(tmp, "lacuna-data")
        self.nbd, self.api = free_port(), free_port()
        vasa_off = no_vasa_args(LACUNA)
        self.proc = subprocess.Popen([
            LACUNA, "serve", *vasa_off, "--data-dir", self.data, "--capacity", "64G",
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

    def __init__(self, tmp, size_gib):
        img = os.path.join(tmp, "qemu.raw")
        subprocess.run(["truncate", "-s", f"{size_gib}G", img], check=True)
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

    def __init__(self, tmp, size_gib):
        img = os.path.join(tmp, "nbdkit.raw")
        subprocess.run(["truncate", "-s", f"{size_gib}G", img], check=True)
        self.sock = os.path.join(tmp, "nbdkit.sock")
        self.proc = subprocess.Popen(["nbdkit", "-f", "-U", self.sock, "file", f"file={img}"],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.time() + 30
        while not os.path.exists(self.sock) and time.time() < deadline:
            time.sleep(0.05)
        self.uri = f"nbd+unix:///?socket={self.sock}"


def disk_image(tmp):
    """A realistic 1 GiB ext4 image holding a copy of /usr (as much as fits)."""
    img = os.path.join(tmp, "usr.ext4")
    subprocess.run(["truncate", "-s", "1G", img], check=True)
    src = os.path.join(tmp, "usr-src")
    os.makedirs(src)
    subprocess.run(f"cd /usr && tar cf - --exclude=./src lib share bin 2>/dev/null | head -c 800000000 | (cd {src} && tar xf - 2>/dev/null); true",
                   shell=True)
    subprocess.run(["mke2fs", "-q", "-F", "-t", "ext4", "-d", src, img], check=True)
    shutil.rmtree(src)
    return img


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--runtime", type=int, default=10)
    ap.add_argument("--size", type=int, default=2, help="GiB per target")
    ap.add_argument("--unmap-gib", type=int, default=16)
    ap.add_argument("--no-record", action="store_true")
    args = ap.parse_args()
    if not os.path.exists(LACUNA):
        sys.exit(f"{LACUNA} missing: run cargo build --release first")
    tmp = tempfile.mkdtemp(prefix="lacuna-bench-", dir=os.environ.get("BENCH_DIR", "/var/tmp"))
    results = {}
    try:
        targets = [Lacuna(tmp, args.size), QemuNbd(tmp, args.size), NbdkitFile(tmp, args.size)]
        for t in targets:
            prefill(t.uri, args.size)
        for name, rw, bs, depth in JOBS:
            for t in targets:
                results[(name, t.name)] = fio(t.uri, rw, bs, depth, args.runtime, args.size)
                print(f"{name:20} {t.name:12} {results[(name, t.name)][0]:10.0f} IOPS {results[(name, t.name)][1]:8.1f} MiB/s", flush=True)
        lacuna = targets[0]
        rss_after_fio = lacuna.rss_mib()
        space_fio = json.loads(lacuna.cli("--json", "array", "space"))
        # nbdcopy of a realistic disk image into a fresh volume of each target.
        img = disk_image(tmp)
        copies = {}
        for t in targets:
            uri = t.uri
            if t is lacuna:
                lacuna.cli("volume", "create", "image", "--size", "1G")
                uri = f"nbd://127.0.0.1:{lacuna.nbd}/image"
            started = time.time()
            subprocess.run(["nbdcopy", "--flush", img, uri], check=True)
            copies[t.name] = time.time() - started
            print(f"nbdcopy 1 GiB ext4   {t.name:12} {copies[t.name]:.2f} s", flush=True)
        image_info = json.loads(lacuna.cli("--json", "volume", "show", "image"))
        # UNMAP of a fully written volume (metadata-only).
        lacuna.cli("volume", "create", "big", "--size", f"{args.unmap_gib}G")
        big = f"nbd://127.0.0.1:{lacuna.nbd}/big"
        prefill(big, args.unmap_gib)
        rss_big = lacuna.rss_mib()
        # Flush first so the trims are not charged for the prefill's durable commit.
        script = ("import time\nh.flush()\nstart=time.time()\nfor i in range(%d):\n    h.trim(1<<30, i<<30)\n"
                  "mid=time.time()\nh.flush()\nprint(mid-start, time.time()-mid)\n" % args.unmap_gib)
        out = subprocess.run(["nbdsh", "-u", big, "-c", script], check=True, capture_output=True, text=True,
                             env={**os.environ, "PATH": "/usr/bin:" + os.environ["PATH"]}).stdout.split()
        unmap_s, unmap_flush_s = float(out[0]), float(out[1])
        print(f"UNMAP of fully written {args.unmap_gib} GiB: {unmap_s*1000:.1f} ms + flush {unmap_flush_s*1000:.1f} ms; RSS {rss_big:.0f} MiB", flush=True)
        for t in targets:
            t.stop()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)

    lines = []
    lines.append(f"\n## {datetime.date.today().isoformat()} — `bench/nbd_compare.py --runtime {args.runtime} --size {args.size} --unmap-gib {args.unmap_gib}`\n")
    lines.append(f"Machine: {os.cpu_count()} cores, {os.uname().release}. Client and servers share the cores.\n")
    lines.append("| job | lacuna | qemu-nbd | nbdkit-file | lacuna/qemu-nbd | lacuna/nbdkit |")
    lines.append("|---|---|---|---|---|---|")
    for name, *_ in JOBS:
        l, q, k = (results[(name, n)] for n in ("lacuna", "qemu-nbd", "nbdkit-file"))
        unit = 1 if "4k" in name else 0
        fmt = (lambda r: f"{r[0]:.0f} IOPS") if unit else (lambda r: f"{r[1]:.0f} MiB/s")
        idx = 0 if unit else 1
        lines.append(f"| {name} | {fmt(l)} | {fmt(q)} | {fmt(k)} | {l[idx]/q[idx]:.2f} | {l[idx]/k[idx]:.2f} |")
    lines.append(f"| nbdcopy 1 GiB ext4 image (s) | {copies['lacuna']:.2f} | {copies['qemu-nbd']:.2f} | {copies['nbdkit-file']:.2f} | {copies['qemu-nbd']/copies['lacuna']:.2f} (speed) | {copies['nbdkit-file']/copies['lacuna']:.2f} (speed) |")
    lines.append("")
    lines.append(f"- Data reduction of the ext4 image volume: {image_info['data_reduction_ratio']:.2f}:1; of the fio data: {space_fio['data_reduction_ratio']:.2f}:1")
    lines.append(f"- UNMAP of a fully written {args.unmap_gib} GiB volume ({args.unmap_gib} trims of 1 GiB via nbdsh): {unmap_s*1000:.1f} ms, then FLUSH {unmap_flush_s*1000:.1f} ms")
    lines.append(f"- Daemon RSS: {rss_after_fio:.0f} MiB after the fio runs, {rss_big:.0f} MiB with {args.unmap_gib} GiB more written")
    text = "\n".join(lines) + "\n"
    print(text)
    if not args.no_record:
        with open(os.path.join(ROOT, "bench", "RESULTS.md"), "a") as f:
            f.write(text)


if __name__ == "__main__":
    main()
