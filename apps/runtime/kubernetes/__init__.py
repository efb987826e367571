"""The `kubernetes` runtime: workloads become Jobs, PyTorchJobs, … on the project's clusters.

- `profile.py`      ClusterProfile: what the builders need to know of a cluster (from a `Cluster` row)
- `manifests/`      Workload + ClusterProfile → the objects to apply (one module per kind), their status → Phase
- `validation.py`   every object checked before it is applied: kubernetes-validate for core kinds, the JSON
                    schemas in k8s/crds/ for custom resources; an unknown kind is a failure
- `client.py`       the official client for a cluster, with retries on 429/5xx/connection errors
- `runtime.py`      KubernetesRuntime (the Runtime interface): submit writes a KubeWorkload row
- `controller.py`   `manage.py runkube`: creates objects (409 → adopt), watches them, follows pod logs
"""
