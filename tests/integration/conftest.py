"""Fixtures the integration tests share beyond tests/conftest.py."""

from __future__ import annotations

import pytest

from shared.db import Store
from tests.integration.search_kit import Log


@pytest.fixture
def log(store: Store) -> Log:
    """A writer of sessions with increasing timestamps (session_search tests)."""
    return Log(store)
