import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import settings

from safeact import Store, get_store

settings.register_profile("ci", derandomize=True, deadline=None, database=None)
settings.register_profile("dev", deadline=None)
settings.register_profile("stress", deadline=None, max_examples=5000)
settings.load_profile(
    os.environ.get("SAFEACT_HYPOTHESIS_PROFILE") or ("ci" if os.environ.get("CI") else "dev")
)


@pytest.fixture
def ledger(tmp_path: Path) -> Path:
    """Path of a ledger file that does not exist yet."""
    return tmp_path / "agent.db"


@pytest.fixture
def store(ledger: Path) -> Iterator[Store]:
    """An open store on a fresh ledger."""
    with get_store(ledger) as opened:
        yield opened
