"""Throw-away TLS certificates for tests: one CA, a server and a client certificate.

``generate_certificates(directory)`` writes PEM files signed by a fresh CA and returns
their paths. The server certificate is valid for ``127.0.0.1``, ``::1`` and
``localhost``, so NATS and Liftbridge on loopback verify against it. Keys are ECDSA
P-256 (fast to make, accepted by Go and OpenSSL). The ``cryptography`` package is used
when it is installed, the ``openssl`` command line otherwise. Never use these files
outside tests: the keys are written unencrypted.
"""

from __future__ import annotations

import datetime as _dt
import ipaddress
import shutil
import ssl
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

__all__ = ["TestCertificates", "generate_certificates"]

_DEFAULT_HOSTS = ("127.0.0.1", "::1", "localhost")


@dataclass(frozen=True, slots=True)
class TestCertificates:
    """Paths of the PEM files made by :func:`generate_certificates`."""

    __test__ = False  # not a pytest test class, despite the name

    ca_cert: Path
    ca_key: Path
    server_cert: Path
    server_key: Path
    client_cert: Path
    client_key: Path

    def client_context(self, *, with_client_cert: bool = True) -> ssl.SSLContext:
        """An SSL context that trusts the CA and (by default) presents the client cert."""
        context = ssl.create_default_context(cafile=str(self.ca_cert))
        if with_client_cert:
            context.load_cert_chain(str(self.client_cert), str(self.client_key))
        return context

    def server_context(self, *, require_client_cert: bool = True) -> ssl.SSLContext:
        """An SSL context for a test server that uses these certificates."""
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(str(self.server_cert), str(self.server_key))
        context.load_verify_locations(cafile=str(self.ca_cert))
        if require_client_cert:
            context.verify_mode = ssl.CERT_REQUIRED
        return context


def generate_certificates(
    directory: str | Path,
    *,
    hosts: Sequence[str] = _DEFAULT_HOSTS,
    client_name: str = "liftbridge-nats-test-client",
    days: int = 2,
) -> TestCertificates:
    """Create a CA plus server and client certificates in ``directory``.

    ``hosts`` are the server certificate's subject alternative names (IP addresses or
    DNS names). Raises RuntimeError when neither ``cryptography`` nor ``openssl`` is
    available.
    """
    out = Path(directory)
    out.mkdir(parents=True, exist_ok=True)
    certs = TestCertificates(
        ca_cert=out / "ca.pem",
        ca_key=out / "ca-key.pem",
        server_cert=out / "server.pem",
        server_key=out / "server-key.pem",
        client_cert=out / "client.pem",
        client_key=out / "client-key.pem",
    )
    try:
        import cryptography  # noqa: F401
    except ImportError:
        _with_openssl(certs, list(hosts), client_name, days)
    else:
        _with_cryptography(certs, list(hosts), client_name, days)
    for key in (certs.ca_key, certs.server_key, certs.client_key):
        key.chmod(0o600)
    return certs


# ------------------------------------------------------------------ cryptography


def _with_cryptography(certs: TestCertificates, hosts: list[str], client: str, days: int) -> None:
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    now = _dt.datetime.now(_dt.UTC)
    # Backdated a little so that clocks a few seconds apart still agree.
    not_before, not_after = now - _dt.timedelta(minutes=5), now + _dt.timedelta(days=days)

    def name(common_name: str) -> x509.Name:
        return x509.Name(
            [
                x509.NameAttribute(NameOID.ORGANIZATION_NAME, "liftbridge-nats tests"),
                x509.NameAttribute(NameOID.COMMON_NAME, common_name),
            ]
        )

    def write_key(key: ec.EllipticCurvePrivateKey, path: Path) -> None:
        path.write_bytes(
            key.private_bytes(
                serialization.Encoding.PEM,
                serialization.PrivateFormat.PKCS8,
                serialization.NoEncryption(),
            )
        )

    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = name("liftbridge-nats test CA")
    ca_cert = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(not_before)
        .not_valid_after(not_after)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), False)
        .sign(ca_key, hashes.SHA256())
    )
    write_key(ca_key, certs.ca_key)
    certs.ca_cert.write_bytes(ca_cert.public_bytes(serialization.Encoding.PEM))

    def issue(
        common_name: str, usage: x509.ObjectIdentifier, sans: list[x509.GeneralName]
    ) -> tuple[bytes, ec.EllipticCurvePrivateKey]:
        key = ec.generate_private_key(ec.SECP256R1())
        builder = (
            x509.CertificateBuilder()
            .subject_name(name(common_name))
            .issuer_name(ca_name)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(not_before)
            .not_valid_after(not_after)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
            .add_extension(
                x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), False
            )
        )
        if sans:
            builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
        cert = builder.sign(ca_key, hashes.SHA256())
        return cert.public_bytes(serialization.Encoding.PEM), key

    sans: list[x509.GeneralName] = []
    for host in hosts:
        try:
            sans.append(x509.IPAddress(ipaddress.ip_address(host)))
        except ValueError:
            sans.append(x509.DNSName(host))
    server_pem, server_key = issue(
        hosts[0] if hosts else "server", ExtendedKeyUsageOID.SERVER_AUTH, sans
    )
    certs.server_cert.write_bytes(server_pem)
    write_key(server_key, certs.server_key)
    client_pem, client_key = issue(client, ExtendedKeyUsageOID.CLIENT_AUTH, [])
    certs.client_cert.write_bytes(client_pem)
    write_key(client_key, certs.client_key)


# ------------------------------------------------------------------ openssl CLI


def _with_openssl(certs: TestCertificates, hosts: list[str], client: str, days: int) -> None:
    openssl = shutil.which("openssl")
    if openssl is None:
        raise RuntimeError(
            "cannot make test certificates: install the 'cryptography' package "
            "(testing extra) or the openssl command line tool"
        )
    workdir = certs.ca_cert.parent

    def run(*args: str) -> None:
        subprocess.run([openssl, *args], check=True, capture_output=True, cwd=workdir)

    org = "/O=liftbridge-nats tests"
    run("ecparam", "-name", "prime256v1", "-genkey", "-noout", "-out", str(certs.ca_key))
    run(
        "req", "-x509", "-new", "-key", str(certs.ca_key), "-sha256", "-days", str(days),
        "-subj", f"{org}/CN=liftbridge-nats test CA",
        "-addext", "basicConstraints=critical,CA:TRUE,pathlen:0",
        "-addext", "keyUsage=critical,keyCertSign,cRLSign,digitalSignature",
        "-out", str(certs.ca_cert),
    )  # fmt: skip
    san = ",".join(f"IP:{h}" if _is_ip(h) else f"DNS:{h}" for h in hosts)

    def issue(cn: str, cert: Path, key: Path, ext: str) -> None:
        csr = workdir / f"{cert.stem}.csr"
        extfile = workdir / f"{cert.stem}.ext"
        extfile.write_text(ext)
        run("ecparam", "-name", "prime256v1", "-genkey", "-noout", "-out", str(key))
        run("req", "-new", "-key", str(key), "-subj", f"{org}/CN={cn}", "-out", str(csr))
        run(
            "x509", "-req", "-in", str(csr), "-CA", str(certs.ca_cert),
            "-CAkey", str(certs.ca_key), "-CAcreateserial", "-days", str(days),
            "-sha256", "-extfile", str(extfile), "-out", str(cert),
        )  # fmt: skip
        csr.unlink()
        extfile.unlink()

    server_ext = "basicConstraints=critical,CA:FALSE\nextendedKeyUsage=serverAuth\n"
    if san:
        server_ext += f"subjectAltName={san}\n"
    issue(hosts[0] if hosts else "server", certs.server_cert, certs.server_key, server_ext)
    issue(
        client,
        certs.client_cert,
        certs.client_key,
        "basicConstraints=critical,CA:FALSE\nextendedKeyUsage=clientAuth\n",
    )


def _is_ip(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True
