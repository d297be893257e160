"""The dashboard's access control (docs/running.md, "dirstream dashboard"): HTTP Basic authentication against an
`--auth-file` of `user:argon2-hash` lines (argon2-cffi), checked before every page, asset and
callback. Basic authentication sends the password with every request: over a network, put TLS in
front (a reverse proxy), or keep the dashboard on loopback behind a proxy that authenticates."""
import base64
import hashlib
import os
import threading
from pathlib import Path

__all__ = ["add_user", "AuthFileError", "BasicAuth", "is_loopback", "LOOPBACK_HOSTS", "protect", "read_users",
           "REALM"]

LOOPBACK_HOSTS = {"127.0.0.1", "::1", "localhost"}
REALM = "dirstream dashboard"


class AuthFileError(ValueError):
    pass


def is_loopback(host: str) -> bool:
    return host in LOOPBACK_HOSTS or host.startswith("127.")


def read_users(path: str) -> dict[str, str]:
    """user -> argon2 hash from an --auth-file; a clear error for a missing, empty or malformed one."""
    try:
        lines = Path(path).read_text().splitlines()
    except OSError as exc:
        raise AuthFileError(f"cannot read --auth-file {path}: {exc.strerror or exc}") from None
    users = {}
    for number, line in enumerate(lines, 1):
        if not line.strip() or line.startswith("#"):
            continue
        name, sep, digest = line.partition(":")
        if not sep or not name or not digest.startswith("$argon2"):
            raise AuthFileError(f"{path}:{number}: expected user:argon2-hash (create it with "
                                f"dirstream dashboard --add-user NAME --auth-file {path})")
        users[name] = digest
    if not users:
        raise AuthFileError(f"--auth-file {path} names no user (add one with --add-user NAME)")
    return users


def add_user(path: str, name: str, password: str) -> None:
    """Add or replace a user in the auth file (mode 0600): only the argon2 hash is stored."""
    from argon2 import PasswordHasher
    if not name or ":" in name or not password:
        raise AuthFileError("a user name (without ':') and a non-empty password are needed")
    try:
        users = read_users(path) if Path(path).exists() else {}
    except AuthFileError as exc:
        if "names no user" not in str(exc):
            raise
        users = {}
    users[name] = PasswordHasher().hash(password)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as fh:
        fh.write("".join(f"{u}:{h}\n" for u, h in sorted(users.items())))
    os.chmod(path, 0o600)


class BasicAuth:
    """Checks an Authorization header against the users; argon2 is slow by design, so a header that
    verified once is remembered (by its SHA-256, in memory) and not hashed again."""

    def __init__(self, users: dict[str, str]):
        from argon2 import PasswordHasher
        self.users, self.hasher = dict(users), PasswordHasher()
        self._verified: set[bytes] = set()
        self._lock = threading.Lock()

    def allows(self, header: str | None) -> bool:
        if not header or not header.startswith("Basic "):
            return False
        key = hashlib.sha256(header.encode()).digest()
        with self._lock:
            if key in self._verified:
                return True
        try:
            name, _, password = base64.b64decode(header[6:], validate=True).decode().partition(":")
        except (ValueError, UnicodeDecodeError):
            return False
        digest = self.users.get(name)
        if digest is None:
            return False
        try:
            self.hasher.verify(digest, password)
        except Exception:                      # noqa: BLE001 -- argon2's VerifyMismatchError and kin
            return False
        with self._lock:
            self._verified.add(key)
        return True


def protect(server, auth: BasicAuth) -> None:
    """Every request to the Flask server behind the Dash app needs valid credentials (else 401)."""
    from flask import Response, request

    @server.before_request
    def require_credentials():
        if not auth.allows(request.headers.get("Authorization")):
            return Response("authentication required\n", 401, {"WWW-Authenticate": f'Basic realm="{REALM}"'})
        return None
