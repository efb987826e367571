"""Study pages: the project's list, a study's page (live: progress, charts, the trial table with filters and CSV),
the create form and YAML import, and the stop and register-best actions."""

from __future__ import annotations

import csv
from typing import Any

from django.contrib import messages
from django.core.exceptions import PermissionDenied, ValidationError
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.utils.translation import gettext as _

from apps.hpo import katib, services
from apps.hpo.filters import StudyFilterSet, TrialFilterSet
from apps.hpo.forms import FORM_FIELD_OF, RegisterBestForm, RerunBestForm, StudyForm, StudyYamlForm
from apps.hpo.models import Study, Trial
from apps.projects.access import project_view
from apps.projects.models import Project
from apps.projects.permissions import CONTRIBUTE, VIEW, has_project_perm


def _put_errors(form: Any, exc: ValidationError, fields: dict[str, str]) -> None:
    """A definition's errors on the form: on the field they concern, each message naming the exact setting."""
    for key, errors in exc.message_dict.items():
        target = fields.get(key) or fields.get(key.split(".")[0]) or (key if key in form.fields else None)
        for message in errors:
            form.add_error(target if target in form.fields else None, f"{key}: {message}")


@project_view(VIEW, methods=("GET",))
def study_list(request: HttpRequest, project: Project) -> HttpResponse:
    filters = StudyFilterSet(request.GET, queryset=Study.objects.filter(project=project).select_related("created_by"))
    context = {
        "project": project,
        "studies": filters.qs,
        "can_create": has_project_perm(request.user, project, CONTRIBUTE),
    }
    if request.htmx:
        return render(request, "hpo/partials/study_table.html", context)
    return render(request, "hpo/study_list.html", context)


def _create(request: HttpRequest, project: Project, form: Any, document: Any, fields: dict[str, str]) -> Any:
    try:
        study = services.create_study(project, request.user, document)
    except ValidationError as exc:
        _put_errors(form, exc, fields)
        return None
    messages.success(request, _("Study “%(name)s” started.") % {"name": study.name})
    return redirect("hpo:study-detail", project=project.slug, pk=study.pk)


@project_view(CONTRIBUTE)
def study_create(request: HttpRequest, project: Project) -> HttpResponse:
    form = StudyForm(request.POST or None)
    if request.method == "POST" and form.is_valid():
        done = _create(request, project, form, form.document(), FORM_FIELD_OF)
        if done is not None:
            return done
    status = 400 if form.errors else 200
    return render(request, "hpo/study_form.html", {"project": project, "form": form, "yaml": False}, status=status)


@project_view(CONTRIBUTE)
def study_import(request: HttpRequest, project: Project) -> HttpResponse:
    """A study's definition as YAML, or a Katib Experiment (recognised by its kind), errors by path."""
    form = StudyYamlForm(request.POST or None)
    if request.method == "POST" and form.is_valid():
        document = form.cleaned_data["document"]
        if katib.is_experiment(document):
            done = _import_katib(request, project, form, document)
        else:
            done = _create(request, project, form, document, {})
        if done is not None:
            return done
    status = 400 if form.errors else 200
    return render(request, "hpo/study_form.html", {"project": project, "form": form, "yaml": True}, status=status)


def _import_katib(request: HttpRequest, project: Project, form: Any, experiment: dict[str, Any]) -> Any:
    try:
        study, notes = services.import_katib(project, request.user, experiment)
    except ValidationError as exc:
        _put_errors(form, exc, {})
        return None
    messages.success(request, _("Study “%(name)s” started from the Katib Experiment.") % {"name": study.name})
    for note in notes:
        messages.info(request, note)
    return redirect("hpo:study-detail", project=project.slug, pk=study.pk)


@project_view(VIEW, model=Study, methods=("GET",))
def study_katib(request: HttpRequest, project: Project, study: Study) -> HttpResponse:
    """The study as a Katib Experiment (YAML, notes as comments on top), for a team moving to a cluster."""
    try:
        experiment, notes = services.export_katib(study)
    except ValidationError as exc:
        messages.error(request, " ".join(f"{k}: {' '.join(v)}" for k, v in exc.message_dict.items()))
        return redirect("hpo:study-detail", project=project.slug, pk=study.pk)
    response = HttpResponse(katib.dump(experiment, notes), content_type="application/yaml; charset=utf-8")
    response["Content-Disposition"] = f'attachment; filename="{study.name}-katib.yaml"'
    return response


def chart_data(study: Study, trials: list[Trial]) -> dict[str, Any]:
    """What the study page's charts draw (static/js/hpo.js): history, learning curves, parallel coordinates and
    importance, all from the portal's rows."""
    return {
        "metric": study.metric_names[0],
        "direction": study.objectives[0]["direction"],
        "params": list(study.space),
        "categorical": {k: p["choices"] for k, p in study.space.items() if p["type"] == "categorical"},
        "trials": [
            {"number": t.number, "status": t.status, "value": t.value, "params": t.params, "curve": t.curve()}
            for t in trials
        ],
        "importance": study.importance,
    }


@project_view(VIEW, model=Study, methods=("GET",))
def study_detail(request: HttpRequest, project: Project, study: Study) -> HttpResponse:
    all_trials = list(study.trials.select_related("run"))
    trials = TrialFilterSet(request.GET, queryset=study.trials.select_related("run")).qs
    if request.GET.get("format") == "csv":
        return _csv(study, trials)
    counts = dict.fromkeys(Trial.Status.values, 0)
    for trial in all_trials:
        counts[trial.status] += 1
    best = study.best_trials()
    context = {
        "project": project,
        "study": study,
        "trials": trials,
        "counts": counts,
        "done": len(all_trials) - counts[Trial.Status.RUNNING],
        "best": best,
        "best_run": services.trial_tracking_run(best[0]) if best else None,
        "statuses": Trial.Status.choices,
        "status_filter": request.GET.get("status", ""),
        "chart_data": chart_data(study, all_trials),
        "can_contribute": has_project_perm(request.user, project, CONTRIBUTE),
        "register_form": RegisterBestForm(),
        "rerun_form": RerunBestForm(),
    }
    return render(request, "hpo/study_detail.html", context)


def _csv(study: Study, trials: Any) -> HttpResponse:
    response = HttpResponse(content_type="text/csv")
    response["Content-Disposition"] = f'attachment; filename="{study.name}-trials.csv"'
    writer = csv.writer(response)
    params = list(study.space)
    writer.writerow(["number", "status", *study.metric_names, *params, "run", "reason"])
    for t in trials:
        values = t.values + [""] * (len(study.metric_names) - len(t.values))
        run = str(t.run) if t.run else ""
        writer.writerow([t.number, t.status, *values, *(t.params.get(p, "") for p in params), run, t.reason])
    return response


@project_view(CONTRIBUTE, model=Study, methods=("POST",))
def study_stop(request: HttpRequest, project: Project, study: Study) -> HttpResponse:
    services.stop_study(study)
    messages.success(request, _("Study “%(name)s” stopped.") % {"name": study.name})
    return redirect("hpo:study-detail", project=project.slug, pk=study.pk)


@project_view(CONTRIBUTE, model=Study, methods=("POST",))
def study_register_best(request: HttpRequest, project: Project, study: Study) -> HttpResponse:
    form = RegisterBestForm(request.POST)
    if form.is_valid():
        try:
            version = services.register_best_model(study, request.user, form.cleaned_data["name"])
        except (ValidationError, PermissionDenied) as exc:
            messages.error(request, " ".join(getattr(exc, "messages", [str(exc)])))
        else:
            messages.success(request, _("Registered %(name)s version %(version)s from the best trial.")
                             % {"name": version.registered_model.name, "version": version.version})  # fmt: skip
    else:
        messages.error(request, _("Give the registered model's name."))
    return redirect("hpo:study-detail", project=project.slug, pk=study.pk)


@project_view(CONTRIBUTE, model=Study, methods=("POST",))
def study_rerun_best(request: HttpRequest, project: Project, study: Study) -> HttpResponse:
    """Re-run the best trial with more data: its pipeline again, its parameters, some arguments replaced."""
    form = RerunBestForm(request.POST)
    if not form.is_valid():
        messages.error(request, " ".join(form.errors.get("args", [])))
        return redirect("hpo:study-detail", project=project.slug, pk=study.pk)
    try:
        run = services.rerun_best(study, request.user, form.cleaned_data["args"])
    except ValidationError as exc:
        messages.error(request, " ".join(f"{k}: {' '.join(v)}" for k, v in exc.message_dict.items()))
        return redirect("hpo:study-detail", project=project.slug, pk=study.pk)
    messages.success(request, _("Started %(run)s with the best trial's parameters.") % {"run": run})
    return redirect("jobs:run-detail", project=project.slug, pk=run.pk)
