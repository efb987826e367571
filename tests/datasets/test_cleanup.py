from __future__ import annotations

import io
from datetime import timedelta

from django.utils import timezone

from apps.datasets.models import Blob, UploadSession, UploadStatus
from apps.datasets.tasks import cleanup_uploads
from apps.datasets.uploads import add_file, partial_path, session_dir, write_chunk
from tests.factories import dataset, dataset_version, upload_session


def test_stale_uploads_and_their_chunks_are_cleaned_up(world):
    ds = dataset(world.project_a, world.alice)
    stale = upload_session(ds, world.alice)
    upload = add_file(stale, path="a.bin", size=10)
    write_chunk(upload, 0, io.BytesIO(b"12345").read, None)
    fresh = upload_session(ds, world.alice)
    UploadSession.objects.filter(pk=stale.pk).update(updated_at=timezone.now() - timedelta(days=2))
    assert partial_path(upload).stat().st_size == 5
    assert cleanup_uploads() == {"aborted": 1, "purged": 0}
    assert UploadSession.objects.get(pk=stale.pk).status == UploadStatus.ABORTED
    assert not session_dir(stale).exists()
    assert session_dir(fresh).exists()


def test_blobs_of_abandoned_uploads_are_purged_but_committed_ones_stay(world):
    ds = dataset(world.project_a, world.alice)
    kept = dataset_version(ds, {"a.txt": b"kept"})
    session = upload_session(ds, world.alice)
    upload = add_file(session, path="b.txt", size=9)
    write_chunk(upload, 0, io.BytesIO(b"abandoned").read, None)
    assert Blob.objects.count() == 2
    UploadSession.objects.filter(pk=session.pk).update(updated_at=timezone.now() - timedelta(days=2))
    assert cleanup_uploads() == {"aborted": 1, "purged": 1}
    assert list(Blob.objects.values_list("pk", flat=True)) == [kept.files.get().blob_id]
