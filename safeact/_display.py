"""A call's arguments as a person is shown them: JSON, with the fields a tool declares redacted.

Kept in the ledger only for a tool that opts in (``safe(..., keep_arguments=True)``), for
``safeact show``, ``doubt`` and ``approvals``: by default the ledger holds only the digest.
Redaction happens here, before anything is written: what is redacted never reaches the file.
"""

from __future__ import annotations

import inspect
import json
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING

from safeact._codec import encode_untyped

if TYPE_CHECKING:
    from safeact._json import JSON

__all__ = ["REDACTED", "Display", "check_redact"]

REDACTED = "[redacted]"
"""What a redacted field's value is replaced with."""


def check_redact(
    signature: inspect.Signature, redact: Iterable[str], tool: str
) -> tuple[tuple[str, ...], ...]:
    """Check ``redact``'s paths against the tool's parameters; return them split on dots.

    A path is a parameter's name (``"card"``), or a field inside its value as JSON
    (``"payment.card_number"``): every value found there is replaced, in lists too.

    Raises:
        TypeError: ``redact`` is a ``str`` (write ``redact=("card",)``), or holds a non-str.
        ValueError: a path is empty, or does not begin with a parameter of the tool.

    """
    if isinstance(redact, str):
        raise TypeError(f"redact must be a collection of names: redact=({redact!r},)")
    _, *parameters = signature.parameters
    paths = []
    for path in redact:
        if not isinstance(path, str):
            raise TypeError(f"redact holds {path!r}; write field paths as str")
        parts = tuple(path.split("."))
        if not all(parts):
            raise ValueError(f"{tool}: redact path {path!r} has an empty part")
        if parts[0] not in parameters:
            raise ValueError(
                f"{tool}: redact path {path!r} names no parameter of the tool "
                f"(its parameters after the key: {', '.join(parameters) or 'none'})"
            )
        paths.append(parts)
    return tuple(paths)


class Display:
    """Writes one tool's calls as the JSON text a person is shown, redacted; planned once."""

    __slots__ = ("_ignore", "_redact", "_signature")

    def __init__(
        self,
        signature: inspect.Signature,
        ignore: frozenset[str],
        redact: tuple[tuple[str, ...], ...],
    ) -> None:
        """Plan the display of calls to ``signature``, leaving out ``ignore``d parameters."""
        self._signature = signature
        self._ignore = ignore
        self._redact = redact

    def __call__(self, key: str, args: tuple[object, ...], kwargs: Mapping[str, object]) -> str:
        """The call's arguments (defaults applied) as JSON text, redacted.

        A value cattrs cannot turn into JSON is shown by its ``repr``: this is for a person
        to read, never rebuilt. Ignored parameters (an injected client, say) are left out.
        """
        bound = self._signature.bind(key, *args, **kwargs)
        bound.apply_defaults()
        _, *names = bound.arguments
        shown: dict[str, JSON] = {
            name: _json(bound.arguments[name]) for name in names if name not in self._ignore
        }
        for path in self._redact:
            _redact(shown, path)
        return json.dumps(shown, sort_keys=True)


def _json(value: object) -> JSON:
    """``value`` as JSON for display: cattrs' form, or its ``repr`` when it has none."""
    try:
        return encode_untyped(value)
    except ValueError:
        return repr(value)


def _redact(value: JSON, path: tuple[str, ...]) -> None:
    """Replace what ``path`` names inside ``value`` with ``REDACTED``, through lists too."""
    if isinstance(value, list):
        for item in value:
            _redact(item, path)
        return
    if not isinstance(value, dict) or path[0] not in value:
        return
    if len(path) == 1:
        value[path[0]] = REDACTED
    else:
        _redact(value[path[0]], path[1:])
