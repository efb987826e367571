"""Pipelines as code: Python functions become templates, a function that calls them becomes a pipeline.

```python
from portal_client import dsl

@dsl.component(cpu=0.5)
def make_rows(count: int = 10) -> list:
    return list(range(count))

@dsl.component
def total(rows: list, scale: float = 1.0) -> float:
    return sum(rows) * scale

@dsl.pipeline(name="sums")
def sums(count: int = 5):
    total(rows=make_rows(count=count), scale=2.0)

print(dsl.compile(sums))                  # the portal/v1 YAML
client.pipelines.apply_code("demo", sums) # registers the components as templates, then applies the pipeline
```

A component runs in a task's Python ("{python}": the template's task environment) as the function's own source, so
it must be self-contained: imports inside its body, as Kubeflow's lightweight components. Arguments arrive as the
template's `--name value` flags, converted back to the annotated types. Calling a component inside a pipeline
function returns a handle to its result: passing it to another component wires the second after the first (the
node's `depends_on`), and the second receives the first's return value (stored as JSON in the first task's
output folder, read through `PORTAL_INPUT_<NODE>`). Arguments are checked when the pipeline is compiled: unknown or
missing names, literals of the wrong type, and results whose annotated type does not fit the parameter.
"""

from __future__ import annotations

import ast
import inspect
import json
import re
import textwrap
import typing
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import yaml

RESULT_FILE = "return.json"
WIRES_ENV = "PORTAL_DSL_WIRES"

# Python type → the JSON Schema type of the template argument.
JSON_TYPES: dict[Any, str] = {int: "integer", float: "number", str: "string", bool: "boolean", list: "array",
                              dict: "object"}  # fmt: skip

RUNNER = """\
import json, os, sys
SOURCE, NAME, TYPES = {source!r}, {name!r}, {types!r}
namespace = {{"__name__": "__portal_component__"}}
exec(compile(SOURCE, NAME, "exec"), namespace)
argv, args, i = sys.argv[1:], {{}}, 0
while i < len(argv):
    key = argv[i][2:]
    kind = TYPES.get(key, "string")
    if kind == "boolean" and (i + 1 == len(argv) or argv[i + 1].startswith("--")):
        args[key], i = True, i + 1
        continue
    raw, i = argv[i + 1], i + 2
    args[key] = {{"integer": int, "number": float, "boolean": lambda v: v.lower() == "true",
                 "array": json.loads, "object": json.loads}}.get(kind, str)(raw)
for key, node in json.loads(os.environ.get({wires!r}, "{{}}")).items():
    folder = os.environ["PORTAL_INPUT_" + node.upper().replace("-", "_")]
    with open(os.path.join(folder, {result!r})) as handle:
        args[key] = json.load(handle)
result = namespace[NAME](**args)
if result is not None:
    with open(os.path.join(os.environ["PORTAL_OUTPUT_DIR"], {result!r}), "w") as handle:
        json.dump(result, handle)
"""


class DslError(TypeError):
    """A pipeline that cannot compile: a wrong argument, a type that does not fit, a component that is no function."""


def _slug(name: str) -> str:
    return re.sub(r"[^a-z0-9-]+", "-", name.lower().replace("_", "-")).strip("-")


def _json_type(annotation: Any) -> str | None:
    """The JSON type of an annotation (None: not declared, anything goes)."""
    if annotation is inspect.Parameter.empty or annotation is Any:
        return None
    origin = typing.get_origin(annotation) or annotation
    if origin not in JSON_TYPES:
        raise DslError(f"{annotation!r} is not a type a template argument can hold (int, float, str, bool, list, dict)")
    return JSON_TYPES[origin]


def _fits(value: Any, kind: str | None) -> bool:
    if kind is None:
        return True
    if kind == "number":
        return isinstance(value, int | float) and not isinstance(value, bool)
    if kind == "integer":
        return isinstance(value, int) and not isinstance(value, bool)
    return isinstance(value, {"string": str, "boolean": bool, "array": list, "object": dict}[kind])


@dataclass
class Component:
    """A function that runs as a pipeline task (`@component`)."""

    func: Callable[..., Any]
    slug: str
    name: str
    image: str = "{portal}"
    resources: dict[str, Any] = field(default_factory=dict)
    description: str = ""

    @property
    def signature(self) -> inspect.Signature:
        return inspect.signature(self.func)

    @property
    def types(self) -> dict[str, str | None]:
        hints = typing.get_type_hints(self.func)
        return {name: _json_type(hints.get(name, inspect.Parameter.empty)) for name in self.signature.parameters}

    @property
    def returns(self) -> str | None:
        hint = typing.get_type_hints(self.func).get("return", inspect.Parameter.empty)
        return None if hint in (None, type(None)) else _json_type(hint)

    def source(self) -> str:
        """The function's own source, without its decorators."""
        text = textwrap.dedent(inspect.getsource(self.func))
        tree = ast.parse(text)
        func = tree.body[0]
        if not isinstance(func, ast.FunctionDef):
            raise DslError(f"{self.name}: a component is a plain function (def)")
        lines = text.splitlines()
        return "\n".join(lines[func.lineno - 1 :]) + "\n"

    def args_schema(self) -> dict[str, Any]:
        properties: dict[str, Any] = {}
        for name, param in self.signature.parameters.items():
            kind = self.types[name]
            prop: dict[str, Any] = {"type": kind} if kind else {"x-portal-type": "json"}
            if param.default is not inspect.Parameter.empty and param.default is not None:
                prop["default"] = param.default
            properties[name] = prop
        # No argument is required by the template: one a pipeline wires from another task's result is not a flag.
        return {"type": "object", "properties": properties, "additionalProperties": False}

    def command(self) -> list[str]:
        types = {name: kind or "json" for name, kind in self.types.items()}
        runner = RUNNER.format(
            source=self.source(), name=self.func.__name__, types=types, wires=WIRES_ENV, result=RESULT_FILE
        )
        return ["{python}", "-c", runner]

    def template(self) -> dict[str, Any]:
        """The job template's fields (what `POST /templates/` takes, less the project)."""
        return {
            "slug": self.slug, "name": self.name, "description": self.description, "image": self.image,
            "command": self.command(), "args_schema": self.args_schema(), "resources": self.resources,
        }  # fmt: skip

    def __call__(self, *args: Any, **kwargs: Any) -> Task:
        builder = _Builder.current
        if builder is None:
            raise DslError(f"{self.name}: call components inside a @pipeline function (or call .func directly)")
        return builder.add(self, args, kwargs)


def component(
    func: Callable[..., Any] | None = None,
    *,
    name: str | None = None,
    image: str = "{portal}",
    cpu: float | str | None = None,
    memory: str | None = None,
    gpu: int | None = None,
) -> Any:
    """Declare a component (usable bare, `@component`, or with options)."""

    def wrap(fn: Callable[..., Any]) -> Component:
        resources = {k: v for k, v in {"cpu": cpu, "memory": memory, "gpu": gpu}.items() if v is not None}
        made = Component(fn, _slug(name or fn.__name__), name or fn.__name__, image, resources,
                         inspect.getdoc(fn) or "")  # fmt: skip
        made.types  # noqa: B018 - annotations are checked when declared, not when compiled
        return made

    return wrap(func) if func is not None else wrap


@dataclass
class Task:
    """A component's call inside a pipeline: a node; pass it on to wire its result into another."""

    node: str
    component: Component
    args: dict[str, Any]
    wires: dict[str, str]
    after: list[str]
    options: dict[str, Any] = field(default_factory=dict)

    def set(self, **options: Any) -> Task:
        """Node options: retries, retry_backoff, timeout, cache, env, resources."""
        self.options.update(options)
        return self

    def after_(self, *tasks: Task) -> Task:
        """Run after these tasks without taking their results."""
        for task in tasks:
            if task.node not in self.after:
                self.after.append(task.node)
        return self


class _Builder:
    current: _Builder | None = None

    def __init__(self) -> None:
        self.tasks: list[Task] = []

    def add(self, comp: Component, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Task:
        try:
            bound = comp.signature.bind(*args, **kwargs)
        except TypeError as exc:
            raise DslError(f"{comp.name}: {exc}") from None
        taken = {t.node for t in self.tasks}
        node, n = comp.slug, 2
        while node in taken:
            node, n = f"{comp.slug}-{n}", n + 1
        literal: dict[str, Any] = {}
        wires: dict[str, str] = {}
        types = comp.types
        for param, value in bound.arguments.items():
            kind = types[param]
            if isinstance(value, Task):
                given = value.component.returns
                if (
                    kind is not None
                    and given is not None
                    and given != kind
                    and not (kind, given) == ("number", "integer")
                ):
                    raise DslError(
                        f"{comp.name}({param}=…): {value.component.name} returns {given}, the parameter takes {kind}"
                    )
                wires[param] = value.node
            elif not _fits(value, kind):
                raise DslError(f"{comp.name}({param}={value!r}): expected {kind}, got {type(value).__name__}")
            else:
                literal[param] = value
        missing = [
            name for name, p in comp.signature.parameters.items()
            if p.default is inspect.Parameter.empty and name not in bound.arguments
        ]  # fmt: skip
        if missing:
            raise DslError(f"{comp.name}: missing {', '.join(missing)}")
        task = Task(node, comp, literal, wires, list(dict.fromkeys(wires.values())))
        self.tasks.append(task)
        return task


@dataclass
class Pipeline:
    """A function whose component calls make the graph (`@pipeline`)."""

    func: Callable[..., Any]
    name: str
    description: str = ""
    options: dict[str, Any] = field(default_factory=dict)

    def build(self, **params: Any) -> list[Task]:
        builder = _Builder()
        previous, _Builder.current = _Builder.current, builder
        try:
            try:
                inspect.signature(self.func).bind(**params)
            except TypeError as exc:
                raise DslError(f"{self.name}: {exc}") from None
            self.func(**params)
        finally:
            _Builder.current = previous
        if not builder.tasks:
            raise DslError(f"{self.name}: the pipeline calls no component")
        return builder.tasks

    def components(self) -> list[Component]:
        seen: dict[str, Component] = {}
        for task in self.build():
            seen.setdefault(task.component.slug, task.component)
        return list(seen.values())

    def spec(self, **params: Any) -> dict[str, Any]:
        nodes = []
        for task in self.build(**params):
            node: dict[str, Any] = {"name": task.node, "template": task.component.slug, "args": task.args}
            if task.after:
                node["depends_on"] = task.after
            env = dict(task.options.get("env", {}))
            if task.wires:
                env[WIRES_ENV] = json.dumps(task.wires, sort_keys=True)
            if env:
                node["env"] = env
            node.update({k: v for k, v in task.options.items() if k != "env"})
            nodes.append(node)
        return {"nodes": nodes, **self.options}


def pipeline(
    func: Callable[..., Any] | None = None, *, name: str | None = None, description: str | None = None, **options: Any
) -> Any:
    """Declare a pipeline; `options` are the spec's (parallelism, priority, failure_policy, env)."""

    def wrap(fn: Callable[..., Any]) -> Pipeline:
        return Pipeline(fn, name or _slug(fn.__name__), description or inspect.getdoc(fn) or "", options)

    return wrap(func) if func is not None else wrap


def compile(pipe: Pipeline, **params: Any) -> str:
    """The pipeline as the portal's YAML (`apiVersion: portal/v1`), with `params` for the pipeline function."""
    document = {
        "apiVersion": "portal/v1",
        "kind": "Pipeline",
        "metadata": {"name": pipe.name, "description": pipe.description},
        "spec": pipe.spec(**params),
    }
    return yaml.safe_dump(document, sort_keys=False, allow_unicode=True, width=1000)
