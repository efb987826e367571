"""The shapes of the waiting and failure reasons a run's pages show, so that they read in the viewer's language
(`portal.lib.reasons`): the sentences the orchestrator, the dispatcher, the admission checks and the agent store in
English. Each literal here is the format that code writes (tests/jobs/test_reasons.py checks them against it)."""

from __future__ import annotations

from django.utils.translation import gettext_noop

from portal.lib import reasons

for _msgid in (
    # apps/jobs/orchestrator.py
    gettext_noop("waiting for the scheduler"),
    gettext_noop("retry %(attempt)s/%(retries)s after %(seconds)s s backoff (%(reason)s)"),
    gettext_noop("upstream %(node)s failed"),
    gettext_noop("skipped"),
    gettext_noop("cached: same inputs as %(run)s / %(node)s"),
    # apps/jobs/dispatcher.py
    gettext_noop("waiting for a slot — pipeline parallelism %(used)s/%(limit)s in use"),
    gettext_noop("waiting for its run to start — quota %(used)s/%(limit)s concurrent runs in flight"),
    gettext_noop("waiting for a slot — quota %(used)s/%(limit)s concurrent tasks in use"),
    # apps/runtime/admission.py
    gettext_noop("waiting for %(need)s — %(why)s"),
    gettext_noop("quota %(used)s/%(limit)s in use"),
    gettext_noop("%(free)s free on %(where)s"),
    gettext_noop("%(free)s of %(total)s free on %(where)s"),
    gettext_noop("no agent is running (start it with `manage.py runagent`)"),
    gettext_noop("no agent is running on this machine (start it with `manage.py runagent`)"),
    gettext_noop("the project runs on Kubernetes and no enabled cluster is bound to it"),
    gettext_noop("the capacity of this machine"),
    gettext_noop("the capacity of cluster %(name)s"),
    # apps/runtime/local/agent.py
    gettext_noop("exited with code %(code)s"),
    gettext_noop("killed by signal %(signal)s"),
    gettext_noop("replica %(replica)s %(reason)s"),
    gettext_noop("timeout: still running after %(seconds)s s"),
    gettext_noop("cancelled"),
    # a run's reason: its failed node and that node's reason
    gettext_noop("%(node)s: %(reason)s"),
):
    reasons.format(_msgid)
