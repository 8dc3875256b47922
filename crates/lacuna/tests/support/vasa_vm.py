"""A VM's life on vVols as vCenter and an ESXi host drive it: every call over
VASA with zeep, every byte over iSCSI through the protocol endpoint with the
raw initiator (vvol_host.py on raw_iscsi.py), as the host finds it in band.
Prints one line per check and exits non-zero on the first mismatch; the last
lines name what is left for the test to check against the REST API.

Each answer that has a REST counterpart is checked against the REST API's
view (rest() below: the same vVol service seen through the other binding).

Usage: vasa_vm.py PORT API_PORT TOKEN DIR TARGET_IQN INITIATOR (DIR holds
provider.pem, client.pem and client.key, and takes scratch files)."""

import base64
import datetime
import os
import struct
import sys

import requests

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from vasa_zeep import check, connect, fault_of, register  # noqa: E402
from vvol_host import Host  # noqa: E402
from zeep import xsd  # noqa: E402

port, api_port, token, work, target, initiator = sys.argv[1:7]
MIB = 1 << 20
NAMESPACE = "com.lacuna.vasa"
VM = "5003e2d1-7a4b-4c1e-9f00-00000000b001"
CLONE_VM = "5003e2d1-7a4b-4c1e-9f00-00000000b002"



def rest(method, path, body=None):
    """The REST API's answer (JSON), which must succeed."""
    r = requests.request(method, f"http://127.0.0.1:{api_port}{path}", json=body,
                         headers={"Authorization": f"Bearer {token}"}, timeout=60)
    if r.status_code >= 300:
        check(f"REST {method} {path}: {r.status_code} {r.text}", False)
    return r.json() if r.text else None


session, c = connect(port, work)
register(c, token, work)
ctx = c.service.setContext(usageContext={
    "hostGuid": "esx1-guid",
    "hostInitiator": [{"iscsiIdentifier": initiator}],
})
array = c.service.queryArrays()[0]
check("the array is the one REST names", array.uniqueIdentifier.startswith("lacuna:"))
containers = c.service.queryStorageContainer()
check("the containers are REST's", sorted(x.name for x in containers)
      == sorted(x["container"] for x in rest("GET", "/v1/vvol-containers")))
check("the containers of the array",
      sorted(c.service.queryStorageContainerForArray(arrayId=array.uniqueIdentifier))
      == sorted(x.uniqueIdentifier for x in containers))


def task_result(task, what):
    check(f"{what}: the task succeeded", task.taskState == "Success" and task.error is None)
    check(f"{what}: the task polls the same", c.service.getTaskUpdate(taskId=task.taskId).taskState
          == "Success")
    return task.result


def metadata(vm, vvol_type, name):
    return [{"parameterName": "VMW_VmID", "parameterValue": vm},
            {"parameterName": "VMW_VVolType", "parameterValue": vvol_type},
            {"parameterName": "VMW_VVolName", "parameterValue": name}]


def info_of(vvol):
    [info] = c.service.queryVirtualVolumeInfo(vvolId=[vvol])
    return {m.parameterName: m.parameterValue for m in info.metadata}


def capability(name, value):
    return {"capabilityId": {"id": name, "namespace": NAMESPACE},
            "constraint": [{"propertyInstance": [{"id": name, "value": value}]}]}


def profile(profile_id, *capabilities):
    return {"constraints": {"subProfiles": [{"capability": list(capabilities), "name": "rules"}]},
            "createdBy": "vcenter", "creationTime": datetime.datetime.now(datetime.timezone.utc),
            "generationId": 1, "name": profile_id, "profileId": profile_id}


# ---- the protocol endpoint, found in band
pe_ids = c.service.queryProtocolEndpointForArray(arrayId=array.uniqueIdentifier)
check("the host's one protocol endpoint", len(pe_ids) == 1)
[pe] = c.service.queryProtocolEndpoint(peId=pe_ids)
check("a SCSI PE named by its NAA", pe.inBandId.protocolEndpointType == "SCSI"
      and pe.inBandId.lunId.startswith("naa.6"))
check("the PE's in-band id is REST's",
      [pe.inBandId.lunId] == [e["protocol_endpoint"]["in_band_id"]
                              for e in rest("GET", "/v1/protocol-endpoints") if e["host"] == "esx1"])
portal = pe.transportIpAddress[0]
host = Host(int(portal.rsplit(":", 1)[1]), target, initiator)


def lun_number(field):
    raw = bytes.fromhex(field)
    return raw[1] if raw[0] >> 6 == 0 else ((raw[0] & 0x3F) << 8) | raw[1]


def naa_of(lun):
    answer = host.command([lun], "12018300ff00", data_in_length=255)
    data = bytes.fromhex(answer["data"])
    at = 4
    while at + 4 <= len(data):
        kind, length = data[at + 1] & 0x0F, data[at + 3]
        if kind == 3 and (data[at + 1] >> 4) & 3 == 0:
            return "naa." + data[at + 4:at + 4 + length].hex()
        at += 4 + length
    return None


def beneath(pe_lun):
    """The LUNs REPORT LUNS (SELECT REPORT 12h) lists under the PE, but the PE."""
    own = "%04x" % pe_lun + "00" * 6
    listed = host.report_luns([pe_lun], 0x12)["luns"]
    check("REPORT LUNS 12h lists the PE itself", own in listed)
    return sorted(f for f in listed if f != own)


luns = [lun_number(f) for f in host.report_luns([0], 0)["luns"]]
pe_lun = next((n for n in luns if naa_of(n) == pe.inBandId.lunId), None)
check(f"the PE's NAA is one of the LUNs the host sees ({luns})", pe_lun is not None)
host.clear_ua([pe_lun])
check("nothing bound beneath the PE yet", beneath(pe_lun) == [])

# ---- the VM: a Config, two Data disks (one with a profile), a Swap
defaults = c.service.queryDefaultProfileForStorageContainer(containerId="default",
                                                             entityType=["Data"])
rules = {cap.capabilityId.id: cap.constraint[0].propertyInstance[0].value
         for cap in defaults[0].constraints.subProfiles[0].capability}
check("the container's defaults are a profile of this namespace",
      set(rules) == {"Provisioning", "Deduplication", "Compression", "ReclaimPolicy"})
policy = rest("GET", "/v1/containers/default")["policy"]
check("the default profile is the container's policy", rules["Deduplication"] == policy["dedup"])
gold = profile("gold-1", capability("Provisioning", xsd.AnyObject(xsd.String(), "thin")),
               capability("Deduplication", xsd.AnyObject(xsd.Boolean(), rules["Deduplication"])))
wrong = "zstd" if rules["Compression"] != "zstd" else "lz4"
check("a profile the container cannot meet is InvalidProfile",
      fault_of(c.service.createVirtualVolume, containerId="default", vvolType="Data",
               storageProfile=profile("bad", capability(
                   "Compression", xsd.AnyObject(xsd.String(), wrong))),
               sizeInMB=64, metadata=metadata(VM, "Data", "bad.vmdk")) == "InvalidProfile")
sizes = {"Config": 64, "Data": 128, "Swap": 32}
vm = {}
for key, kind, name, prof in [("config", "Config", "vm.vmx", None),
                              ("a", "Data", "vm.vmdk", None),
                              ("b", "Data", "vm_1.vmdk", gold),
                              ("swap", "Swap", "vm.vswp", None)]:
    task = c.service.createVirtualVolume(containerId="default", vvolType=kind, storageProfile=prof,
                                         sizeInMB=sizes[kind], metadata=metadata(VM, kind, name))
    vm[key] = task_result(task, f"create {name}")
check("the VM's vVols found by its id",
      sorted(c.service.queryVirtualVolume(searchConstraint=[{"key": "VMW_VmID", "value": VM}]))
      == sorted(vm.values()))
[compliance] = c.service.queryComplianceResult(compliance=[{"objectId": [vm["b"]],
                                                            "profileId": "gold-1"}])
check("the disk with a profile complies with it",
      compliance.complianceStatus == "compliant" and compliance.profileId == "gold-1")
check("a provisioning change is NotSupported",
      fault_of(c.service.updateStorageProfileForVirtualVolume, vvolId=vm["b"],
               newStorageProfile=profile("gold-2", capability(
                   "Provisioning", xsd.AnyObject(xsd.String(), "eagerzeroedthick")))) == "NotSupported")
task_result(c.service.updateStorageProfileForVirtualVolume(
    vvolId=vm["b"], newStorageProfile=profile("gold-3", capability(
        "Provisioning", xsd.AnyObject(xsd.String(), "thin")))), "update the profile")
check("the new profile is kept", info_of(vm["b"]).get("LACUNA_StorageProfileId") == "gold-3")

# ---- power on: one batch bind, the subsidiary LUNs under the PE
order = ["config", "a", "b", "swap"]
answers = c.service.bindVirtualVolume(vvolId=[vm[k] for k in order], bindContext="Normal")
check("every bind answered, none failed", len(answers) == 4 and all(a.fault is None for a in answers))
handles = {}
for key, answer in zip(order, answers):
    handle = answer.vvolHandle
    check(f"{key} bound under the PE", handle.peInBandId.lunId == pe.inBandId.lunId
          and handle.vvolSecondaryId.startswith("0xe2"))
    handles[key] = handle
lun = {k: [pe_lun, int(h.vvolSecondaryId, 16) & ((1 << 40) - 1)] for k, h in handles.items()}
for item in rest("POST", "/v1/vvols/info", {"ids": [vm[k] for k in order]}):
    check(f"REST sees {item['id']} bound to esx1", item["result"]["bound_hosts"] == ["esx1"])
host.clear_ua([pe_lun])
listed = beneath(pe_lun)
expected = sorted("%04x" % pe_lun + h.vvolSecondaryId[2:] for h in handles.values())
check("the PE lists exactly the bound vVols", listed == expected)
for key in order:
    kind = "Config" if key == "config" else "Swap" if key == "swap" else "Data"
    check(f"{key} is its size", host.capacity(lun[key])["bytes"] == sizes[kind] * MIB)


def chunk_bitmap(result):
    """A VirtualVolumeBitmapResult's bitmap (zeep answers a one-element type as its element)."""
    return result if isinstance(result, bytes) else result.chunkBitmap


def noise(seed, length):
    out = bytearray()
    block = seed
    while len(out) < length:
        block = (block * 6364136223846793005 + 1442695040888963407) % (1 << 64)
        out += struct.pack(">Q", block) * 64
    return bytes(out[:length])


def write(key, offset, data):
    path = os.path.join(work, "out")
    with open(path, "wb") as f:
        f.write(data)
    host.write_file(lun[key], path, offset)


def read(key, offset, length):
    path = os.path.join(work, "in")
    host.read_file(lun[key], path, offset, length)
    with open(path, "rb") as f:
        return f.read()


first = {k: noise(i + 1, 2 * MIB) for i, k in enumerate(order)}
for key in order:
    write(key, 0, first[key])
check("SYNCHRONIZE CACHE", host.sync(lun["a"])["status"] == "good")
for key in order:
    check(f"{key} reads back", read(key, 0, 2 * MIB) == first[key])
[stats] = c.service.spaceStatsForVirtualVolume(vvolId=[vm["a"]])
check("the disk's space counts what was written",
      stats.objectId == vm["a"] and stats.committed >= 2 * MIB and stats.logical == 128 * MIB)
check("the disk's space is REST's",
      stats.committed == rest("GET", f"/v1/vvols/{vm['a']}/space")["written_bytes"])
container_stats = c.service.spaceStatsForStorageContainer(containerId="default")
container_rest = rest("GET", "/v1/vvol-containers/default")
check("the container's space is REST's", container_stats[0].logicalUsed
      == container_rest["used_bytes"] and container_stats[0].logicalFree > 0)
bitmap = c.service.allocatedBitmapVirtualVolume(vvolId=vm["a"], segmentStartOffsetBytes=0,
                                                segmentLengthBytes=16 * MIB, chunkSizeBytes=MIB)
bits = chunk_bitmap(bitmap)
check("the allocated bitmap marks the first 2 MiB and nothing after",
      len(bits) == 2 and bits[0] & 0xC0 == 0xC0 and bits[0] & 0x3F == 0 and bits[1] == 0)
by_rest = rest("POST", f"/v1/vvols/{vm['a']}/allocated-bitmap",
               {"offset_bytes": 0, "length_bytes": 16 * MIB, "chunk_bytes": MIB})
check("the bitmap is REST's", base64.b64decode(by_rest["bitmap"]) == bits)

# ---- a snapshot of both disks, in two phases
snapshots = {}
for key in ["a", "b"]:
    task = c.service.prepareToSnapshotVirtualVolume(vvolId=vm[key], snapType="SnapshotReadOnly")
    prepared = task_result(task, f"prepare the snapshot of {key}")
    check(f"the snapshot of {key} is prepared for it", prepared.parentInfo.vvolId == vm[key])
    snapshots[key] = prepared.snapshotId
statuses = c.service.snapshotVirtualVolume(
    snapshotInfo=[{"vvolId": snapshots[k], "metadata": metadata(VM, "Data", f"snap-{k}")}
                  for k in ["a", "b"]], timeoutMS=10000)
check(f"both snapshots committed in one batch ({statuses})",
      all(s.errorResult is None for s in statuses))
for key in ["a", "b"]:
    snap = rest("GET", f"/v1/vvols/{snapshots[key]}")
    check(f"REST sees the snapshot of {key}", snap["snapshot"]["base"] == vm[key])
second = noise(9, MIB)
write("a", 0, second)
unshared = c.service.unsharedBitmapVirtualVolume(vvolId=vm["a"], baseVvolId=snapshots["a"],
                                                 segmentStartOffsetBytes=0,
                                                 segmentLengthBytes=16 * MIB, chunkSizeBytes=MIB)
check("only the rewritten MiB is unshared with the snapshot",
      chunk_bitmap(unshared)[:2] == bytes([0x80, 0]))
chunks = c.service.unsharedChunksVirtualVolume(vvolId=vm["a"], baseVvolId=snapshots["a"],
                                               segmentStartOffsetBytes=0,
                                               segmentLengthBytes=16 * MIB)
check("unshared chunks count it", chunks.unsharedChunks >= 1 and chunks.scannedChunks >= 1)
[bound] = c.service.bindVirtualVolume(vvolId=[snapshots["a"]], bindContext="Normal")
lun["snap-a"] = [pe_lun, int(bound.vvolHandle.vvolSecondaryId, 16) & ((1 << 40) - 1)]
check("the snapshot holds the data before", read("snap-a", 0, 2 * MIB) == first["a"])
refused = host.command(lun["snap-a"], "8a00" + "00" * 8 + "00000001" + "0000", data_out="00" * 512)
check("a write to the snapshot is DATA PROTECT", refused["status"].startswith("2 07/"))
check("the disk has the data after", read("a", 0, MIB) == second)

# ---- clones
for kind, call in [("clone", c.service.cloneVirtualVolume),
                   ("fast clone", c.service.fastCloneVirtualVolume)]:
    task = call(vvolId=vm["a"], metadata=metadata(CLONE_VM, "Data", f"{kind}.vmdk"))
    copy = task_result(task, kind)
    [bound] = c.service.bindVirtualVolume(vvolId=[copy], bindContext="Normal")
    lun[kind] = [pe_lun, int(bound.vvolHandle.vvolSecondaryId, 16) & ((1 << 40) - 1)]
    check(f"the {kind} holds the disk's data",
          read(kind, 0, 2 * MIB) == second + first["a"][MIB:])
    write(kind, 0, noise(20, MIB))
    check(f"a write to the {kind} does not reach its source", read("a", 0, MIB) == second)
    vm[kind] = copy

# ---- revert and resize
check("a revert to another disk's snapshot is IncompatibleVolume",
      fault_of(c.service.revertVirtualVolume, vvolId=vm["a"],
               snapshotVvolId=snapshots["b"]) == "IncompatibleVolume")
task_result(c.service.revertVirtualVolume(vvolId=vm["a"], snapshotVvolId=snapshots["a"]), "revert")
host.clear_ua(lun["a"])
check("the reverted disk holds the snapshot's data", read("a", 0, 2 * MIB) == first["a"])
task_result(c.service.resizeVirtualVolume(vvolId=vm["b"], sizeInMB=256), "resize")
host.clear_ua(lun["b"])
check("the host sees the new size", host.capacity(lun["b"])["bytes"] == 256 * MIB)
check("REST sees the new size", rest("GET", f"/v1/vvols/{vm['b']}")["size_bytes"] == 256 * MIB)
check("the data before the resize stays", read("b", 0, 2 * MIB) == first["b"])
check("shrinking is refused", fault_of(c.service.resizeVirtualVolume, vvolId=vm["b"],
                                       sizeInMB=64) is not None)

# ---- metadata, events, tasks, alarms
c.service.updateVirtualVolumeMetaData(vvolId=vm["config"], keyValuePair=[
    {"parameterName": "VMW_GosType", "parameterValue": "debian12_64Guest"}])
check("metadata updated", info_of(vm["config"]).get("VMW_GosType") == "debian12_64Guest")
check("REST sees the metadata", rest("GET", f"/v1/vvols/{vm['config']}")["metadata"]
      .get("VMW_GosType") == "debian12_64Guest")
events = c.service.getEvents(lastEventId=-1)
check("the creates and the metadata change are events",
      {e.objectId for e in events if e.eventType == "Config"} >= {vm["config"], vm["a"]})
last = max(e.eventId for e in events)
check("the events are REST's", last == max(e["id"] for e in rest("GET", "/v1/vvol-events?since=0")))
check("no event after the last seen", c.service.getEvents(lastEventId=last) == [])
alarms = c.service.getAlarms(lastAlarmId=-1)
check("no alarm on a fresh array", alarms == [])
check("no task is running", c.service.getCurrentTask() == [])
done = c.service.createVirtualVolume(containerId="default", vvolType="Other", sizeInMB=16,
                                     metadata=metadata(VM, "Other", "vm.nvram"))
vm["nvram"] = task_result(done, "create vm.nvram")
by_rest = rest("GET", f"/v1/vvol-tasks/{done.taskId}")
check("the task is REST's", by_rest["state"] == "Success" and by_rest["result"] == done.result)
check("a finished task cannot be cancelled",
      fault_of(c.service.cancelTask, taskId=done.taskId) == "NotCancellable")
check("an unknown task is NotFound", fault_of(c.service.getTaskUpdate, taskId="9999999") in
      ("NotFound", "InvalidArgument"))
check("no message catalog (docs/LIMITS.md)", c.service.queryCatalog() == [])

# ---- power off: unbind in one batch, then everything else at once
statuses = c.service.unbindVirtualVolume(
    vvolHandle=[handles[k] for k in order], unbindContext="Normal")
check("the VM's vVols unbound", len(statuses) == 4 and all(s.errorResult is None for s in statuses))
host.clear_ua([pe_lun])
left = beneath(pe_lun)
check("the PE lists only the snapshot and the clones", len(left) == 3)
c.service.unbindAllVirtualVolumesFromHost()
host.clear_ua([pe_lun])
check("the PE lists nothing", beneath(pe_lun) == [])
for item in rest("POST", "/v1/vvols/info", {"ids": [vm[k] for k in order]}):
    check(f"REST sees {item['id']} unbound", item["result"]["bound_hosts"] == [])

# ---- delete the VMs (the snapshots go with their base)
for key in ["clone", "fast clone", "config", "a", "b", "swap", "nvram"]:
    c.service.deleteVirtualVolume(vvolId=vm[key])
left = c.service.queryVirtualVolume(searchConstraint=[{"key": "VMW_VmID", "value": VM}])
left += c.service.queryVirtualVolume(searchConstraint=[{"key": "VMW_VmID", "value": CLONE_VM}])
check(f"nothing of the VMs is left ({left})", left == [])
host.session.logout()
host.session.close()
print("deleted " + " ".join(sorted(set(vm.values()) | set(snapshots.values()))))
print("done")
