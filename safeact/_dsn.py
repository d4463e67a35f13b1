"""What a ledger location is: a PostgreSQL database, or else a SQLite file path.

A pure reading of the string, without psycopg (SQLite users never load it). A PostgreSQL
location comes back as the string to hand libpq, the form to show (every secret value
masked) and the secret values to scrub from whatever libpq or the server says.
"""

from __future__ import annotations

import re
from urllib.parse import quote, unquote, urlsplit

import attrs

__all__ = ["PostgresLocation", "parse_location"]

_MASK = "***"
"""What a secret value is shown as."""

_SHOWN = frozenset(
    {
        *("host", "hostaddr", "port", "dbname", "user", "passfile", "service", "options"),
        *("connect_timeout", "client_encoding", "application_name", "fallback_application_name"),
        *("keepalives", "keepalives_idle", "keepalives_interval", "keepalives_count"),
        *("tcp_user_timeout", "replication", "target_session_attrs", "load_balance_hosts"),
        *("sslmode", "sslnegotiation", "sslcompression", "sslcert", "sslkey", "sslcertmode"),
        *("sslrootcert", "sslcrl", "sslcrldir", "sslsni", "sslkeylogfile", "requirepeer"),
        *("ssl_min_protocol_version", "ssl_max_protocol_version", "min_protocol_version"),
        *("max_protocol_version", "gssencmode", "krbsrvname", "gsslib", "gssdelegation"),
        *("channel_binding", "require_auth", "oauth_issuer", "oauth_client_id", "oauth_scope"),
    }
)
"""The libpq keywords (PostgreSQL 18) whose values are not secret, and only those.

Every other key's value is masked: ``password``, ``sslpassword``, ``oauth_client_secret``,
a keyword newer than this list, and a misspelt key (``pasword=``, ``PASSWORD=``), whose
value is a password more often than not.
"""

_SPACE = " \t\n\v\f\r"
"""What libpq takes for white space between keyword pairs (C's ``isspace``)."""

# A URL's scheme (RFC 3986; two characters at least, as C:// is a Windows path), with a
# scheme of its own before it (jdbc:postgresql://), then "//". Or a scheme users write
# without "//": SQLite's file: URIs, SQLAlchemy's sqlite:, a PostgreSQL URL missing it.
_URL = re.compile(r"[A-Za-z][A-Za-z0-9+.:-]+(?=://)")
_OPAQUE = re.compile(r"(?:file|sqlite|postgres|postgresql)(?:\+\w*)?(?=:)", re.IGNORECASE)
_MEMORY = re.compile(r"memory:", re.IGNORECASE)
"""How an in-memory ledger's location begins (``memory:1f0c3a9e``): it names no file."""
_POSTGRES = re.compile(r"(?:postgresql|postgres)(?:\+\w+)?")
"""PostgreSQL's two schemes, or SQLAlchemy's with a driver (``postgresql+psycopg``)."""
_BAD_PERCENT = re.compile(r"%(?![0-9A-Fa-f]{2})")


@attrs.frozen
class PostgresLocation:
    """A PostgreSQL database, as a location names it.

    Attributes:
        dsn: The connection string to hand libpq: the location without the white space
            around it, a URL's scheme as ``postgresql://``. It holds the password.
        shown: The location as messages and reprs show it: every secret value ``***``,
            wherever it appears (a user named as the password is masked too).
        secrets: Each secret value of the location, as written and as libpq reads it
            (percent-decoded, unquoted), and percent-encoded.

    """

    dsn: str = attrs.field(repr=False)
    shown: str
    secrets: frozenset[str] = attrs.field(repr=False)

    def scrub(self, text: str) -> str:
        """``text`` (what libpq or the server said) with each secret value as ``***``."""
        return _scrubbed(text, self.secrets)


def _scrubbed(text: str, secrets: frozenset[str]) -> str:
    """``text`` with each of ``secrets`` as ``***``, the longest first (one may hold another)."""
    for secret in sorted(secrets, key=len, reverse=True):
        text = text.replace(secret, _MASK)
    return text


def parse_location(location: str) -> PostgresLocation | None:
    r"""The PostgreSQL database ``location`` names, or ``None``: it is a SQLite file path.

    PostgreSQL: a ``postgresql://`` or ``postgres://`` URL, the scheme in any case, or
    SQLAlchemy's with a driver (``postgresql+psycopg://``), all read as ``postgresql://``;
    or libpq keyword pairs (``host=db dbname=agents``), which a location is when it has a
    ``=`` and no ``/`` or ``\`` before its first one. White space around either is
    dropped. Anything else is a file path: write a file named like keyword pairs
    ``./host=…``.

    Raises:
        ValueError: ``location`` is SQLite's ``:memory:`` (a location names a file; see
            ``safeact.memory_ledger``), an in-memory ledger's ``memory:…``, a URL of
            another kind (``sqlite:///``, ``file:``, ``mysql://``...), or a PostgreSQL
            location that libpq would refuse or read otherwise than meant: a word without
            ``=`` or a quote left open among keyword pairs; in a URL, a ``%`` not starting
            a ``%XX`` escape, an ``@`` other than the one after the password, or a ``/`` or
            ``?`` before that one. One line, the location masked, saying what to write.

    """
    text = location.strip(_SPACE)
    if text == ":memory:":
        # SQLite's name for a database that dies with its connection; here it would be a
        # file named ":memory:", and a test's "fresh" ledger would replay the last run's.
        raise ValueError(
            "':memory:' is not an in-memory ledger here: as a location it would make a "
            "ledger file named ':memory:', which the next run would find again; "
            "for a ledger in this process's memory, gone when closed, call "
            "safeact.memory_ledger(); with pytest, the ledger fixture gives each test a "
            "ledger of its own"
        )
    if _MEMORY.match(text):
        # How an in-memory ledger's location reads (``safeact._memory``): as a path, it
        # would make a file of that name, a ledger other than the one it names.
        raise ValueError(
            f"{text!r} reads as the location of an in-memory ledger, which no location "
            "opens: it lives in the process that made it, reached only through the store "
            "safeact.memory_ledger() returned, so pass that store; write a file named so "
            f"'./{text}'"
        )
    scheme = _URL.match(text) or _OPAQUE.match(text)
    if scheme is not None:
        name, rest = scheme.group().lower(), text[scheme.end() :]
        if rest.startswith("://") and _POSTGRES.fullmatch(name):
            return _postgres_url("postgresql" + rest)
        raise ValueError(_not_postgres(text, name, rest))
    if _names_keywords(text):
        return _keyword_pairs(text)
    return None


def _names_keywords(text: str) -> bool:
    """Whether ``text`` is libpq keyword pairs: a ``=``, and no path separator before it."""
    key, equals, _ = text.partition("=")
    return bool(equals) and not any(separator in key for separator in "/\\")


def _postgres_url(url: str) -> PostgresLocation:
    """A ``postgresql://`` URL that libpq reads as it is meant.

    Raises:
        ValueError: a ``%`` that starts no ``%XX``, or an ``@`` libpq would read otherwise.

    """
    head, after = "postgresql://", url.removeprefix("postgresql://")
    masked = _masked_url(after)
    if _BAD_PERCENT.search(after):
        raise ValueError(
            f"{head}{masked}: a % in a URL starts a %XX escape: write a % in the password (or in "
            "any part of the URL) as %25"
        )
    # libpq takes the first @ before any / for the end of the password: an @, / or ? in
    # the password would move it, and an @ elsewhere could be taken for it.
    at = after.find("@")
    if after.count("@") > 1 or any(mark in after[: max(at, 0)] for mark in "/?"):
        raise ValueError(
            f"{head}{masked}: libpq would misread this URL: write an @ in the user name, password "
            "or a value as %40, and a / or ? in the user name or password as %2F or %3F"
        )
    userinfo, _, rest = after.rpartition("@")
    _, colon, password = userinfo.partition(":")
    written = [password] if colon else []
    for parameter in rest.partition("?")[2].split("&"):
        key, equals, value = parameter.partition("=")
        if not equals:
            written.append(key)  # a bare word: a value cut from its key
        elif unquote(key) not in _SHOWN:
            written.append(value)
    secrets = _encoded_too({form for value in written for form in (value, unquote(value))})
    return PostgresLocation(dsn=url, shown=head + _scrubbed(masked, secrets), secrets=secrets)


def _masked_url(after: str) -> str:
    """A URL's part after its scheme, its password and secret query values masked.

    Any URL, even one that libpq would misread: everything before the last ``@`` is taken
    for the user name and password, and all of it is masked if the name looks wrong.
    """
    userinfo, at, rest = after.rpartition("@")
    if at:
        user, colon, _ = userinfo.partition(":")
        if any(mark in user for mark in "/?#=&"):
            userinfo = _MASK
        else:
            userinfo = f"{user}:{_MASK}" if colon else user
    base, question, query = rest.partition("?")
    parameters = "&".join(map(_masked_parameter, query.split("&"))) if question else ""
    return f"{userinfo}{at}{base}{question}{parameters}"


def _masked_parameter(parameter: str) -> str:
    """A URL's ``key=value`` parameter, its value masked unless the key is a shown one."""
    key, equals, _ = parameter.partition("=")
    if not equals:
        return _MASK if parameter else parameter
    return parameter if unquote(key) in _SHOWN else f"{key}={_MASK}"


@attrs.frozen
class _Pair:
    """A ``key=value`` pair of a libpq connection string."""

    key: str
    written: str
    """The value as written: quotes and backslashes included."""
    value: str
    """The value as libpq reads it."""

    @property
    def shown(self) -> str:
        return f"{self.key}={self.written if self.key in _SHOWN else _MASK}"


@attrs.frozen
class _Reading:
    """libpq's reading of keyword pairs: the pairs, and the fault that ended it, if any."""

    pairs: tuple[_Pair, ...]
    fault: str | None


def _keyword_pairs(text: str) -> PostgresLocation:
    """Keyword pairs that libpq reads through.

    Raises:
        ValueError: a word without ``=``, or a quoted value left open.

    """
    reading = _read_pairs(text)
    forms: set[str] = set()
    for pair in reading.pairs:
        if pair.key not in _SHOWN:
            inner = pair.written[1:-1] if pair.written.startswith("'") else pair.written
            forms |= {pair.written, inner, pair.value}
    secrets = _encoded_too(forms)
    shown = _scrubbed(" ".join(pair.shown for pair in reading.pairs), secrets)
    if reading.fault is not None:  # what libpq could not read is masked whole
        read = f"{shown} {_MASK}".lstrip()
        raise ValueError(f"{read}: not a PostgreSQL connection string: {reading.fault}")
    return PostgresLocation(dsn=text, shown=shown, secrets=secrets)


_NO_EQUALS = (
    "a word without = (a value with spaces is written in single quotes, "
    "password='two words'; a file of this name is written starting with ./)"
)
_OPEN_QUOTE = (
    "a quoted value without its closing ' (a ' or \\ inside a value is written \\' or \\\\)"
)


def _read_pairs(text: str) -> _Reading:  # noqa: C901 - libpq's own parser, step for step
    """The pairs of ``text`` as libpq's ``conninfo_parse`` reads them, up to a fault."""
    pairs: list[_Pair] = []
    end, at = len(text), 0

    def skip_space() -> None:
        nonlocal at
        while at < end and text[at] in _SPACE:
            at += 1

    while True:
        skip_space()
        if at == end:
            return _Reading(tuple(pairs), None)
        start = at
        while at < end and text[at] != "=" and text[at] not in _SPACE:
            at += 1
        key = text[start:at]
        skip_space()
        if at == end or text[at] != "=":
            return _Reading(tuple(pairs), _NO_EQUALS)
        at += 1
        skip_space()
        begun, quoted, value = at, text.startswith("'", at), []
        at += quoted  # past the opening quote
        closed = not quoted
        while at < end and (quoted or text[at] not in _SPACE):
            char = text[at]
            at += 1
            if char == "\\":  # escapes the next character; at the very end, nothing
                value.append(text[at : at + 1])
                at = min(at + 1, end)
            elif quoted and char == "'":
                closed = True
                break
            else:
                value.append(char)
        if not closed:
            return _Reading(tuple(pairs), _OPEN_QUOTE)
        pairs.append(_Pair(key, text[begun:at], "".join(value)))


def _encoded_too(forms: set[str]) -> frozenset[str]:
    """``forms`` and their percent-encodings, empty ones left out (they would mask all)."""
    return frozenset(secret for form in forms for secret in (form, quote(form, safe="")) if secret)


def _not_postgres(text: str, scheme: str, rest: str) -> str:
    """Why a URL that is not a PostgreSQL one is refused, and what to write instead."""
    shown = _shown_url(text, scheme, rest)
    base = scheme.partition("+")[0]
    if base in {"sqlite", "file"}:
        path = unquote(urlsplit(text).path)
        if base == "sqlite" and rest.startswith(":///"):
            path = path.removeprefix("/")  # SQLAlchemy's: sqlite:///x.db is x.db
        named = f"write {path!r}" if path else "write the path of a file, such as 'agent.db'"
        return f"{shown}: safeact opens a SQLite ledger by its file path, not a URL: {named}"
    if base in {"postgresql", "postgres"}:
        return f"{shown}: a PostgreSQL URL starts postgresql:// (user@host/dbname after it)"
    return (
        f"{shown}: safeact keeps its ledger in PostgreSQL or in a SQLite file, not at a "
        f"{scheme}: URL: write a postgresql:// URL, libpq keyword pairs "
        "(host=… dbname=…) or a file path"
    )


def _shown_url(text: str, scheme: str, rest: str) -> str:
    """A URL of any scheme, its password and secret values masked."""
    separator = "://" if rest.startswith("://") else ":"
    return text[: len(scheme)] + separator + _masked_url(rest.removeprefix(separator))
