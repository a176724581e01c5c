"""A throwaway TLS certificate for an emulator whose client insists on TLS (Gemini Live).

google-genai turns every Live API base URL into ``wss://`` when it holds an API key, so the
emulator must speak TLS. Each call makes its own self-signed certificate for 127.0.0.1 with the
``cryptography`` package (which google-auth, and so livekit-plugins-google, already requires):
no file is kept, no CA is installed, and only the client given :attr:`ThrowawayTLS.client`
trusts it (google-genai takes it as ``HttpOptions.async_client_args["ssl"]``), not the process.
"""

from __future__ import annotations

import datetime
import ipaddress
import ssl
import tempfile
from dataclasses import dataclass
from pathlib import Path

__all__ = ["ThrowawayTLS", "throwaway_tls"]

# fixed validity: the lab's virtual clock patches time.time, OpenSSL reads the real clock
_NOT_BEFORE = datetime.datetime(2000, 1, 1, tzinfo=datetime.timezone.utc)
_NOT_AFTER = datetime.datetime(2100, 1, 1, tzinfo=datetime.timezone.utc)


@dataclass(frozen=True)
class ThrowawayTLS:
    """Both ends of one throwaway certificate.

    Attributes:
        server: What the emulator serves with (the certificate and its key).
        client: What trusts that certificate only (hostname checked: 127.0.0.1).
    """

    server: ssl.SSLContext
    client: ssl.SSLContext


def throwaway_tls(host: str = "127.0.0.1") -> ThrowawayTLS:
    """A new self-signed certificate for ``host``, as server and client contexts."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "resilient-agent emulator")])
    certificate = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(_NOT_BEFORE)
        .not_valid_after(_NOT_AFTER)
        .add_extension(
            x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address(host))]),
            critical=False,
        )
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    cert_pem = certificate.public_bytes(serialization.Encoding.PEM)
    key_pem = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    server = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    # load_cert_chain reads files only: they live for the load and no longer
    with tempfile.TemporaryDirectory(prefix="ra-tls-") as folder:
        cert_file, key_file = Path(folder, "cert.pem"), Path(folder, "key.pem")
        cert_file.write_bytes(cert_pem)
        key_file.write_bytes(key_pem)
        server.load_cert_chain(cert_file, key_file)
    client = ssl.create_default_context(cadata=cert_pem.decode())
    return ThrowawayTLS(server=server, client=client)
