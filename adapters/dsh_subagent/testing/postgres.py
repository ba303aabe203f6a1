"""A throwaway PostgreSQL cluster for tests: a pytest plugin with two fixtures.

Theory of operation
-------------------
1. ``postgres_cluster`` (session scope) finds the server binaries (``DSH_PG_BINDIR``, else
   ``pg_config --bindir``, else ``/usr/lib/postgresql/*/bin``), runs ``initdb`` into a fresh
   temporary directory and starts ``pg_ctl`` listening on a Unix socket in that directory
   only (no TCP port: ``listen_addresses=''``), so every pytest-xdist worker gets its own
   cluster with nothing shared. It stops the cluster (``-m immediate``) and removes the
   directory at the end of the session.
2. As root, ``initdb`` refuses to run: the cluster is then owned by, and run as, the
   ``postgres`` account (else ``nobody``); the tests connect as the superuser over the
   socket with ``trust`` authentication.
3. The server runs without ``fsync``: the tests kill clients, never the server, so its own
   crash safety is not under test and the suite stays fast.
4. ``postgres_db`` (function scope) gives each test an empty database of its own and yields
   its address. Databases are made with ``CREATE DATABASE ... TEMPLATE`` (a copy of an
   empty template) and recycled: after the test its connections are ended and its schema
   dropped and made anew, so the next test gets it empty for a fraction of the cost of a
   new database (about a second on a loaded 2-core machine).
5. Missing binaries or a missing ``psycopg``: the tests skip with the reason, except under
   CI (``CI`` set and not empty), where they fail: CI never skips them.
"""

from __future__ import annotations

import glob
import itertools
import os
import pwd
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import attrs
import pytest

_COUNTER = itertools.count()


def _unavailable(reason: str) -> None:
    if os.environ.get("CI"):
        pytest.fail(f"PostgreSQL tests cannot run under CI: {reason}", pytrace=False)
    pytest.skip(reason)


def find_bindir() -> Path | None:
    """The directory of ``initdb`` and ``pg_ctl``, or None (rule 1)."""
    candidates = []
    if os.environ.get("DSH_PG_BINDIR"):
        candidates.append(os.environ["DSH_PG_BINDIR"])
    if shutil.which("pg_config"):
        found = subprocess.run(
            ["pg_config", "--bindir"], capture_output=True, text=True, check=False
        )
        candidates.append(found.stdout.strip())
    candidates.extend(sorted(glob.glob("/usr/lib/postgresql/*/bin"), reverse=True))
    for each in candidates:
        if each and (Path(each) / "initdb").is_file() and (Path(each) / "pg_ctl").is_file():
            return Path(each)
    return None


@attrs.define
class PostgresCluster:
    """A running throwaway cluster (rule 1); ``address(db)`` names one of its databases."""

    bindir: Path
    root: Path
    user: pwd.struct_passwd | None
    template: str = "dsh_template"
    free: list[str] = attrs.Factory(list)

    @property
    def data(self) -> Path:
        return self.root / "data"

    def address(self, dbname: str = "postgres") -> str:
        return f"postgresql://postgres@/{dbname}?host={self.root}"

    def _run(self, *argv: str) -> None:
        kwargs = {} if self.user is None else {"user": self.user.pw_uid, "group": self.user.pw_gid}
        done = subprocess.run(argv, capture_output=True, text=True, check=False, **kwargs)  # type: ignore[call-overload]
        if done.returncode != 0:
            raise RuntimeError(f"{argv[0]} failed: {done.stdout}{done.stderr}")

    def start(self, *, fsync: bool = False) -> None:
        """``initdb`` and ``pg_ctl start``; without ``fsync`` unless asked (rule 3)."""
        if self.user is not None:
            os.chown(self.root, self.user.pw_uid, self.user.pw_gid)
        self._run(
            str(self.bindir / "initdb"),
            "-D",
            str(self.data),
            "-U",
            "postgres",
            "-A",
            "trust",
            "-E",
            "UTF8",
            "--locale=C",
            "--no-sync",
        )
        options = f"-k {self.root} -c listen_addresses='' -c max_connections=200"
        if not fsync:
            options += " -c fsync=off -c full_page_writes=off -c synchronous_commit=off"
        self._run(
            str(self.bindir / "pg_ctl"),
            "-D",
            str(self.data),
            "-l",
            str(self.root / "server.log"),
            "-o",
            options,
            "-w",
            "start",
        )
        self.sql(f"CREATE DATABASE {self.template}")

    def sql(self, statement: str) -> None:
        import psycopg

        with psycopg.connect(self.address(), autocommit=True) as conn:
            conn.execute(statement.encode())

    def database(self) -> str:
        """An empty database of the caller's own (rule 4); returns its name."""
        if self.free:
            return self.free.pop()
        name = f"t{os.getpid()}_{next(_COUNTER)}"
        self.sql(f"CREATE DATABASE {name} TEMPLATE {self.template}")
        return name

    def recycle(self, name: str) -> None:
        """End the database's connections, empty it, and keep it for the next test."""
        import psycopg

        self.sql(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
            f"WHERE datname = '{name}' AND pid <> pg_backend_pid()"
        )
        with psycopg.connect(self.address(name), autocommit=True) as conn:
            conn.execute("DROP SCHEMA public CASCADE")
            conn.execute("CREATE SCHEMA public")
        self.free.append(name)

    def stop(self) -> None:
        if (self.data / "postmaster.pid").exists():
            self._run(str(self.bindir / "pg_ctl"), "-D", str(self.data), "-m", "immediate", "stop")
        shutil.rmtree(self.root, ignore_errors=True)


def server_account() -> pwd.struct_passwd | None:
    """The account to run the server as: None unless root (rule 2)."""
    if os.geteuid() != 0:
        return None
    for name in ("postgres", "nobody"):
        try:
            return pwd.getpwnam(name)
        except KeyError:
            continue
    return None


@pytest.fixture(scope="session")
def postgres_cluster() -> Iterator[PostgresCluster]:
    """One throwaway cluster per test session (per xdist worker)."""
    try:
        import psycopg  # noqa: F401
    except ImportError:
        _unavailable("psycopg is not installed: pip install 'dsh-subagent[postgres]'")
    bindir = find_bindir()
    if bindir is None:
        _unavailable("no PostgreSQL server binaries (initdb, pg_ctl) found")
    assert bindir is not None
    # A short path: a Unix socket's path is limited to about 100 bytes.
    cluster = PostgresCluster(bindir, Path(tempfile.mkdtemp(prefix="dshpg")), server_account())
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture
def postgres_db(postgres_cluster: PostgresCluster) -> Iterator[str]:
    """The address of an empty database of this test's own on the session's cluster."""
    name = postgres_cluster.database()
    yield postgres_cluster.address(name)
    postgres_cluster.recycle(name)
