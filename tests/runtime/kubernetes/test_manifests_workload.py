"""The Workload's cluster fields: defaults, round trips, and a ValueError naming the field for each bad value."""

from __future__ import annotations

import pytest

from apps.runtime.workload import Resources, Workload, parse_service


def workload(**fields) -> Workload:
    return Workload(uid="task-1", name="t", project="p", command=["true"], **fields)


def test_a_dict_stored_before_the_cluster_fields_existed_still_loads() -> None:
    old = {
        "uid": "task-9", "name": "n", "project": "p", "command": ["{python}", "-c", "pass"], "kind": "job",
        "framework": "", "image": "", "env": {"A": "1"}, "workdir": "/w", "replicas": {},
        "resources": {"cpu": 1.0, "memory_bytes": None, "gpu": 0.0, "gpu_type": ""}, "timeout": None,
        "labels": {"task_run": "9"},
    }  # fmt: skip

    loaded = Workload.from_dict(old)

    assert loaded.resources.vgpu == {}
    assert (loaded.cluster, loaded.namespace, loaded.volumes, loaded.retries, loaded.rdma) == ("", "", [], 0, False)
    assert (loaded.service, loaded.ports, loaded.image_pull_secrets) == ({}, {}, [])
    assert loaded.avoid_nodes == []


def test_every_field_survives_a_round_trip() -> None:
    original = workload(
        resources=Resources(cpu=2, memory_bytes=2**30, gpu=1, gpu_type="A100", vgpu={"memory": 8000}),
        cluster="gpu", namespace="team", node_selector={"zone": "a"}, tolerations=[{"key": "k", "operator": "Exists"}],
        affinity={"nodeAffinity": {}}, volumes=[{"kind": "shm", "size": "1Gi"}], retries=2,
        image_pull_secrets=["pull"], ports={"http": 80}, service={"max_replicas": 3}, rdma=True, procs_per_replica=4,
    )  # fmt: skip

    copy = Workload.from_dict(original.as_dict())

    assert copy == original
    assert copy.volumes == [{"kind": "shm", "mount_path": "/dev/shm", "source": "", "read_only": False, "size": 2**30}]
    assert (copy.service["max_replicas"], copy.service["mode"]) == (3, "deployment")


def test_avoided_nodes_are_kept_sorted_once_and_survive_a_round_trip() -> None:
    original = workload(avoid_nodes=("node-b", "node-a", "node-b"))

    assert original.avoid_nodes == ["node-a", "node-b"]
    assert original.as_dict()["avoid_nodes"] == ["node-a", "node-b"]
    assert Workload.from_dict(original.as_dict()) == original
    assert workload().avoid_nodes == []


def test_resources_parse_vgpu_and_name_the_bad_field() -> None:
    assert Resources.parse({"gpu": 1, "vgpu": {"memory": "8000", "cores": 30}}).vgpu == {
        "memory": 8000.0,
        "cores": 30.0,
    }
    with pytest.raises(ValueError, match=r"^vgpu\.memory: not a number: 'lots'"):
        Resources.parse({"vgpu": {"memory": "lots"}})
    with pytest.raises(ValueError, match=r"^vgpu\.cores: cannot be negative"):
        Resources.parse({"vgpu": {"cores": -1}})
    with pytest.raises(ValueError, match=r"^vgpu: must be a mapping"):
        Resources.parse({"vgpu": 3})
    with pytest.raises(ValueError, match=r"^cpu: not a number"):
        Resources.parse({"cpu": "many"})
    with pytest.raises(ValueError, match=r"^memory: not a memory size"):
        Resources.parse({"memory": "2 lots"})
    with pytest.raises(ValueError, match=r"^unknown resource 'disk'"):
        Resources.parse({"disk": "1Gi"})


@pytest.mark.parametrize(
    ("volume", "message"),
    [
        ({"kind": "ceph", "mount_path": "/x"}, r"^volumes\[0\]\.kind: must be one of pvc, host_path"),
        ({"kind": "pvc", "source": "data", "mount_path": "data"}, r"^volumes\[0\]\.mount_path: must be an absolute"),
        ({"kind": "pvc", "source": "Data_Set", "mount_path": "/d"}, r"^volumes\[0\]\.source: must name a pvc"),
        (
            {"kind": "host_path", "source": "relative", "mount_path": "/d"},
            r"^volumes\[0\]\.source: must be an absolute",
        ),
        ({"kind": "nfs", "source": "server/path", "mount_path": "/d"}, r"^volumes\[0\]\.source: must be server:/"),
        ({"kind": "shm", "mount_path": "/shm"}, r"^volumes\[0\]\.mount_path: a shm volume is mounted at /dev/shm"),
        ({"kind": "empty_dir", "mount_path": "/t", "source": "x"}, r"^volumes\[0\]\.source: a empty_dir volume"),
        ({"kind": "pvc", "source": "d", "mount_path": "/d", "size": "1Gi"}, r"^volumes\[0\]\.size: only shm"),
        ({"kind": "shm", "size": "huge"}, r"^volumes\[0\]\.size: not a memory size"),
        ({"kind": "secret", "source": "s", "mount_path": "/s", "read_only": "yes"}, r"^volumes\[0\]\.read_only"),
        ({"kind": "secret", "source": "s", "mount_path": "/s", "mode": 1}, r"^volumes\[0\]\.mode: unknown"),
    ],
)
def test_a_bad_volume_is_refused_naming_its_field(volume: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        workload(volumes=[volume])


def test_two_volumes_on_one_path_are_refused() -> None:
    volumes = [{"kind": "pvc", "source": "a", "mount_path": "/d"}, {"kind": "empty_dir", "mount_path": "/d"}]

    with pytest.raises(ValueError, match=r"^volumes\[1\]\.mount_path: /d is already used by volumes\[0\]"):
        workload(volumes=volumes)


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"ports": {"HTTP": 80}}, r"^ports\.HTTP: a port name"),
        ({"ports": {"http": 70000}}, r"^ports\.http: must be between 1 and 65535"),
        ({"retries": -1}, r"^retries: must be 0 or more"),
        ({"procs_per_replica": 1.5}, r"^procs_per_replica: not a whole number"),
        ({"image_pull_secrets": ["Not A Name"]}, r"^image_pull_secrets: must be a list of Secret names"),
        ({"node_selector": {"zone": 1}}, r"^node_selector: must be a mapping of strings"),
        ({"tolerations": {"key": "k"}}, r"^tolerations: must be a list"),
        ({"affinity": ["x"]}, r"^affinity: must be a mapping"),
        ({"rdma": "yes"}, r"^rdma: must be true or false"),
        ({"avoid_nodes": "node-a"}, r"^avoid_nodes: must be a list of node names"),
        ({"avoid_nodes": {"node-a": True}}, r"^avoid_nodes: must be a list of node names"),
        ({"avoid_nodes": ["node-a", ""]}, r"^avoid_nodes: must be a list of node names"),
        ({"avoid_nodes": ["node-a", 3]}, r"^avoid_nodes: must be a list of node names"),
        ({"service": {"mode": "lambda"}}, r"^service\.mode: must be one of deployment, kserve"),
        ({"service": {"min_replicas": 3, "max_replicas": 2}}, r"^service\.max_replicas: 2 is less than min_replicas"),
        ({"service": {"scale_metric": "gpu"}}, r"^service\.scale_metric: must be one of cpu, memory, concurrency"),
        ({"service": {"canary_traffic_percent": 120}}, r"^service\.canary_traffic_percent: must be between 0 and 100"),
        ({"service": {"replicas": 2}}, r"^service\.replicas: unknown"),
        ({"service": {"deployment_mode": "Knative"}}, r"^service\.deployment_mode: must be one of RawDeployment, Serv"),
        (
            {"service": {"mode": "kserve", "min_replicas": 0}},
            r"^service\.min_replicas: scaling to zero needs .*Serverl",
        ),
        (
            {"service": {"mode": "kserve", "scale_metric": "rps"}},
            r"^service\.scale_metric: RawDeployment scales on cpu",
        ),
    ],
)
def test_a_bad_cluster_field_is_refused_naming_it(fields: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        workload(**fields)


def test_a_service_gets_every_default() -> None:
    assert parse_service({}) == {
        "mode": "deployment", "deployment_mode": "RawDeployment", "min_replicas": 1, "max_replicas": 1,
        "scale_metric": "cpu", "scale_target": None, "model_format": "", "storage_uri": "",
        "canary_traffic_percent": None,
    }  # fmt: skip
    assert parse_service({"mode": "kserve", "deployment_mode": "Serverless", "min_replicas": 0})["max_replicas"] == 1
    assert workload().service == {}  # other kinds do not carry a service's defaults
