"""An operator's result for a key: read from JSON text, and checked against its tool's type.

The command line (``resolve``, ``amend``) and the web inbox (``safeact serve``) check a
result here, the same way: against the description of the tool's results its own process
wrote in the ledger, with no code of the tool's imported or run.
"""

from __future__ import annotations

import json
import math
import sys
from typing import TYPE_CHECKING, NoReturn, cast

from safeact._cli_text import escaped
from safeact._shape import check

if TYPE_CHECKING:
    from collections.abc import Sequence

    from safeact._protocol import JSON, Record
    from safeact._store import Store

__all__ = ["ECHOED", "echoed", "parse_result", "result_fit"]

ECHOED = 60
"""Characters (or bytes) of a value quoted in an error: enough to recognise, never a page."""


def echoed(value: str | bytes) -> str:
    """``value`` as an error quotes it: its repr, cut short, saying how long it is if cut."""
    if len(value) <= ECHOED:
        return repr(value)
    unit = "characters" if isinstance(value, str) else "bytes"
    return f"{value[:ECHOED]!r}... ({len(value):,} {unit})"


_DEEPEST = 200
"""How deep a result may nest: well within what Python decodes, stores and shows."""


def parse_result(text: str) -> object:
    """A JSON document, its arrays and objects nested at most ``_DEEPEST`` deep.

    Raises:
        ValueError: the text is nested deeper, is not JSON, holds a number that is not
            finite, or an integer longer than Python reads from text.

    """
    if (depth := nesting(text)) > _DEEPEST:
        raise ValueError(
            f"{echoed(text)} is nested {depth:,} levels deep; a result may nest at most "
            f"{_DEEPEST} levels"
        )
    try:
        return json.loads(text, parse_float=_finite, parse_constant=_not_a_number)
    except _NotFiniteError as exc:
        raise ValueError(
            f"{echoed(text)} holds {exc}, which is not a finite number; a result holds finite "
            "numbers only (JSON has no NaN or infinity)"
        ) from None
    except json.JSONDecodeError as exc:
        raise ValueError(f"{echoed(text)} is not JSON ({exc})") from None
    except ValueError:  # json's only other error: an integer over Python's digit limit
        raise ValueError(
            f"{echoed(text)} holds an integer of more than "
            f"{sys.get_int_max_str_digits():,} digits, the most Python reads from text "
            "(its int max str digits limit)"
        ) from None


class _NotFiniteError(ArithmeticError):
    """A number in a result that is no finite float (``1e400``, ``NaN``)."""


def _finite(text: str) -> float:
    number = float(text)
    if not math.isfinite(number):
        raise _NotFiniteError(text)
    return number


def _not_a_number(text: str) -> NoReturn:
    """``NaN``, ``Infinity`` and ``-Infinity``: Python's json reads them; JSON has none."""
    raise _NotFiniteError(text)


def nesting(text: str) -> int:
    """How deep the arrays and objects of JSON ``text`` nest (0: none); strings are skipped."""
    depth = deepest = 0
    in_string = after_backslash = False
    for char in text:
        if in_string:
            if after_backslash:
                after_backslash = False
            elif char == "\\":
                after_backslash = True
            elif char == '"':
                in_string = False
        elif char == '"':
            in_string = True
        elif char in "[{":
            depth += 1
            deepest = max(deepest, depth)
        elif char in "]}":
            depth -= 1
    return deepest


_SAID = 3
"""Problems (or parts not checked) a message names before it says how many more there are."""


def result_fit(
    store: Store, record: Record | None, result: object
) -> tuple[str | None, str | None]:
    """Check an operator's ``result`` for ``record``'s key against its tool's description.

    The description is the one the tool's own process wrote in the ledger at its latest
    claim (``safeact._shape``): no code of the tool's is imported or run here. Returns the
    key's tool (the decision must be about a key of that tool still) and, when some of the
    result could not be checked, a warning for stderr once the decision is made (a refused
    decision prints only its error).

    Raises:
        ValueError: the result does not fit; nothing was written.

    """
    if record is None:
        return None, None  # the decision itself says the key is unknown
    tool = escaped(record.tool)
    later = (
        f"if it does not fit, replaying {record.key!r} says so: then correct it with safeact amend"
    )
    text = store._result_shape(record.tool)  # noqa: SLF001 - the command line is the operator's seat
    if text is None:
        return record.tool, (
            f"safeact: warning: the result is not checked: the ledger has no description of "
            f"{tool}'s results (it is written at the tool's first claim since the ledger "
            f"reached schema 5); {later}"
        )
    try:
        shape = json.loads(text)
    except ValueError:
        shape = None  # not JSON: check says it cannot read it
    fit = check(shape, cast("JSON", result))
    if fit.problems:
        raise ValueError(
            f"the result does not fit the return type of {tool}: {_some(fit.problems)}; "
            "nothing was changed"
        )
    if fit.unchecked:
        return record.tool, (
            f"safeact: warning: part of the result is not checked against the return type of "
            f"{tool}: {_some(fit.unchecked)}; {later}"
        )
    return record.tool, None


def _some(said: Sequence[str]) -> str:
    """The first few of ``said``, joined, and how many more there are."""
    shown = "; ".join(said[:_SAID])
    more = len(said) - _SAID
    return f"{shown}; and {more} more" if more > 0 else shown
