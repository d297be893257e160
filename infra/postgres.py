"""A throw-away PostgreSQL server for tests: `initdb` into a directory, `pg_ctl start` on a loopback
port with trust authentication, `pg_ctl stop` at the end. PostgreSQL refuses to run as root; as
root the server runs as the `postgres` system user (created by Debian's package).
"""
import glob
import os
import pwd
import shutil
import subprocess
from pathlib import Path

__all__ = ["postgres_bindir", "PostgresError", "TemporaryPostgres"]


class PostgresError(RuntimeError):
    pass


def postgres_bindir() -> Path:
    """The directory of initdb/pg_ctl/postgres: on PATH, else Debian's newest /usr/lib/postgresql/N/bin."""
    on_path = shutil.which("initdb")
    if on_path:
        return Path(on_path).parent
    candidates = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"), key=lambda p: int(p.split("/")[4]))
    if not candidates:
        raise PostgresError("the PostgreSQL server programs (initdb, pg_ctl) are not installed: "
                            "apt-get install postgresql (the README's test command does it)")
    return Path(candidates[-1]).parent


class TemporaryPostgres:
    def __init__(self, directory: Path, port: int, host: str = "127.0.0.1"):
        self.directory, self.port, self.host = Path(directory), port, host
        self.bindir = postgres_bindir()
        self.run_as = "postgres" if os.geteuid() == 0 else None
        if self.run_as:
            try:
                pwd.getpwnam(self.run_as)
            except KeyError:
                raise PostgresError("PostgreSQL does not run as root and there is no 'postgres' user to run it as")

    @property
    def data_dir(self) -> Path:
        return self.directory / "data"

    def url(self, database: str = "postgres") -> str:
        return f"postgresql://postgres@{self.host}:{self.port}/{database}"

    def _run(self, *args: str) -> None:
        command = [str(self.bindir / args[0]), *args[1:]]
        if self.run_as:
            command = ["runuser", "-u", self.run_as, "--", *command]
        done = subprocess.run(command, capture_output=True, text=True, timeout=120)
        if done.returncode != 0:
            raise PostgresError(f"{args[0]} failed: {(done.stdout + done.stderr).strip()[-1500:]}")

    def start(self) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        if self.run_as:
            user = pwd.getpwnam(self.run_as)
            os.chown(self.directory, user.pw_uid, user.pw_gid)
            for parent in self.directory.parents:       # the server user must reach its directory
                if parent == Path("/"):
                    break
                os.chmod(parent, os.stat(parent).st_mode | 0o111)
        self._run("initdb", "-D", str(self.data_dir), "-U", "postgres", "-A", "trust", "--no-sync",
                  "--encoding", "UTF8", "--locale", "C")
        self.resume()

    def resume(self) -> None:
        """Starts the server on its existing cluster (after stop(): a database outage ended)."""
        options = (f"-p {self.port} -c listen_addresses={self.host} -k {self.directory} -c fsync=off "
                   "-c synchronous_commit=off -c full_page_writes=off -c max_connections=100")
        self._run("pg_ctl", "-D", str(self.data_dir), "-o", options, "-l", str(self.directory / "server.log"),
                  "-w", "-t", "60", "start")

    def stop(self) -> None:
        try:
            self._run("pg_ctl", "-D", str(self.data_dir), "-m", "fast", "-w", "stop")
        except PostgresError:
            pass

    def create_database(self, name: str) -> str:
        import psycopg
        with psycopg.connect(self.url(), autocommit=True, connect_timeout=10) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        return self.url(name)
