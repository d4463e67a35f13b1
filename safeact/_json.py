"""``JSON``: a JSON value as Python holds it, the type of every stored result and hash form.

A word of its own, below the keys (whose args hash is the digest of a JSON form) and the
rules (whose records hold results as JSON), so neither imports the other for it.
``_protocol`` re-exports it.
"""

from __future__ import annotations

from typing import TypeAlias

__all__ = ["JSON"]

JSON: TypeAlias = bool | int | float | str | list["JSON"] | dict[str, "JSON"] | None
