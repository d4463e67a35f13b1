"""safeact: run an AI agent's real-world actions at most once per key, across crashes.

A guarded call returns an ``Outcome``: ``Succeeded``, ``Failed``, ``InDoubt`` (the process
stopped between the action and its record; go and check) or ``AwaitingApproval`` (a tool
that needs a person's yes, which has not been given yet). See README.md and DESIGN.md.
"""

from typing import TYPE_CHECKING

from safeact._codec import register_type
from safeact._history import Event, Why
from safeact._keys import Key
from safeact._outcome import AwaitingApproval, Failed, InDoubt, Outcome, Succeeded
from safeact._owner import Owner
from safeact._protocol import (
    Approval,
    ApprovalState,
    DoubtReason,
    Record,
    SagaRecord,
    SagaState,
    State,
)
from safeact._replay_only import replay_only
from safeact._tool import AsyncSafeTool, SafeTool, raise_on_doubt, safe
from safeact.exceptions import (
    AwaitingApprovalError,
    CorruptRecordError,
    FailedCallError,
    InDoubtError,
    KeyConflictError,
    NotProvenError,
    ReplayOnlyError,
    SafeError,
    StoreError,
)

if TYPE_CHECKING:
    from safeact._archive import Archived
    from safeact._keyed import (
        KeyPolicy,
        NoRunKeyError,
        Template,
        ToolCall,
        each_call,
        in_run,
        keyed,
        run_scope,
        template,
    )
    from safeact._memory import memory_ledger
    from safeact._open import get_store
    from safeact._reconcile import Happened, NotHappened, Probe, Unknown, Verdict
    from safeact._retention import Purged
    from safeact._saga import Saga, SagaFailed
    from safeact._sqlite import SqliteStore
    from safeact._store import Store

__all__ = [
    "Approval",
    "ApprovalState",
    "Archived",
    "AsyncSafeTool",
    "AwaitingApproval",
    "AwaitingApprovalError",
    "CorruptRecordError",
    "DoubtReason",
    "Event",
    "Failed",
    "FailedCallError",
    "Happened",
    "InDoubt",
    "InDoubtError",
    "Key",
    "KeyConflictError",
    "KeyPolicy",
    "NoRunKeyError",
    "NotHappened",
    "NotProvenError",
    "Outcome",
    "Owner",
    "Probe",
    "Purged",
    "Record",
    "ReplayOnlyError",
    "SafeError",
    "SafeTool",
    "Saga",
    "SagaFailed",
    "SagaRecord",
    "SagaState",
    "SqliteStore",
    "State",
    "Store",
    "StoreError",
    "Succeeded",
    "Template",
    "ToolCall",
    "Unknown",
    "Verdict",
    "Why",
    "each_call",
    "get_store",
    "in_run",
    "keyed",
    "memory_ledger",
    "raise_on_doubt",
    "register_type",
    "replay_only",
    "run_scope",
    "safe",
    "template",
]


_LAZY = {
    "get_store": "safeact._open",
    "memory_ledger": "safeact._memory",
    "Store": "safeact._store",
    "SqliteStore": "safeact._sqlite",
    "Purged": "safeact._retention",
    "Archived": "safeact._archive",
    "Saga": "safeact._saga",
    "SagaFailed": "safeact._saga",
    "Happened": "safeact._reconcile",
    "NotHappened": "safeact._reconcile",
    "Probe": "safeact._reconcile",
    "Unknown": "safeact._reconcile",
    "Verdict": "safeact._reconcile",
    "KeyPolicy": "safeact._keyed",
    "NoRunKeyError": "safeact._keyed",
    "Template": "safeact._keyed",
    "ToolCall": "safeact._keyed",
    "each_call": "safeact._keyed",
    "in_run": "safeact._keyed",
    "keyed": "safeact._keyed",
    "run_scope": "safeact._keyed",
    "template": "safeact._keyed",
}
"""What a guarded call does not need, and the module that loads when it is first used.

``import safeact`` loads the call and its results; the ledger and its backends load when a
tool is first made (or one of these names first used), sagas, probes' verdicts and keyed
tools when first used.
"""

if TYPE_CHECKING:
    __version__: str
else:

    def __getattr__(name: str) -> object:
        # Only at run time: a module __getattr__ would make type checkers accept any name.
        if name in _LAZY:
            import importlib  # noqa: PLC0415 - only when a lazy name is first used

            value = getattr(importlib.import_module(_LAZY[name]), name)
            globals()[name] = value  # the next use is a plain lookup
            return value
        if name == "__version__":
            from importlib.metadata import version  # noqa: PLC0415 - only when asked for

            return version("safeact")
        raise AttributeError(f"module 'safeact' has no attribute {name!r}")

    def __dir__() -> list[str]:
        return sorted({*globals(), *_LAZY})
