"""A VASA client as vCenter and ESXi behave, with zeep (nobody here wrote it):
loads the WSDL the provider serves, registers a client certificate, makes a
session and runs calls, printing one line per check. Exits non-zero on any
mismatch. Usage: vasa_client.py PORT TOKEN DIR (DIR holds provider.pem,
client.pem, client.key)."""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from vasa_zeep import check, connect, fault_of  # noqa: E402

port, token, work = sys.argv[1], sys.argv[2], sys.argv[3]

session, c = connect(port, work)
check("setContext before registration is InvalidSession",
      fault_of(c.service.setContext, usageContext={"hostGuid": "h1"}) == "InvalidSession")
check("a wrong password is InvalidLogin",
      fault_of(c.service.registerVASACertificate, userName="vasa", password="no",
               newCertificate=open(os.path.join(work, "client.pem")).read()) == "InvalidLogin")
info = c.service.registerVASACertificate(userName="vasa", password=token,
                                         newCertificate=open(os.path.join(work, "client.pem")).read())
check("registration answers the provider's uid", info.uid.startswith("lacuna:"))
check("a call without a session is InvalidSession", fault_of(c.service.queryArrays) == "InvalidSession")
ctx = c.service.setContext(usageContext={"hostGuid": "h1",
                                         "hostInitiator": [{"iscsiIdentifier": "iqn.1998-01.com.vmware:esx1"}]})
check("setContext sets the VASASESSIONID cookie", session.cookies.get("VASASESSIONID") == ctx.sessionId)
check("the provider advertises its batch and per-session limits",
      ctx.maxBatchSize == 1024 and ctx.maxConcurrentRequestsPerSession == 16)
arrays = c.service.queryArrays()
check("one array", len(arrays) == 1 and arrays[0].uniqueIdentifier == info.uid)
containers = c.service.queryStorageContainer()
check("the default container", [x.name for x in containers] == ["default"])
task = c.service.createVirtualVolume(containerId="default", vvolType="Config", sizeInMB=4096,
                                     metadata=[{"parameterName": "VMW_VmID", "parameterValue": "vm1"}])
check("create answers a successful task", task.taskState == "Success" and task.result.startswith("rfc4122."))
check("the task polls", c.service.getTaskUpdate(taskId=task.taskId).taskState == "Success")
check("query finds it by metadata",
      c.service.queryVirtualVolume(searchConstraint=[{"key": "VMW_VmID", "value": "vm1"}]) == [task.result])
infos = c.service.queryVirtualVolumeInfo(vvolId=[task.result])
check("info answers its metadata", {m.parameterName: m.parameterValue for m in infos[0].metadata} == {"VMW_VmID": "vm1"})
events = c.service.getEvents(lastEventId=-1)
check("the create is an event", any(e.eventType == "Config" and e.objectId == task.result for e in events))
check("deleting a missing vVol is NotFound",
      fault_of(c.service.deleteVirtualVolume, vvolId="rfc4122.00000000-0000-4000-8000-000000000001") == "NotFound")
check("capabilities", c.service.queryCapabilityMetadata()[0].schemaId == "com.lacuna.vasa.capabilities")
c.service.deleteVirtualVolume(vvolId=task.result)
check("deleted", c.service.queryVirtualVolume(searchConstraint=[{"key": "VMW_VmID", "value": "vm1"}]) == [])
print(f"created {task.result}")
