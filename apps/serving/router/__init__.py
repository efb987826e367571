"""The serving router: `/serving/<project>/<service>/…` authenticated, balanced over ready replicas, split by
canary weight, mirrored to the shadow revision, counted per revision (docs/serving-router.md).

    auth.py      who may call a service (API token, service key, session), cached decisions
    table.py     the routing table: ready replicas per revision, balancing, canary and shadow splits
    upstream.py  HTTP/1.1 keep-alive pools to the replicas
    asgi.py      `ServingRoute`, the ASGI route in front of Django that ties them together

Counts and charts: apps/serving/stats.py.
"""
