"""Where `portal login` keeps tokens and how it reads the URL it is given (no server needed)."""

from __future__ import annotations

import pytest
from portal_client.config import normalise


@pytest.mark.parametrize(
    ("given", "url"),
    [
        ("http://127.0.0.1:8000/", "http://127.0.0.1:8000"),
        ("127.0.0.1:8000", "http://127.0.0.1:8000"),  # what `make run` serves: plain HTTP on this machine
        ("localhost:8000", "http://localhost:8000"),
        ("[::1]:8000", "http://[::1]:8000"),
        ("portal.example.com", "https://portal.example.com"),
        ("portal.example.com:8443/", "https://portal.example.com:8443"),
        ("https://localhost", "https://localhost"),
    ],
)
def test_a_url_without_a_scheme_is_http_on_this_machine_and_https_elsewhere(given, url):
    assert normalise(given) == url
