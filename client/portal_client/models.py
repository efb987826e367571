"""What the API returns, as typed dataclasses (standard library only: pydantic would add a compiled dependency for
what `from_api` does here). Each keeps the whole answer in `raw`, so fields added on the server are never lost."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, ClassVar, TypeVar

M = TypeVar("M", bound="Model")


@dataclass
class Model:
    raw: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)
    # The columns `portal … list` shows.
    columns: ClassVar[tuple[str, ...]] = ()

    @classmethod
    def from_api(cls: type[M], data: dict[str, Any]) -> M:
        names = {f.name for f in dataclasses.fields(cls)} - {"raw"}
        return cls(raw=data, **{key: value for key, value in data.items() if key in names})

    def to_dict(self) -> dict[str, Any]:
        return dict(self.raw)


@dataclass
class Project(Model):
    slug: str = ""
    name: str = ""
    description: str = ""
    runtime: str = ""
    my_role: str | None = None
    created_at: str | None = None
    columns: ClassVar[tuple[str, ...]] = ("slug", "name", "my_role", "runtime")


@dataclass
class Dataset(Model):
    id: int = 0
    project: str = ""
    name: str = ""
    description: str = ""
    latest_version: int | None = None  # its number
    version_count: int = 0
    created_at: str | None = None
    columns: ClassVar[tuple[str, ...]] = ("id", "project", "name", "version_count", "latest_version")


@dataclass
class DatasetVersion(Model):
    id: int = 0
    dataset: int = 0
    dataset_name: str = ""
    project: str = ""
    number: int = 0
    ref: str = ""
    message: str = ""
    digest: str = ""
    total_size: int = 0
    file_count: int = 0
    created_at: str | None = None
    created: bool | None = None  # after a commit: False when the files equalled the latest version's
    columns: ClassVar[tuple[str, ...]] = ("id", "ref", "file_count", "total_size", "message", "created_at")


@dataclass
class VersionFile(Model):
    path: str = ""
    size: int = 0
    sha256: str = ""
    columns: ClassVar[tuple[str, ...]] = ("path", "size", "sha256")


@dataclass
class Template(Model):
    id: int = 0
    project: str | None = None
    slug: str = ""
    version: int = 0
    ref: str = ""
    name: str = ""
    category: str = ""
    description: str = ""
    image: str = ""
    command: list[str] = field(default_factory=list)
    args_schema: dict[str, Any] = field(default_factory=dict)
    kind: str = ""
    columns: ClassVar[tuple[str, ...]] = ("id", "ref", "project", "name", "kind")


@dataclass
class Pipeline(Model):
    id: int = 0
    project: str = ""
    name: str = ""
    description: str = ""
    spec: dict[str, Any] = field(default_factory=dict)
    updated_at: str | None = None
    columns: ClassVar[tuple[str, ...]] = ("id", "project", "name", "updated_at")


FINISHED = frozenset({"succeeded", "failed", "cancelled"})


@dataclass
class Run(Model):
    id: int = 0
    project: str = ""
    pipeline: int | None = None
    pipeline_name: str = ""
    number: int = 0
    status: str = ""
    reason: str = ""
    trigger: str = ""
    rerun_of: int | None = None
    created_at: str | None = None
    started_at: str | None = None
    finished_at: str | None = None
    progress: Any = None
    columns: ClassVar[tuple[str, ...]] = ("id", "project", "pipeline_name", "number", "status", "created_at")

    @property
    def is_finished(self) -> bool:
        return self.status in FINISHED

    @property
    def succeeded(self) -> bool:
        return self.status == "succeeded"


@dataclass
class TaskRun(Model):
    id: int = 0
    run: int = 0
    node: str = ""
    attempt: int = 1
    status: str = ""
    reason: str = ""
    exit_code: int | None = None
    columns: ClassVar[tuple[str, ...]] = ("id", "node", "attempt", "status", "exit_code", "reason")


@dataclass
class LogLine(Model):
    id: int = 0
    task: int = 0
    node: str = ""
    attempt: int = 1
    replica: str = ""
    seq: int = 0
    ts: str = ""
    stream: str = "stdout"
    text: str = ""
    columns: ClassVar[tuple[str, ...]] = ("ts", "node", "attempt", "replica", "text")

    FIELDS: ClassVar[tuple[str, ...]] = ("id", "task", "node", "attempt", "replica", "seq", "ts", "stream", "text")

    @classmethod
    def from_row(cls, row: list[Any]) -> LogLine:
        """A row of the websocket's `lines` message (its fields in FIELDS order)."""
        return cls.from_api(dict(zip(cls.FIELDS, row, strict=False)))

    def format(self) -> str:
        return f"{self.ts} [{self.node}#{self.attempt}/{self.replica}] {self.text}"


@dataclass
class Experiment(Model):
    id: int = 0
    project: str = ""
    name: str = ""
    lifecycle_stage: str = ""
    columns: ClassVar[tuple[str, ...]] = ("id", "project", "name", "lifecycle_stage")


@dataclass
class TrackingRun(Model):
    run_uuid: str = ""
    project: str = ""
    experiment: int = 0
    name: str = ""
    status: str = ""
    params: Any = None
    metrics: Any = None
    tags: Any = None
    source_pipeline_run: int | None = None
    columns: ClassVar[tuple[str, ...]] = ("run_uuid", "experiment", "name", "status")


@dataclass
class RegisteredModel(Model):
    id: int = 0
    project: str = ""
    name: str = ""
    description: str = ""
    columns: ClassVar[tuple[str, ...]] = ("id", "project", "name", "description")


@dataclass
class ModelVersion(Model):
    id: int = 0
    registered_model: int = 0
    version: int = 0
    source: str = ""
    run_uuid: str | None = None
    status: str = ""
    stage: str = ""
    aliases: list[str] = field(default_factory=list)
    columns: ClassVar[tuple[str, ...]] = ("id", "version", "status", "stage", "aliases")


@dataclass
class ModelAlias(Model):
    id: int = 0
    registered_model: int = 0
    alias: str = ""
    model_version: int = 0
    version: int = 0
    columns: ClassVar[tuple[str, ...]] = ("id", "alias", "version")


@dataclass
class Service(Model):
    id: int = 0
    project: str = ""
    name: str = ""
    stage: str = ""
    registered_model: str | None = None
    model_version: int | None = None
    follow_alias: str = ""
    framework: str = ""
    status: str = ""
    reason: str = ""
    url: str = ""
    auth: str = ""
    columns: ClassVar[tuple[str, ...]] = ("id", "project", "name", "registered_model", "model_version", "status")


@dataclass
class Revision(Model):
    id: int = 0
    service: int = 0
    number: int = 0
    role: str = ""
    status: str = ""
    reason: str = ""
    traffic_percent: int = 0
    columns: ClassVar[tuple[str, ...]] = ("id", "number", "role", "status", "traffic_percent")


@dataclass
class Notebook(Model):
    id: int = 0
    project: str = ""
    owner: str = ""
    name: str = ""
    ide: str = ""
    status: str = ""
    reason: str = ""
    open_url: str | None = None
    columns: ClassVar[tuple[str, ...]] = ("id", "project", "name", "ide", "status")


@dataclass
class Token(Model):
    id: int = 0
    name: str = ""
    project: str | None = None
    prefix: str = ""
    scope: str = ""
    expires_at: str | None = None
    last_used_at: str | None = None
    revoked_at: str | None = None
    token: str | None = None  # only in the answer that created it
    columns: ClassVar[tuple[str, ...]] = ("id", "name", "project", "prefix", "scope", "expires_at")


@dataclass
class Study(Model):
    id: int = 0
    project: str = ""
    name: str = ""
    description: str = ""
    algorithm: str = ""
    status: str = ""
    reason: str = ""
    max_trials: int = 0
    parallel_trials: int = 0
    best_trial: dict[str, Any] | None = None
    trial_counts: dict[str, int] = field(default_factory=dict)
    created_by: str | None = None
    created_at: str | None = None
    finished_at: str | None = None
    columns: ClassVar[tuple[str, ...]] = ("id", "project", "name", "status", "algorithm", "max_trials")

    @property
    def is_finished(self) -> bool:
        return self.status not in ("pending", "running")


@dataclass
class Trial(Model):
    number: int = 0
    status: str = ""
    reason: str = ""
    params: dict[str, Any] = field(default_factory=dict)
    values: list[float] | None = None
    last_step: int | None = None
    run: int | None = None
    columns: ClassVar[tuple[str, ...]] = ("number", "status", "params", "values", "run")


@dataclass
class KnowledgeBase(Model):
    id: int = 0
    project: str = ""
    name: str = ""
    description: str = ""
    llm_url: str = ""
    llm_model: str = ""
    shared_with: list[str] = field(default_factory=list)
    document_count: int = 0
    created_at: str | None = None
    columns: ClassVar[tuple[str, ...]] = ("id", "project", "name", "document_count", "llm_model")


@dataclass
class Document(Model):
    id: int = 0
    knowledge_base: int = 0
    name: str = ""
    kind: str = ""
    tags: list[str] = field(default_factory=list)
    size: int = 0
    version: int = 0
    status: str = ""
    reason: str = ""
    chunk_count: int = 0
    columns: ClassVar[tuple[str, ...]] = ("id", "name", "kind", "version", "status", "chunk_count")


@dataclass
class App(Model):
    id: int = 0
    name: str = ""
    project: str | None = None
    visibility: str = ""
    builtin: bool = False
    latest: dict[str, Any] | None = None
    columns: ClassVar[tuple[str, ...]] = ("id", "name", "project", "visibility", "builtin")


@dataclass
class AppVersion(Model):
    id: int = 0
    version: str = ""
    digest: str = ""
    manifest: dict[str, Any] = field(default_factory=dict)
    readme: str = ""
    creates: list[dict[str, str]] = field(default_factory=list)
    created_at: str | None = None
    columns: ClassVar[tuple[str, ...]] = ("id", "version", "digest", "created_at")


@dataclass
class Installation(Model):
    id: int = 0
    project: str = ""
    app_name: str = ""
    app_version_number: str = ""
    name: str = ""
    parameters: dict[str, Any] = field(default_factory=dict)
    created: list[dict[str, Any]] = field(default_factory=list)
    created_by: str | None = None
    created_at: str | None = None
    columns: ClassVar[tuple[str, ...]] = ("id", "project", "name", "app_name", "app_version_number")


@dataclass
class LabelingProject(Model):
    id: int = 0
    project: str = ""
    name: str = ""
    description: str = ""
    dataset_version: int = 0
    dataset: str = ""
    kind: str = ""
    labels: list[str] = field(default_factory=list)
    status: str = ""
    reason: str = ""
    task_count: int = 0
    progress: dict[str, Any] = field(default_factory=dict)
    synced_at: str | None = None
    created_at: str | None = None
    columns: ClassVar[tuple[str, ...]] = ("id", "project", "name", "kind", "dataset", "status", "task_count")
