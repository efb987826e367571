"""Completing a workload's env where it starts: the one step between a stored workload and its processes.

A stored workload (LocalWorkload.spec, KubeWorkload.spec) holds references where its env has something the
database must not hold in clear: `${secret:NAME}` for a project secret (apps/projects/secrets.py) and
`${sealed:…}` for a token the portal issued (portal/lib/sealed.py). `resolve(workload)` returns a copy whose env
holds the values, in this process's memory only, and what the workload's log must mask. The local agent calls it
before it plans the processes (apps/runtime/local/agent.py); the Kubernetes controller puts the same values in the
workload's own Secret (apps/runtime/kubernetes/apply.py) and resolves them here only to mask its pods' logs.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from apps.projects.secrets import env_references, resolve_env
from apps.runtime.workload import Workload
from portal.lib import sealed


@dataclass(frozen=True)
class Secrets:
    """What resolving a workload's env found: the values its log lines must not show (tokens and project secrets)
    and the project secrets its env names that no longer exist (deleted after it was submitted: their variables
    are left out, and the listener's sink may say so)."""

    values: tuple[str, ...] = ()
    missing: tuple[str, ...] = ()


def resolve(workload: Workload) -> tuple[Workload, Secrets]:
    """(a copy of `workload` whose env holds values instead of references, the secrets found). A reference that
    cannot be resolved (a deleted secret, a token sealed with a key no longer configured) leaves its variable out:
    the process gets no variable rather than a reference. The workload itself is left as stored."""
    env = dict(workload.env)
    tokens = sealed.complete_env(env)
    refs = env_references(env)
    values, missing = resolve_env(workload.project, env) if refs else ({}, [])
    for key in refs:
        if key in values:
            env[key] = values[key]
        else:
            env.pop(key, None)
    return dataclasses.replace(workload, env=env), Secrets((*tokens, *values.values()), tuple(missing))
