"""Certificates for the TLS tests, made with `cryptography`.

Usage: tls_certs.py OUT_DIR

Writes PEM files to OUT_DIR:
- `ca.pem`: a CA; `server.pem`: the node's key and certificate chain (CN=localhost, SAN
  127.0.0.1 and localhost), signed by it, as Kafka's `ssl.keystore.location` PEM holds them;
- `client.pem`/`client.key`: CN=client-a,O=Example, signed by the CA, for mTLS;
- `expired.pem`/`expired.key`: signed by the CA, expired a day ago;
- `stranger-ca.pem`, `stranger.pem`/`stranger.key`: another CA and a client of it;
- `ca2.pem`, `server2.pem`: a second CA and a node certificate of it (for a reload).
"""

import datetime
import ipaddress
import sys

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

out = sys.argv[1]
now = datetime.datetime.now(datetime.timezone.utc)
day = datetime.timedelta(days=1)


def key():
    return ec.generate_private_key(ec.SECP256R1())


def pem_key(k):
    return k.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                           serialization.NoEncryption())


def pem_cert(c):
    return c.public_bytes(serialization.Encoding.PEM)


def name(**parts):
    attrs = {"cn": NameOID.COMMON_NAME, "o": NameOID.ORGANIZATION_NAME}
    return x509.Name([x509.NameAttribute(attrs[k], v) for k, v in parts.items()])


def ca(cn):
    k = key()
    subject = name(cn=cn)
    c = (x509.CertificateBuilder().subject_name(subject).issuer_name(subject)
         .public_key(k.public_key()).serial_number(x509.random_serial_number())
         .not_valid_before(now - day).not_valid_after(now + 30 * day)
         .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
         .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                      content_commitment=False, key_encipherment=False,
                                      data_encipherment=False, key_agreement=False,
                                      encipher_only=False, decipher_only=False), critical=True)
         .sign(k, hashes.SHA256()))
    return k, c


def leaf(issuer, subject, server, before=None, after=None):
    ik, ic = issuer
    k = key()
    b = (x509.CertificateBuilder().subject_name(subject).issuer_name(ic.subject)
         .public_key(k.public_key()).serial_number(x509.random_serial_number())
         .not_valid_before(before or now - day).not_valid_after(after or now + 30 * day)
         .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
         .add_extension(x509.ExtendedKeyUsage(
             [ExtendedKeyUsageOID.SERVER_AUTH if server else ExtendedKeyUsageOID.CLIENT_AUTH]),
             critical=False))
    if server:
        b = b.add_extension(x509.SubjectAlternativeName(
            [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
            critical=False)
    return k, b.sign(ik, hashes.SHA256())


def write(path, data):
    with open(f"{out}/{path}", "wb") as f:
        f.write(data)


first = ca("Inlet test CA")
write("ca.pem", pem_cert(first[1]))
k, c = leaf(first, name(cn="localhost"), server=True)
write("server.pem", pem_key(k) + pem_cert(c) + pem_cert(first[1]))
# The usual order (O, then CN): RFC 2253 writes it last first, CN=client-a,O=Example.
k, c = leaf(first, name(o="Example", cn="client-a"), server=False)
write("client.pem", pem_cert(c))
write("client.key", pem_key(k))
k, c = leaf(first, name(cn="client-old"), server=False, before=now - 10 * day, after=now - day)
write("expired.pem", pem_cert(c))
write("expired.key", pem_key(k))
stranger = ca("Another CA")
write("stranger-ca.pem", pem_cert(stranger[1]))
k, c = leaf(stranger, name(cn="stranger"), server=False)
write("stranger.pem", pem_cert(c))
write("stranger.key", pem_key(k))
second = ca("Inlet test CA 2")
write("ca2.pem", pem_cert(second[1]))
k, c = leaf(second, name(cn="localhost"), server=True)
write("server2.pem", pem_key(k) + pem_cert(c) + pem_cert(second[1]))
print("OK", flush=True)
