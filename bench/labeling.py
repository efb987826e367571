"""Labeling: the portal's task import and annotation sync side by side with a plain label-studio-sdk script, against
the same real Label Studio.

(a) import N text tasks (default 10,000) into a new text classification project
    portal: `services.create_labeling_project` from a dataset version holding one N-line .txt (validates the config
    through Label Studio, makes the project, records a LabelingTask per line, imports in batches, registers the webhook)
    SDK:    `projects.create` + `projects.import_tasks(return_task_ids=True)` of the same N texts
(b) read M annotations back (default 1,000) from one project of N tasks whose first M carry one (made untimed)
    portal: `tasks.sync_project` (the webhook's and reconcile's task body: progress, annotators, agreement, each
            task's state stored)
    SDK:    `tasks.list(project, fields="all", query=<tasks with annotations>, page_size=500)` collected into a dict
            of annotations per task (`only_annotated=True`, which the SDK offers, is ignored by the server)

Label Studio 1.23.2 is started from .venv-labelstudio (`make labelstudio-env`) on a free loopback port with a fresh
data folder; the SDK script runs in that venv (the portal cannot import the SDK: docs/labeling.md). The peer (the SDK)
runs first, then the portal, `--repeat` times each; the best time of each is kept. Prints both times, the portal's
SQL statements, and the ratio portal / SDK (target ≤ 1.5× for both).

    .venv/bin/python bench/labeling.py [--tasks 10000] [--annotations 1000] [--repeat 1]
    (PostgreSQL and Redis on 127.0.0.1; BENCH_DATABASE_URL / BENCH_REDIS_URL override)
"""

from __future__ import annotations

import argparse
import cProfile
import json
import os
import pstats
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from _env import ROOT, prepare

from apps.labeling import launch

LS_VENV = ROOT / ".venv-labelstudio"
LABELS = ["positive", "negative", "neutral"]
CONFIG = """<View>
  <Text name="text" value="$text"/>
  <Choices name="label" toName="text" choice="single">
    <Choice value="positive"/><Choice value="negative"/><Choice value="neutral"/>
  </Choices>
</View>"""

SDK = r"""
import json, sys, time
from label_studio_sdk import LabelStudio

url, token, mode, arg = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4]
ls = LabelStudio(base_url=url, api_key=token)
out = {}
if mode == "import":
    texts = json.loads(open(arg).read())
    config = open(sys.argv[5]).read()
    started = time.perf_counter()
    project = ls.projects.create(title="sdk-" + str(time.time()), label_config=config)
    answer = ls.projects.import_tasks(id=project.id, request=[{"text": t} for t in texts], return_task_ids=True)
    out["seconds"] = time.perf_counter() - started
    out["project"] = project.id
    out["tasks"] = len(answer.task_ids)
else:
    started = time.perf_counter()
    annotations = {}
    # `only_annotated=True` is ignored by the server (1.23.2 reads no such parameter: it returned all tasks, 100 a
    # page); the Data Manager's filter on the per-task counters is how the SDK gets only the annotated tasks.
    query = json.dumps({"filters": {"conjunction": "or", "items": [
        {"filter": "filter:tasks:total_annotations", "operator": "greater", "type": "Number", "value": 0},
        {"filter": "filter:tasks:cancelled_annotations", "operator": "greater", "type": "Number", "value": 0}]}})
    for task in ls.tasks.list(project=int(arg), fields="all", query=query, page_size=int(sys.argv[5])):
        annotations[task.id] = [a["result"] for a in task.annotations or []]
    out["seconds"] = time.perf_counter() - started
    out["annotations"] = sum(len(v) for v in annotations.values())
print(json.dumps(out))
"""


def texts(count: int) -> list[str]:
    words = ["good", "bad", "fine", "slow", "fast", "broken", "lovely", "late", "cheap", "solid"]
    return [f"Review {i}: the parcel was {words[i % 10]} and the service {words[(i * 7) % 10]}." for i in range(count)]


def sdk(url: str, token: str, *args: str) -> dict:
    answer = subprocess.run(
        [str(LS_VENV / "bin" / "python"), "-c", SDK, url, token, *args],
        capture_output=True, text=True, check=False, cwd=ROOT,
    )  # fmt: skip
    if answer.returncode:
        raise RuntimeError(f"the SDK script failed:\n{answer.stderr[-3000:]}")
    return json.loads(answer.stdout.strip().splitlines()[-1])


def sync_fixture(url: str, token: str, lines: list[str], count: int) -> list[int]:
    """Untimed set-up of (b): a Label Studio project of the same texts whose first `count` tasks carry an
    annotation, imported in one request (making 1,000 annotations one POST at a time took 12 minutes here);
    returns the project id and its task ids."""
    import httpx

    def result(i: int) -> list[dict]:
        return [{"from_name": "label", "to_name": "text", "type": "choices", "value": {"choices": [LABELS[i % 3]]}}]

    with httpx.Client(base_url=url, headers={"Authorization": f"Token {token}"}, timeout=600) as http:
        project = http.post("/api/projects/", json={"title": "sync", "label_config": CONFIG}).json()["id"]
        body = [
            {"data": {"text": text}, **({"annotations": [{"result": result(i)}]} if i < count else {})}
            for i, text in enumerate(lines)
        ]
        answer = http.post(f"/api/projects/{project}/import", params={"return_task_ids": "true"}, json=body)
        answer.raise_for_status()
        return [project, *answer.json()["task_ids"]]


class Statements:
    """Counts the portal's SQL statements (django.db.connection.execute_wrapper)."""

    def __init__(self) -> None:
        self.count = 0

    def __call__(self, execute, sql, params, many, context):
        self.count += 1
        return execute(sql, params, many, context)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tasks", type=int, default=10_000)
    parser.add_argument("--annotations", type=int, default=1_000)
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--profile", action="store_true", help="print where the portal's import spends its time")
    parser.add_argument("--page-size", type=int, default=500, help="the SDK's tasks.list page (the portal reads 500)")
    args = parser.parse_args()
    if not (LS_VENV / "bin" / "label-studio").exists():
        sys.exit(f"no Label Studio venv at {LS_VENV}: run `make labelstudio-env`")

    # One page of annotated tasks can take Label Studio more than the portal's 30 s on a loaded host: a bench
    # measures, so it waits as long as the SDK script does.
    os.environ.setdefault("LABEL_STUDIO_TIMEOUT", "600")
    var = prepare("labeling")
    local = launch.LocalServer(
        venv=LS_VENV, data_dir=var / "labelstudio", port=_free_port(), email="bench@labelstudio.local",
        password=launch.new_token(), token=launch.new_token(),
    )  # fmt: skip
    log = var / "labelstudio.log"
    process = local.start(stdout=log.open("wb"))
    try:
        started = time.perf_counter()
        launch.wait_ready(local.url, local.token, timeout=900, process=process)
        print(
            f"Label Studio 1.23.2 ready at {local.url} in {time.perf_counter() - started:.0f} s (log: {log})",
            flush=True,
        )
        run(local, var, args)
    finally:
        os.killpg(process.pid, 15)
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, 9)


def _free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def run(local: launch.LocalServer, var: Path, args: argparse.Namespace) -> None:
    from django.conf import settings
    from django.contrib.auth import get_user_model
    from django.db import connection
    from django.urls import reverse

    from apps.datasets import services as datasets
    from apps.labeling import server, tasks
    from apps.labeling.models import LabelingProject, LabelingTask
    from apps.labeling.services import create_labeling_project
    from apps.projects.services import provision_project

    settings.LABELING = "on"
    settings.LABEL_STUDIO_URL, settings.LABEL_STUDIO_TOKEN = local.url, local.token
    settings.LABELING_PORTAL_URL = "http://127.0.0.1:9"  # its webhooks go nowhere: the bench calls the sync itself
    user = get_user_model().objects.create_user("bench", "bench@example.com", "x")
    project = provision_project(user, slug="bench", name="Bench")
    lines = texts(args.tasks)
    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / "reviews.txt").write_text("\n".join(lines) + "\n")
        dataset = datasets.create_dataset(project, user, name="reviews")
        version = datasets.version_from_directory(dataset, Path(tmp), user=user, message="bench")
    texts_file, config_file = var / "texts.json", var / "config.xml"
    texts_file.write_text(json.dumps(lines))
    config_file.write_text(CONFIG)

    reverse("labeling-webhook", args=[1])  # a running portal resolved its URLs long ago (here: 2.7 s, once)
    peer_import, portal_import, peer_sync, portal_sync = [], [], [], []
    statements = {}
    for attempt in range(args.repeat):
        made = sdk(local.url, local.token, "import", str(texts_file), str(config_file))
        assert made["tasks"] == args.tasks, made
        peer_import.append(made["seconds"])

        counter = Statements()
        profile = cProfile.Profile() if args.profile else None
        with connection.execute_wrapper(counter):
            started = time.perf_counter()
            if profile:
                profile.enable()
            row = create_labeling_project(
                project, user, name=f"reviews-{attempt}", dataset_version=version, kind="text_classification",
                labels=LABELS,
            )  # fmt: skip
            portal_import.append(time.perf_counter() - started)
        if profile:
            profile.disable()
            pstats.Stats(profile).sort_stats("cumulative").print_stats(30)
        statements["import"] = counter.count
        assert row.task_count == args.tasks
        print(f"  import: SDK {peer_import[-1]:.2f} s, portal {portal_import[-1]:.2f} s", flush=True)

        # (b) on one project both read: the portal's labeling project is bound to it as create_labeling_project
        # would have left it (its LabelingTask rows carry Label Studio's task ids).
        project_id, *ids = sync_fixture(local.url, local.token, lines, args.annotations)
        row = LabelingProject.objects.create(
            project=project, name=f"sync-{attempt}", dataset_version=version, kind="text_classification",
            labels=LABELS, label_config=CONFIG, ls_project_id=project_id, status=LabelingProject.Status.READY,
            task_count=len(ids),
        )  # fmt: skip
        LabelingTask.objects.bulk_create(
            [LabelingTask(labeling_project=row, path="reviews.txt", row=i, ls_task_id=t) for i, t in enumerate(ids)],
            batch_size=2000,
        )
        made["project"] = project_id
        read = sdk(local.url, local.token, "sync", str(made["project"]), str(args.page_size))
        assert read["annotations"] == args.annotations, read
        peer_sync.append(read["seconds"])
        counter = Statements()
        with connection.execute_wrapper(counter):
            started = time.perf_counter()
            tasks.sync_project(row.pk)
            portal_sync.append(time.perf_counter() - started)
        statements["sync"] = counter.count
        print(f"  sync: SDK {peer_sync[-1]:.2f} s, portal {portal_sync[-1]:.2f} s", flush=True)
        with server.connect() as client:  # the portal's calls besides the tasks, timed on their own
            for what, call in (
                ("GET /api/projects/<id>/", lambda c, p=project_id: c.get_project(p)),
                ("GET /api/users/", lambda c: c.request("GET", "/api/users/")),
            ):
                started = time.perf_counter()
                call(client)
                print(f"    of which {what}: {time.perf_counter() - started:.2f} s", flush=True)
        row.refresh_from_db()
        assert row.progress["labeled"] == args.annotations, row.progress
        assert row.tasks.filter(state="labeled").count() == args.annotations

    print()
    print(f"Label Studio 1.23.2, label-studio-sdk 2.1.2; best of {args.repeat}; PostgreSQL for the portal")
    for name, peer, ours, count in (
        (f"(a) import {args.tasks:,} text tasks", peer_import, portal_import, statements["import"]),
        (f"(b) sync {args.annotations:,} annotations back", peer_sync, portal_sync, statements["sync"]),
    ):
        floor, mine = min(peer), min(ours)
        print(f"{name}")
        print(f"    plain SDK script   {floor:8.2f} s")
        print(f"    portal             {mine:8.2f} s   ({count} SQL statements)")
        print(f"    ratio portal/SDK   {mine / floor:8.2f}x   (target <= 1.5x)")


if __name__ == "__main__":
    main()
