"""portal/lib/origins.py: the same-origin rule of the notebook proxy and the serving router."""

from __future__ import annotations

from portal.lib.origins import from_portal, trusted_origin

OWN = "http://127.0.0.1:8000"


def test_trusted_origins_are_the_portals_own_and_csrf_trusted_ones(settings):
    settings.CSRF_TRUSTED_ORIGINS = ["https://portal.example.com", "https://*.corp.example"]
    assert trusted_origin(OWN, OWN)
    assert trusted_origin("https://portal.example.com", OWN)
    assert trusted_origin("https://lab.corp.example", OWN)
    assert not trusted_origin("http://lab.corp.example", OWN)  # the scheme counts
    assert not trusted_origin("http://127.0.0.1:8001", OWN)  # so does the port
    assert not trusted_origin("https://corp.example.evil", OWN)
    assert not trusted_origin("https://evilcorp.example", OWN)  # a suffix is not a subdomain


def test_origin_decides_and_referer_stands_in_only_without_it(settings):
    settings.CSRF_TRUSTED_ORIGINS = []
    assert from_portal(OWN, None, OWN)
    assert from_portal(None, f"{OWN}/p/a/notebooks/1/", OWN)
    assert not from_portal("https://evil.example", f"{OWN}/page", OWN)  # Origin wins over a friendly Referer
    assert not from_portal(None, "https://evil.example/page", OWN)


def test_neither_header_a_null_origin_or_a_relative_referer_is_refused():
    assert not from_portal(None, None, OWN)
    assert not from_portal("null", None, OWN)
    assert not from_portal(None, "", OWN)
    assert not from_portal(None, "/p/a/", OWN)
