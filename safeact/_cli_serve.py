"""``safeact serve`` and ``safeact hash-password``: the web inbox's commands.

The web stack (the extra ``serve``) is imported only when the inbox starts, so the rest of
the command line works without it. The inbox refuses to start without a way to tell who
comes in: a token, a file of password hashes, or (on a loopback address only) the explicit
``--no-auth``.
"""

from __future__ import annotations

import argparse
import getpass
import ipaddress
import sys
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

from safeact._web_auth import Credentials, hash_password

if TYPE_CHECKING:
    from safeact._store import Store

__all__ = ["add_commands", "cmd_hash_password", "cmd_serve"]

_P = TypeVar("_P", bound=argparse.ArgumentParser)

_PORT = 8765
_WILDCARDS = ("0.0.0.0", "::", "")  # noqa: S104 - named to be refused without --allowed-host


class ServeError(Exception):
    """A reason the inbox cannot start: said on one line, exit 2."""


def add_commands(commands: argparse._SubParsersAction[_P]) -> None:
    """Add ``serve`` and ``hash-password`` to the command line's ``commands``."""
    serve = commands.add_parser(
        "serve",
        help="Serve the inbox: a web page where people settle doubts and approvals.",
        description="Serve the inbox: a web page where people see the keys in doubt and the "
        "approval requests, live, and decide them (needs safeact[serve]).",
        epilog="example:\n"
        "  safeact serve agent.db --token-file inbox.token\n"
        "  python3 -c 'import secrets; print(secrets.token_urlsafe(32))' > inbox.token\n"
        "  safeact hash-password alice >> inbox.passwords   # NAME:HASH lines\n"
        "  safeact serve agent.db --passwords inbox.passwords --port 9000\n"
        "  safeact serve agent.db --no-auth           # loopback only: names, no secret",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    serve.add_argument("ledger", metavar="LEDGER", help="the ledger file, or a postgresql:// URL")
    who = serve.add_mutually_exclusive_group()
    who.add_argument(
        "--token-file",
        type=Path,
        metavar="FILE",
        help="a file whose first line is the token people sign in with (at least 32 characters)",
    )
    who.add_argument(
        "--passwords",
        type=Path,
        metavar="FILE",
        help="a file of NAME:HASH lines, each hash printed by `safeact hash-password`",
    )
    who.add_argument(
        "--no-auth",
        action="store_true",
        help="ask for a name only, no secret: allowed on a loopback address only",
    )
    serve.add_argument(
        "--host", default="127.0.0.1", help="the address to listen on (default 127.0.0.1)"
    )
    serve.add_argument(
        "--port", type=_port, default=_PORT, help=f"the port (default {_PORT}; 0: any free one)"
    )
    serve.add_argument(
        "--allowed-host",
        action="append",
        default=[],
        metavar="NAME",
        help="a host name browsers reach the inbox by (behind a proxy, say); repeatable",
    )
    serve.add_argument(
        "--session-minutes",
        type=float,
        default=30.0,
        metavar="N",
        help="a sign-in lasts this long (default 30)",
    )
    serve.add_argument(
        "--secure-cookies",
        action="store_true",
        help="send the session cookie over HTTPS only (behind a TLS proxy)",
    )
    commands.add_parser(
        "hash-password",
        help="Print a password's hash for serve --passwords (read from the terminal or stdin).",
        description="Print NAME:HASH for a --passwords file: the password is read from the "
        "terminal (asked twice), or one line of standard input.",
        epilog="example:\n  safeact hash-password alice >> inbox.passwords",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    ).add_argument("name", metavar="NAME", help="who signs in with this password")


def _port(text: str) -> int:
    """A TCP port number, 0 to 65535."""
    if not text.isdigit() or int(text) > 65535:
        raise argparse.ArgumentTypeError(f"{text!r} is not a port: give 0 to 65535")
    return int(text)


def cmd_hash_password(options: argparse.Namespace) -> int:
    """Print ``NAME:HASH`` for the password read; refuse an empty one or two that differ."""
    name = options.name.strip()
    if not name or ":" in name:
        raise ServeError("NAME must be a name without ':' (the file's lines are NAME:HASH)")
    if sys.stdin.isatty():
        password = getpass.getpass("password: ")
        if getpass.getpass("again: ") != password:
            raise ServeError("the two passwords differ; nothing was printed")
    else:
        password = sys.stdin.readline().rstrip("\n")
    if not password:
        raise ServeError("the password is empty; nothing was printed")
    sys.stdout.write(f"{name}:{hash_password(password)}\n")
    return 0


def credentials(options: argparse.Namespace) -> Credentials:
    """Who may sign in, as the options say; refused unless one way is given and allowed."""
    if options.host in _WILDCARDS and not options.allowed_host:
        raise ServeError(
            f"--host {options.host!r} listens on every address: name the host browsers "
            "use with --allowed-host NAME (a page served under any name can be reached by "
            "DNS rebinding)"
        )
    try:
        if options.token_file is not None:
            return Credentials.from_token_file(options.token_file)
        if options.passwords is not None:
            return Credentials.from_password_file(options.passwords)
    except ValueError as exc:
        raise ServeError(str(exc)) from None
    if not options.no_auth:
        raise ServeError(
            "say who may come in: --token-file FILE or --passwords FILE (or, on a loopback "
            "address only, --no-auth)"
        )
    if not loopback(options.host):
        raise ServeError(
            f"--no-auth is for a loopback address only, not --host {options.host}: anyone "
            "who reaches it could decide; give --token-file or --passwords"
        )
    return Credentials("nothing")


def loopback(host: str) -> bool:
    """Whether ``host`` is this machine's loopback only (``localhost``, 127.0.0.0/8, ::1)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def host_names(host: str, allowed: list[str]) -> tuple[str, ...]:
    """The names of the Host header the inbox answers: its address, ``allowed``, loopback's.

    A browser names an IPv6 address in brackets (``[::1]``), which is how the header
    arrives.
    """
    names = {host, *allowed}
    if loopback(host):
        names |= {"localhost", "127.0.0.1", "::1"}
    names |= {f"[{name}]" for name in names if ":" in name}
    return tuple(sorted(names))


def cmd_serve(options: argparse.Namespace, store: Store) -> int:
    """Serve ``store``'s inbox until interrupted."""
    who = credentials(options)
    if not options.session_minutes > 0:
        raise ServeError("--session-minutes must be more than 0")
    try:
        from safeact._web import Inbox, listening, server  # noqa: PLC0415 - the extra serve
    except ImportError as exc:
        raise ServeError(
            f"the inbox needs the extra serve ({(exc.name or 'a module').partition('.')[0]} is "
            "missing): pip install 'safeact[serve]'"
        ) from None
    try:
        sock = listening(options.host, options.port)
    except OSError as exc:
        raise ServeError(
            f"cannot listen on {options.host} port {options.port}: {exc.strerror or exc}"
        ) from None
    port = sock.getsockname()[1]
    names = host_names(options.host, options.allowed_host)
    inbox = Inbox(
        store=store,
        credentials=who,
        port=port,
        hosts=names,
        session_minutes=options.session_minutes,
        secure_cookies=options.secure_cookies,
    )
    shown = f"[{options.host}]" if ":" in options.host else options.host
    sys.stdout.write(
        f"safeact inbox for {store.location} on http://{shown}:{port}/ (Ctrl-C stops)\n"
    )
    sys.stdout.flush()
    server(inbox).run(sockets=[sock])
    return 0
