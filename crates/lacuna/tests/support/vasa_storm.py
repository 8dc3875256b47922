"""A boot storm over VASA, as when vCenter reconnects a cluster: HOSTS ESXi
hosts at once, each its own zeep session (setContext with its initiator),
each creating its VMs' vVols and binding them in one batch; then one
session flooded past its concurrency limit (each call answers or is
VasaProviderBusy, nothing else); then the provider restarted over the REST
API while a host writes to a bound vVol over iSCSI (the writes never fail,
the bindings stay, the old session is over; then every host makes a new
session at once, the storm a restart brings).

Prints one line per check and exits non-zero on the first mismatch; the
last lines give the Busy count and what the test checks over REST.
Usage: vasa_storm.py VASA_PORT API_PORT TOKEN DIR TARGET_IQN HOSTS
(hosts esx0..esx{HOSTS-1} exist with initiators iqn.1998-01.com.vmware:storm-<i>
and protocol endpoints)."""

import concurrent.futures
import os
import sys
import threading
import time

import requests

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from vasa_zeep import check, connect, fault_of, register  # noqa: E402
from vvol_host import Host, block_value, pattern, rw16, lun_field  # noqa: E402

vasa_port, api_port, token, work, target, hosts = sys.argv[1:7]
hosts = int(hosts)
VVOLS_PER_HOST = 4
PER_SESSION_LIMIT = 16
FLOOD_CALLS = 96


def initiator(i):
    return f"iqn.1998-01.com.vmware:storm-{i}"


def host_session(i):
    session, c = connect(vasa_port, work)
    c.service.setContext(usageContext={"hostGuid": f"guid-{i}",
                                       "hostInitiator": [{"iscsiIdentifier": initiator(i)}]})
    return session, c


def boot(i):
    """Host i: its session, its VM's vVols created and bound in one batch."""
    session, c = host_session(i)
    ids = []
    for k in range(VVOLS_PER_HOST):
        task = c.service.createVirtualVolume(
            containerId="default", vvolType="Data", sizeInMB=16,
            metadata=[{"parameterName": "VMW_VmID", "parameterValue": f"storm-vm-{i}"}])
        if task.taskState != "Success":
            return f"host {i}: create {k}: {task.taskState} {task.error}"
        ids.append(task.result)
    answers = c.service.bindVirtualVolume(vvolId=ids, bindContext="Normal")
    faults = [a.fault for a in answers if a.fault is not None]
    if len(answers) != len(ids) or faults:
        return f"host {i}: bind: {faults}"
    secondary = {a.vvolHandle.vvolSecondaryId for a in answers}
    if len(secondary) != len(ids):
        return f"host {i}: secondary ids repeat: {secondary}"
    return (session.cookies.get("VASASESSIONID"), ids, answers)


_, first = connect(vasa_port, work)
register(first, token, work)
with concurrent.futures.ThreadPoolExecutor(max_workers=hosts) as pool:
    booted = list(pool.map(boot, range(hosts)))
failures = [b for b in booted if isinstance(b, str)]
check(f"{hosts} hosts booted at once, every vVol created and bound ({failures[:3]})",
      not failures)
check("a session each", len({b[0] for b in booted}) == hosts)

# ---- one session flooded: at most 16 of its calls run at once, the rest Busy
session, flood = host_session(0)
ids = booted[0][1]
outcomes = {"ok": 0, "busy": 0}
other = []
lock = threading.Lock()
start = threading.Barrier(FLOOD_CALLS)


def flood_call(_):
    start.wait()
    fault = fault_of(flood.service.queryVirtualVolumeInfo, vvolId=ids * 256)
    kind = "ok" if fault is None else "busy" if fault == "VasaProviderBusy" else fault
    with lock:
        if kind in outcomes:
            outcomes[kind] += 1
        else:
            other.append(kind)


with concurrent.futures.ThreadPoolExecutor(max_workers=FLOOD_CALLS) as pool:
    list(pool.map(flood_call, range(FLOOD_CALLS)))
check(f"every flooded call answered or was Busy ({outcomes}, {other[:2]})",
      not other and outcomes["ok"] + outcomes["busy"] == FLOOD_CALLS)
check(f"at least the per-session limit answered ({outcomes})", outcomes["ok"] >= PER_SESSION_LIMIT)
check("the session works after the flood", len(flood.service.queryArrays()) == 1)

# ---- the provider restarted under I/O to a bound vVol
host0 = booted[0]
handle = host0[2][0].vvolHandle
_, c0 = host_session(0)
[pe] = c0.service.queryProtocolEndpoint()
portal_port = int(pe.transportIpAddress[0].rsplit(":", 1)[1])
iscsi = Host(portal_port, target, initiator(0))
luns = [bytes.fromhex(f)[1] for f in iscsi.report_luns([0], 0)["luns"]]
check("the host sees its PE", len(luns) == 1)
lun = [luns[0], int(handle.vvolSecondaryId, 16) & ((1 << 40) - 1)]
field = lun_field(lun)
iscsi.session.clear_unit_attentions(field)
BLOCK = 4096
written = {"n": 0, "error": None}
stop = threading.Event()


def writer():
    try:
        i = 0
        while not stop.is_set() and i < 2048:
            i += 1
            r = iscsi.session.command(field, rw16(0x8A, (i - 1) * BLOCK, BLOCK),
                                      data_out=pattern("S", i))
            if r.status != 0:
                raise RuntimeError(f"write {i}: status {r.status} sense {r.sense!r}")
            written["n"] = i
    except Exception as error:  # noqa: BLE001 - reported as a failure
        written["error"] = repr(error)


thread = threading.Thread(target=writer)
thread.start()
while written["n"] < 50 and thread.is_alive():
    time.sleep(0.01)
api = f"http://127.0.0.1:{api_port}"
auth = {"Authorization": f"Bearer {token}"}
before_restart = written["n"]
r = requests.post(f"{api}/v1/vasa/restart", headers=auth, timeout=60)
check(f"the provider restarted ({r.status_code})", r.status_code == 200 and r.json()["running"])
while written["n"] < before_restart + 200 and thread.is_alive():
    time.sleep(0.01)
stop.set()
thread.join(60)
check(f"writes went on through the restart ({written})",
      written["error"] is None and written["n"] >= before_restart + 200)
check("the session from before the restart is over",
      fault_of(c0.service.queryArrays) == "InvalidSession")
_, after = host_session(0)
infos = after.service.queryVirtualVolumeInfo(vvolId=host0[1])
check("the vVols are all there after the restart", len(infos) == VVOLS_PER_HOST)


def reconnect(i):
    """Host i after the restart: a new session, and its vVols all there."""
    _, c = host_session(i)
    return len(c.service.queryVirtualVolumeInfo(vvolId=booted[i][1])) == VVOLS_PER_HOST


with concurrent.futures.ThreadPoolExecutor(max_workers=hosts) as pool:
    back = list(pool.map(reconnect, range(hosts)))
check(f"after the restart, {hosts} hosts make new sessions at once and find their vVols",
      all(back))
n = written["n"]
r = iscsi.session.command(field, rw16(0x88, 0, n * BLOCK), data_in_length=n * BLOCK)
values = [block_value(r.data[k * BLOCK:(k + 1) * BLOCK]) for k in range(n)]
check("every block written reads back", r.status == 0 and values == list(range(1, n + 1)))
iscsi.session.logout()
iscsi.session.close()
print(f"busy {outcomes['busy']}")
print("bound " + " ".join(host0[1]))
print("done")
