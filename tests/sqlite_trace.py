"""SQLite's trace of a connection, a line per statement the code ran."""

from collections.abc import Callable


def each_statement_once(report: Callable[[str], None]) -> Callable[[str], None]:
    """A trace callback (``set_trace_callback``) that passes each statement to ``report`` once.

    Python traces a statement's text again for each trigger program it runs, and for each
    statement inside one (the counting triggers of schema 7, on ``calls``): a text repeated
    in a row is that statement's triggers at work, not a statement of its own.
    """
    last = [""]

    def traced(statement: str) -> None:
        if statement != last[0]:
            report(statement)
        last[0] = statement

    return traced
