"""Previews and statistics (the Celery task's body, called directly) and the preview endpoint."""

from __future__ import annotations

import io
import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from PIL import Image

from apps.datasets import blobs
from apps.datasets.analysis import thumbnail_name
from apps.datasets.models import AnalysisStatus, Blob
from apps.datasets.tasks import analyze_version
from tests.conftest import user_client
from tests.factories import dataset, dataset_version

CSV = b"sepal,petal,species,note\n5.1,1.4,setosa,\n7.0,4.7,versicolor,x\n6.3,6.0,virginica,\n5.1,1.5,setosa,y\n"


def _png(color=(200, 10, 10), size=(400, 300)) -> bytes:
    out = io.BytesIO()
    Image.new("RGB", size, color).save(out, format="PNG")
    return out.getvalue()


def _parquet() -> bytes:
    table = pa.table({"x": [1, 2, None, 4], "name": ["a", "b", "b", None]})
    out = io.BytesIO()
    pq.write_table(table, out)
    return out.getvalue()


def _analyzed(world, files):
    version = dataset_version(dataset(world.project_a, world.alice), files)
    analyze_version(version.pk)
    version.refresh_from_db()
    return version


@pytest.mark.smoke
def test_csv_statistics_and_schema(world):
    version = _analyzed(world, {"iris.csv": CSV})
    assert version.analysis_status == AnalysisStatus.READY
    assert version.schema["iris.csv"] == [
        {"name": "sepal", "type": "float"},
        {"name": "petal", "type": "float"},
        {"name": "species", "type": "string"},
        {"name": "note", "type": "string"},
    ]
    stats = version.statistics["iris.csv"]
    assert stats["row_count"] == 4
    sepal, _petal, species, note = stats["columns"]
    assert (sepal["min"], sepal["max"], sepal["distinct"], sepal["nulls"]) == (5.1, 7.0, 3, 0)
    assert sepal["mean"] == pytest.approx((5.1 + 7.0 + 6.3 + 5.1) / 4)
    assert (species["distinct"], species["min"], species["max"], species["mean"]) == (3, "setosa", "virginica", None)
    assert note["nulls"] == 2
    assert version.previews["iris.csv"]["rows"][0] == ["5.1", "1.4", "setosa", ""]
    assert version.row_count == 4


def test_tsv_jsonl_and_parquet(world):
    jsonl = b'{"a": 1, "b": "x"}\n{"a": 2, "b": null}\n\n{"a": 3, "c": true}\n'
    version = _analyzed(world, {"t.tsv": b"a\tb\n1\t2\n3\t4\n", "j.jsonl": jsonl, "p.parquet": _parquet()})
    assert version.statistics["t.tsv"]["row_count"] == 2
    assert version.schema["t.tsv"] == [{"name": "a", "type": "integer"}, {"name": "b", "type": "integer"}]
    j = version.statistics["j.jsonl"]
    assert j["row_count"] == 3
    assert [c["name"] for c in j["columns"]] == ["a", "b", "c"]
    assert j["columns"][0]["mean"] == 2
    assert j["columns"][1]["nulls"] == 2
    p = version.statistics["p.parquet"]
    assert p["row_count"] == 4
    assert version.schema["p.parquet"] == [{"name": "x", "type": "int64"}, {"name": "name", "type": "string"}]
    x, name = p["columns"]
    assert (x["nulls"], x["min"], x["max"], x["mean"]) == (1, 1, 4, pytest.approx(7 / 3))
    assert (name["distinct"], name["nulls"]) == (2, 1)


def test_distinct_counts_are_capped_not_unbounded(world, monkeypatch):
    from apps.datasets import analysis

    monkeypatch.setattr(analysis, "DISTINCT_CAP", 10)
    rows = b"n\n" + b"".join(f"{i}\n".encode() for i in range(50))
    version = _analyzed(world, {"n.csv": rows})
    column = version.statistics["n.csv"]["columns"][0]
    assert (column["distinct"], column["distinct_capped"]) == (10, True)
    assert (column["min"], column["max"]) == (0, 49)


def test_numeric_columns_get_a_histogram_and_the_others_their_most_frequent_values(world):
    rows = b"x,label\n" + b"".join(f"{i},{'odd' if i % 2 else 'even'}\n".encode() for i in range(100)) + b"7,\n"
    version = _analyzed(world, {"n.csv": rows})
    x, label = version.statistics["n.csv"]["columns"]
    histogram = x["histogram"]
    assert len(histogram["counts"]) == 20
    assert histogram["edges"][0] == 0
    assert histogram["edges"][-1] == 99
    assert sum(histogram["counts"]) == 101  # every number, exactly: fewer rows than the sample holds
    assert histogram["counts"][1] == 6  # 5..9 and the extra 7 (bins of 4.95)
    assert histogram["sampled"] is False
    assert x["top"] is None
    assert label["histogram"] is None
    assert label["top"] == [["even", 50], ["odd", 50]]  # by count, then by value; the empty one is a null


def test_a_large_column_is_histogrammed_from_a_sample_scaled_to_every_row(world, monkeypatch):
    from apps.datasets import analysis

    monkeypatch.setattr(analysis, "SAMPLE_SIZE", 100)
    rows = b"x\n" + b"".join(f"{i % 10}\n".encode() for i in range(1000))
    version = _analyzed(world, {"n.csv": rows})
    histogram = version.statistics["n.csv"]["columns"][0]["histogram"]
    assert histogram["sampled"] is True
    assert sum(histogram["counts"]) == pytest.approx(1000, abs=10)  # the sample's counts scaled by 10
    assert (histogram["edges"][0], histogram["edges"][-1]) == (0, 9)  # spans the column's min and max


def test_a_constant_column_has_one_bin_and_too_many_values_no_top(world, monkeypatch):
    from apps.datasets import analysis

    monkeypatch.setattr(analysis, "TOP_CAP", 5)
    rows = b"k,id\n" + b"".join(f"3,id-{i}\n".encode() for i in range(10))
    version = _analyzed(world, {"c.csv": rows})
    k, ident = version.statistics["c.csv"]["columns"]
    assert k["histogram"] == {"edges": [3.0, 3.0], "counts": [10], "sampled": False}
    assert ident["top"] is None  # more distinct values than counted: no misleading "top"


def test_the_version_page_draws_each_columns_distribution(world):
    version = _analyzed(world, {"iris.csv": CSV})
    client = user_client(world.alice)
    client.force_login(world.alice)
    html = client.get(f"/p/project-a/dataset-versions/{version.pk}/").content.decode()
    assert '<svg class="distribution"' in html
    assert "<title>5.1 – 5.195: 2</title>" in html  # the first bin of sepal: its range and count
    assert '<li title="setosa: 2">' in html  # species' most frequent value


def test_images_get_thumbnails_and_text_a_preview(world):
    version = _analyzed(world, {"img/cat.png": _png(), "notes.txt": b"hello\nworld\n", "model.bin": b"\x00\x01"})
    assert version.previews["img/cat.png"] == {
        "kind": "image", "width": 400, "height": 300, "format": "PNG", "thumbnail": True,
    }  # fmt: skip
    sha = version.files.get(path="img/cat.png").blob_id
    with blobs.storage().open(thumbnail_name(sha)) as fh:
        thumb = Image.open(io.BytesIO(fh.read()))
        assert max(thumb.size) <= 160
    assert version.previews["notes.txt"]["text"] == "hello\nworld\n"
    assert version.previews["model.bin"] == {
        "kind": "none",
        "message": "No preview for .bin files; download the file instead.",
    }


def test_a_broken_file_does_not_hide_the_others(world):
    version = _analyzed(world, {"bad.parquet": b"not parquet", "good.csv": b"a\n1\n"})
    assert version.previews["bad.parquet"]["kind"] == "error"
    assert version.statistics["good.csv"]["row_count"] == 1
    assert "bad.parquet" in version.analysis_error


@pytest.mark.smoke
def test_the_preview_endpoint_answers_rows_and_refuses_unsupported_formats(world):
    version = dataset_version(dataset(world.project_a, world.alice), {"iris.csv": CSV, "weights.xyz": b"??"})
    client = user_client(world.bob)
    before = client.get(f"/api/v1/dataset-versions/{version.pk}/preview/?path=iris.csv")  # before the analysis
    assert before.status_code == 200
    assert before.json()["preview"]["columns"][2] == {"name": "species", "type": "string"}
    assert len(before.json()["preview"]["rows"]) == 4
    unsupported = client.get(f"/api/v1/dataset-versions/{version.pk}/preview/?path=weights.xyz")
    assert unsupported.status_code == 400
    assert unsupported.json() == {"path": ["No preview for .xyz files; download the file instead."]}
    missing = client.get(f"/api/v1/dataset-versions/{version.pk}/preview/?path=nope.csv")
    assert missing.status_code == 404
    blobs_before = Blob.objects.count()
    analyze_version(version.pk)
    stats = client.get(f"/api/v1/dataset-versions/{version.pk}/stats/").json()
    assert stats["analysis_status"] == "ready"
    assert stats["statistics"]["iris.csv"]["row_count"] == 4
    assert Blob.objects.count() == blobs_before


@pytest.mark.parametrize("action", ["preview", "thumbnail"])
def test_a_nul_in_the_path_is_a_400_naming_path_not_a_500(world, action):
    """`?path=iris.csv%00` reached the database filter (PostgreSQL refuses a NUL in text: a 500)."""
    version = dataset_version(dataset(world.project_a, world.alice), {"iris.csv": CSV})

    response = user_client(world.bob).get(f"/api/v1/dataset-versions/{version.pk}/{action}/?path=iris.csv%00")

    assert response.status_code == 400
    assert response.json() == {"path": ["Text may not contain NUL (\\u0000) characters."]}


def test_the_thumbnail_endpoint_serves_a_png(world):
    version = dataset_version(dataset(world.project_a, world.alice), {"cat.png": _png()})
    response = user_client(world.alice).get(f"/api/v1/dataset-versions/{version.pk}/thumbnail/?path=cat.png")
    assert response.status_code == 200
    assert response["Content-Type"] == "image/png"
    assert Image.open(io.BytesIO(b"".join(response.streaming_content))).size == (160, 120)


def test_stats_json_is_serialisable(world):
    version = _analyzed(world, {"j.jsonl": b'{"a": {"nested": 1}, "b": 1.5}\n'})
    json.dumps(version.statistics)
    assert version.schema["j.jsonl"][0] == {"name": "a", "type": "object"}


def test_a_file_without_line_breaks_is_refused_not_read_whole(world, monkeypatch):
    from apps.datasets import analysis

    monkeypatch.setattr(analysis, "MAX_LINE", 1000)
    version = _analyzed(world, {"one-line.csv": b"a" * 5000})
    assert version.previews["one-line.csv"] == {
        "kind": "error",
        "message": "ValueError: a line longer than 1000 characters",
    }
