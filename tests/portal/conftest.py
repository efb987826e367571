"""Fixtures shared by the portal's own tests (settings, security middleware, rate limits)."""

from __future__ import annotations

import pytest
from django.core.cache import cache


@pytest.fixture
def fresh_rate_counts():
    """Rate-limit and lockout counts live in the cache, which outlives a test's database transaction: a module that
    counts them starts and ends every test with an empty cache (`pytestmark = pytest.mark.usefixtures(...)`)."""
    cache.clear()
    yield
    cache.clear()
