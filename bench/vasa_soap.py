"""A lean VASA 2.0 client for the benchmarks: SOAP 1.1 envelopes written from
templates, sent on one kept-alive HTTPS connection (TLS to the provider's
certificate, with a client certificate), answers parsed with ElementTree.
It is as thin as a client can be, so what it measures is the provider's
cost, not a SOAP library's (zeep's own Python work would dominate); the
tests use zeep. Each call answers (parsed value, wall seconds of the round
trip incl. reading the body, seconds the client spent parsing)."""

import http.client
import os
import socket
import ssl
import subprocess
import time
import xml.etree.ElementTree as ET
from xml.sax.saxutils import escape

SOAP11 = "http://schemas.xmlsoap.org/soap/envelope/"
VASA = "http://com.vmware.vim.vasa/2.0/xsd"
DATA = "http://data.vasa.vim.vmware.com/xsd"
VVOL = "http://vvol.data.vasa.vim.vmware.com/xsd"
SERVICE = "/vasa/services/vasaService"


class SoapFault(RuntimeError):
    def __init__(self, kind, message):
        super().__init__(f"{kind}: {message}")
        self.kind = kind


def make_client_certificate(directory):
    """A self-signed client certificate and key (as vCenter makes one)."""
    key, cert = os.path.join(directory, "client.key"), os.path.join(directory, "client.pem")
    if not os.path.exists(cert):
        subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256",
                        "-nodes", "-subj", "/CN=bench-vcenter", "-days", "30", "-keyout", key, "-out", cert],
                       check=True, capture_output=True)
    return cert, key


def envelope(op, inner):
    return (f'<?xml version="1.0" encoding="UTF-8"?><s:Envelope xmlns:s="{SOAP11}" xmlns:v="{VASA}" '
            f'xmlns:d="{DATA}" xmlns:w="{VVOL}"><s:Body><v:{op}>{inner}</v:{op}></s:Body>'
            f'</s:Envelope>').encode()


def leaf(name, value):
    return f"<{name}>{escape(str(value))}</{name}>"


def pairs(tag, metadata):
    return "".join(f"<{tag}>{leaf('d:parameterName', k)}{leaf('d:parameterValue', v)}</{tag}>"
                   for k, v in metadata.items())


def text(element, path):
    found = element.find(path)
    return None if found is None else (found.text or "")


class SoapConn:
    """One kept-alive HTTPS connection and one VASA session on it."""

    def __init__(self, port, provider_pem, client_cert, client_key, initiator, host_guid, handles=None):
        self.port = port
        self.context = ssl.create_default_context(cafile=provider_pem)
        self.context.check_hostname = False  # the provider's names are the listen address's
        self.context.load_cert_chain(client_cert, client_key)
        self.http = None
        self.cookie = None
        self.initiator, self.host_guid = initiator, host_guid
        # vVol id -> (PE lun id, secondary id) from bind answers, for unbind.
        self.handles = {} if handles is None else handles

    def connect(self):
        self.http = http.client.HTTPSConnection("127.0.0.1", self.port, context=self.context, timeout=600)
        self.http.connect()
        self.http.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def call(self, op, inner=""):
        """One operation; answers (the response element, wall, parse seconds)."""
        body = envelope(op, inner)
        headers = {"Content-Type": "text/xml; charset=utf-8", "SOAPAction": f'"urn:{op}"',
                   "Connection": "keep-alive"}
        if self.cookie:
            headers["Cookie"] = f"VASASESSIONID={self.cookie}"
        for attempt in (0, 1):
            if self.http is None:
                self.connect()
            start = time.perf_counter()
            try:
                self.http.request("POST", SERVICE, body=body, headers=headers)
                resp = self.http.getresponse()
                raw = resp.read()
            except (http.client.RemoteDisconnected, BrokenPipeError, ConnectionResetError, ssl.SSLEOFError):
                # The provider closed an idle kept-alive connection (after 10 s); the session
                # (its cookie) outlives the connection.
                self.close()
                if attempt:
                    raise
                continue
            wall = time.perf_counter() - start
            break
        if resp.getheader("Connection", "").lower() == "close":
            self.close()
        cookie = resp.getheader("Set-Cookie", "")
        if cookie.startswith("VASASESSIONID="):
            self.cookie = cookie.split(";", 1)[0].split("=", 1)[1]
        t0 = time.perf_counter()
        root = ET.fromstring(raw)
        body_element = root.find(f"{{{SOAP11}}}Body")
        fault = body_element.find(f"{{{SOAP11}}}Fault")
        if fault is not None:
            detail = fault.find("detail")
            kind = detail[0].tag.split("}")[1] if detail is not None and len(detail) else text(fault, "faultcode")
            raise SoapFault(kind, text(fault, "faultstring"))
        answer = body_element.find(f"{{{VASA}}}{op}Response")
        return answer, wall, time.perf_counter() - t0

    def close(self):
        if self.http is not None:
            self.http.close()
            self.http = None

    # ---- session
    def register(self, password, client_pem_text):
        self.call("registerVASACertificate", leaf("v:userName", "vasa") + leaf("v:password", password)
                  + leaf("v:newCertificate", client_pem_text))

    def set_context(self):
        usage = (f"<v:usageContext>{leaf('d:hostGuid', self.host_guid)}<d:hostInitiator>"
                 f"{leaf('d:iscsiIdentifier', self.initiator)}</d:hostInitiator></v:usageContext>")
        _, wall, _ = self.call("setContext", usage)
        return wall

    # ---- the operations the workflows make, with the REST benchmark's answers' shapes
    def create(self, container, vvol_type, size_mib, metadata):
        inner = (leaf("v:containerId", container) + leaf("v:vvolType", vvol_type) + leaf("v:sizeInMB", size_mib)
                 + pairs("v:metadata", metadata))
        answer, wall, parse = self.call("createVirtualVolume", inner)
        task = answer.find(f"{{{VASA}}}return")
        state = text(task, "{*}taskState")
        if state != "Success":
            raise SoapFault("TaskError", f"createVirtualVolume task {state}")
        return text(task, "{*}result"), wall, parse

    def delete(self, vvol):
        _, wall, parse = self.call("deleteVirtualVolume", leaf("v:vvolId", vvol))
        return None, wall, parse

    def bind(self, ids):
        inner = "".join(leaf("v:vvolId", i) for i in ids) + leaf("v:bindContext", "Normal")
        answer, wall, parse = self.call("bindVirtualVolume", inner)
        out = []
        for item in answer.findall(f"{{{VASA}}}return"):
            vvol = text(item, f"{{{VVOL}}}vvolId")
            handle = item.find(f"{{{VVOL}}}vvolHandle")
            if item.find(f"{{{VVOL}}}fault") is not None or handle is None:
                out.append({"id": vvol, "fault": ET.tostring(item).decode()[:300]})
                continue
            lun_id = text(handle, f"{{{VVOL}}}peInBandId/{{{VVOL}}}lunId")
            self.handles[vvol] = (lun_id, text(handle, f"{{{VVOL}}}vvolSecondaryId"))
            out.append({"id": vvol, "result": {"host": "esx1", "protocol_endpoint": {"in_band_id": lun_id}}})
        return out, wall, parse

    def unbind(self, ids):
        inner = ""
        for i in ids:
            lun_id, secondary = self.handles[i]
            inner += (f"<v:vvolHandle>{leaf('d:uniqueIdentifier', i)}<w:peInBandId>{leaf('w:lunId', lun_id)}"
                      f"{leaf('w:protocolEndpointType', 'SCSI')}</w:peInBandId>"
                      f"{leaf('w:vvolSecondaryId', secondary)}</v:vvolHandle>")
        inner += leaf("v:unbindContext", "Normal")
        answer, wall, parse = self.call("unbindVirtualVolume", inner)
        return self.statuses(answer), wall, parse

    @staticmethod
    def statuses(answer):
        out = []
        for item in answer.findall(f"{{{VASA}}}return"):
            vvol = text(item, f"{{{VVOL}}}uniqueId")
            error = item.find(f"{{{VVOL}}}errorResult")
            out.append({"id": vvol, "fault": ET.tostring(error).decode()[:300]} if error is not None
                       else {"id": vvol, "result": True})
        return out

    def prepare(self, vvol):
        inner = leaf("v:vvolId", vvol) + leaf("v:snapType", "SnapshotReadOnly")
        answer, wall, parse = self.call("prepareToSnapshotVirtualVolume", inner)
        task = answer.find(f"{{{VASA}}}return")
        if text(task, "{*}taskState") != "Success":
            raise SoapFault("TaskError", "prepareToSnapshotVirtualVolume")
        result = task.find("{*}result")
        return {"base": text(result, "{*}parentInfo/{*}vvolId"),
                "snapshot_id": text(result, "{*}snapshotId")}, wall, parse

    def commit(self, snapshots, timeout_ms):
        inner = "".join(f"<v:snapshotInfo>{pairs('w:metadata', s['metadata'])}{leaf('w:vvolId', s['snapshot_id'])}"
                        f"</v:snapshotInfo>" for s in snapshots) + leaf("v:timeoutMS", timeout_ms)
        answer, wall, parse = self.call("snapshotVirtualVolume", inner)
        return self.statuses(answer), wall, parse

    def query(self, metadata):
        inner = "".join(f"<v:searchConstraint>{leaf('w:key', k)}{leaf('w:value', v)}</v:searchConstraint>"
                        for k, v in metadata.items())
        answer, wall, parse = self.call("queryVirtualVolume", inner)
        return [r.text for r in answer.findall(f"{{{VASA}}}return")], wall, parse

    def info(self, ids):
        answer, wall, parse = self.call("queryVirtualVolumeInfo", "".join(leaf("v:vvolId", i) for i in ids))
        t0 = time.perf_counter()
        out = []
        for item in answer.findall(f"{{{VASA}}}return"):
            metadata = {text(m, f"{{{DATA}}}parameterName"): text(m, f"{{{DATA}}}parameterValue")
                        for m in item.findall(f"{{{VVOL}}}metadata")}
            out.append({"id": text(item, f"{{{VVOL}}}vvolId"), "result": {"metadata": metadata}})
        return out, wall, parse + time.perf_counter() - t0

    def allocated_bitmap(self, vvol, offset, length, chunk):
        inner = (leaf("v:vvolId", vvol) + leaf("v:segmentStartOffsetBytes", offset)
                 + leaf("v:segmentLengthBytes", length) + leaf("v:chunkSizeBytes", chunk))
        answer, wall, parse = self.call("allocatedBitmapVirtualVolume", inner)
        return text(answer, f"{{{VASA}}}return/{{*}}chunkBitmap"), wall, parse

    def events(self, last):
        answer, wall, parse = self.call("getEvents", leaf("v:lastEventId", last))
        return [int(text(e, "{*}eventId")) for e in answer.findall(f"{{{VASA}}}return")], wall, parse
