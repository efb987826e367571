"""The `kubernetes` runtime: workloads become Jobs, PyTorchJobs, … on the project's clusters.

- `profile.py`      ClusterProfile: what the builders need to know of a cluster (from a `Cluster` row)
- `manifests/`      Workload + ClusterProfile → the objects to apply (one module per kind), their status → Phase
- `validation.py`   every object checked before it is applied: kubernetes-validate for core kinds, the JSON
                    schemas in k8s/crds/ for custom resources; an unknown kind is a failure
- `client.py`       the official client for a cluster: generic REST calls, watch, pod logs
- `retry.py`        errors and the retry policy (429 with Retry-After, 5xx, connection errors; never other 4xx)
- `runtime.py`      KubernetesRuntime (the Runtime interface): submit writes a KubeWorkload row and queues its apply
- `operations.py`   the units of work the `kubernetes` queue's tasks do (apps/runtime/tasks.py): apply, delete,
                    inventory, the repair sweep's list; each idempotent
- `controller.py`   `manage.py runkube`: the leader (watches, log follows, phases); one leads at a time
- `apply.py`        creates a workload's objects (409 → adopt when the labels match), pull Secrets, rollback
- `watch.py`        list + watch with resourceVersion resume, relist on 410 Gone, periodic resync
- `status.py`       reasons from pods and Events (ImagePullBackOff, Unschedulable, OOMKilled, Evicted)
- `podlogs.py`      follows every replica's log into the listener's sink; resumes without gaps or repeats
- `tracking.py`     what the controller holds per workload and per cluster
- `capacity.py`     nodes + pods → Cluster.inventory → free capacity (pure functions)
- `inventory.py`    a cluster's inventory refresh (a task's work)
"""
