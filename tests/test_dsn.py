"""What a ledger location is, and that no password of one is ever shown.

Every spelling of a PostgreSQL database users write reaches PostgreSQL or is refused, never
becomes a SQLite file (named with the password); other URLs are refused saying what to
write. The password is masked in every location shown, and scrubbed from whatever libpq or
the server says, in messages, tracebacks, log records and the command line's output.
"""

import logging
import re
import socket
import subprocess
import sys
import traceback
from collections.abc import Callable
from pathlib import Path
from urllib.parse import quote

import pytest
from hypothesis import given
from hypothesis import strategies as st

from safeact import State, Store, StoreError, Succeeded, get_store, safe
from safeact._dsn import PostgresLocation, parse_location
from safeact._open import StoreHandle, names_postgres
from safeact._tables import SCHEMA_VERSION
from tests.conftest import postgres_or_skip


def pay(key: str) -> int:
    return 1


def run(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """Run ``python -m safeact ARGS`` in ``cwd`` to the end."""
    (done,) = run_all(args, cwd=cwd)
    return done


def started(args: tuple[str, ...], cwd: Path) -> subprocess.Popen[str]:
    """``python -m safeact ARGS`` in ``cwd``, started."""
    return subprocess.Popen(
        [sys.executable, "-m", "safeact", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=cwd,
    )


def finished(process: subprocess.Popen[str]) -> subprocess.CompletedProcess[str]:
    """``process`` run to its end."""
    out, err = process.communicate(timeout=60)
    return subprocess.CompletedProcess(process.args, process.returncode, out, err)


def run_all(*commands: tuple[str, ...], cwd: Path) -> list[subprocess.CompletedProcess[str]]:
    """Run ``python -m safeact`` once for each command, all at once, each to the end."""
    return [finished(process) for process in [started(args, cwd) for args in commands]]


def location(text: str) -> PostgresLocation:
    found = parse_location(text)
    assert found is not None
    return found


# What a location is.

POSTGRES_SPELLINGS = {
    "URL": ("postgresql://app@db/agents", "postgresql://app@db/agents"),
    "short scheme": ("postgres://app@db/agents", "postgresql://app@db/agents"),
    "scheme in capitals": ("POSTGRESQL://app@db/agents", "postgresql://app@db/agents"),
    "scheme capitalised": ("Postgres://app@db/agents", "postgresql://app@db/agents"),
    "SQLAlchemy psycopg": ("postgresql+psycopg://app@db/agents", "postgresql://app@db/agents"),
    "SQLAlchemy psycopg2": ("postgresql+psycopg2://app@db/agents", "postgresql://app@db/agents"),
    "SQLAlchemy asyncpg": ("postgres+asyncpg://app@db/agents", "postgresql://app@db/agents"),
    "URL in white space": (" \tpostgresql://app@db/agents\n", "postgresql://app@db/agents"),
    "keywords": ("host=db dbname=agents", "host=db dbname=agents"),
    "keyword safeact did not list first": (
        "keepalives_idle=30 host=db password=p",
        "keepalives_idle=30 host=db password=p",
    ),
    "keyword in capitals": ("PASSWORD=p host=db", "PASSWORD=p host=db"),
    "misspelt keyword first": ("pasword=p host=db", "pasword=p host=db"),
    "spaces around =": ("dbname = agents", "dbname = agents"),
    "keywords in white space": ("  host=db dbname=agents \n", "host=db dbname=agents"),
}
"""Each spelling of a PostgreSQL location, and the connection string libpq is given for it."""


@pytest.mark.parametrize(("spelling", "dsn"), POSTGRES_SPELLINGS.values(), ids=POSTGRES_SPELLINGS)
def test_every_postgresql_spelling_names_postgresql(spelling: str, dsn: str) -> None:
    """A URL in any case or with a SQLAlchemy driver, or keyword pairs: PostgreSQL, as meant."""
    assert dsn == location(spelling).dsn


PATHS = [
    "agent.db",
    "./host=db password=p",
    "/var/lib/safeact/agent.db",
    "ledgers/run=7/agent.db",
    "C:\\ledgers\\run=7.db",
    "agent.db:backup",
    "postgres.db",
    "sqlite.db",
]


@pytest.mark.parametrize("path", PATHS)
def test_a_path_is_a_file(path: str) -> None:
    """A path (``./`` first, or a ``/`` before the first ``=``) is a SQLite file."""
    assert parse_location(path) is None


REFUSED = {
    "SQLAlchemy's SQLite URL": ("sqlite:///agent.db", "write 'agent.db'"),
    "SQLAlchemy's absolute SQLite URL": ("sqlite:////srv/agent.db", "write '/srv/agent.db'"),
    "SQLAlchemy's SQLite URL with a driver": ("sqlite+pysqlite:///agent.db", "write 'agent.db'"),
    "SQLite's file URI": ("file:agent.db?mode=ro", "write 'agent.db'"),
    "a file URL": ("file:///srv/agent.db", "write '/srv/agent.db'"),
    "in-memory SQLite": ("sqlite://", "write the path of a file"),
    "MySQL": ("mysql://app@db/agents", "write a postgresql:// URL, libpq keyword pairs"),
    "HTTP": ("http://db/agents", "write a postgresql:// URL, libpq keyword pairs"),
    "JDBC": ("jdbc:postgresql://db/agents", "write a postgresql:// URL, libpq keyword pairs"),
    "PostgreSQL without //": ("postgresql:db/agents", "starts postgresql://"),
    "a word without =": ("host=db password=two words", "password='two words'"),
    "a word first": ("agents host=db", "a file of this name is written starting with ./"),
    "a quote left open": ("host=db password='open", "closing '"),
    "a bare % in a URL": ("postgresql://app:50%off@db/agents", "as %25"),
    "an @ in the password": ("postgresql://app:p@ss@db/agents", "as %40"),
    "a / in the password": ("postgresql://app:pa/ss@db/agents", "%2F"),
    "an @ in a value before any /": ("postgresql://db?application_name=a@b", "as %40"),
}
"""Locations refused, and what the refusal says to write."""


@pytest.mark.parametrize(("text", "fix"), REFUSED.values(), ids=REFUSED)
def test_a_location_safeact_cannot_use_as_meant_is_refused_saying_what_to_write(
    text: str, fix: str
) -> None:
    """Another URL, or a PostgreSQL one libpq would refuse or misread: one line with the fix."""
    with pytest.raises(ValueError, match=re.escape(fix)) as refused:
        parse_location(text)
    assert "\n" not in str(refused.value)


def test_names_postgres_answers_for_its_callers() -> None:
    """True for PostgreSQL, False for a file path, and the refusal for another URL."""
    assert names_postgres("POSTGRESQL://db/agents")
    assert names_postgres("keepalives_idle=30 host=db")
    assert not names_postgres("./host=db")
    with pytest.raises(ValueError, match=re.escape("write 'agent.db'")):
        names_postgres("sqlite:///agent.db")


SPACES = st.sampled_from(["", " ", "\t ", "\n"])
VALUES = st.text(alphabet="ab '\\\t=", max_size=5)
PAIRS = st.builds(
    "{}{}={}{}{}".format,
    st.sampled_from(["host", "password", "hostx", ""]),
    SPACES,
    SPACES,
    st.one_of(VALUES, VALUES.map("'{}'".format)),
    SPACES,
)
STRAYS = st.sampled_from(["'", "\\", "a", "=", "password='a"])
KEYWORD_STRINGS = st.lists(st.one_of(PAIRS, STRAYS), max_size=5)
"""Keyword strings: pairs of libpq keywords, an unknown one or none, spaced and quoted
every way, values with libpq's marks in them, and stray marks (a quote opened) among them."""


@given(KEYWORD_STRINGS.map("".join))
def test_keyword_pairs_are_read_as_libpq_reads_them(text: str) -> None:
    """Keyword strings are read as libpq reads them: the same values, the same refusals."""
    psycopg = pytest.importorskip("psycopg")
    from psycopg.conninfo import conninfo_to_dict

    from safeact._dsn import _read_pairs

    reading = _read_pairs(text)
    try:
        theirs: dict[str, str | int | None] | None = conninfo_to_dict(text)
    except psycopg.ProgrammingError:
        theirs = None
    keys = {pair.key for pair in reading.pairs}
    ours: dict[str, str | int | None] = {pair.key: pair.value for pair in reading.pairs}
    expected = None if reading.fault or not keys <= {"host", "password"} else ours
    assert theirs == expected


# What a location shows.

SHOWN = {
    "URL password": ("postgresql://agent:s3cret@db/agents", "postgresql://agent:***@db/agents"),
    "no password": ("postgresql://agent@db/agents", "postgresql://agent@db/agents"),
    "user named as the password": ("postgres://s3cret:s3cret@db/a", "postgresql://***:***@db/a"),
    "role named as the password": ("user=s3cret password=s3cret", "user=*** password=***"),
    "encoded password": ("postgresql://agent:s3%40cr%25et@db/a", "postgresql://agent:***@db/a"),
    "capitals": ("POSTGRESQL://agent:s3cret@db/agents", "postgresql://agent:***@db/agents"),
    "driver": ("postgresql+psycopg://agent:s3cret@db/a", "postgresql://agent:***@db/a"),
    "query password": (
        "postgresql://db/agents?password=s3cret&sslmode=require",
        "postgresql://db/agents?password=***&sslmode=require",
    ),
    "query PASSWORD": ("postgresql://db/a?PASSWORD=s3cret", "postgresql://db/a?PASSWORD=***"),
    "encoded query key": (
        "postgresql://db/a?pass%77ord=s3cret",
        "postgresql://db/a?pass%77ord=***",
    ),
    "query word": (
        "postgresql://db/a?s3cret&sslmode=require",
        "postgresql://db/a?***&sslmode=require",
    ),
    "keyword": ("host=db user=agent password=s3cret", "host=db user=agent password=***"),
    "quoted keyword": (
        "host=db password='s3 cr\\'et' user=agent",
        "host=db password=*** user=agent",
    ),
    "spaced keyword": ("host=db password = s3cret", "host=db password=***"),
    "escaped space": ("host=db password=s3\\ cret user=agent", "host=db password=*** user=agent"),
    "keyword in capitals": ("PASSWORD=s3cret host=db", "PASSWORD=*** host=db"),
    "misspelt keyword": ("host=db pasword=s3cret", "host=db pasword=***"),
    "ssl password": ("host=db sslpassword=s3cret", "host=db sslpassword=***"),
    "shown keywords": (
        "host=db port=5432 dbname=agents user=agent application_name='my agent'",
        "host=db port=5432 dbname=agents user=agent application_name='my agent'",
    ),
}
"""Locations, and how messages and reprs show them."""


@pytest.mark.parametrize(("text", "shown"), SHOWN.values(), ids=SHOWN)
def test_a_location_is_shown_with_every_secret_masked(text: str, shown: str) -> None:
    """Passwords, values of keys libpq does not know, and stray words are shown as ``***``."""
    assert shown == location(text).shown


MASKED_REFUSALS = {
    "raw % in a URL password": "postgresql://agent:s3cret%@db/agents",
    "@ in a URL password": "postgresql://agent:s3cret@x@db/agents",
    "/ in a URL password": "postgresql://agent:s3cret/x@db/agents",
    "? in a URL password": "postgresql://agent:s3cret?x@db/agents",
    "unquoted space in a password": "host=db password=s3cret and more",
    "password first, unquoted space": "password=x s3cret host=db",
    "password quote left open": "host=db password='s3cret",
    "MySQL": "mysql://agent:s3cret@db/agents?ssl=1",
    "JDBC": "jdbc:postgresql://db/agents?user=agent&password=s3cret",
}


@pytest.mark.parametrize("text", MASKED_REFUSALS.values(), ids=MASKED_REFUSALS)
def test_a_refusal_shows_no_password(text: str) -> None:
    """A location refused is shown masked too, however libpq would have read it."""
    with pytest.raises(ValueError, match=r"\*\*\*") as refused:
        parse_location(text)
    assert "s3cret" not in str(refused.value)


def test_the_secrets_are_each_password_as_written_decoded_and_encoded() -> None:
    """A URL password is scrubbed as written, percent-decoded and percent-encoded."""
    found = location("postgresql://agent:S3cr3t-Pa55%20w%25rd@db/agents")
    said = 'token "S3cr3t-Pa55%20w%25rd", then "S3cr3t-Pa55 w%rd"'
    assert {"S3cr3t-Pa55%20w%25rd", "S3cr3t-Pa55 w%rd"} <= found.secrets
    assert found.scrub(said) == 'token "***", then "***"'


def test_a_keyword_password_is_scrubbed_as_libpq_reads_it_and_as_written() -> None:
    """A quoted password with an escaped quote is scrubbed unescaped and as written."""
    found = location("host=db password='S3cr3t \\'Pa55' user=agent")
    assert found.scrub("S3cr3t 'Pa55 and S3cr3t \\'Pa55") == "*** and ***"


def test_no_secret_is_empty() -> None:
    """An empty password scrubs nothing (an empty secret would mask between every letter)."""
    found = location("postgresql://agent:@db/agents?password=")
    assert frozenset() == found.secrets
    assert found.scrub("cannot connect") == "cannot connect"


def test_a_locations_repr_holds_no_password() -> None:
    """The repr of a parsed location shows the masked form alone."""
    assert (
        repr(location("host=db password=s3cret"))
        == "PostgresLocation(shown='host=db password=***')"
    )


# The real thing: each spelling against the server, from the library and the command line.


@pytest.fixture
def workdir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty working directory, where no file may be created."""
    monkeypatch.chdir(tmp_path)
    return tmp_path


def spelled(dsn: str, spelling: str) -> str:
    """The fixture's URL ``dsn`` in the named spelling (a password: trust auth ignores it)."""
    from psycopg.conninfo import conninfo_to_dict, make_conninfo

    rest = dsn.removeprefix("postgresql://")
    keywords = make_conninfo("", **conninfo_to_dict(dsn), password=PASSWORDS[0])
    return {
        "scheme in capitals": f"POSTGRESQL://{rest}",
        "scheme capitalised": f"Postgres://{rest}",
        "SQLAlchemy psycopg": f"postgresql+psycopg://{rest}",
        "SQLAlchemy psycopg2": f"postgresql+psycopg2://{rest}",
        "SQLAlchemy asyncpg": f"postgres+asyncpg://{rest}",
        "white space": f"  postgresql://{rest}\n",
        "URL password": f"postgresql://{rest.replace('@', ':S3cr3t-Pa55%20w%25rd@', 1)}",
        "keywords": keywords,
        "keyword safeact did not list first": f"keepalives_idle=30 {keywords}",
        "keywords in white space": f" {keywords}\t",
    }[spelling]


SPELLINGS = [
    "scheme in capitals",
    "scheme capitalised",
    "SQLAlchemy psycopg",
    "SQLAlchemy psycopg2",
    "SQLAlchemy asyncpg",
    "white space",
    "URL password",
    "keywords",
    "keyword safeact did not list first",
    "keywords in white space",
]


@pytest.mark.parametrize("spelling", SPELLINGS)
def test_each_spelling_reaches_postgresql_from_a_tool_and_the_command_line(
    postgres_ledger: str, workdir: Path, spelling: str
) -> None:
    """A tool on the spelling records its key on the server; `safeact ls` lists it; no file."""
    from safeact.postgres import PostgresStore, migrate_postgres

    given = spelled(postgres_ledger, spelling)
    assert migrate_postgres(given) == (SCHEMA_VERSION, SCHEMA_VERSION)
    PostgresStore(given).close()
    tool = safe(given, name="pay")(pay)
    assert Succeeded("order-1", 1) == tool("order-1")
    assert isinstance(tool.store, PostgresStore)
    tool.store.close()
    with get_store(postgres_ledger) as store:
        record = store.get("order-1")
    assert record is not None
    assert record.state == State.SUCCEEDED
    listed = run("ls", given, cwd=workdir)
    assert (listed.returncode, listed.stderr) == (0, "")
    assert [line.split()[:3] for line in listed.stdout.splitlines()[1:]] == [
        ["order-1", "pay", "succeeded"]
    ]
    assert list(workdir.iterdir()) == []


def test_a_keyword_libpq_does_not_know_is_refused_by_libpq_not_made_a_file(workdir: Path) -> None:
    """``PASSWORD=`` (libpq's keywords are lower case) reaches libpq, which refuses it."""
    pytest.importorskip("psycopg")
    given = "PASSWORD=S3cr3t host=127.0.0.1 dbname=agents"
    with pytest.raises(StoreError, match='invalid connection option "PASSWORD"'):
        get_store(given)
    listed = run("ls", given, cwd=workdir)
    assert listed.returncode == 2
    assert 'invalid connection option "PASSWORD"' in listed.stderr
    assert list(workdir.iterdir()) == []


@pytest.mark.parametrize(("text", "fix"), REFUSED.values(), ids=REFUSED)
def test_a_refused_location_opens_nothing_from_a_tool_or_the_command_line(
    workdir: Path, text: str, fix: str
) -> None:
    """get_store, safe() and `safeact ls` and `migrate` refuse it in one line; no file is made."""
    with pytest.raises(ValueError, match=re.escape(fix)):
        get_store(text)
    with pytest.raises(ValueError, match=re.escape(fix)):
        safe(text)(pay)
    for result in run_all(("ls", text), ("migrate", text), cwd=workdir):
        assert (result.returncode, result.stdout) == (2, "")
        (line,) = result.stderr.splitlines()
        assert line.startswith("safeact: error: ")
        assert fix in line
    assert list(workdir.iterdir()) == []


def test_an_unquoted_keyword_string_on_the_command_line_is_not_echoed(workdir: Path) -> None:
    """Words argparse did not expect (a connection string's, unquoted) are counted, not shown."""
    result = run("ls", "host=db", "password=S3cr3t", "Pa55", "--bogus", cwd=workdir)
    assert (result.returncode, result.stdout) == (2, "")
    assert result.stderr == (
        "safeact: error: unrecognized arguments: --bogus, 2 other words (not shown: a "
        "connection string with spaces goes in quotes, as one argument) (see `safeact --help`)\n"
    )


# No password anywhere: every way a location can fail, through every door.

PASSWORDS = ["S3cr3t-Pa55 w%rd", "S3cr3t'Pa55\\w0rd=x@y/z?q:r"]
"""Passwords with what chokes libpq: a space and a %; a quote, a backslash, = and URL marks."""


def fragments(password: str) -> set[str]:
    """The password, percent-encoded too, and each piece of it libpq might quote alone."""
    pieces = re.split(r"[\s'\\@/?:=&-]+", password)
    return {password, quote(password, safe="")} | {piece for piece in pieces if len(piece) >= 3}


def escaped(password: str) -> str:
    """``password`` quoted for libpq keyword pairs."""
    return "'" + password.replace("\\", "\\\\").replace("'", "\\'") + "'"


def closed_port() -> int:
    """A port of 127.0.0.1 that nothing listens on: bound, then let go."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


NO_ROLE = "safeact_no_role"
"""A role the server does not have: trust auth takes any password, not any role. Each failure
that could connect names it, or a missing database or schema: none may migrate the server's
own schema."""

FAILURES: dict[str, Callable[[str, str], str]] = {
    "URL, raw password": lambda pw, server: f"postgresql://{NO_ROLE}:{pw}@{server}/test",
    "URL, missing role": lambda pw, server: (
        f"postgresql://{NO_ROLE}:{quote(pw, safe='')}@{server}/test"
    ),
    "URL, password named as the missing role": lambda pw, server: (
        f"postgresql://{quote(pw, safe='')}:{quote(pw, safe='')}@{server}/test"
    ),
    "URL, missing database": lambda pw, server: (
        f"postgresql://postgres:{quote(pw, safe='')}@{server}/safeact_no_database"
    ),
    "URL, missing schema": lambda pw, server: (
        f"postgresql://postgres:{quote(pw, safe='')}@{server}/test"
        "?options=-csearch_path%3Dsafeact_no_schema"
    ),
    "URL, unknown host": lambda pw, _: (
        f"postgresql://{NO_ROLE}:{quote(pw, safe='')}@safeact-no-host.invalid/test"
    ),
    "URL, closed port": lambda pw, _: (
        f"postgresql://{NO_ROLE}:{quote(pw, safe='')}@127.0.0.1:{closed_port()}/test"
    ),
    "URL, IPv6 bracket left open": lambda pw, _: (
        f"postgresql://{NO_ROLE}:{quote(pw, safe='')}@[::1/test"
    ),
    "URL, raw query password": lambda pw, server: (
        f"postgresql://{NO_ROLE}@{server}/test?password={pw}"
    ),
    "URL, query PASSWORD": lambda pw, server: (
        f"postgresql://{NO_ROLE}@{server}/test?PASSWORD={quote(pw, safe='')}"
    ),
    "URL in capitals, missing role": lambda pw, server: (
        f"POSTGRESQL://{NO_ROLE}:{quote(pw, safe='')}@{server}/test"
    ),
    "SQLAlchemy URL, missing role": lambda pw, server: (
        f"postgresql+psycopg://{NO_ROLE}:{quote(pw, safe='')}@{server}/test"
    ),
    "keywords, unquoted password": lambda pw, server: (
        f"{keywords(server)} dbname=test user={NO_ROLE} password={pw}"
    ),
    "keywords, missing role": lambda pw, server: (
        f"{keywords(server)} dbname=test user={NO_ROLE} password={escaped(pw)}"
    ),
    "keywords, misspelt pasword": lambda pw, server: (
        f"{keywords(server)} dbname=test user={NO_ROLE} pasword={escaped(pw)}"
    ),
    "keywords, PASSWORD first": lambda pw, server: (
        f"PASSWORD={escaped(pw)} {keywords(server)} dbname=test user={NO_ROLE}"
    ),
    "keywords, unknown host": lambda pw, _: (
        f"keepalives_idle=30 host=safeact-no-host.invalid password={escaped(pw)}"
    ),
    "keywords, quote left open": lambda pw, server: (
        f"{keywords(server)} user={NO_ROLE} password={escaped(pw)[:-1]}"
    ),
    "MySQL URL": lambda pw, _: f"mysql://app:{quote(pw, safe='')}@db/agents",
    "JDBC URL": lambda pw, server: (
        f"jdbc:postgresql://{server}/test?user={NO_ROLE}&password={quote(pw, safe='')}"
    ),
}
"""Locations that fail, each given the password and the server's host:port."""


def keywords(server: str) -> str:
    host, _, port = server.partition(":")
    return f"host={host} port={port} connect_timeout=2"


def server() -> str:
    """The test server's ``host:port``."""
    from psycopg.conninfo import conninfo_to_dict

    parts = conninfo_to_dict(postgres_or_skip())
    return f"{parts.get('host', '127.0.0.1')}:{parts.get('port', 5432)}"


def told(action: Callable[[], object]) -> str:
    """What ``action`` shows: its value's repr, or its error as a traceback prints it."""
    try:
        value = action()
    except Exception as exc:  # noqa: BLE001 - whatever it raises is looked into
        return "".join(traceback.format_exception(exc))
    if isinstance(value, Store):
        value.close()
    return repr(value)


def tool_told(given: str) -> str:
    """What a tool on ``given`` shows: its refusal, or its repr and its first call's error."""
    try:
        tool = safe(given, name="pay")(pay)
    except ValueError as exc:
        return "".join(traceback.format_exception(exc))
    handle = StoreHandle(given)
    return f"{tool!r} {handle.location} {handle!r} {told(lambda: tool('order-1'))}"


def everything_shown(given: str, cwd: Path) -> list[str]:
    """What every door shows for ``given``: the library's errors, reprs, and the CLI's output."""
    from safeact.postgres import PostgresStore, migrate_postgres

    commands = [started((command, given), cwd) for command in ("ls", "migrate")]
    shown = [
        told(lambda: get_store(given, connect_timeout=2)),
        told(lambda: PostgresStore(given, connect_timeout=2)),
        told(lambda: migrate_postgres(given, connect_timeout=2)),
        tool_told(given),
    ]
    for command in map(finished, commands):
        assert command.returncode == 2, command.stderr
        shown += [command.stdout, command.stderr]
    return shown


@pytest.mark.postgres
@pytest.mark.parametrize("failure", FAILURES.values(), ids=FAILURES)
def test_no_password_is_shown_by_any_failure(
    failure: Callable[[str, str], str], workdir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Every door (errors, tracebacks, reprs, logs, the CLI) fails without the password."""
    caplog.set_level(logging.DEBUG)
    leaked = {}
    for password in PASSWORDS:
        shown = "\n".join([*everything_shown(failure(password, server()), workdir), caplog.text])
        leaked[password] = sorted(piece for piece in fragments(password) if piece in shown)
    assert leaked == {password: [] for password in PASSWORDS}
    assert list(workdir.iterdir()) == []


def test_no_password_is_shown_when_everything_works(
    empty_postgres: str, workdir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Migrating, listing, a store's and a tool's repr and location: all masked."""
    caplog.set_level(logging.DEBUG)
    password = PASSWORDS[0]
    given = empty_postgres.replace("@", f":{quote(password, safe='')}@", 1)
    results = [run(command, given, cwd=workdir) for command in ("migrate", "ls", "stats")]
    assert [result.returncode for result in results] == [0, 0, 0]
    assert results[0].stdout.startswith("created schema")
    with get_store(given) as store:
        tool = safe(store, name="pay")(pay)
        tool("order-1")
        shown = [repr(store), store.location, repr(tool), repr(safe(given)(pay))]
    shown += [result.stdout + result.stderr for result in results] + [caplog.text]
    assert [piece for piece in fragments(password) if piece in "\n".join(shown)] == []


def test_a_failed_migration_says_no_password_the_server_quotes() -> None:
    """A migration's failure is scrubbed of the password, should the server's text hold it."""
    psycopg = pytest.importorskip("psycopg")
    from safeact._postgres import _migration_failed

    said = psycopg.errors.InsufficientPrivilege('permission denied for role "S3cr3t-Pa55"')
    failed = _migration_failed(
        location("user=S3cr3t-Pa55 password=S3cr3t-Pa55"), 0, said, lost=False
    )
    assert "S3cr3t" not in str(failed)
    assert 'permission denied for role "***"' in str(failed)


MEMORY_REFUSED = "':memory:' is not an in-memory ledger here"
MEMORY_ADVICE = ("call safeact.memory_ledger()", "the ledger fixture")
"""What the refusal of ``":memory:"`` points at instead: the in-memory ledger, the fixture."""


@pytest.mark.parametrize(
    "open_it",
    [lambda: safe(":memory:")(pay), lambda: get_store(":memory:"), lambda: get_store(" :memory:")],
    ids=["safe", "get_store", "get_store with spaces"],
)
def test_sqlites_memory_name_is_refused_and_no_file_is_made(
    open_it: Callable[[], object], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``":memory:"`` is refused, pointing at ``memory_ledger()`` and the fixture; no file."""
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ValueError, match=re.escape(MEMORY_REFUSED)) as refused:
        open_it()
    assert [advice for advice in MEMORY_ADVICE if advice not in str(refused.value)] == []
    assert list(tmp_path.iterdir()) == []


def test_the_command_line_refuses_sqlites_memory_name(tmp_path: Path) -> None:
    """``safeact ls :memory:`` is a usage error (exit 2) saying why, and makes no file."""
    result = run("ls", ":memory:", cwd=tmp_path)
    assert result.returncode == 2
    assert MEMORY_REFUSED in result.stderr
    assert [advice for advice in MEMORY_ADVICE if advice not in result.stderr] == []
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    "open_it",
    [lambda: safe("memory:1f0c3a9e")(pay), lambda: get_store(" Memory:1f0c3a9e ")],
    ids=["safe", "get_store"],
)
def test_an_in_memory_ledgers_location_is_refused_and_no_file_is_made(
    open_it: Callable[[], object], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``memory:…`` names an in-memory ledger, never a file: refused, saying to pass the store."""
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ValueError, match=r"no location opens: .* so pass that store"):
        open_it()
    assert list(tmp_path.iterdir()) == []


def test_a_file_named_like_an_in_memory_ledger_is_written_with_dot_slash(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``./memory:x`` is a file path, as the refusal says to write it."""
    monkeypatch.chdir(tmp_path)
    with get_store("./memory:1f0c3a9e") as store:
        assert safe(store)(pay)("k") == Succeeded("k", 1)
    with get_store(tmp_path / "memory:1f0c3a9e") as store:
        assert safe(store)(pay)("k") == Succeeded("k", 1, replayed=True)
