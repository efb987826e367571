from django.urls import path

from apps.jobs.views import editor, logs, pipelines, runs, schedules, templates

app_name = "jobs"

urlpatterns = [
    path("p/<slug:project>/templates/", templates.template_list, name="template-list"),
    path("p/<slug:project>/templates/new/", templates.template_create, name="template-create"),
    path("p/<slug:project>/images/", templates.image_list, name="image-list"),
    path("p/<slug:project>/images/<int:pk>/delete/", templates.image_delete, name="image-delete"),
    path("p/<slug:project>/templates/<int:pk>/", templates.template_detail, name="template-detail"),
    path("p/<slug:project>/pipelines/", pipelines.pipeline_list, name="pipeline-list"),
    path("p/<slug:project>/pipelines/new/", pipelines.pipeline_create, name="pipeline-create"),
    path("p/<slug:project>/pipelines/new/editor/", editor.pipeline_editor_new, name="pipeline-editor-new"),
    path("p/<slug:project>/pipelines/validate/", editor.pipeline_validate, name="pipeline-validate"),
    path("p/<slug:project>/pipelines/<int:pk>/", pipelines.pipeline_detail, name="pipeline-detail"),
    path("p/<slug:project>/pipelines/<int:pk>/editor/", editor.pipeline_editor, name="pipeline-editor"),
    path("p/<slug:project>/pipelines/<int:pk>/run/", pipelines.pipeline_run, name="pipeline-run"),
    path("p/<slug:project>/pipelines/<int:pk>/duplicate/", pipelines.pipeline_duplicate, name="pipeline-duplicate"),
    path("p/<slug:project>/pipelines/<int:pk>/delete/", pipelines.pipeline_delete, name="pipeline-delete"),
    path("p/<slug:project>/pipelines/<int:pk>/export/", pipelines.pipeline_export, name="pipeline-export"),
    path("p/<slug:project>/pipelines/<int:pk>/manifests/", pipelines.pipeline_manifests, name="pipeline-manifests"),
    path("p/<slug:project>/pipelines/<int:pk>/schedules/new/", schedules.schedule_create, name="schedule-create"),
    path("p/<slug:project>/schedules/<int:pk>/pause/", schedules.schedule_pause, name="schedule-pause"),
    path("p/<slug:project>/schedules/<int:pk>/backfill/", schedules.schedule_backfill, name="schedule-backfill"),
    path("p/<slug:project>/schedules/<int:pk>/delete/", schedules.schedule_delete, name="schedule-delete"),
    path("p/<slug:project>/runs/", runs.run_list, name="run-list"),
    path("p/<slug:project>/runs/<int:pk>/", runs.run_detail, name="run-detail"),
    path("p/<slug:project>/runs/<int:pk>/summary/", runs.run_summary, name="run-summary"),
    path("p/<slug:project>/runs/<int:pk>/cancel/", runs.run_cancel, name="run-cancel"),
    path("p/<slug:project>/runs/<int:pk>/rerun/", runs.run_rerun, name="run-rerun"),
    path("p/<slug:project>/runs/<int:pk>/logs/", logs.log_viewer, name="run-logs"),
    path("p/<slug:project>/runs/<int:pk>/logs/download/", logs.log_download, name="run-logs-download"),
    path("p/<slug:project>/runs/<int:pk>/logs/search/", logs.log_search, name="run-logs-search"),
]
