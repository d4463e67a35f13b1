"""Who may use ``safeact serve``: the operator's token or password hashes, and the checks.

Pure of the web framework: the inbox asks ``Credentials.admits`` at sign-in, and
``same_origin`` and ``same_token`` for each decision (a POST). A password is kept only as
its scrypt hash, with its parameters, so that a stolen file of hashes costs a guesser what
it costs the server; a token is compared in constant time.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import os
from typing import TYPE_CHECKING, Literal

import attrs

if TYPE_CHECKING:
    from collections.abc import Mapping
    from pathlib import Path

__all__ = ["Credentials", "hash_password", "same_origin", "same_token"]

_SCRYPT = "scrypt"
_COST, _BLOCK, _PARALLEL = 17, 8, 1
"""scrypt's parameters for new hashes: n = 2**17, r = 8, p = 1 (128 MiB, ~0.3 s here)."""

_MAXMEM = 256 * 1024 * 1024
"""Memory scrypt may use: more than n = 2**17, r = 8 needs (hashlib's default is 32 MiB)."""

SHORTEST_TOKEN = 32
"""The fewest characters a token may have: a guesser must not be able to try them all."""

_MAKE_TOKEN = "python3 -c 'import secrets; print(secrets.token_urlsafe(32))' > token"  # noqa: S105 - how to make one


def hash_password(password: str, *, salt: bytes | None = None) -> str:
    """``password``'s scrypt hash, as ``--passwords`` files keep it (parameters included)."""
    salt = os.urandom(16) if salt is None else salt
    digest = _scrypt(password, salt, _COST, _BLOCK, _PARALLEL)
    return "$".join((_SCRYPT, str(_COST), str(_BLOCK), str(_PARALLEL), _b64(salt), _b64(digest)))


_UNKNOWN = "scrypt$17$8$1$AAAAAAAAAAAAAAAAAAAAAA$AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"
"""A hash no password matches, checked for a name the file does not hold."""


def _scrypt(password: str, salt: bytes, cost: int, block: int, parallel: int) -> bytes:
    return hashlib.scrypt(
        password.encode(), salt=salt, n=2**cost, r=block, p=parallel, maxmem=_MAXMEM, dklen=32
    )


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).decode().rstrip("=")


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def _matches(password: str, hashed: str) -> bool:
    """Whether ``password`` is the one ``hashed`` (``hash_password``'s form) was made from."""
    _, cost, block, parallel, salt, digest = hashed.split("$")
    tried = _scrypt(password, _unb64(salt), int(cost), int(block), int(parallel))
    return hmac.compare_digest(tried, _unb64(digest))


@attrs.frozen
class Credentials:
    """What a person must show to sign in: the token, a password of theirs, or nothing.

    ``nothing`` is allowed only on a loopback address, and only when the operator asks for
    it (``safeact serve --no-auth``): anyone who can reach the port then signs in with a
    name alone.
    """

    kind: Literal["token", "passwords", "nothing"]
    token: str | None = attrs.field(default=None, repr=False)
    hashes: Mapping[str, str] = attrs.field(factory=dict, repr=False)

    @classmethod
    def from_token_file(cls, path: Path) -> Credentials:
        """The token in ``path`` (its first line).

        Raises:
            ValueError: it cannot be read, or the token is shorter than ``SHORTEST_TOKEN``.

        """
        try:
            lines = path.read_text().splitlines()
        except (OSError, UnicodeDecodeError) as exc:
            raise ValueError(f"--token-file {path}: cannot read it ({exc})") from None
        token = lines[0].strip() if lines else ""
        if len(token) < SHORTEST_TOKEN:
            raise ValueError(
                f"--token-file {path}: the token has {len(token)} characters; give one of at "
                f"least {SHORTEST_TOKEN}, e.g. {_MAKE_TOKEN}"
            )
        return cls("token", token=token)

    @classmethod
    def from_password_file(cls, path: Path) -> Credentials:
        """The people in ``path``: one ``NAME:HASH`` a line, each hash from ``hash-password``.

        Raises:
            ValueError: it cannot be read, names nobody, or a line is not ``NAME:HASH``.

        """
        try:
            lines = path.read_text().splitlines()
        except (OSError, UnicodeDecodeError) as exc:
            raise ValueError(f"--passwords {path}: cannot read it ({exc})") from None
        hashes: dict[str, str] = {}
        for number, line in enumerate(lines, 1):
            if not line.strip() or line.startswith("#"):
                continue
            name, _, hashed = line.rpartition(":")
            if not name.strip() or not _well_formed(hashed):
                raise ValueError(
                    f"--passwords {path}: line {number} is not NAME:HASH with a hash that "
                    "`safeact hash-password` printed"
                )
            hashes[name.strip()] = hashed
        if not hashes:
            raise ValueError(
                f"--passwords {path}: it names nobody; add NAME:HASH lines, each hash from "
                "`safeact hash-password`"
            )
        return cls("passwords", hashes=hashes)

    def admits(self, name: str, secret: str) -> bool:
        """Whether ``name`` signing in with ``secret`` may come in."""
        match self.kind:
            case "token":
                assert self.token is not None
                return hmac.compare_digest(secret.encode(), self.token.encode())
            case "passwords":
                hashed = self.hashes.get(name)
                # An unknown name costs a hash too: the answer's time tells no one who exists.
                return _matches(secret, _UNKNOWN if hashed is None else hashed) and (
                    hashed is not None
                )
            case "nothing":
                return True

    def bearer(self, header: str | None) -> bool:
        """Whether an ``Authorization`` header carries the token (for the JSON API)."""
        if self.kind != "token" or header is None:
            return False
        scheme, _, given = header.partition(" ")
        assert self.token is not None
        return scheme.lower() == "bearer" and hmac.compare_digest(
            given.strip().encode(), self.token.encode()
        )


def _well_formed(hashed: str) -> bool:
    parts = hashed.split("$")
    return (
        len(parts) == 6
        and parts[0] == _SCRYPT
        and all(part.isdigit() and 0 < int(part) < 64 for part in parts[1:4])
    )


def same_token(expected: object, given: object) -> bool:
    """Whether a form's anti-forgery token is the session's (text, compared in constant time)."""
    return (
        isinstance(expected, str)
        and isinstance(given, str)
        and bool(expected)
        and hmac.compare_digest(expected.encode(), given.encode())
    )


def same_origin(origin: str | None, fetch_site: str | None, own: str) -> bool:
    """Whether a POST comes from the inbox's own pages, as far as the browser tells.

    ``origin`` is its ``Origin`` header, ``fetch_site`` its ``Sec-Fetch-Site``, ``own`` the
    inbox's origin (``http://host:port`` as the request named it). A browser sends both on
    a form's POST; a header that is missing is no evidence either way (the form's token
    still has to match).
    """
    if fetch_site is not None and fetch_site not in ("same-origin", "none"):
        return False
    return origin is None or origin == own
