"""Check the TensorFlow multi-worker env contract: TF_CONFIG's cluster and task, as a TFJob gives each pod.

Needs no TensorFlow: it validates what `tf.distribute.MultiWorkerMirroredStrategy` would read.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
from typing import Any

from apps.jobs.builtin_tasks._common import TaskError, fail, flag, log, output_dir, parser, write_json

ROLES = ("chief", "worker", "ps", "evaluator", "master")


def build_parser() -> argparse.ArgumentParser:
    p = parser("tf_env_check", __doc__)
    p.add_argument(*flag("expect_workers"), type=int, default=0, help="fail unless the cluster has this many workers")
    p.add_argument(*flag("resolve"), action="store_true", help="also resolve every host name in the cluster")
    return p


def parse_tf_config(raw: str | None) -> dict[str, Any]:
    """TF_CONFIG as a dict, or TaskError(code 1) saying what is wrong with it."""
    if raw is None or not raw.strip():
        raise TaskError("TF_CONFIG is not set: run this as a distributed job with framework tf", 1)
    try:
        config = json.loads(raw)
    except ValueError as exc:
        raise TaskError(f"TF_CONFIG is not valid JSON: {exc}", 1) from None
    if not isinstance(config, dict):
        raise TaskError("TF_CONFIG must be a JSON object with 'cluster' and 'task'", 1)
    cluster, task = config.get("cluster"), config.get("task")
    if not isinstance(cluster, dict) or not cluster:
        raise TaskError("TF_CONFIG.cluster must be a non-empty object of role → list of host:port", 1)
    for role, addresses in cluster.items():
        if role not in ROLES:
            raise TaskError(f"TF_CONFIG.cluster: unknown role {role!r} (known: {', '.join(ROLES)})", 1)
        if not isinstance(addresses, list) or not addresses:
            raise TaskError(f"TF_CONFIG.cluster.{role} must be a non-empty list of host:port", 1)
        for address in addresses:
            host, _, port = str(address).rpartition(":")
            if not isinstance(address, str) or not host or not port.isdigit() or not 0 < int(port) < 65536:
                raise TaskError(f"TF_CONFIG.cluster.{role}: {address!r} is not host:port", 1)
    if sum(len(cluster.get(role, [])) for role in ("chief", "master")) > 1:
        raise TaskError("TF_CONFIG.cluster: at most one chief", 1)
    if not isinstance(task, dict):
        raise TaskError("TF_CONFIG.task must be an object with 'type' and 'index'", 1)
    role, index = task.get("type"), task.get("index")
    if not isinstance(role, str) or not role:
        raise TaskError("TF_CONFIG.task.type must be a role name", 1)
    if not isinstance(index, int) or isinstance(index, bool) or index < 0:
        raise TaskError(f"TF_CONFIG.task.index must be a whole number >= 0, got {index!r}", 1)
    # TF's evaluator runs beside the cluster and need not be listed in it.
    if role != "evaluator":
        if role not in cluster:
            raise TaskError(f"TF_CONFIG.task.type {role!r} is not a role of the cluster ({', '.join(cluster)})", 1)
        if index >= len(cluster[role]):
            raise TaskError(f"TF_CONFIG.task.index {index} is out of range: {role} has {len(cluster[role])}", 1)
    return config


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.expect_workers < 0:
        return fail("--expect_workers cannot be negative")
    try:
        config = parse_tf_config(os.environ.get("TF_CONFIG"))
    except TaskError as exc:
        return fail(str(exc), exc.code)
    cluster, task = config["cluster"], config["task"]
    role, index = task["type"], task["index"]
    size = sum(len(addresses) for addresses in cluster.values())
    workers = len(cluster.get("worker", []))
    roles = ", ".join(f"{name}={len(addresses)}" for name, addresses in cluster.items())
    log(f"TF_CONFIG ok: this is {role} {index}; cluster of {size} ({roles})")
    if role != "evaluator":
        log(f"this task's address: {cluster[role][index]}")
    if args.expect_workers and workers != args.expect_workers:
        return fail(f"expected {args.expect_workers} workers, TF_CONFIG has {workers}", 1)
    if args.resolve:
        for name, addresses in cluster.items():
            for address in addresses:
                host = address.rpartition(":")[0]
                try:
                    socket.getaddrinfo(host, None)
                except OSError as exc:
                    return fail(f"{name} {address}: cannot resolve {host}: {exc}", 1)
        log("every cluster host resolves")
    # The chief (or worker 0 without one) speaks for the job, as TF's own checkpointing convention does.
    has_chief = "chief" in cluster or "master" in cluster
    if role in ("chief", "master") or (not has_chief and role == "worker" and index == 0):
        write_json(output_dir() / "tf_config.json", {"cluster": cluster, "size": size, "workers": workers})
        log(f"wrote {output_dir() / 'tf_config.json'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
