"""The public surface is the API: what users call is public, the protocol's internals are not.

A name added to ``safeact`` or to ``Store`` is a promise to users; these tests make adding
one a decision (edit the list here, README and DESIGN), never an accident.
"""

import importlib
import subprocess
import sys
import types

import safeact
from safeact import Store

STORE_API = {
    # reading keys, their history and the late completions
    "get",
    "list_in_doubt",
    "records",
    "scan_records",
    "counts",
    "history",
    "scan_history",
    "late_completions",
    "scan_late_completions",
    # sagas
    "get_saga",
    "list_sagas",
    "scan_sagas",
    "saga_history",
    # an operator's decisions, probes and retention
    "resolve",
    "amend",
    "reconcile",
    "purge",
    "export_history",
    "archive_history",
    # a person's approvals
    "approval",
    "approvals",
    "scan_approvals",
    "approve",
    "deny",
    # the ledger itself
    "location",
    "owner",
    "close",
}

PROTOCOL = {
    "claim",
    "finish",
    "mark_in_doubt",
    "renew",
    "hold",
    "settle",
    "note",
    "decided",
    "owner_gone",
    "owner_lost",
    "begin_saga",
    "record_saga_step",
    "move_saga",
    "request_approval",
}
"""The store's protocol: called by the package's own tools, sagas and probes, as ``_name``."""


def test_the_stores_public_names_are_its_api() -> None:
    public = {name for name in dir(Store) if not name.startswith("_")}
    assert public == STORE_API


def test_the_protocols_steps_are_private() -> None:
    assert not PROTOCOL & set(dir(Store))
    assert {f"_{name}" for name in PROTOCOL} <= set(dir(Store))


def test_the_package_exports_its_api_and_nothing_private() -> None:
    assert all(not name.startswith("_") for name in safeact.__all__)
    assert len(set(safeact.__all__)) == len(safeact.__all__)
    for name in safeact.__all__:
        assert getattr(safeact, name) is not None
    stray = {
        name
        for name, value in vars(safeact).items()
        if name not in safeact.__all__
        and not name.startswith("__")
        and not isinstance(value, types.ModuleType)
        and name not in ("TYPE_CHECKING", "_LAZY")
    }
    assert stray == set()
    for internal in ("next_step", "guarded_call", "claim", "Request", "names_postgres"):
        assert not hasattr(safeact, internal)


NOT_FOR_A_CALL = {
    "sqlite3",
    "asyncio",
    "psycopg",
    "safeact._store",
    "safeact._ledger",
    "safeact._approvals",
    "safeact._sqlite",
    "safeact._postgres",
    "safeact._schema",
    "safeact._tables",
    "safeact._saga",
    "safeact._saga_run",
    "safeact._keyed",
    "safeact._reconcile",
    "safeact._cli",
    "langgraph",
    "langchain_core",
    "mcp",
    "dbos",
    "temporalio",
    "pydantic_ai",
    "agents",
    "opentelemetry",
    "safeact._web",
    "starlette",
    "uvicorn",
    "jinja2",
    "socket",
    "tempfile",
    "secrets",
    "zoneinfo",
}
"""What ``import safeact`` must not load: the ledger, backends, sagas, probes, CLI, frameworks,
the web inbox's stack,
and the standard modules only an owner's identity or a zone read back needs."""


def test_import_loads_only_what_a_guarded_call_needs() -> None:
    """In a fresh interpreter, ``import safeact`` loads none of them; they load when used."""
    # What the import adds: a coverage run's child has loaded sqlite3 for itself before.
    code = "import sys; was = set(sys.modules); import safeact; print(*set(sys.modules) - was)"
    loaded = set(
        subprocess.run(
            [sys.executable, "-c", code], check=True, capture_output=True, text=True
        ).stdout.split()
    )
    assert "safeact._tool" in loaded
    assert loaded & NOT_FOR_A_CALL == set()


def test_every_lazy_name_is_its_modules_own_object() -> None:
    """A name loaded on first use is the same object its module defines, and dir() lists it."""
    assert set(safeact._LAZY) <= set(safeact.__all__)
    for name, module in safeact._LAZY.items():
        assert getattr(safeact, name) is getattr(importlib.import_module(module), name)
        assert name in dir(safeact)
