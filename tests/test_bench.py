"""The benchmark's own logic: how it splits calls, judges targets and counts round trips."""

import socket
import threading

import pytest

pytest.importorskip("bench", reason="bench/ is not in the wheel that the artifact step tests")

# Imported once bench/ is known to be there (ruff sees importorskip as an import).
from bench.operator import verdicts
from bench.round_trips import Proxy
from bench.targets import OPERATOR_TARGETS, TARGETS, Target, judge
from bench.timing import shares


def test_shares_add_up_to_the_calls() -> None:
    """Calls split over workers add up to the calls, the first workers taking the rest."""
    assert shares(100, 3) == [34, 33, 33]


def test_shares_of_fewer_calls_than_workers_include_none() -> None:
    """Fewer calls than workers leave the last workers without one."""
    assert shares(2, 3) == [1, 1, 0]


@pytest.mark.parametrize(
    ("target", "measured", "verdict"),
    [
        (Target("<=", 1.3), 1.3, "met"),
        (Target("<=", 1.3), 1.31, "not met"),
        (Target(">=", 4), 4.0, "met"),
        (Target(">=", 4), 3.9, "not met"),
        (Target("<=", 5, "ms"), None, "not measured"),
    ],
)
def test_a_target_judges_its_figure(target: Target, measured: float | None, verdict: str) -> None:
    """A bound is met at the bound itself and on its side, and a skipped figure is unjudged."""
    assert verdict == target.verdict(measured)


def test_a_target_reads_as_the_issue_writes_it() -> None:
    """A ratio's target shows an x, a time's its unit."""
    assert [
        str(Target("<=", 1.3)),
        str(Target(">=", 4)),
        str(Target("<=", 30, "ms")),
        str(Target("<=", 100, "µs")),
    ] == ["<= 1.3x", ">= 4x", "<= 30 ms", "<= 100 µs"]
    assert [Target("<=", 30, "ms").show(29.04), Target("<=", 100, "µs").show(96.04)] == [
        "29.0 ms",
        "96.0 µs",
    ]


def test_judge_lists_every_target_in_order() -> None:
    """Every target is judged, in the table's order, a figure not given as not measured."""
    judged = judge({"replay / bare indexed read": 2.0})
    assert list(TARGETS) == [figure for figure, *_ in judged]
    assert {"met", "not measured"} == {verdict for *_, verdict in judged}


def line_server(listener: socket.socket) -> None:
    """Answer each line a client sends with ``ok``, until it leaves."""
    connection, _ = listener.accept()
    with connection, connection.makefile("rb") as lines:
        for _ in lines:
            connection.sendall(b"ok\n")


def test_the_proxy_counts_a_round_trip_per_exchange() -> None:
    """Two requests, the second sent in two pieces, each answered once, are two round trips."""
    with socket.create_server(("127.0.0.1", 0)) as listener:
        server = threading.Thread(target=line_server, args=(listener,))
        server.start()
        port = listener.getsockname()[1]
        with Proxy(lambda: socket.create_connection(("127.0.0.1", port))) as proxy:
            with socket.create_connection(("127.0.0.1", proxy.port)) as client:
                answers = client.makefile("rb")
                client.sendall(b"one\n")
                answers.readline()
                client.sendall(b"tw")
                client.sendall(b"o\n")
                answers.readline()
                answers.close()
            trips = proxy.round_trips
        server.join()
    assert trips == 2


def test_operator_verdicts_judge_time_memory_and_growth() -> None:
    """Issue 36's verdicts: milliseconds and megabytes at a million keys, and growth."""
    small = {
        read: {"seconds": 0.05, "peak_bytes": 30 * 2**20}
        for read in ("doubt", "stats", "show", "ls --state in_doubt", "the in-doubt gauge")
    }
    large = {read: dict(at) for read, at in small.items()}
    large["doubt"] = {"seconds": 0.07, "peak_bytes": 33 * 2**20}
    large["stats"] = {"seconds": 1.2, "peak_bytes": 200 * 2**20}
    judged: dict[str, tuple[float, str]] = {
        j.figure: (round(j.measured or 0, 6), j.verdict) for j in verdicts(small, large)
    }
    assert judged["doubt at 1,000,000 keys"] == (70.0, "met")
    assert judged["peak memory of doubt at 1,000,000 keys"] == (33.0, "met")
    assert judged["doubt, 1,000,000 keys / 1,000"] == (1.4, "met")
    assert judged["stats at 1,000,000 keys"] == (1200.0, "not met")
    assert judged["peak memory of stats at 1,000,000 keys"] == (200.0, "not met")
    assert judged["stats, 1,000,000 keys / 1,000"] == (24.0, "not met")
    assert list(judged) == list(OPERATOR_TARGETS)
