"""portal/lib/resources.py: one value for CPU, memory and GPUs, read from what people write and from every shape
stored so far, written as one, added up and compared, and described to people by one formatter."""

from __future__ import annotations

from decimal import Decimal

import pytest

from portal.lib.resources import UNLIMITED, Resources, Shortfall, describe, format_bytes, parse_memory, read_amount

GiB = 2**30
MiB = 2**20


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ({"cpu": 2, "memory": "4Gi", "gpu": 1}, Resources(cpu=2, memory_bytes=4 * GiB, gpu=1)),
        ({"cpu": "500m", "memory": "512Mi"}, Resources(cpu=0.5, memory_bytes=512 * MiB)),  # Kubernetes quantities
        ({"cpu": "1.5", "memory": "2G"}, Resources(cpu=1.5, memory_bytes=2 * 10**9)),
        ({"memory": "1e9"}, Resources(memory_bytes=10**9)),  # Kubernetes' own parser takes what ours does not
        ({"memory": "512mb"}, Resources(memory_bytes=512 * 10**6)),  # as the portal always read it
        ({"memory": 3 * GiB + 1}, Resources(memory_bytes=3 * GiB + 1)),
        ({}, Resources(cpu=1.0)),
    ],
)
def test_it_parses_what_people_write(raw, expected):
    assert Resources.parse(raw) == expected


@pytest.mark.parametrize(
    ("raw", "error"),
    [
        ({"cpu": "NaN"}, "cpu: not a number"),
        ({"cpu": "lots"}, "cpu: not a number"),
        ({"cpu": -1}, "cpu: cannot be negative"),
        ({"gpu": "2e7"}, "gpu: at most"),
        ({"memory": "NaN"}, "memory: not a memory size"),
        ({"memory": "1e99999"}, "memory: not a memory size"),
        ({"memory": "lots"}, "memory: not a memory size"),
        ({"disk": "1Gi"}, "unknown resource 'disk'"),
    ],
)
def test_it_refuses_what_is_not_an_amount_naming_the_field(raw, error):
    with pytest.raises(ValueError, match=error):
        Resources.parse(raw)


def test_forms_read_amounts_exactly_with_the_same_parser():
    """Notebook and service forms bound amounts to their decimal columns themselves: they get the exact number."""
    assert read_amount("500m") == read_amount(" 0.5 ") == Decimal("0.5")
    assert read_amount(2) == Decimal(2)
    assert read_amount("1.005") == Decimal("1.005")  # not 1.00499999… as a float would have it
    assert read_amount("NaN").is_nan()  # a number, for the caller's bounds to refuse
    for bad in ("lots", "", None, True, [1]):
        with pytest.raises(ValueError, match="not a number"):
            read_amount(bad)


def test_it_reads_every_stored_shape_and_writes_one():
    workload = {"cpu": 2.0, "memory_bytes": GiB, "gpu": 1.0, "gpu_type": "A100", "vgpu": {"memory": 8000.0}}
    task = {"cpu": 2.0, "memory": GiB, "gpu": 1.0, "gpu_type": "A100", "vgpu": {"memory": 8000.0}}  # a frozen node
    revision = {"cpu": 2.0, "memory_bytes": GiB, "gpu": 1.0}

    expected = Resources(cpu=2, memory_bytes=GiB, gpu=1, gpu_type="A100", vgpu={"memory": 8000.0})
    assert Resources.from_json(workload) == Resources.from_json(task) == expected
    assert Resources.from_json(revision) == Resources(cpu=2, memory_bytes=GiB, gpu=1)
    assert Resources.from_json(expected.to_json()) == expected
    assert Resources.from_json(None) == Resources.from_json({}) == Resources.none()
    assert Resources.parse(expected.to_spec()) == expected  # a validated spec validates to itself
    assert expected.amounts_json() == revision  # a serving revision's shape: only what adds up
    assert Resources.none().amounts_json() == {"cpu": 0.0, "memory_bytes": 0, "gpu": 0.0}


def test_it_becomes_a_containers_cpu_and_memory():
    assert Resources(cpu=0.25, memory_bytes=3 * GiB).kubernetes() == {
        "requests": {"cpu": "250m", "memory": "3Gi"},
        "limits": {"memory": "3Gi"},  # CPU is not limited: a limit throttles bursts for nothing
    }
    assert Resources(cpu=0).kubernetes() == {"requests": {}, "limits": {}}


def test_it_adds_subtracts_and_multiplies_by_replicas():
    a = Resources.of(cpu=1.5, memory=GiB, gpu=1)
    b = Resources.of(cpu=0.5, memory=GiB // 2)

    assert a + b == Resources.of(cpu=2, memory=1.5 * GiB, gpu=1)
    assert a - b == Resources.of(cpu=1, memory=GiB // 2, gpu=1)
    assert a * 3 == 3 * a == Resources.of(cpu=4.5, memory=3 * GiB, gpu=3)
    assert Resources.none() + Resources.none() == Resources.none()


def test_it_says_which_amounts_exceed_limits_scarcest_first():
    limits = Resources.of(cpu=4, memory=UNLIMITED, gpu=1)

    assert limits.exceeded_by(Resources.of(cpu=8, memory=10**18, gpu=2)) == ["gpu", "cpu"]
    assert limits.exceeded_by(Resources.of(cpu=0.1 + 0.2 + 3.7)) == []  # float sums still fit
    assert Resources.of(cpu=4, gpu=1).fits_within(limits)
    assert Resources.of(gpu=0.5).times_within(limits) == 2
    assert Resources.of(memory=GiB).times_within(limits) == 1_000_000  # asks for nothing limited
    assert Resources.of(cpu=1).times_within(Resources.of(cpu=-1)) == 0  # over already: no room


def test_one_formatter_describes_amounts_for_people():
    assert [describe("cpu", 1), describe("cpu", 2.5), describe("gpu", 1), describe("gpu", 4)] == [
        "1 CPU core",
        "2.5 CPU cores",
        "1 GPU",
        "4 GPUs",
    ]
    assert [describe("memory", 1.5 * GiB), describe("memory", 512 * MiB), describe("memory", UNLIMITED)] == [
        "1.5 GiB",
        "512 MiB",
        "unlimited",
    ]
    assert str(Resources.of(cpu=2, memory=4 * GiB, gpu=1)) == "2 CPU cores, 4 GiB, 1 GPU"
    assert str(Shortfall("memory", 2 * GiB, GiB, 2 * GiB, "quota")) == "2 GiB of memory — quota 1 GiB/2 GiB in use"


def test_memory_keeps_every_byte_of_a_whole_number():
    assert parse_memory(2**60 - 1) == 2**60 - 1


@pytest.mark.parametrize(
    ("size", "text"),
    [
        (100, "100 bytes"),
        (1536, "1.5 KiB"),
        (512 * 2**20, "512 MiB"),
        (1000 * 2**20, "1000 MiB"),
        (1023.9 * 2**20, "1024 MiB"),
        (1.5 * 2**30, "1.5 GiB"),
        (999.4 * 2**30, "999 GiB"),
    ],
)
def test_bytes_read_as_people_write_them_never_in_exponents(size, text):
    assert format_bytes(size) == text
