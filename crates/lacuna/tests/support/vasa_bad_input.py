"""Bad input to the VASA provider over HTTPS with python-requests: each
malformed request gets its SOAP fault (or HTTP error) and changes nothing;
the provider answers a good call afterwards. Prints one line per check and
exits non-zero on the first mismatch; the last line says how many vVols the
session sees (the test checks the REST API agrees nothing was made).
Usage: vasa_bad_input.py PORT TOKEN DIR (DIR as vasa_client.py's)."""

import os
import re
import socket
import ssl
import subprocess
import sys
import time

import requests

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from vasa_zeep import check, connect, fault_of, register  # noqa: E402

port, token, work = sys.argv[1], sys.argv[2], sys.argv[3]
URL = f"https://127.0.0.1:{port}/vasa/services/vasaService"
SOAP11 = "http://schemas.xmlsoap.org/soap/envelope/"
VASA = "http://com.vmware.vim.vasa/2.0/xsd"

session, c = connect(port, work)
register(c, token, work)
c.service.setContext(usageContext={"hostGuid": "bad-input"})


def envelope(body, header="", ns=SOAP11):
    return (f'<?xml version="1.0"?><s:Envelope xmlns:s="{ns}" xmlns:v="{VASA}">'
            f'{header}<s:Body>{body}</s:Body></s:Envelope>').encode()


def post(data, action='"urn:vasa"', session_id=None):
    headers = {"Content-Type": "text/xml; charset=utf-8", "SOAPAction": action}
    if session_id is None:
        return session.post(URL, data=data, headers=headers)
    # Alone, without the session's cookie jar (which holds the real id).
    headers["Cookie"] = f"VASASESSIONID={session_id}"
    alone = requests.Session()
    alone.trust_env = False
    alone.verify, alone.cert = session.verify, session.cert
    return alone.post(URL, data=data, headers=headers)


def fault(response):
    """(HTTP status, faultcode, VASA fault element or None)."""
    text = response.text
    code = re.search(r"<faultcode>([^<]*)</faultcode>", text)
    detail = re.search(r"<detail><vasa:(\w+)", text)
    return (response.status_code, code.group(1) if code else None,
            detail.group(1) if detail else None)


def expect(what, response, status, code, vasa=None):
    got = fault(response)
    message = re.search(r"<faultstring>([^<]*)</faultstring>", response.text)
    check(f"{what}: {got} {message.group(1) if message else ''}", got == (status, code, vasa))


create = ('<v:createVirtualVolume><v:containerId>default</v:containerId>'
          '<v:vvolType>Data</v:vvolType><v:sizeInMB>{size}</v:sizeInMB>'
          '<v:metadata xmlns:d="http://data.vasa.vim.vmware.com/xsd">'
          '<d:parameterName>VMW_VmID</d:parameterName><d:parameterValue>bad</d:parameterValue>'
          '</v:metadata></v:createVirtualVolume>')
expect("not XML", post(b"<<<not xml"), 500, "soapenv:Client")
expect("truncated", post(envelope(create.format(size=16))[:-20]), 500, "soapenv:Client")
expect("a SOAP 1.2 envelope",
       post(envelope(create.format(size=16), ns="http://www.w3.org/2003/05/soap-envelope")),
       500, "soapenv:VersionMismatch")
expect("another root element", post(b'<?xml version="1.0"?><Envelope/>'), 500,
       "soapenv:VersionMismatch")
expect("a header that must be understood",
       post(envelope(create.format(size=16),
                     header='<s:Header><x:Tx xmlns:x="urn:x" s:mustUnderstand="1"/></s:Header>')),
       500, "soapenv:MustUnderstand")
expect("no Body", post(f'<s:Envelope xmlns:s="{SOAP11}"/>'.encode()), 500, "soapenv:Client")
expect("an unknown operation", post(envelope("<v:formatArray/>")), 500, "soapenv:Client")
expect("an operation in another namespace",
       post(envelope('<x:queryArrays xmlns:x="urn:other"/>')), 500, "soapenv:Client")
expect("two operations in one Body",
       post(envelope("<v:queryArrays/><v:queryArrays/>")), 500, "soapenv:Client")
expect("an empty Body without a SOAPAction", post(envelope(""), action=""), 500, "soapenv:Client")
expect("a size that is not a number", post(envelope(create.format(size="lots"))), 500,
       "soapenv:Client", "InvalidArgument")
expect("a size out of range", post(envelope(create.format(size="99999999999999999999"))), 500,
       "soapenv:Client", "InvalidArgument")
expect("a required element missing",
       post(envelope("<v:createVirtualVolume><v:containerId>default</v:containerId>"
                     "</v:createVirtualVolume>")), 500, "soapenv:Client", "InvalidArgument")
expect("an element out of order",
       post(envelope('<v:createVirtualVolume><v:vvolType>Data</v:vvolType>'
                     '<v:containerId>default</v:containerId><v:sizeInMB>1</v:sizeInMB>'
                     '</v:createVirtualVolume>')), 500, "soapenv:Client", "InvalidArgument")
expect("a DOCTYPE (entity expansion)",
       post(b'<?xml version="1.0"?><!DOCTYPE x [<!ENTITY a "aaaa">]>' + envelope("&a;")[21:]),
       500, "soapenv:Client")
expect("an unknown entity", post(envelope("<v:queryArrays>&nope;</v:queryArrays>")), 500,
       "soapenv:Client")
deep = "<v:x>" * 100 + "</v:x>" * 100
expect("nesting past the depth limit", post(envelope(deep)), 500, "soapenv:Client")
big = envelope("<v:queryArrays>" + "<v:arrayUniqueId>x</v:arrayUniqueId>" * 500_000
               + "</v:queryArrays>")
with open(os.path.join(work, "big.xml"), "wb") as f:
    f.write(big)
# curl, as a client that sends a large body after "Expect: 100-continue", so
# the refusal arrives before the body is sent (python-requests sends it all
# first, and a server that will not read 18 MB resets that connection).
answer = subprocess.run(
    ["curl", "-s", "-o", "/dev/null", "-w", "%{http_code}", "--cacert", session.verify,
     "--cert", session.cert[0], "--key", session.cert[1], "-H", "Content-Type: text/xml",
     "-H", "SOAPAction: \"urn:queryArrays\"", "--data-binary", "@" + os.path.join(work, "big.xml"),
     URL], capture_output=True, text=True, timeout=60)
check(f"a body past 16 MiB is 413 ({answer.stdout})", answer.stdout == "413")
expect("a session id that was never given",
       post(envelope("<v:queryArrays/>"), session_id="12345"), 500, "soapenv:Server", "InvalidSession")
expect("a create into a container that does not exist",
       post(envelope(create.format(size=16).replace(">default<", ">nowhere<"))), 500,
       "soapenv:Server", "NotFound")
expect("a vVol id that is not one",
       post(envelope("<v:deleteVirtualVolume><v:vvolId>../../etc</v:vvolId>"
                     "</v:deleteVirtualVolume>")), 500, "soapenv:Client", "InvalidArgument")
_, short = connect(port, work)
short.service.setContext(usageContext={"hostGuid": "short", "sessionTimeoutInSeconds": 1})
check("a fresh short session works", len(short.service.queryArrays()) == 1)
time.sleep(2.5)
check("an expired session is InvalidSession", fault_of(short.service.queryArrays) == "InvalidSession")
check("an empty Body names its operation by SOAPAction",
      post(envelope(""), action='"urn:queryArrays"').status_code == 200)
check("GET of the service is not a call",
      session.get(URL).status_code in (405, 404))
check("an unknown path is 404", session.get(URL + "/x").status_code == 404)

# A connection that sends half a request and stops does not hold the provider.
raw = socket.create_connection(("127.0.0.1", int(port)))
tls = ssl._create_unverified_context().wrap_socket(raw)
tls.sendall(b"POST /vasa/services/vasaService HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\n<s:")
# Garbage where the TLS handshake should be.
junk = socket.create_connection(("127.0.0.1", int(port)))
junk.sendall(b"\x16\x03\x01\xff\xff" + b"\0" * 64)

answer = c.service.queryVirtualVolume(searchConstraint=[{"key": "VMW_VVolType", "value": "Data"}])
check("the provider still answers, and nothing was made", answer == [])
tls.close()
junk.close()
print("done")
