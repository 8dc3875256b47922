"""What the VASA test clients share: a zeep client on the provider's served
WSDL over HTTPS (trusting only the provider's certificate, presenting the
client's), checks printed one a line, and the VASA fault of a failed call."""

import os
import sys

import requests
import zeep
from zeep.transports import Transport


def connect(port, work, cert="client", trust="provider.pem"):
    """A requests session and a zeep client of the provider on `port`: it
    trusts the PEM file `trust` and presents `cert`.pem / `cert`.key (none
    when `cert` is None), both in `work`."""
    s = requests.Session()
    s.trust_env = False  # REQUESTS_CA_BUNDLE would replace the provider's certificate
    s.verify = os.path.join(work, trust)
    if cert:
        s.cert = (os.path.join(work, f"{cert}.pem"), os.path.join(work, f"{cert}.key"))
    base = f"https://127.0.0.1:{port}/vasa"
    return s, zeep.Client(f"{base}/vasaService.wsdl", transport=Transport(session=s))


def check(what, ok):
    print(f"{'ok' if ok else 'FAIL'} {what}", flush=True)
    if not ok:
        sys.exit(1)


def fault_of(call, *args, **kwargs):
    """The VASA fault `call` answers (the detail's element name), else None."""
    try:
        call(*args, **kwargs)
    except zeep.exceptions.Fault as f:
        return f.detail[0].tag.split("}")[1] if f.detail is not None and len(f.detail) else f.code
    return None


def register(c, token, work):
    """Registers the client certificate with the provider's credentials."""
    with open(os.path.join(work, "client.pem")) as f:
        return c.service.registerVASACertificate(userName="vasa", password=token,
                                                 newCertificate=f.read())
