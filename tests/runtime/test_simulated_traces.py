"""The trace generator's shape and determinism, and the CSV trace loader (apps/runtime/simulated/traces.py)."""

from __future__ import annotations

import math
import statistics

import pytest

from apps.runtime.simulated.traces import DAY, GIB, TraceError, generate, load_csv, write_csv


@pytest.fixture(scope="module")
def big():
    return generate(jobs=5000, gpus=512, load=1.0, teams=8, seed=7)


def test_the_same_seed_gives_the_same_trace():
    assert generate(jobs=300, gpus=64, seed=3) == generate(jobs=300, gpus=64, seed=3)
    assert generate(jobs=300, gpus=64, seed=3).jobs != generate(jobs=300, gpus=64, seed=4).jobs


def test_most_jobs_use_one_gpu_with_a_long_tail_to_64(big):
    sizes = [j.gpus for j in big.jobs]
    ones = sizes.count(1) / len(sizes)
    assert 0.65 <= ones <= 0.75
    assert max(sizes) == 64
    assert 0.01 <= sum(1 for s in sizes if s > 8) / len(sizes) <= 0.08
    # The few large jobs hold a large part of the GPU time.
    large = sum(j.gpus * j.duration for j in big.jobs if j.gpus > 8)
    assert large / big.gpu_seconds() > 0.3


def test_durations_are_heavy_tailed_and_larger_jobs_run_longer(big):
    durations = [j.duration for j in big.jobs]
    assert statistics.mean(durations) > 2 * statistics.median(durations)
    assert max(durations) > 50 * statistics.median(durations)
    single = statistics.median(j.duration for j in big.jobs if j.gpus == 1)
    multi = statistics.median(j.duration for j in big.jobs if j.gpus >= 8)
    assert multi > single


def test_arrivals_follow_the_day(big):
    hours = [int(j.submit % DAY // 3600) for j in big.jobs]
    afternoon = sum(1 for h in hours if 11 <= h <= 17)
    night = sum(1 for h in hours if h <= 3 or h >= 23)
    assert afternoon > 2 * night


def test_the_load_is_close_to_what_was_asked(big):
    offered = big.gpu_seconds() / (512 * big.span)
    assert 0.6 <= offered <= 1.6  # a heavy tail: one long job moves it


def test_teams_have_quotas_and_no_job_exceeds_its_teams(big):
    assert len(big.quotas) == 8
    assert list(big.quotas.values()) == sorted(big.quotas.values(), reverse=True)  # Zipf-like shares
    assert all(j.gpus <= big.quotas[j.project] for j in big.jobs)
    assert all(j.cpus >= 4 * j.gpus and j.memory >= 32 * GIB * j.gpus for j in big.jobs)


def test_a_trace_survives_a_round_trip_through_csv(tmp_path):
    trace = generate(jobs=50, gpus=32, seed=1)
    write_csv(trace, tmp_path / "t.csv")
    loaded = load_csv(tmp_path / "t.csv", quotas=trace.quotas)
    assert loaded.jobs == trace.jobs
    assert loaded.quotas == trace.quotas


def test_the_loader_reads_units_and_sorts_by_submit_time(tmp_path):
    path = tmp_path / "t.csv"
    path.write_text("project,submit_time,gpus,cpus,memory,duration\nb,20,2,8,64Gi,600\na,5,1,4,1073741824,30.5\n")
    trace = load_csv(path)
    assert [(j.project, j.submit, j.memory, j.priority) for j in trace.jobs] == [
        ("a", 5.0, GIB, 0),
        ("b", 20.0, 64 * GIB, 0),
    ]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("submit_time,project,gpus\n", "line 1: missing column(s) cpus, memory, duration"),
        ("submit_time,project,gpus,cpus,memory,duration,priority\n", "no jobs"),
        ("submit_time,project,gpus,cpus,memory,duration\n0,a,two,4,1Gi,60\n", "line 2: gpus: not a whole number"),
        ("submit_time,project,gpus,cpus,memory,duration\n0,a,1,4,1Gi,60\n5,a,1,4,lots,60\n", "line 3: memory: not a"),
        ("submit_time,project,gpus,cpus,memory,duration\n0,a,1,4,1Gi,0\n", "line 2: duration: must be above 0"),
        ("submit_time,project,gpus,cpus,memory,duration\n-1,a,1,4,1Gi,5\n", "line 2: submit_time: must be at least 0"),
        ("submit_time,project,gpus,cpus,memory,duration\n0,,1,4,1Gi,5\n", "line 2: project: empty"),
        ("submit_time,project,gpus,cpus,memory,duration\n0,a,1,4,1Gi,5,9\n", "line 2: more fields than the header"),
        ("submit_time,project,gpus,cpus,memory,duration\nnan,a,1,4,1Gi,5\n", "line 2: submit_time: must be"),
    ],
)
def test_the_loader_names_the_line_and_column_of_a_bad_row(tmp_path, text, message):
    path = tmp_path / "bad.csv"
    path.write_text(text)
    with pytest.raises(TraceError) as raised:
        load_csv(path)
    assert message in str(raised.value)
    assert str(raised.value).startswith("bad.csv: ")


def test_the_generator_refuses_nonsense():
    with pytest.raises(ValueError, match="must be positive"):
        generate(jobs=0, gpus=8)
    assert not math.isnan(generate(jobs=1, gpus=1).span)
