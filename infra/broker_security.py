"""The embedded broker's SASL_SSL listener (`dirstream broker start --security sasl_ssl`).

At the first start, into the state directory: a CA and the broker's key pair signed by it (the JDK's
keytool; `tls/ca.pem` is what clients trust), two SCRAM-SHA-512 users created when the log
directory is formatted (`admin` for the broker's own connections, `dirstream` for the clients),
and `client.properties`, the file to pass as `--kafka-config` (librdkafka names; the password is in
that file only, mode 0600). The KRaft controller listener stays PLAINTEXT on loopback.

With ACLs (`AUTHORIZER`), KRaft's StandardAuthorizer allows nothing that no ACL grants, except to
the super users; `add_scram_user` and `grant` are the admin's requests that make users and ACLs.
"""
import os
import secrets
import shutil
import subprocess
from dataclasses import dataclass
from ipaddress import ip_address
from pathlib import Path

__all__ = ["ADMIN_TIMEOUT_S", "add_scram_user", "ADMIN_USER", "AUTHORIZER", "client_options", "CLIENT_USER",
           "ensure_tls", "grant", "keytool", "listener_config", "MECHANISM", "read_client_properties",
           "scram_format_arguments", "Secrets", "SECURITY_MODES", "SecurityError", "write_client_properties",
           "write_private"]

MECHANISM = "SCRAM-SHA-512"
CLIENT_USER = "dirstream"
ADMIN_USER = "admin"
SECURITY_MODES = ("plaintext", "sasl_ssl")
# The admin is the broker's own principal on SASL_SSL; ANONYMOUS is the broker's on the PLAINTEXT
# controller listener (loopback only), whose registration and heartbeats the controller authorizes.
AUTHORIZER = ["authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer",
              f"super.users=User:{ADMIN_USER};User:ANONYMOUS"]
ADMIN_TIMEOUT_S = 30.0


class SecurityError(RuntimeError):
    pass


@dataclass(frozen=True)
class Secrets:
    """What the state directory keeps: passwords of the keystores and of the two users."""
    store_password: str
    admin_password: str
    client_password: str

    @classmethod
    def load_or_create(cls, path: Path) -> "Secrets":
        if path.exists():
            values = dict(line.split("=", 1) for line in path.read_text().splitlines() if "=" in line)
            return cls(values["store"], values["admin"], values["client"])
        made = cls(secrets.token_urlsafe(24), secrets.token_urlsafe(24), secrets.token_urlsafe(24))
        write_private(path, f"store={made.store_password}\nadmin={made.admin_password}\n"
                             f"client={made.client_password}\n")
        return made


def write_private(path: Path, text: str) -> None:
    """A file only its owner can read (written at mode 0600, never wider for a moment)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as fh:
        fh.write(text)
    os.chmod(path, 0o600)


def keytool(java: str) -> str:
    tool = Path(java).with_name("keytool")
    found = str(tool) if tool.exists() else shutil.which("keytool")
    if not found:
        raise SecurityError("keytool (from the JDK) is needed to create the broker's TLS key pair and was not found")
    return found


def ensure_tls(tls_dir: Path, host: str, java: str, password: str) -> None:
    """A CA and the broker's PKCS12 keystore, signed by it for `host` (and localhost, 127.0.0.1)."""
    if (tls_dir / "broker.p12").exists() and (tls_dir / "ca.pem").exists():
        return
    tls_dir.mkdir(parents=True, exist_ok=True)
    os.chmod(tls_dir, 0o700)
    tool = keytool(java)
    ca, broker = str(tls_dir / "ca.p12"), str(tls_dir / "broker.p12")
    names = {"dns:localhost", "ip:127.0.0.1", f"{'ip' if _is_ip(host) else 'dns'}:{host}"}
    steps = [
        ["-genkeypair", "-alias", "ca", "-keyalg", "RSA", "-keysize", "2048", "-validity", "3650",
         "-dname", "CN=dirstream embedded broker CA", "-ext", "bc:c", "-keystore", ca, "-storetype", "PKCS12",
         "-storepass", password],
        ["-exportcert", "-rfc", "-alias", "ca", "-keystore", ca, "-storepass", password,
         "-file", str(tls_dir / "ca.pem")],
        ["-genkeypair", "-alias", "broker", "-keyalg", "RSA", "-keysize", "2048", "-validity", "3650",
         "-dname", f"CN={host}", "-keystore", broker, "-storetype", "PKCS12", "-storepass", password],
        ["-certreq", "-alias", "broker", "-keystore", broker, "-storepass", password,
         "-file", str(tls_dir / "broker.csr")],
        ["-gencert", "-rfc", "-alias", "ca", "-keystore", ca, "-storepass", password, "-validity", "3650",
         "-infile", str(tls_dir / "broker.csr"), "-outfile", str(tls_dir / "broker.crt"),
         "-ext", "SAN=" + ",".join(sorted(names)), "-ext", "EKU=serverAuth"],
        ["-importcert", "-noprompt", "-alias", "ca", "-keystore", broker, "-storepass", password,
         "-file", str(tls_dir / "ca.pem")],
        ["-importcert", "-alias", "broker", "-keystore", broker, "-storepass", password,
         "-file", str(tls_dir / "broker.crt")],
    ]
    for step in steps:
        done = subprocess.run([tool, *step], capture_output=True, text=True)
        if done.returncode != 0:
            shutil.rmtree(tls_dir, ignore_errors=True)
            raise SecurityError(f"keytool {step[0]} failed: {(done.stdout + done.stderr).strip()[-500:]}")
    for name in ("ca.p12", "broker.p12"):
        os.chmod(tls_dir / name, 0o600)


def _is_ip(host: str) -> bool:
    try:
        ip_address(host)
        return True
    except ValueError:
        return False


def listener_config(bootstrap: str, controller: str, tls_dir: Path, s: Secrets) -> list[str]:
    """server.properties lines for a SASL_SSL client listener (SCRAM-SHA-512)."""
    jaas = (f'org.apache.kafka.common.security.scram.ScramLoginModule required username="{ADMIN_USER}" '
            f'password="{s.admin_password}";')
    return [
        f"listeners=SASL_SSL://{bootstrap},CONTROLLER://{controller}",
        f"advertised.listeners=SASL_SSL://{bootstrap}",
        "controller.listener.names=CONTROLLER",
        "inter.broker.listener.name=SASL_SSL",
        "listener.security.protocol.map=SASL_SSL:SASL_SSL,CONTROLLER:PLAINTEXT",
        f"sasl.enabled.mechanisms={MECHANISM}",
        f"sasl.mechanism.inter.broker.protocol={MECHANISM}",
        f"listener.name.sasl_ssl.{MECHANISM.lower()}.sasl.jaas.config={jaas}",
        "ssl.keystore.type=PKCS12",
        f"ssl.keystore.location={(tls_dir / 'broker.p12').resolve()}",
        f"ssl.keystore.password={s.store_password}",
        f"ssl.key.password={s.store_password}",
        "ssl.truststore.type=PEM",
        f"ssl.truststore.location={(tls_dir / 'ca.pem').resolve()}",
        "ssl.client.auth=none",
    ]


def scram_format_arguments(s: Secrets) -> list[str]:
    """kafka-storage format's --add-scram arguments: the users exist before the broker first starts."""
    return [f"--add-scram={MECHANISM}=[name={ADMIN_USER},password={s.admin_password}]",
            f"--add-scram={MECHANISM}=[name={CLIENT_USER},password={s.client_password}]"]


def client_options(tls_dir: Path, s: Secrets) -> dict[str, str]:
    return {"security.protocol": "SASL_SSL", "sasl.mechanism": MECHANISM, "sasl.username": CLIENT_USER,
            "sasl.password": s.client_password, "ssl.ca.location": str((tls_dir / "ca.pem").resolve())}


def read_client_properties(path: Path) -> dict[str, str]:
    return dict(line.split("=", 1) for line in path.read_text().splitlines() if "=" in line and line[0] != "#")


def write_client_properties(path: Path, options: dict[str, str]) -> None:
    write_private(path, "# dirstream --kafka-config for the embedded broker's SASL_SSL listener\n"
                   + "".join(f"{k}={v}\n" for k, v in options.items()))


def add_scram_user(bootstrap: str, admin: dict[str, str], name: str, password: str) -> None:
    """A SCRAM-SHA-512 user (or a new password for one), asked for by the `admin` client options."""
    from confluent_kafka.admin import (AdminClient, ScramCredentialInfo, ScramMechanism,
                                       UserScramCredentialUpsertion)
    client = AdminClient({"bootstrap.servers": bootstrap, **admin})
    upsert = UserScramCredentialUpsertion(name, ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 8192),
                                          password.encode())
    for future in client.alter_user_scram_credentials([upsert]).values():
        future.result(timeout=ADMIN_TIMEOUT_S)


def grant(bootstrap: str, admin: dict[str, str], user: str, acls) -> None:
    """Allow User:`user` each (operation, resource type, resource name[, pattern type]) of `acls`,
    from any host, e.g. ("WRITE", "TOPIC", "msmq.dsrp.raw") or ("READ", "GROUP", "dirstream-", "PREFIXED");
    returns once the broker's authorizer holds them (it learns them from the metadata log)."""
    import time

    from confluent_kafka.admin import (AclBinding, AclBindingFilter, AclOperation, AclPermissionType, AdminClient,
                                       ResourcePatternType, ResourceType)
    bindings = [AclBinding(ResourceType[kind.upper()], name, ResourcePatternType[(pattern or ["LITERAL"])[0].upper()],
                           f"User:{user}", "*", AclOperation[operation.upper()], AclPermissionType.ALLOW)
                for operation, kind, name, *pattern in acls]
    client = AdminClient({"bootstrap.servers": bootstrap, **admin})
    for future in client.create_acls(bindings).values():
        future.result(timeout=ADMIN_TIMEOUT_S)
    mine = AclBindingFilter(ResourceType.ANY, None, ResourcePatternType.ANY, f"User:{user}", None,
                            AclOperation.ANY, AclPermissionType.ANY)
    deadline = time.monotonic() + ADMIN_TIMEOUT_S
    while len(client.describe_acls(mine).result(timeout=ADMIN_TIMEOUT_S)) < len(set(bindings)):
        if time.monotonic() > deadline:
            raise SecurityError(f"the broker did not hold User:{user}'s ACLs within {ADMIN_TIMEOUT_S:.0f} s")
        time.sleep(0.1)
