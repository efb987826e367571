"""Pipeline workflows: save (validated), start (frozen), cancel, retry, re-run from a node.

Views, the API, schedules and `demo --run` call these; the orchestrator then moves runs forward.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from django.core.exceptions import PermissionDenied, ValidationError
from django.db import IntegrityError, transaction
from django.db.models import F, Max, ProtectedError, Q, RestrictedError
from django.utils import timezone
from django.utils.translation import gettext as _

from apps.jobs.args import validate_args_schema, with_order
from apps.jobs.dag import TEMPLATE_REF_RE, node_strategy, validate_spec
from apps.jobs.models import (
    RUN_FINISHED,
    TASK_DONE_OK,
    JobTemplate,
    Pipeline,
    PipelineRun,
    RunStatus,
    TaskRun,
    TaskStatus,
)
from apps.jobs.references import check_references, pin
from apps.outbox.services import enqueue, enqueue_many
from apps.projects.models import Project
from apps.projects.permissions import CONTRIBUTE, has_project_perm
from apps.runtime.admission import Limits, node_limits
from apps.runtime.placement import runtime_name_for
from apps.runtime.strategy import StrategyError
from apps.runtime.strategy import describe as describe_strategy
from apps.runtime.workload import total_replicas
from portal.lib.errors import Conflict


def resolve_template(project: Project, ref: str) -> JobTemplate | None:
    """`slug` (newest version) or `slug@3`, the project's own templates before the built-ins."""
    slug, _at, version = str(ref).partition("@")
    qs = JobTemplate.objects.filter(Q(project=project) | Q(project__isnull=True), slug=slug)
    if version:
        if not version.isdigit():
            return None
        qs = qs.filter(version=int(version))
    # The project's own template wins over a built-in of the same slug (NULLs sort last descending on
    # PostgreSQL and first on SQLite, so order on an explicit flag).
    return qs.order_by(F("project_id").desc(nulls_last=True), "-version").first()


def normalize_spec(project: Project, spec: dict[str, Any]) -> dict[str, Any]:
    """Validate a spec against the project's templates, limits and datasets; return it with defaults filled in."""
    return _normalize(project, spec)[0]


class ProjectLookups:
    """What validating a spec reads of its project that does not depend on the spec: its limits (the quota and the
    capacity of the places its work runs) and its templates by reference. Each is read once per object, so that
    several specs of one batch (`RunBatch`) are checked against the same reads; a lone spec makes its own."""

    def __init__(self, project: Project) -> None:
        self.project = project
        self._templates: dict[str, JobTemplate | None] = {}
        self._limits: Limits | None = None

    def template(self, ref: str) -> JobTemplate | None:
        if ref not in self._templates:
            self._templates[ref] = resolve_template(self.project, ref)
        return self._templates[ref]

    @property
    def limits(self) -> Limits:
        if self._limits is None:
            self._limits = node_limits(self.project)
        return self._limits


def _normalize(
    project: Project, spec: dict[str, Any], lookups: ProjectLookups | None = None
) -> tuple[dict[str, Any], dict[str, JobTemplate], dict]:
    """(normalized spec, node → template, node → {dataset arg → version})."""
    lookups = lookups or ProjectLookups(project)
    found: dict[str, JobTemplate] = {}  # by exact ref: the normalized spec names each template as slug@version

    def resolve(ref: str) -> JobTemplate | None:
        template = lookups.template(ref)
        if template is not None:
            found[template.ref] = template
        return template

    normalized = validate_spec(spec, resolve_template=resolve, limits=lookups.limits)
    templates = {node["name"]: found[node["template"]] for node in normalized["nodes"]}
    return normalized, templates, check_references(project, normalized, templates)


def pipeline_name_errors(project: Project, name: str, pipeline_id: int | None = None) -> dict[str, list[str]]:
    """The name is free in the project (the pipeline `pipeline_id` may keep its own): the check `save_pipeline`
    makes, and the editor's validate endpoint before it saves."""
    clash = Pipeline.objects.filter(project=project, name=name)
    if pipeline_id is not None:
        clash = clash.exclude(pk=pipeline_id)
    if clash.exists():
        return {"name": [_("A pipeline with this name already exists in the project.")]}
    return {}


def save_pipeline(
    project: Project,
    user: Any,
    *,
    name: str,
    spec: dict[str, Any],
    description: str = "",
    layout: dict | None = None,
    pipeline: Pipeline | None = None,
) -> Pipeline:
    """Create or update a pipeline after validating its spec (field errors name the node and field)."""
    errors = pipeline_name_errors(project, name, pipeline.pk if pipeline is not None else None)
    try:
        # Validated now; stored as written ("train" keeps meaning the newest version; runs pin it).
        normalize_spec(project, spec)
    except ValidationError as exc:
        errors.update(exc.message_dict)
    if errors:
        raise ValidationError(errors)
    if pipeline is None:
        pipeline = Pipeline(project=project, created_by=user)
    pipeline.name, pipeline.description, pipeline.spec = name, description, spec
    if layout is not None:
        pipeline.layout = layout
    pipeline.updated_at = timezone.now()
    try:
        pipeline.save()
    except IntegrityError:
        raise ValidationError({"name": [_("A pipeline with this name already exists in the project.")]}) from None
    return pipeline


def copy_name(project: Project, name: str) -> str:
    """A free name for a copy of the pipeline `name`: "<name>-copy", then "<name>-copy-2"…"""
    base = f"{name[:90]}-copy"
    taken = set(Pipeline.objects.filter(project=project, name__startswith=base).values_list("name", flat=True))
    return next(n for n in (base, *(f"{base}-{i}" for i in range(2, 10_000))) if n not in taken)


def duplicate_pipeline(pipeline: Pipeline, user: Any, name: str = "") -> Pipeline:
    """A new pipeline of the same project with the same spec, description and layout, named `name` (or a free
    "<name>-copy"); its runs and schedules stay with the original."""
    return save_pipeline(
        pipeline.project, user, name=name.strip() or copy_name(pipeline.project, pipeline.name), spec=pipeline.spec,
        description=pipeline.description, layout=pipeline.layout,
    )  # fmt: skip


def delete_pipeline(pipeline: Pipeline) -> None:
    """Delete a pipeline and its schedules. Its runs stay, with their logs, under the pipeline's name (a run keeps
    the spec it froze); studies and labeling projects that started it forget it. Refused with a Conflict naming
    the retrain policies that run it."""
    try:
        with transaction.atomic():
            pipeline.delete()
    except (ProtectedError, RestrictedError) as exc:
        raise Conflict.from_protected(exc, pipeline) from None


def next_template_version(project: Project, slug: str) -> int:
    latest = JobTemplate.objects.filter(project=project, slug=slug).aggregate(v=Max("version"))["v"]
    return (latest or 0) + 1


def create_template(*, project: Project, slug: str, **fields: Any) -> JobTemplate:
    """A project's template, or the next version of one: changing what a template runs makes a new row, so that a
    frozen run keeps naming exactly what it ran. The argument schema is checked and kept in the author's order."""
    schema = fields.pop("args_schema", None) or {}
    validate_args_schema(schema)
    if fields.get("strategy") is not None:
        fields["strategy"] = template_strategy(fields)
    version = next_template_version(project, slug)
    return JobTemplate.objects.create(
        project=project, slug=slug, version=version, args_schema=with_order(schema), **fields
    )


def strategy_layouts(project: Project, spec: Any) -> dict[str, str]:
    """{node: "world 8 = dp 2 × tp 2 × pp 2, fsdp, bf16"} for every node with a strategy that can run as written
    (other nodes, and nodes whose strategy or template is wrong, are left out: their errors say why)."""
    layouts: dict[str, str] = {}
    nodes = spec.get("nodes") if isinstance(spec, dict) else None
    for node in nodes if isinstance(nodes, list) else []:
        if not (isinstance(node, dict) and isinstance(node.get("name"), str) and isinstance(node.get("template"), str)):
            continue
        template = resolve_template(project, node["template"]) if TEMPLATE_REF_RE.match(node["template"]) else None
        overrides = node.get("resources") if isinstance(node.get("resources"), dict) else {}
        if template is None or template.kind != "distributed":
            continue
        resources = {**(template.resources or {}), **{k: v for k, v in overrides.items() if v is not None}}
        try:
            found = node_strategy(template, node.get("strategy"), resources)
        except (StrategyError, TypeError):
            continue
        if found:
            layouts[node["name"]] = describe_strategy(*found)
    return layouts


def template_strategy(fields: dict[str, Any]) -> dict[str, Any]:
    """A template's strategy, normalized and checked against its replicas, default resources and command; a
    ValidationError keyed `strategy.<field>` (or `strategy`) otherwise."""
    if not isinstance(fields.get("strategy"), dict):
        raise ValidationError({"strategy": [_("Must be a mapping of the strategy's fields.")]})
    if not fields["strategy"]:
        return {}
    template = JobTemplate(**{k: v for k, v in fields.items() if k != "project"})
    try:
        found = node_strategy(template, {}, template.resources or {})
    except StrategyError as exc:
        raise ValidationError({exc.key: [exc.message]}) from None
    return found[0] if found else {}


def _freeze(
    project: Project, spec: dict[str, Any], *, ignore_cache: bool = False, lookups: ProjectLookups | None = None
) -> dict[str, Any]:
    """The spec a run executes: validated now, every node bound to an exact template row. A node of a template with
    side effects, or every node when asked to ignore the cache, says `cache: false` in it (and runs)."""
    frozen, templates, versions = _normalize(project, spec, lookups)
    for node in frozen["nodes"]:
        template = templates[node["name"]]
        node["template_id"] = template.pk
        # What the queue counts of it is its resources × this (the runtimes launch the template's replicas).
        node["replicas"] = total_replicas(
            template.kind, template.replicas, framework=template.framework, runtime=runtime_name_for(project)
        )
        if template.preemptible:  # the queue may borrow room for it and preempt it (apps/jobs/borrowing.py)
            node["preemptible"] = True
        if ignore_cache or template.side_effects:
            node["cache"] = False
        if node["name"] in versions:
            pin(node, versions[node["name"]])
    return frozen


def _next_number(project: Project) -> int:
    return (PipelineRun.objects.filter(project=project).aggregate(n=Max("number"))["n"] or 0) + 1


def _create_run(project: Project, user: Any, **fields: Any) -> PipelineRun:
    for _attempt in range(5):
        try:
            with transaction.atomic():
                return PipelineRun.objects.create(
                    project=project, created_by=user, number=_next_number(project), **fields
                )
        except IntegrityError:  # two runs took the same number at once: take the next one
            continue
    raise RuntimeError("could not allocate a run number")


def _create_runs(project: Project, user: Any, rows: list[dict[str, Any]]) -> list[PipelineRun]:
    """`_create_run` for several runs: their numbers from one read of the highest and one insert for all of them
    (one savepoint around both, for the retry when another start took one of the numbers meanwhile)."""
    for _attempt in range(5):
        try:
            with transaction.atomic():
                first = _next_number(project)
                return PipelineRun.objects.bulk_create(
                    PipelineRun(project=project, created_by=user, number=first + i, **fields)
                    for i, fields in enumerate(rows)
                )
        except IntegrityError:  # a run started meanwhile took one of the numbers: take the next ones
            continue
    raise RuntimeError("could not allocate run numbers")


def _kick(run: PipelineRun) -> None:
    from apps.jobs.tasks import advance_run

    enqueue(advance_run, run.pk)  # through the outbox: a broker outage delays the run, never fails its start


def start_run(
    pipeline: Pipeline,
    user: Any,
    *,
    trigger: str = "manual",
    schedule: Any = None,
    logical_date: Any = None,
    ignore_cache: bool = False,
) -> PipelineRun:
    """Freeze the pipeline into a run and queue it (with `ignore_cache`, no node is taken from the cache)."""
    return start_spec_run(
        pipeline.project,
        user,
        pipeline.spec,
        name=pipeline.name,
        pipeline=pipeline,
        trigger=trigger,
        schedule=schedule,
        logical_date=logical_date,
        ignore_cache=ignore_cache,
    )


def start_spec_run(
    project: Project,
    user: Any,
    spec: dict[str, Any],
    *,
    name: str,
    pipeline: Pipeline | None = None,
    trigger: str = "manual",
    schedule: Any = None,
    logical_date: Any = None,
    ignore_cache: bool = False,
    permission_checked: bool = False,
) -> PipelineRun:
    """Freeze `spec` (validated as a pipeline's) into a run named `name` and queue it: a saved pipeline's run, or
    one whose spec was made for it (a study's trial: its template with the trial's values filled in).
    `permission_checked`: the caller has just checked that `user` may start runs here (a study's pass, once for the
    trials it starts)."""
    if user is not None and not permission_checked and not has_project_perm(user, project, CONTRIBUTE):
        raise PermissionDenied(_("Your role in this project does not allow starting runs."))
    spec = _freeze(project, spec, ignore_cache=ignore_cache)
    with transaction.atomic():
        run = _create_run(
            project,
            user,
            pipeline=pipeline,
            pipeline_name=name,
            spec=spec,
            priority=int(spec.get("priority") or 0),
            trigger=trigger,
            schedule=schedule,
            logical_date=logical_date,
        )
        _kick(run)
    return run


class RunBatch:
    """Several runs of one project started together, as `start_spec_run` starts one (a study's pass starts its new
    trials' runs so): each spec is validated and frozen on its own (`add`), against the project's limits and
    templates read once for the batch (`ProjectLookups`), and the owner's permission is checked once; `start` then
    numbers the runs with one read, inserts them in one statement and queues their advances in one more
    (`outbox.enqueue_many`), in the caller's transaction without a savepoint of its own (any failure in it rolls
    the caller's transaction back), or in one of its own."""

    def __init__(self, project: Project, user: Any, *, trigger: str = "manual", permission_checked: bool = False):
        if user is not None and not permission_checked and not has_project_perm(user, project, CONTRIBUTE):
            raise PermissionDenied(_("Your role in this project does not allow starting runs."))
        self.project, self.user, self.trigger = project, user, trigger
        self.lookups = ProjectLookups(project)
        self._rows: list[dict[str, Any]] = []

    def add(self, spec: dict[str, Any], *, name: str) -> None:
        """Freeze `spec` into the batch as a run named `name`; a ValidationError leaves the batch as it was."""
        frozen = _freeze(self.project, spec, lookups=self.lookups)
        priority = int(frozen.get("priority") or 0)
        self._rows.append({"pipeline_name": name, "spec": frozen, "priority": priority, "trigger": self.trigger})

    def start(self) -> list[PipelineRun]:
        """The runs added so far, in their order, created and queued (to start when the transaction commits)."""
        from apps.jobs.tasks import advance_run

        rows, self._rows = self._rows, []
        if not rows:
            return []
        with transaction.atomic(savepoint=False):
            runs = _create_runs(self.project, self.user, rows)
            enqueue_many(advance_run, [(run.pk,) for run in runs])
        return runs


@dataclass(frozen=True)
class RequestKey:
    """A client's idempotency key for a request that starts a run, and a digest of what that request asked (its
    action, target and body): the same key with the same request is a retry, with another one a mistake."""

    key: str
    digest: str


class KeyReused(Exception):
    """The key already started a run for a different request."""


def run_for_key(user: Any, request_key: RequestKey) -> PipelineRun | None:
    """The run this user's request with this key started, if any (`KeyReused` when that was another request)."""
    run = PipelineRun.objects.filter(created_by=user, idempotency_key=request_key.key).first()
    if run is not None and run.request_digest != request_key.digest:
        raise KeyReused(request_key.key)
    return run


def start_once(user: Any, request_key: RequestKey | None, start: Callable[[], PipelineRun]) -> tuple[PipelineRun, bool]:
    """`start()` (a run start, retry or re-run by `user`) unless the request with this key already started a run:
    (run, created). Two requests with one key at once make one run: the second waits on the unique key, rolls back
    everything its start did (the run, its queued advance) and gets the first's run."""
    if request_key is None:
        return start(), True
    existing = run_for_key(user, request_key)
    if existing is not None:
        return existing, False
    try:
        with transaction.atomic():
            run = start()
            run.idempotency_key, run.request_digest = request_key.key, request_key.digest
            run.save(update_fields=["idempotency_key", "request_digest"])
    except IntegrityError:
        existing = run_for_key(user, request_key)
        if existing is None:
            raise
        return existing, False
    return run, True


def cancel_run(run: PipelineRun) -> PipelineRun:
    """Stop a run: queued work is dropped, running processes are killed."""
    with transaction.atomic():
        run = PipelineRun.objects.select_for_update(no_key=True).get(pk=run.pk)
        if run.status in RUN_FINISHED or run.status == RunStatus.CANCELLING:
            return run
        run.status = RunStatus.CANCELLING
        run.save(update_fields=["status"])
        _kick(run)
    return run


def rerun_from(run: PipelineRun, user: Any, node: str | None = None) -> PipelineRun:
    """A new run of the same frozen spec. Nodes that are not `node` or downstream of it, and that
    succeeded before, reuse their outputs; without `node`, every node that did not succeed runs again. The nodes
    that run again really run: the new run's spec takes them out of the cache (`cache: false`), or a node whose
    inputs did not change would be 'cached' from the very task it was asked to re-run."""
    if not run.is_finished:
        # Its tasks are still moving: a new run would start the same nodes again alongside them.
        raise ValidationError({"status": [_("Wait for the run to finish, or cancel it, before running it again.")]})
    names = [n["name"] for n in run.spec["nodes"]]
    if node is not None and node not in names:
        raise ValidationError({"node": [_("No node “%(node)s” in this run.") % {"node": node}]})
    if user is not None and not has_project_perm(user, run.project, CONTRIBUTE):
        raise PermissionDenied(_("Your role in this project does not allow starting runs."))
    previous = {t.node: t for t in run.tasks.order_by("node", "attempt")}
    if node is None:  # retry: whatever did not succeed
        rerun_nodes = {n for n in names if n not in previous or previous[n].status not in TASK_DONE_OK}
    else:
        rerun_nodes = _downstream(run.spec, node)
    with transaction.atomic():
        new = _create_run(
            run.project,
            user,
            pipeline=run.pipeline,
            pipeline_name=run.pipeline_name,
            spec={
                **run.spec,
                "nodes": [{**n, "cache": False} if n["name"] in rerun_nodes else n for n in run.spec["nodes"]],
            },
            priority=run.priority,
            trigger="rerun",
            rerun_of=run,
        )
        now = timezone.now()
        for name in names:
            old = previous.get(name)
            reusable = old is not None and old.status in TASK_DONE_OK and old.output_dir
            if reusable and name not in rerun_nodes:
                TaskRun.objects.create(
                    run=new,
                    node=name,
                    status=TaskStatus.CACHED,
                    cached_from=old.cached_from or old,
                    output_dir=old.output_dir,
                    output_digest=old.output_digest,
                    cache_key=old.cache_key,
                    reason=_("reused from %(run)s") % {"run": run},
                    started_at=now,
                    finished_at=now,
                )
        _kick(new)
    return new


def _downstream(spec: dict[str, Any], start: str) -> set[str]:
    children: dict[str, list[str]] = {}
    for n in spec["nodes"]:
        for dep in n.get("depends_on", []):
            children.setdefault(dep, []).append(n["name"])
    seen, stack = {start}, [start]
    while stack:
        for child in children.get(stack.pop(), []):
            if child not in seen:
                seen.add(child)
                stack.append(child)
    return seen
