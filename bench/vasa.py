#!/usr/bin/python3
"""The cost of the VASA provider's SOAP layer (issue 46): the seed 003 calls through SOAP
over HTTPS beside the same calls through the REST API, on one `lacuna serve`, in one run.
Appends the record to bench/RESULTS.md.

usage: bench/vasa.py [--reps 100] [--browse-vms 1024] [--vms 120] [--concurrency 16]
                     [--no-record]

Part 1, per call: one client thread, one kept-alive connection per binding (HTTP/1.1 for
REST, HTTPS with a client certificate and a VASA session for SOAP), the two bindings
alternating call by call so both see the same array. Each of REPS rounds: create a Data
vVol (4 metadata pairs), bind 4 vVols in a batch, unbind them, prepare a snapshot and commit
it, an allocated bitmap of 16 MiB at 64 KiB, events since the newest (what every host polls),
and at the end the deletes; the datastore browse of BROWSE_VMS VMs (query the Config vVols,
then their info, 1024 a call) REPS/10 times. The median round trip of each, and SOAP ÷ REST.

Part 2, the seed's power-on: VMS VMs, CONCURRENCY at a time (ESXi's 16), each its Config,
two Data and a Swap vVol created and bound in one batch, then unbound, then bound again
(the second power-on); first through REST, then through SOAP (one VASA session per client
thread), each on VMs of its own. Per phase the total wall, the per-VM median and the daemon's
CPU seconds.

The SOAP client (bench/vasa_soap.py) writes envelopes from templates and parses answers with
ElementTree, so what is measured is the provider, not a SOAP library. Needs openssl and a
release build (as bench/vvols.py).
"""
import argparse
import datetime
import concurrent.futures
import os
import queue
import sys
import tempfile
import threading
import time
import shutil

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import vvols  # noqa: E402
from vasa_soap import SoapConn, make_client_certificate  # noqa: E402
from vvols import HOST, HOST_IQN, MAX_BATCH, MiB, items_ok, log, med, ms, pool_map  # noqa: E402


class Bindings:
    """The two bindings of the vVol service on one daemon: REST (the daemon's API) and SOAP
    (its VASA provider), each with a connection per client thread."""

    def __init__(self, d, work):
        self.d = d
        self.cert, self.key = make_client_certificate(work)
        self.provider_pem = os.path.join(d.data, "vasa", "provider-cert.pem")
        self.local = threading.local()
        self.spare = queue.Queue()
        self.conns = []
        # Bind answers' handles, which unbind sends back (any connection may unbind).
        self.handles = {}

    def warm(self, n):
        """N SOAP connections made ahead, each with its session (as hosts keep theirs), so no
        timed call pays a TLS handshake or a setContext."""
        for _ in range(n - self.spare.qsize()):
            c = SoapConn(self.d.vasa_port, self.provider_pem, self.cert, self.key, HOST_IQN,
                         f"bench-{len(self.conns)}", self.handles)
            if not self.conns:
                with open(self.cert) as f:
                    c.register(self.d.token, f.read())
            c.set_context()
            self.conns.append(c)
            self.spare.put(c)

    def soap(self):
        """This thread's connection (taken from the warm ones at its first call)."""
        c = getattr(self.local, "soap", None)
        if c is None:
            if self.spare.empty():
                self.warm(1)
            c = self.local.soap = self.spare.get()
        return c

    def close(self):
        for c in self.conns:
            c.close()

    # Each answers (value, wall seconds) through `via`, REST's answers checked as bench/vvols.py does.
    def create(self, via, vvol_type, size_mib, metadata):
        if via == "rest":
            return self.d.create_vvol(vvol_type, size_mib, metadata)
        vvol, wall, _ = self.soap().create("default", vvol_type, size_mib, metadata)
        return vvol, wall

    def bind(self, via, ids):
        if via == "rest":
            ans, wall = self.d.host_call("POST", "/v1/vvols/bind", {"host": HOST, "ids": ids})
        else:
            ans, wall, _ = self.soap().bind(ids)
        for b in items_ok(ans, ids, f"{via} bind"):
            if b["host"] != HOST or not b["protocol_endpoint"]["in_band_id"]:
                raise RuntimeError(f"{via} bind answered {b}")
        return ans, wall

    def unbind(self, via, ids):
        if via == "rest":
            ans, wall = self.d.host_call("POST", "/v1/vvols/unbind", {"host": HOST, "ids": ids})
        else:
            ans, wall, _ = self.soap().unbind(ids)
        if items_ok(ans, ids, f"{via} unbind") != [True] * len(ids):
            raise RuntimeError(f"{via} unbind answered {ans}")
        return ans, wall

    def delete(self, via, vvol):
        if via == "rest":
            return self.d.api("DELETE", f"/v1/vvols/{vvol}")
        _, wall, _ = self.soap().delete(vvol)
        return None, wall

    def snapshot(self, via, disk):
        """Prepare and commit a snapshot of DISK: (snapshot id, prepare wall, commit wall)."""
        meta = {"VMW_VmID": "bench", "VMW_SnapshotLevel": "1"}
        if via == "rest":
            p, wp = self.d.api("POST", f"/v1/vvols/{disk}/prepare-snapshot", {"kind": "ReadOnly"})
            commit, wc = self.d.api("POST", "/v1/vvols/snapshot",
                                    {"snapshots": [{"snapshot_id": p["snapshot_id"], "metadata": meta}],
                                     "timeout_ms": 10000})
            items_ok(commit["results"], [p["snapshot_id"]], "rest commit")
        else:
            p, wp, _ = self.soap().prepare(disk)
            commit, wc, _ = self.soap().commit([{"snapshot_id": p["snapshot_id"], "metadata": meta}], 10000)
            items_ok(commit, [p["snapshot_id"]], "soap commit")
        if p["base"] != disk:
            raise RuntimeError(f"{via}: prepare of {disk} answered {p}")
        return p["snapshot_id"], wp, wc

    def bitmap(self, via, vvol, length):
        if via == "rest":
            ans, wall = self.d.api("POST", f"/v1/vvols/{vvol}/allocated-bitmap",
                                   {"offset_bytes": 0, "length_bytes": length, "chunk_bytes": 64 << 10})
            bitmap = ans["bitmap"]
        else:
            bitmap, wall, _ = self.soap().allocated_bitmap(vvol, 0, length, 64 << 10)
        if bitmap.strip("A=") != "":
            raise RuntimeError(f"{via}: the bitmap of an unwritten vVol is {bitmap[:40]}")
        return bitmap, wall

    def events(self, via, last):
        if via == "rest":
            ans, wall = self.d.api("GET", f"/v1/vvol-events?since={last}")
            return [e["id"] for e in ans], wall
        ids, wall, _ = self.soap().events(last)
        return ids, wall

    def browse(self, via, expect):
        """Query the Config vVols, then their info: (query wall, info wall, calls)."""
        if via == "rest":
            q, wq = self.d.api("POST", "/v1/vvols/query",
                               {"container": "default", "metadata": {"VMW_VVolType": "Config"}})
            ids = q["ids"]
        else:
            ids, wq, _ = self.soap().query({"VMW_VVolType": "Config"})
        if set(ids) != expect:
            raise RuntimeError(f"{via} query answered {len(ids)} Config vVols, {len(expect)} exist")
        wi, calls = 0.0, 1
        for at in range(0, len(ids), MAX_BATCH):
            batch = ids[at:at + MAX_BATCH]
            if via == "rest":
                info, w = self.d.api("POST", "/v1/vvols/info", {"ids": batch})
            else:
                info, w, _ = self.soap().info(batch)
            for rec in items_ok(info, batch, f"{via} info"):
                if rec["metadata"].get("VMW_VVolType") != "Config":
                    raise RuntimeError(f"{via} info answered {rec}")
            wi, calls = wi + w, calls + 1
        return wq, wi, calls


VIAS = ("rest", "soap")


def part_calls(b, args):
    log("== part 1: per call, REST and SOAP alternating")
    walls = {(op, via): [] for op in ("create", "bind 4", "unbind 4", "prepare", "commit", "bitmap", "events",
                                      "delete", "browse query", "browse info") for via in VIAS}
    made = {via: [] for via in VIAS}
    last = 0
    for rep in range(args.reps):
        for via in VIAS:
            meta = {"VMW_VmID": f"calls-{via}-{rep // 4}", "VMW_VVolType": "Data",
                    "VMW_VVolName": f"c{rep}.vmdk", "VMW_ContainerId": "default"}
            vvol, w = b.create(via, "Data", 16, meta)
            walls[("create", via)].append(w)
            made[via].append(vvol)
        if rep % 4 == 3:
            for via in VIAS:
                four = made[via][-4:]
                walls[("bind 4", via)].append(b.bind(via, four)[1])
                walls[("unbind 4", via)].append(b.unbind(via, four)[1])
        for via in VIAS:
            snap, wp, wc = b.snapshot(via, made[via][-1])
            walls[("prepare", via)].append(wp)
            walls[("commit", via)].append(wc)
            b.d.api("DELETE", f"/v1/vvols/{snap}")  # untimed
            walls[("bitmap", via)].append(b.bitmap(via, made[via][-1], 16 * MiB)[1])
        while True:  # catch up to the newest event, untimed
            ids, _ = b.events("rest", last)
            if not ids:
                break
            last = ids[-1]
        for via in VIAS:
            ids, w = b.events(via, last)
            walls[("events", via)].append(w)
    for via in VIAS:
        for vvol in made[via]:
            walls[("delete", via)].append(b.delete(via, vvol)[1])
    log(f"browse: making {args.browse_vms} VMs (a Config and a Data vVol each)")

    def make_vm(i):
        vm = f"{i:08x}-7b3a-4c1e-9f00-{i:012x}"
        config, _ = b.create("rest", "Config", 4096, {"VMW_VmID": vm, "VMW_VVolType": "Config",
                                                      "VMW_VVolName": f"browse-{i:04}", "VMW_GosType": "other",
                                                      "VMW_VVolNamespace": f"/vmfs/volumes/vvol:default/b{i}",
                                                      "VMW_ContainerId": "default"})
        b.create("rest", "Data", 40960, {"VMW_VmID": vm, "VMW_VVolType": "Data"})
        return config

    expect = set(pool_map(args.concurrency, make_vm, range(args.browse_vms)))
    b.d.wait_idle()
    for _ in range(max(3, args.reps // 10)):
        for via in VIAS:
            wq, wi, _ = b.browse(via, expect)
            walls[("browse query", via)].append(wq)
            walls[("browse info", via)].append(wi)
    rows = []
    for op in dict.fromkeys(op for op, _ in walls):
        rest, soap = med(walls[(op, "rest")]), med(walls[(op, "soap")])
        rows.append({"op": op, "n": len(walls[(op, "rest")]), "rest": rest, "soap": soap, "ratio": soap / rest})
        log(f"{op:13} REST {ms(rest)}  SOAP {ms(soap)}  SOAP/REST {soap / rest:.2f}")
    return rows


def part_power(b, args):
    log("== part 2: power-on of VMS VMs, through REST then SOAP")
    out = []
    b.warm(args.concurrency)
    # One pool for the whole part: each client thread keeps its connection (and SOAP session).
    pool = concurrent.futures.ThreadPoolExecutor(args.concurrency)
    for via in VIAS:
        vms = [{"vm": f"{via}-vm{i:04}"} for i in range(args.vms)]

        def md(vm, typ, name):
            return {"VMW_VmID": vm["vm"], "VMW_VVolType": typ, "VMW_VVolName": name, "VMW_ContainerId": "default"}

        def the4(vm):
            return [vm["config"], vm["data0"], vm["data1"], vm["swap"]]

        def first_on(vm):
            vm["config"] = b.create(via, "Config", 4096, md(vm, "Config", f"{vm['vm']}.vmx"))[0]
            for k in (0, 1):
                vm[f"data{k}"] = b.create(via, "Data", 40960, md(vm, "Data", f"{vm['vm']}_{k}.vmdk"))[0]
            vm["swap"] = b.create(via, "Swap", 4096, md(vm, "Swap", f"{vm['vm']}.vswp"))[0]
            b.bind(via, the4(vm))

        phases = [("first power-on", first_on), ("power-off", lambda vm: b.unbind(via, the4(vm))),
                  ("second power-on", lambda vm: b.bind(via, the4(vm)))]
        for name, fn in phases:
            def one(vm, fn=fn):
                t0 = time.perf_counter()
                fn(vm)
                return time.perf_counter() - t0
            cpu0, t0 = b.d.cpu_s(), time.perf_counter()
            times = list(pool.map(one, vms))
            wall, cpu = time.perf_counter() - t0, b.d.cpu_s() - cpu0
            out.append({"via": via, "phase": name, "wall": wall, "median": med(times), "cpu": cpu})
            log(f"{via:4} {name:16} total {wall * 1000:.0f} ms, per VM median {ms(med(times))}, daemon CPU "
                f"{cpu:.2f} s")
        for vm in vms:
            b.unbind(via, the4(vm))
    pool.shutdown()
    return out


def report(args, argv, rev, calls, power, elapsed):
    L = [f"\n## {datetime.date.today().isoformat()} — `bench/vasa.py {' '.join(argv)}`\n"]
    L.append(f"Machine: {os.cpu_count()} cores, kernel {os.uname().release}; client and `lacuna serve` share the "
             f"cores. Lacuna built from `{rev}`. One daemon; REST on kept-alive HTTP/1.1, SOAP on kept-alive HTTPS "
             f"(TLS 1.3, client certificate, one VASA session per client thread), the client writing envelopes from "
             f"templates and parsing with ElementTree (`bench/vasa_soap.py`). Times are round trips (request sent to "
             f"answer read). Run time {elapsed / 60:.1f} min.\n")
    targets = []
    if calls:
        L.append(f"### Per call, REST and SOAP alternating ({args.reps} rounds; the browse of {args.browse_vms} VMs "
                 f"{max(3, args.reps // 10)} times)\n")
        L.append("| call | samples | REST median | SOAP median | SOAP ÷ REST |")
        L.append("|---|---|---|---|---|")
        for r in calls:
            L.append(f"| {r['op']} | {r['n']} | {ms(r['rest'])} | {ms(r['soap'])} | **{r['ratio']:.2f}×** |")
        L.append("")
        worst = max(calls, key=lambda r: r["ratio"])
        targets.append(("every call through SOAP within 2× of REST",
                        f"worst {worst['op']} {worst['ratio']:.2f}×", worst["ratio"] <= 2))
    if power:
        L.append(f"### Power-on of {args.vms} VMs, {args.concurrency} at a time: REST, then SOAP\n")
        L.append("| phase | REST total | SOAP total | SOAP ÷ REST | per VM REST / SOAP | daemon CPU REST / SOAP |")
        L.append("|---|---|---|---|---|---|")
        by = {(p["via"], p["phase"]): p for p in power}
        for name in ("first power-on", "power-off", "second power-on"):
            r, s = by[("rest", name)], by[("soap", name)]
            L.append(f"| {name} | {r['wall'] * 1000:.0f} ms | {s['wall'] * 1000:.0f} ms | "
                     f"**{s['wall'] / r['wall']:.2f}×** | {ms(r['median'])} / {ms(s['median'])} | "
                     f"{r['cpu']:.2f} s / {s['cpu']:.2f} s |")
        L.append("")
        r, s = by[("rest", "first power-on")], by[("soap", "first power-on")]
        targets.append((f"{args.vms}-VM first power-on limited by the array, not the provider (SOAP within 1.5× "
                        f"of REST)", f"{s['wall'] / r['wall']:.2f}× ({s['wall']:.2f} s vs {r['wall']:.2f} s)",
                        s["wall"] / r["wall"] <= 1.5))
    L.append("### Targets\n")
    L.append("| target | measured | met |")
    L.append("|---|---|---|")
    for name, measured, ok in targets:
        L.append(f"| {name} | {measured} | {vvols.mark(ok)} |")
    return "\n".join(L) + "\n"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--reps", type=int, default=100, help="part 1: rounds of calls")
    ap.add_argument("--browse-vms", type=int, default=1024, help="part 1: VMs the browse lists")
    ap.add_argument("--vms", type=int, default=120, help="part 2: VMs powered on")
    ap.add_argument("--concurrency", type=int, default=16, help="part 2: client threads (ESXi: 16)")
    ap.add_argument("--parts", type=vvols.int_list, default=[1, 2])
    ap.add_argument("--no-record", action="store_true")
    argv = sys.argv[1:]
    args = ap.parse_args()
    if not os.path.exists(vvols.LACUNA):
        sys.exit(f"{vvols.LACUNA} missing: run cargo build --release -p lacuna first")
    if args.concurrency > 16:
        sys.exit("--concurrency over 16: the array answers a host's 17th request in flight Busy")
    tmp = tempfile.mkdtemp(prefix="lacuna-vasa-", dir=os.environ.get("BENCH_DIR", "/var/tmp"))
    started, rev = time.time(), vvols.source_rev()
    d = None
    try:
        d = vvols.Daemon(tmp, "vasa", "2T", vasa=True)
        d.add_host()
        b = Bindings(d, tmp)
        calls = part_calls(b, args) if 1 in args.parts else None
        power = part_power(b, args) if 2 in args.parts else None
        b.close()
    finally:
        if d is not None:
            d.stop()
        shutil.rmtree(tmp, ignore_errors=True)
    text = report(args, argv, rev, calls, power, time.time() - started)
    print(text)
    if not args.no_record:
        with open(os.path.join(vvols.ROOT, "bench", "RESULTS.md"), "a") as f:
            f.write(text)


if __name__ == "__main__":
    main()
