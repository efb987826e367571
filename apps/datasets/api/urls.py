from rest_framework.routers import SimpleRouter

from apps.datasets.api.views import DatasetVersionViewSet, DatasetViewSet, UploadFileViewSet, UploadSessionViewSet

router = SimpleRouter()
router.register("datasets", DatasetViewSet, basename="dataset")
router.register("dataset-versions", DatasetVersionViewSet, basename="datasetversion")
router.register("dataset-uploads", UploadSessionViewSet, basename="datasetupload")
router.register("dataset-upload-files", UploadFileViewSet, basename="datasetuploadfile")
