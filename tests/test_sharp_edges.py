"""Sharp edges: misuse that used to go wrong quietly is refused at once, saying what to do."""

import asyncio
import os
from pathlib import Path
from typing import Annotated, NewType

import pytest

import safeact
from safeact import (
    FailedCallError,
    SafeTool,
    StoreError,
    Succeeded,
    get_store,
    raise_on_doubt,
    safe,
)

OrderKey = NewType("OrderKey", str)

PASSWORD = "s3cret"  # noqa: S105 - made up, to look for in what the store shows


def test_keyword_dsn_opens_postgresql(
    postgres_ledger: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A libpq keyword string opens the PostgreSQL database it names."""
    from psycopg.conninfo import conninfo_to_dict, make_conninfo

    monkeypatch.chdir(tmp_path)  # where the old code put the file

    with get_store(make_conninfo("", **conninfo_to_dict(postgres_ledger))) as store:
        assert type(store).__name__ == "PostgresStore"


def test_keyword_dsn_creates_no_file(
    postgres_ledger: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A libpq keyword string with a password never becomes a local file."""
    from psycopg.conninfo import conninfo_to_dict, make_conninfo

    monkeypatch.chdir(tmp_path)
    get_store(make_conninfo("", **conninfo_to_dict(postgres_ledger), password=PASSWORD)).close()
    assert list(tmp_path.iterdir()) == []


def test_keyword_dsn_location_hides_the_password(
    postgres_ledger: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A store opened from a keyword string does not show its password."""
    from psycopg.conninfo import conninfo_to_dict, make_conninfo

    monkeypatch.chdir(tmp_path)  # where the old code put the file

    with get_store(
        make_conninfo("", **conninfo_to_dict(postgres_ledger), password=PASSWORD)
    ) as store:
        assert PASSWORD not in store.location + repr(store)


def test_dot_slash_keeps_a_keyword_like_name_a_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A path written as ``./host=...`` is a SQLite file, not a connection string."""
    monkeypatch.chdir(tmp_path)
    get_store("./host=x.db").close()
    assert (tmp_path / "host=x.db").is_file()


def test_directory_is_refused(tmp_path: Path) -> None:
    """A directory as the ledger is refused, naming the path and what it is."""
    with pytest.raises(StoreError, match=f"^{tmp_path}: is a directory"):
        get_store(tmp_path)


def test_empty_path_is_refused() -> None:
    """An empty path is refused instead of opening the current directory."""
    with pytest.raises(StoreError, match="empty path"):
        get_store("")


def test_device_is_refused_without_side_files(tmp_path: Path) -> None:
    """A device is refused before SQLite opens it, so no journal appears beside it."""
    device = tmp_path / "null"
    device.symlink_to(os.devnull)
    with pytest.raises(StoreError, match=f"^{device}: is a character device"):
        get_store(device)
    assert [device] == list(tmp_path.iterdir())


def test_fifo_is_refused_at_once(tmp_path: Path) -> None:
    """A FIFO is refused at once instead of blocking SQLite's open forever."""
    fifo = tmp_path / "ledger.fifo"
    os.mkfifo(fifo)
    with pytest.raises(StoreError, match=f"^{fifo}: is a FIFO"):
        get_store(fifo)


def test_raise_on_doubt_awaits_an_async_tool(ledger: Path) -> None:
    """``raise_on_doubt`` of an async tool is an async function returning the value."""

    @safe(ledger)
    async def double(key: str, n: int) -> int:
        return 2 * n

    assert asyncio.run(raise_on_doubt(double)("k", 3)) == 6


def test_raise_on_doubt_raises_an_async_tool_failure(ledger: Path) -> None:
    """``raise_on_doubt`` of an async tool raises ``FailedCallError`` when it fails."""

    @safe(ledger)
    async def broken(key: str) -> int:
        raise RuntimeError("boom")

    with pytest.raises(FailedCallError):
        asyncio.run(raise_on_doubt(broken)("k"))


def test_first_parameter_of_another_type_is_refused(ledger: Path) -> None:
    """A first parameter annotated as something other than ``str`` is refused at once."""

    def send(key: int) -> None:
        pass

    with pytest.raises(TypeError, match=r"first parameter receives the key.*'key: str'"):
        safe(ledger)(send)  # type: ignore[arg-type] # the misuse under test


def test_first_parameter_not_named_key_is_refused(ledger: Path) -> None:
    """A first parameter named otherwise would key every call by its value: refused, with a fix."""

    def send(to: str, body: str) -> None:
        pass

    with pytest.raises(
        TypeError, match=r"its first parameter, 'to', would receive the key"
    ) as caught:
        safe(ledger)(send)
    assert "name it 'key'" in str(caught.value)
    assert "'def send(to: safeact.Key, ...)'" in str(caught.value)


def test_first_parameter_marked_key_takes_the_key(ledger: Path) -> None:
    """A first parameter annotated ``safeact.Key`` receives the key, whatever its name."""

    @safe(ledger)
    def send(idempotency_key: safeact.Key, to: str) -> str:
        return f"{idempotency_key}->{to}"

    assert send("k-1", "ada") == Succeeded("k-1", "k-1->ada")


def test_key_mark_inside_another_annotated_is_read(ledger: Path) -> None:
    """``Annotated[safeact.Key, ...]`` marks the key as well: its metadata is flattened in."""

    @safe(ledger)
    def send(idem: Annotated[safeact.Key, "doc"], to: str) -> str:
        return to

    assert send("k-1", "ada") == Succeeded("k-1", "ada")


def test_unannotated_first_parameter_is_accepted(ledger: Path) -> None:
    """An unannotated first parameter takes the key."""

    def send(key, to: str) -> None:  # type: ignore[no-untyped-def] # noqa: ANN001 - the case under test
        pass

    assert isinstance(safe(ledger)(send), SafeTool)


def test_newtype_of_str_first_parameter_is_accepted(ledger: Path) -> None:
    """A first parameter annotated as a ``NewType`` of ``str`` takes the key."""

    def send(key: OrderKey, to: str) -> None:
        pass

    assert isinstance(safe(ledger)(send), SafeTool)  # type: ignore[arg-type] # OrderKey is not str


def test_key_by_keyword_says_to_pass_it_first(ledger: Path) -> None:
    """Passing the key by keyword says to pass it first, positionally."""

    @safe(ledger)
    def send(key: str, to: str) -> None:
        pass

    with pytest.raises(TypeError, match="pass the key first, positionally"):
        send(key="k", to="a")  # type: ignore[call-arg] # the misuse under test


def test_async_key_by_keyword_says_to_pass_it_first(ledger: Path) -> None:
    """Passing an async tool's key by keyword says to pass it first, positionally."""

    @safe(ledger)
    async def send(key: str, to: str) -> None:
        pass

    with pytest.raises(TypeError, match="pass the key first, positionally"):
        asyncio.run(send(key="k", to="a"))  # type: ignore[call-arg] # the misuse under test
