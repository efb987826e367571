from rest_framework.routers import SimpleRouter

from apps.jobs.api.views import (
    ImageViewSet,
    JobTemplateViewSet,
    PipelineRunViewSet,
    PipelineViewSet,
    ScheduleViewSet,
    TaskRunViewSet,
)

router = SimpleRouter()
router.register("templates", JobTemplateViewSet, basename="template")
router.register("images", ImageViewSet, basename="image")
router.register("pipelines", PipelineViewSet, basename="pipeline")
router.register("runs", PipelineRunViewSet, basename="run")
router.register("task-runs", TaskRunViewSet, basename="taskrun")
router.register("schedules", ScheduleViewSet, basename="schedule")
