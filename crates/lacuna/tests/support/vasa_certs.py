"""The provider's certificates as vCenter's certificate authority manages
them, with zeep over HTTPS and a CA made here with openssl: requestCSR, the
CA-signed certificate installed (sessions made before it end, the connection
then presents it), the CA registered so that a client certificate it issued
needs no registration, a CRL that revokes that client, and a client
certificate unregistered. Prints one line per check, exits non-zero on the
first mismatch. Usage: vasa_certs.py PORT TOKEN DIR (DIR holds
provider.pem, client.pem and client.key; the CA's files go there too)."""

import os
import socket
import ssl
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from vasa_zeep import check, connect, fault_of, register  # noqa: E402

port, token, work = sys.argv[1], sys.argv[2], sys.argv[3]


def path(name):
    return os.path.join(work, name)


def openssl(*args):
    subprocess.run(["openssl", *args], check=True, capture_output=True)


def read(name):
    with open(path(name)) as f:
        return f.read()


def write(name, text):
    with open(path(name), "w") as f:
        f.write(text)


def served_certificate():
    """The DER certificate the provider presents to a new connection."""
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    with socket.create_connection(("127.0.0.1", int(port))) as raw:
        with context.wrap_socket(raw) as tls:
            return tls.getpeercert(binary_form=True)


def der(pem_name):
    return ssl.PEM_cert_to_DER_cert(read(pem_name))


# ---- the CA, with an openssl ca database so it can revoke and issue CRLs
os.makedirs(path("ca-db"), exist_ok=True)
write("ca-db/index.txt", "")
write("ca-db/crlnumber", "1000\n")
write("ca.cnf", f"""[ca]
default_ca = test
[test]
database = {path("ca-db/index.txt")}
crlnumber = {path("ca-db/crlnumber")}
certificate = {path("ca.pem")}
private_key = {path("ca.key")}
default_md = sha256
default_crl_days = 7
""")
openssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
        "-subj", "/CN=Lacuna test VMCA", "-days", "3650", "-keyout", path("ca.key"),
        "-out", path("ca.pem"), "-addext", "basicConstraints=critical,CA:TRUE",
        "-addext", "keyUsage=critical,keyCertSign,cRLSign")
write("issue.ext", "basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature\n"
                   "extendedKeyUsage=clientAuth\n")


def issue_client(name):
    """A client certificate the CA issues (as VMCA issues vCenter's)."""
    openssl("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
            "-subj", f"/CN={name}", "-keyout", path(f"{name}.key"), "-out", path(f"{name}.csr"))
    openssl("x509", "-req", "-in", path(f"{name}.csr"), "-CA", path("ca.pem"),
            "-CAkey", path("ca.key"), "-CAcreateserial", "-days", "365",
            "-extfile", path("issue.ext"), "-out", path(f"{name}.pem"))


def client_session(cert_name, trust):
    """A zeep client presenting `cert_name` and trusting the PEM file `trust`."""
    return connect(port, work, cert=cert_name, trust=trust)


def set_context(c):
    return c.service.setContext(usageContext={"hostGuid": "certs"})


session, c = connect(port, work)
register(c, token, work)
set_context(c)
self_signed = der("provider.pem")
check("the provider serves its self-signed certificate", served_certificate() == self_signed)

# ---- requestCSR, signed by the CA, installed
csr = c.service.requestCSR()
check("requestCSR answers a PEM request", csr.startswith("-----BEGIN CERTIFICATE REQUEST-----"))
write("provider.csr", csr)
write("provider.ext", "basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature\n"
                      "extendedKeyUsage=serverAuth\nsubjectAltName=IP:127.0.0.1,DNS:localhost\n")
openssl("x509", "-req", "-in", path("provider.csr"), "-CA", path("ca.pem"), "-CAkey",
        path("ca.key"), "-CAcreateserial", "-days", "3000", "-extfile", path("provider.ext"),
        "-out", path("provider-signed.pem"))
openssl("x509", "-req", "-in", path("provider.csr"), "-CA", path("ca.pem"), "-CAkey",
        path("ca.key"), "-CAcreateserial", "-days", "2", "-extfile", path("provider.ext"),
        "-out", path("provider-short.pem"))
check("a certificate expiring before the current one needs forceApply",
      fault_of(c.service.registerCASignedProviderCertificate,
               providerCert=read("provider-short.pem"), forceApply=False) == "InvalidCertificate")
check("a certificate for another key is refused",
      fault_of(c.service.registerCASignedProviderCertificate,
               providerCert=read("ca.pem"), forceApply=True) == "InvalidCertificate")
check("nothing was installed by the refusals", served_certificate() == self_signed)
# One that expires in 2 days, forced: the expiry alarm is raised (Yellow) at once.
c.service.registerCASignedProviderCertificate(providerCert=read("provider-short.pem"),
                                              forceApply=True)
write("trust.pem", read("provider.pem") + read("ca.pem"))
_, watcher = client_session("client", "ca.pem")
set_context(watcher)
alarms = watcher.service.getAlarms(lastAlarmId=-1)
check(f"a certificate 2 days from expiry raises a Yellow alarm ({alarms})",
      [(a.messageId, a.status) for a in alarms] == [("lacuna.vasa.certificate.expiry", "Yellow")])
last_alarm = alarms[-1].alarmId
c = watcher
c.service.registerCASignedProviderCertificate(providerCert=read("provider-signed.pem"),
                                              forceApply=False)
check("a new connection is presented the CA-signed certificate",
      served_certificate() == der("provider-signed.pem"))
check("the session made before the change is over",
      fault_of(c.service.queryArrays) == "InvalidSession")
_, by_ca = client_session("client", "ca.pem")
set_context(by_ca)
alarms = by_ca.service.getAlarms(lastAlarmId=last_alarm)
check(f"the long-lived certificate clears the alarm ({alarms})",
      [(a.messageId, a.status) for a in alarms] == [("lacuna.vasa.certificate.expiry", "Green")])
check("a client trusting only the CA verifies the provider (name 127.0.0.1)",
      len(by_ca.service.queryArrays()) == 1)

# ---- the CA registered: a client it issued needs no registration
issue_client("vc2")
_, vc2 = client_session("vc2", "ca.pem")
check("an unregistered client of an unregistered CA gets no session",
      fault_of(set_context, vc2) == "InvalidSession")
check("registering CAs needs the provider's password",
      fault_of(by_ca.service.registerCACertificatesAndCRLs, providerUserName="vasa",
               providerPassword="wrong", caRootCert=[read("ca.pem")]) == "InvalidLogin")
by_ca.service.registerCACertificatesAndCRLs(providerUserName="vasa", providerPassword=token,
                                            caRootCert=[read("ca.pem")])
set_context(vc2)
check("a client the registered CA issued gets a session", len(vc2.service.queryArrays()) == 1)
check("the CA is listed", [ssl.PEM_cert_to_DER_cert(pem) for pem in
                          vc2.service.queryCACertificates()] == [der("ca.pem")])
check("a leaf certificate is no CA root",
      fault_of(vc2.service.refreshCACertificatesAndCRLs,
               caRootCert=[read("vc2.pem")]) == "InvalidCertificate")

# ---- a CRL revokes that client
openssl("ca", "-config", path("ca.cnf"), "-revoke", path("vc2.pem"))
openssl("ca", "-config", path("ca.cnf"), "-gencrl", "-out", path("ca.crl"))
vc2.service.refreshCACertificatesAndCRLs(caRootCert=[read("ca.pem")], caCRL=[read("ca.crl")])
check("the CRL is listed", len(vc2.service.queryCACertificateRevocationLists()) == 1)
_, vc2_again = client_session("vc2", "ca.pem")
check("the revoked client gets no new session", fault_of(set_context, vc2_again) == "InvalidSession")

# ---- the first client's certificate unregistered
by_ca.service.unregisterVASACertificate(existingCertificate=read("client.pem"))
_, gone = client_session("client", "ca.pem")
check("an unregistered client gets no new session", fault_of(set_context, gone) == "InvalidSession")
check("unregistering it again is InvalidCertificate",
      fault_of(by_ca.service.unregisterVASACertificate,
               existingCertificate=read("client.pem")) == "InvalidCertificate")
print("done")
