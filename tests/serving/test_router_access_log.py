"""uvicorn's access-log line for inference through the router: dropped when answered below 400, kept otherwise."""

import logging

from apps.serving.router.asgi import QuietInference, quiet_access_log


def access_record(path: str, status: int) -> logging.LogRecord:
    """A record as uvicorn's httptools protocol makes it for one answered request."""
    args = ("127.0.0.1:50000", "POST", path, "1.1", status)
    return logging.LogRecord("uvicorn.access", logging.INFO, __file__, 1, '%s - "%s %s HTTP/%s" %d', args, None)


def test_it_drops_the_line_of_an_answered_inference():
    assert not QuietInference().filter(access_record("/serving/demo/iris/v2/models/iris/infer", 200))


def test_it_keeps_the_lines_of_refused_and_failed_inference():
    quiet = QuietInference()
    for status in (401, 404, 413, 502, 503):
        assert quiet.filter(access_record("/serving/demo/iris/v2/models/iris/infer", status))


def test_it_keeps_the_lines_of_every_other_path():
    quiet = QuietInference()
    assert quiet.filter(access_record("/p/demo/serving/iris/", 200))
    assert quiet.filter(access_record("/api/v1/services/", 200))
    assert quiet.filter(logging.LogRecord("uvicorn.access", logging.INFO, __file__, 1, "plain message", None, None))


def test_it_is_installed_once_and_not_when_the_setting_asks_for_every_line(settings):
    access = logging.getLogger("uvicorn.access")
    saved = access.filters[:]
    try:
        access.filters[:] = []
        settings.PORTAL_SERVING_ROUTER_ACCESS_LOG = True
        quiet_access_log()
        assert not access.filters
        settings.PORTAL_SERVING_ROUTER_ACCESS_LOG = False
        quiet_access_log()
        quiet_access_log()
        assert [type(f) for f in access.filters] == [QuietInference]
    finally:
        access.filters[:] = saved
