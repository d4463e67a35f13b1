"""One PostgreSQL database under two spellings is one database: one liveness session.

A process holds its liveness lock on one session per database. Two stores of the process
whose DSNs reach the same database another way (``127.0.0.1`` and ``localhost``, the unix
socket, the port left out, a TCP proxy beside the server) share that session; a second one
would wait for the first one's lock, and give up. The server says which database a
connection is on: its system identifier, or (where a role may not read it) the port and
start of the running server; then the database's oid.
"""

import contextlib
import socket
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from safeact import Succeeded, _postgres
from safeact._owner import this_process
from safeact._postgres import _owner_lock, migrate_postgres
from safeact.postgres import PostgresStore
from tests.conftest import POSTGRES, postgres_or_skip
from tests.test_postgres import DEADLINE, LONG_LEASE, Admin, charge, holders_of

SPELLINGS = ["localhost", "unix socket", "port left out", "tcp proxy", "its own time zone"]
"""How a second DSN reaches the database of a first one, on 127.0.0.1."""
SHORT_LOCK_TIMEOUT = 1.0
"""Seconds a second liveness session would wait for the first one's lock before giving up."""


@pytest.fixture
def admin(postgres_ledger: str) -> Iterator[Admin]:
    """A session of the test's own, for looking at the others' locks."""
    with psycopg.connect(postgres_ledger, autocommit=True) as connection:
        yield connection


@pytest.fixture
def host(admin: Admin, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """A host name of the test's own, and a short lock timeout; its liveness session ends after."""
    monkeypatch.setattr(_postgres, "LOCK_TIMEOUT", SHORT_LOCK_TIMEOUT)
    name = f"host-{uuid.uuid4().hex[:12]}"
    yield name
    for pid in holders_of(admin, _owner_lock(this_process(name))):
        admin.execute("SELECT pg_terminate_backend(%s, %s)", (pid, int(DEADLINE * 1000)))


def respelled(dsn: str, **changes: str) -> str:
    """``dsn`` with other connection parameters; an empty one is left out."""
    parts = {**conninfo_to_dict(dsn), **changes}
    return make_conninfo("", **{name: value for name, value in parts.items() if value})


def pump(source: socket.socket, sink: socket.socket) -> None:
    """Copy what ``source`` receives to ``sink`` until either end closes."""
    with contextlib.suppress(OSError):
        while data := source.recv(65536):
            sink.sendall(data)
    with contextlib.suppress(OSError):
        sink.shutdown(socket.SHUT_WR)


def forward(client: socket.socket, server: tuple[str, int]) -> None:
    """Carry one client's connection to ``server`` both ways, then close both ends."""
    with client, socket.create_connection(server) as upstream:
        back = threading.Thread(target=pump, args=(upstream, client), daemon=True)
        back.start()
        pump(client, upstream)
        back.join(DEADLINE)


@contextlib.contextmanager
def tcp_proxy(server: tuple[str, int]) -> Iterator[int]:
    """A TCP proxy to ``server`` on a port of its own (as a pooler beside it); yield the port."""
    listener = socket.create_server(("127.0.0.1", 0))

    def serve() -> None:
        with contextlib.suppress(OSError):  # the listener was closed
            while True:
                client, _ = listener.accept()
                threading.Thread(target=forward, args=(client, server), daemon=True).start()

    with listener:
        threading.Thread(target=serve, daemon=True).start()
        yield listener.getsockname()[1]


@contextlib.contextmanager
def spelling(dsn: str, how: str) -> Iterator[str]:
    """``dsn`` (its host 127.0.0.1) spelled ``how``; skip where this server cannot be so reached."""
    given = conninfo_to_dict(dsn)
    port = str(given.get("port") or 5432)
    if given.get("host") != "127.0.0.1":
        pytest.skip(f"the test server is not at 127.0.0.1: {given.get('host')}")
    if how == "localhost":
        yield respelled(dsn, host="localhost")
    elif how == "unix socket":
        with psycopg.connect(POSTGRES) as superuser:  # it alone may read where the socket is
            shown = superuser.execute("SHOW unix_socket_directories").fetchone()
        (directories,) = shown or ("",)
        directory = directories.split(",")[0].strip()
        if not directory or not (Path(directory) / f".s.PGSQL.{port}").exists():
            pytest.skip(f"no unix socket of the server here: {directories!r}")
        yield respelled(dsn, host=directory)
    elif how == "its own time zone":
        options = f"{given.get('options', '')} -c TimeZone=Pacific/Chatham -c DateStyle=German"
        yield respelled(dsn, options=options)
    elif how == "port left out":
        if port != "5432":
            pytest.skip(f"the server is on port {port}, not the default one")
        yield respelled(dsn, port="")
    else:
        with tcp_proxy(("127.0.0.1", int(port))) as proxied:
            yield respelled(dsn, port=str(proxied))


@pytest.mark.parametrize("how", SPELLINGS)
def test_stores_of_one_process_on_two_spellings_of_a_database_share_its_liveness_lock(
    postgres_ledger: str, admin: Admin, host: str, tmp_path: Path, how: str
) -> None:
    """A second store of the process, its DSN spelt otherwise, claims at once: one lock held."""
    effects = tmp_path / "effects"
    with (
        spelling(postgres_ledger, how) as other,
        PostgresStore(postgres_ledger, host=host, lease=LONG_LEASE) as first,
        PostgresStore(other, host=host, lease=LONG_LEASE) as second,
    ):
        outcomes = [charge(first, effects)("a"), charge(second, effects)("b")]
        holders = holders_of(admin, _owner_lock(first.owner))
    assert outcomes == [Succeeded("a", host), Succeeded("b", host)]
    assert len(holders) == 1


@pytest.fixture
def unidentified() -> Iterator[str]:
    """A DSN of a role that may not run pg_control_system(), on a migrated database of its own.

    A database of its own: EXECUTE is revoked in its catalog only, not in the one every
    other test uses. It is dropped with its sessions (this process's liveness one among them).
    """
    server = postgres_or_skip()
    name = f"safeact_unidentified_{uuid.uuid4().hex[:12]}"
    role = f"safeact_role_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(server, autocommit=True) as admin:
        admin.execute(f"CREATE DATABASE {name}")
        admin.execute(f"CREATE ROLE {role} LOGIN")
        try:
            database = make_conninfo(server, dbname=name)
            migrate_postgres(database)
            with psycopg.connect(database, autocommit=True) as owner:
                owner.execute("REVOKE EXECUTE ON FUNCTION pg_control_system() FROM PUBLIC")
                owner.execute(f"GRANT ALL ON ALL TABLES IN SCHEMA public TO {role}")
                owner.execute(f"GRANT ALL ON ALL SEQUENCES IN SCHEMA public TO {role}")
            yield make_conninfo(database, user=role)
        finally:
            admin.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
            admin.execute(f"DROP ROLE {role}")


@pytest.mark.parametrize("how", SPELLINGS)
def test_a_role_that_may_not_read_the_system_identifier_still_shares_the_liveness_lock(
    unidentified: str, host: str, tmp_path: Path, how: str
) -> None:
    """Without pg_control_system(), the server's port and start tell the database: one lock."""
    effects = tmp_path / "effects"
    with (
        psycopg.connect(unidentified, autocommit=True) as admin,
        spelling(unidentified, how) as other,
        PostgresStore(unidentified, host=host, lease=LONG_LEASE) as first,
        PostgresStore(other, host=host, lease=LONG_LEASE) as second,
    ):
        outcomes = [charge(first, effects)("a"), charge(second, effects)("b")]
        holders = holders_of(admin, _owner_lock(first.owner))
        identities = (first._database, second._database)
    assert outcomes == [Succeeded("a", host), Succeeded("b", host)]
    assert len(holders) == 1
    assert identities[0] == identities[1]
    assert identities[0].startswith("port ")
