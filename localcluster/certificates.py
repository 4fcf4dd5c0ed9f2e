"""A fresh certificate authority and every key the control plane needs, made per cluster.

Why: the components authenticate to each other with TLS client certificates exactly as in a real
cluster, so RBAC and the Node authorizer see real users and groups. Nothing may be downloaded,
so the CA and each leaf are generated here with `cryptography`. ECDSA P-256 keys take
milliseconds to generate (RSA takes far longer on a busy machine) and Kubernetes accepts them for
serving, client and service-account signing keys alike.
"""

from __future__ import annotations

import datetime
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

VALIDITY = datetime.timedelta(days=365)
CLOCK_SKEW_ALLOWANCE = datetime.timedelta(hours=1)
SERVICE_CLUSTER_IP = "10.96.0.1"


@dataclass(frozen=True)
class KeyPair:
    """A PEM certificate and its PEM private key, written to disk."""

    cert: Path
    key: Path

    def cert_pem(self) -> bytes:
        return self.cert.read_bytes()

    def key_pem(self) -> bytes:
        return self.key.read_bytes()


@dataclass(frozen=True)
class ClusterPki:
    """Every credential file of one local cluster."""

    ca: KeyPair
    apiserver_serving: KeyPair
    admin: KeyPair
    controller_manager: KeyPair
    scheduler: KeyPair
    kwok: KeyPair
    apiserver_kubelet_client: KeyPair
    """How the API server authenticates to a real kubelet (logs, exec)."""
    service_account_private_key: Path
    service_account_public_key: Path


def _new_key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


def _name(common_name: str, organization: str | None = None) -> x509.Name:
    attributes = [x509.NameAttribute(NameOID.COMMON_NAME, common_name)]
    if organization:
        attributes.append(x509.NameAttribute(NameOID.ORGANIZATION_NAME, organization))
    return x509.Name(attributes)


def _validity(builder: x509.CertificateBuilder) -> x509.CertificateBuilder:
    now = datetime.datetime.now(datetime.UTC)
    return builder.not_valid_before(now - CLOCK_SKEW_ALLOWANCE).not_valid_after(now + VALIDITY)


def _write(
    directory: Path, stem: str, cert: x509.Certificate, key: ec.EllipticCurvePrivateKey
) -> KeyPair:
    pair = KeyPair(cert=directory / f"{stem}.crt", key=directory / f"{stem}.key")
    pair.cert.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    pair.key.write_bytes(_key_pem(key))
    pair.key.chmod(0o600)
    return pair


class CertificateAuthority:
    """Signs leaf certificates with a self-signed CA key."""

    key: ec.EllipticCurvePrivateKey
    certificate: x509.Certificate

    @classmethod
    def load(cls, pair: KeyPair) -> CertificateAuthority:
        """The CA written by `generate_pki`, to sign more leaves later (a real node's)."""
        authority = cls.__new__(cls)
        key = serialization.load_pem_private_key(pair.key_pem(), password=None)
        if not isinstance(key, ec.EllipticCurvePrivateKey):
            raise TypeError(f"{pair.key} is not an EC private key")
        authority.key = key
        authority.certificate = x509.load_pem_x509_certificate(pair.cert_pem())
        return authority

    def __init__(self, common_name: str) -> None:
        self.key = _new_key()
        subject = _name(common_name)
        builder = (
            x509.CertificateBuilder()
            .subject_name(subject)
            .issuer_name(subject)
            .public_key(self.key.public_key())
            .serial_number(x509.random_serial_number())
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
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
            .add_extension(
                x509.SubjectKeyIdentifier.from_public_key(self.key.public_key()), critical=False
            )
        )
        self.certificate = _validity(builder).sign(self.key, hashes.SHA256())

    def issue(
        self,
        common_name: str,
        *,
        organization: str | None = None,
        server_names: tuple[str, ...] = (),
        server_ips: tuple[str, ...] = (),
    ) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
        """A leaf: a serving certificate when names or IPs are given, else a client one."""
        key = _new_key()
        serving = bool(server_names or server_ips)
        usage = ExtendedKeyUsageOID.SERVER_AUTH if serving else ExtendedKeyUsageOID.CLIENT_AUTH
        builder = (
            x509.CertificateBuilder()
            .subject_name(_name(common_name, organization))
            .issuer_name(self.certificate.subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(
                x509.KeyUsage(
                    digital_signature=True,
                    content_commitment=False,
                    key_encipherment=False,
                    data_encipherment=False,
                    key_agreement=False,
                    key_cert_sign=False,
                    crl_sign=False,
                    encipher_only=False,
                    decipher_only=False,
                ),
                critical=True,
            )
            .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
            .add_extension(
                x509.AuthorityKeyIdentifier.from_issuer_public_key(self.key.public_key()),
                critical=False,
            )
        )
        if serving:
            alternative_names: list[x509.GeneralName] = [x509.DNSName(n) for n in server_names]
            alternative_names += [x509.IPAddress(ipaddress.ip_address(ip)) for ip in server_ips]
            builder = builder.add_extension(
                x509.SubjectAlternativeName(alternative_names), critical=False
            )
        return _validity(builder).sign(self.key, hashes.SHA256()), key


def generate_pki(directory: Path) -> ClusterPki:
    """Writes the CA, the apiserver's serving pair, one client pair per component and the
    service-account signing key pair into `directory`."""
    directory.mkdir(parents=True, exist_ok=True)
    authority = CertificateAuthority("localcluster-ca")
    ca = _write(directory, "ca", authority.certificate, authority.key)

    def client(stem: str, common_name: str, organization: str | None = None) -> KeyPair:
        cert, key = authority.issue(common_name, organization=organization)
        return _write(directory, stem, cert, key)

    serving_cert, serving_key = authority.issue(
        "kube-apiserver",
        server_names=(
            "localhost",
            "kubernetes",
            "kubernetes.default",
            "kubernetes.default.svc",
            "kubernetes.default.svc.cluster.local",
        ),
        server_ips=("127.0.0.1", "::1", SERVICE_CLUSTER_IP),
    )
    service_account_key = _new_key()
    private_path = directory / "service-account.key"
    public_path = directory / "service-account.pub"
    private_path.write_bytes(_key_pem(service_account_key))
    private_path.chmod(0o600)
    public_path.write_bytes(
        service_account_key.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )
    )
    return ClusterPki(
        ca=ca,
        apiserver_serving=_write(directory, "apiserver", serving_cert, serving_key),
        admin=client("admin", "localcluster-admin", "system:masters"),
        controller_manager=client("controller-manager", "system:kube-controller-manager"),
        scheduler=client("scheduler", "system:kube-scheduler"),
        kwok=client("kwok", "localcluster-kwok", "system:masters"),
        apiserver_kubelet_client=client(
            "apiserver-kubelet-client", "kube-apiserver-kubelet-client", "system:masters"
        ),
        service_account_private_key=private_path,
        service_account_public_key=public_path,
    )


@dataclass(frozen=True)
class KubeletPki:
    """A real node's credentials: its client identity (system:node:<name>, so the Node
    authorizer and NodeRestriction judge it as a real kubelet) and its serving pair."""

    client: KeyPair
    serving: KeyPair


def issue_kubelet_pki(directory: Path, ca: KeyPair, node: str, node_ip: str) -> KubeletPki:
    """Signs a kubelet's client and serving certificates with the cluster's CA."""
    directory.mkdir(parents=True, exist_ok=True)
    authority = CertificateAuthority.load(ca)
    client_cert, client_key = authority.issue(f"system:node:{node}", organization="system:nodes")
    serving_cert, serving_key = authority.issue(
        node, server_names=(node,), server_ips=(node_ip, "127.0.0.1")
    )
    return KubeletPki(
        client=_write(directory, "kubelet-client", client_cert, client_key),
        serving=_write(directory, "kubelet-serving", serving_cert, serving_key),
    )
