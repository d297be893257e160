"""The job and the readers under PostgreSQL roles with only the privileges docs/configuration.md lists,
their passwords never in the URL: from PGPASSWORD, from a password file (libpq's .pgpass format),
and `sslmode` passed on. On the real server, with password authentication for these roles."""
import json
import uuid

import psycopg
import pytest

from conftest import dirstream, simulate


@pytest.fixture
def roles(postgres_server, tmp_path):
    """A fresh database, a job role with CONNECT and the schema's USAGE and CREATE, a reader role
    with CONNECT, USAGE and SELECT on what the job creates; both must give their passwords
    (scram-sha-256 for them, ahead of the test server's trust lines)."""
    suffix = uuid.uuid4().hex[:8]
    job, reader, database = f"dirstream_job_{suffix}", f"dirstream_reader_{suffix}", f"dirstream_roles_{suffix}"
    hba = postgres_server.data_dir / "pg_hba.conf"
    lines = [f"host {database} {role} 127.0.0.1/32 scram-sha-256\n" for role in (job, reader)]
    hba.write_text("".join(lines) + hba.read_text())
    admin = postgres_server.url()
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{database}"')
        for role, password in ((job, "job-secret"), (reader, "reader-secret")):
            conn.execute(f"CREATE ROLE {role} LOGIN PASSWORD '{password}' NOSUPERUSER NOCREATEDB NOCREATEROLE")
            conn.execute(f'GRANT CONNECT ON DATABASE "{database}" TO {role}')
        conn.execute(f'REVOKE ALL ON DATABASE "{database}" FROM PUBLIC')
        conn.execute("SELECT pg_reload_conf()")
    with psycopg.connect(postgres_server.url(database), autocommit=True) as conn:
        conn.execute("REVOKE ALL ON SCHEMA public FROM PUBLIC")
        conn.execute(f"GRANT USAGE, CREATE ON SCHEMA public TO {job}")
        conn.execute(f"GRANT USAGE ON SCHEMA public TO {reader}")
        conn.execute(f"ALTER DEFAULT PRIVILEGES FOR ROLE {job} IN SCHEMA public GRANT SELECT ON TABLES TO {reader}")
    passfile = tmp_path / "pgpass"
    passfile.write_text(f"{postgres_server.host}:{postgres_server.port}:{database}:{reader}:reader-secret\n")
    passfile.chmod(0o600)
    where = f"{postgres_server.host}:{postgres_server.port}/{database}"
    yield {"job": f"postgresql://{job}@{where}", "reader": f"postgresql://{reader}@{where}", "passfile": passfile}


def test_the_job_runs_under_a_role_with_only_the_listed_privileges_its_password_from_the_environment(
        broker, tmp_path, roles):
    summary, _ = simulate(broker, tmp_path, "--seed", "12", "--count", "800")
    truth = next(tmp_path.glob("truth-*.json"))
    refused = dirstream("run", "--bootstrap", broker, "--once", "--sink", roles["job"], "--checkpoint",
                        str(tmp_path / "ckpt-refused"), "--pec-name", "pec0", "--metrics-port", "0",
                        "--log-format", "plain", "--outbound-topic", "none", timeout=300,
                        env={**_env(), "PGPASSWORD": "wrong"})
    assert refused.returncode == 2 and "password authentication failed" in refused.stdout + refused.stderr
    done = dirstream("run", "--bootstrap", broker, "--once", "--sink", roles["job"], "--checkpoint",
                     str(tmp_path / "ckpt"), "--pec-name", "pec0", "--metrics-port", "0", "--log-format", "plain",
                     "--outbound-topic", "none", timeout=600, env={**_env(), "PGPASSWORD": "job-secret"})
    assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]
    assert "job-secret" not in done.stdout + done.stderr
    # the reader: its password from a password file, SELECT only
    reader_env = {**_env(), "PGPASSFILE": str(roles["passfile"])}
    verified = dirstream("verify", "--truth", str(truth), "--sink", roles["reader"], "--only", "discovery",
                         env=reader_env)
    assert verified.returncode in (0, 1) and "discovery:" in verified.stdout, verified.stderr[-2000:]
    history = dirstream("history", "--sink", roles["reader"], "--help", env=reader_env)
    assert history.returncode == 0
    with psycopg.connect(roles["reader"], passfile=str(roles["passfile"])) as conn:
        seen = conn.execute("SELECT COUNT(*) FROM raw_messages_seen").fetchone()[0]
        assert seen > 0 and json.dumps(summary)
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            conn.execute("DELETE FROM raw_messages_seen")


def test_sslmode_in_the_url_is_passed_on(roles):
    """libpq takes the URL's query: a server without TLS refuses sslmode=require, by name."""
    done = dirstream("verify", "--truth", "/nonexistent", "--sink", roles["reader"] + "?sslmode=require",
                     env={**_env(), "PGPASSFILE": str(roles["passfile"])})
    assert done.returncode != 0
    assert "SSL" in done.stdout + done.stderr and "reader-secret" not in done.stdout + done.stderr


def _env() -> dict:
    import os
    return {k: v for k, v in os.environ.items() if not k.startswith("PG")}
