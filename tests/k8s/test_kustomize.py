"""The overlays in k8s/ render with `kubectl kustomize`, every object validates against the Kubernetes 1.33
schemas in strict mode, and the properties a deployment depends on hold: RBAC grants exactly what the
Kubernetes runtime uses, every container is bounded and locked down, servers have probes, prod is
redundant and pinned, and the configuration agrees with the objects it names.
"""

from __future__ import annotations

import base64
import copy
from urllib.parse import urlsplit

import kubernetes_validate
import pytest

from tests.k8s.render import (
    NAMESPACES,
    OVERLAYS,
    PORTAL_IMAGE,
    config,
    containers,
    generated,
    image_parts,
    named,
    of_kind,
    pod_templates,
    portal_templates,
    render,
)

pytestmark = pytest.mark.smoke

K8S_VERSION = "1.33"
WORKLOAD_VERBS = frozenset({"create", "get", "list", "watch", "delete"})
READ_VERBS = frozenset({"get", "list", "watch"})


def _grants(group: str, resources: list[str], verbs: frozenset[str]) -> set[tuple[str, str, str]]:
    return {(group, resource, verb) for resource in resources for verb in verbs}


# What the runtime does in a namespace it runs workloads in (see k8s/base/rbac.yaml for why each is needed).
RUNTIME_GRANTS = (
    _grants("batch", ["jobs"], WORKLOAD_VERBS)
    | _grants("kubeflow.org", ["pytorchjobs", "tfjobs", "mpijobs", "paddlejobs", "xgboostjobs"], WORKLOAD_VERBS)
    | _grants("batch.volcano.sh", ["jobs"], WORKLOAD_VERBS)
    | _grants("ray.io", ["rayjobs"], WORKLOAD_VERBS)
    | _grants("serving.kserve.io", ["inferenceservices"], WORKLOAD_VERBS)
    | _grants("apps", ["deployments", "statefulsets"], WORKLOAD_VERBS)
    | _grants("autoscaling", ["horizontalpodautoscalers"], WORKLOAD_VERBS)
    | _grants("", ["services"], WORKLOAD_VERBS)
    | _grants("", ["secrets"], frozenset({"create", "get", "update", "patch", "delete"}))
    | _grants("", ["configmaps"], frozenset({"create", "get", "delete"}))
    | _grants("", ["pods", "events"], READ_VERBS)
    | _grants("", ["pods/log"], frozenset({"get"}))
)
# What it reads cluster-wide, for capacity only.
CAPACITY_GRANTS = _grants("", ["nodes"], READ_VERBS) | _grants("", ["pods"], frozenset({"list"}))


def rule_grants(role: dict) -> set[tuple[str, str, str]]:
    grants = set()
    for rule in role["rules"]:
        assert not rule.get("resourceNames"), rule
        assert not rule.get("nonResourceURLs"), rule
        for group in rule["apiGroups"]:
            grants |= _grants(group, rule["resources"], frozenset(rule["verbs"]))
    return grants


@pytest.fixture(params=OVERLAYS)
def overlay(request) -> str:
    return request.param


# --- Schemas -----------------------------------------------------------------------------------------


def test_every_rendered_object_validates_strictly(overlay):
    objs = render(overlay)
    assert len(objs) > 20
    failures = []
    for obj in objs:
        try:
            kubernetes_validate.validate(obj, K8S_VERSION, strict=True)
        except kubernetes_validate.SchemaNotFoundError:  # an unknown kind is a failure, never a pass
            failures.append(f"{obj['kind']} {obj['metadata']['name']}: no schema for {obj['apiVersion']}")
        except kubernetes_validate.ValidationError as exc:
            failures.append(f"{obj['kind']} {obj['metadata']['name']}: {exc.message} at {list(exc.path)}")
    assert not failures, "\n".join(failures)


def test_strict_validation_catches_a_misspelt_field_and_an_unknown_kind():
    """The check above can fail: the same validator rejects what a typo in k8s/ would produce."""
    web = copy.deepcopy(named(render("prod"), "Deployment", "portal-web"))
    web["spec"]["template"]["spec"]["containers"][0]["imagePullPolicyy"] = "Always"
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(web, K8S_VERSION, strict=True)
    with pytest.raises(kubernetes_validate.SchemaNotFoundError):
        kubernetes_validate.validate({"apiVersion": "v1", "kind": "Deploymnet", "metadata": {}}, K8S_VERSION, True)


# --- RBAC ----------------------------------------------------------------------------------------------


def test_rbac_has_no_wildcards(overlay):
    for role in of_kind(render(overlay), "ClusterRole") + of_kind(render(overlay), "Role"):
        for rule in role["rules"]:
            for field in ("apiGroups", "resources", "verbs"):
                assert "*" not in rule[field], f"{role['metadata']['name']}: wildcard in {field}"


def test_rbac_grants_exactly_what_the_runtime_needs_to_the_controller_only(overlay):
    objs = render(overlay)
    namespace = NAMESPACES[overlay]
    assert not of_kind(objs, "Role")
    roles = {r["metadata"]["name"]: rule_grants(r) for r in of_kind(objs, "ClusterRole")}
    by_grants = {frozenset(g): name for name, g in roles.items()}
    assert len(roles) == 2
    runtime_role = by_grants[frozenset(RUNTIME_GRANTS)]
    capacity_role = by_grants[frozenset(CAPACITY_GRANTS)]

    # Workload rights only inside the namespace (a RoleBinding); cluster-wide only the capacity reads.
    [binding] = of_kind(objs, "RoleBinding")
    [cluster_binding] = of_kind(objs, "ClusterRoleBinding")
    assert binding["metadata"]["namespace"] == namespace
    assert binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": runtime_role}
    assert cluster_binding["roleRef"]["name"] == capacity_role
    controller_sa = {"kind": "ServiceAccount", "name": "portal-controller", "namespace": namespace}
    assert binding["subjects"] == [controller_sa]
    assert cluster_binding["subjects"] == [controller_sa]
    named(objs, "ServiceAccount", "portal-controller")

    # Only the controller's pods (the leader and the `kubernetes` queue's workers) carry a token; no other pod runs
    # as the controller.
    for owner, tpl in pod_templates(objs):
        spec = tpl["spec"]
        if owner["metadata"]["name"] in ("portal-controller", "portal-kube-worker"):
            assert spec["serviceAccountName"] == "portal-controller"
            assert spec["automountServiceAccountToken"] is True
        else:
            assert spec.get("serviceAccountName") != "portal-controller"
            assert spec["automountServiceAccountToken"] is False, owner["metadata"]["name"]


# --- Containers ------------------------------------------------------------------------------------------


def test_every_container_has_requests_and_limits(overlay):
    for owner, tpl in pod_templates(render(overlay)):
        for c in containers(tpl):
            resources = c.get("resources", {})
            for kind in ("requests", "limits"):
                assert set(resources.get(kind, {})) >= {"cpu", "memory"}, f"{owner['metadata']['name']}/{c['name']}"


def test_every_pod_runs_as_non_root_without_privileges(overlay):
    for owner, tpl in pod_templates(render(overlay)):
        pod = tpl["spec"]["securityContext"]
        assert pod["runAsNonRoot"] is True
        assert pod["runAsUser"] > 0
        assert pod["seccompProfile"] == {"type": "RuntimeDefault"}
        writable = {v["name"] for v in tpl["spec"].get("volumes", [])}
        writable |= {t["metadata"]["name"] for t in owner["spec"].get("volumeClaimTemplates", [])}
        for c in containers(tpl):
            where = f"{owner['metadata']['name']}/{c['name']}"
            sc = c["securityContext"]
            assert sc["allowPrivilegeEscalation"] is False, where
            assert sc["capabilities"] == {"drop": ["ALL"]}, where
            assert sc["readOnlyRootFilesystem"] is True, where
            assert {m["name"] for m in c.get("volumeMounts", [])} <= writable, where


def test_portal_processes_have_scratch_space_and_their_commands(overlay):
    objs = render(overlay)
    commands = {}
    for owner, tpl in portal_templates(objs):
        for c in containers(tpl):
            mounts = {m["mountPath"]: m["name"] for m in c["volumeMounts"]}
            volume = next(v for v in tpl["spec"]["volumes"] if v["name"] == mounts["/tmp"])
            assert "emptyDir" in volume, f"{owner['metadata']['name']}/{c['name']}: /tmp must be scratch"
        commands[owner["metadata"]["name"]] = containers(tpl, init=False)[0]["command"]
        # Service links would inject PORTAL_WEB_PORT=tcp://… and the like, colliding with the PORTAL_* settings.
        assert tpl["spec"]["enableServiceLinks"] is False, owner["metadata"]["name"]
    assert commands["portal-web"][:2] == ["uvicorn", "portal.asgi:application"]
    assert commands["portal-worker"][:6] == ["celery", "-A", "portal", "worker", "--queues", "celery"]
    # Cluster work has workers of its own (apps/runtime/tasks.py, routed by CELERY_TASK_ROUTES).
    assert commands["portal-kube-worker"][:6] == ["celery", "-A", "portal", "worker", "--queues", "kubernetes"]
    assert commands["portal-beat"][:4] == ["celery", "-A", "portal", "beat"]
    assert commands["portal-controller"] == ["python", "manage.py", "runkube"]
    assert commands["portal-migrate"] == ["python", "manage.py", "migrate", "--noinput"]
    # Two beats would send every periodic task twice; two controllers would race on every workload.
    for name in ("portal-beat", "portal-controller"):
        deployment = named(objs, "Deployment", name)
        assert deployment["spec"]["replicas"] == 1
        assert deployment["spec"]["strategy"]["type"] == "Recreate"


def test_servers_have_probes_that_django_answers(overlay):
    objs = render(overlay)
    allowed_hosts = config(objs)["ALLOWED_HOSTS"].split(",")
    [web] = named(objs, "Deployment", "portal-web")["spec"]["template"]["spec"]["containers"]
    paths = {}
    for probe in ("startupProbe", "livenessProbe", "readinessProbe"):
        get = web[probe]["httpGet"]
        assert get["port"] in {p["name"] for p in web["ports"]}
        [host] = [h["value"] for h in get["httpHeaders"] if h["name"] == "Host"]
        assert host in allowed_hosts or "*" in allowed_hosts, f"{probe} would get 400 DisallowedHost"
        paths[probe] = get["path"]
    assert paths == {"startupProbe": "/healthz", "livenessProbe": "/healthz", "readinessProbe": "/readyz"}
    for kind, name in (("StatefulSet", "portal-postgres"), ("Deployment", "portal-redis")):
        [c] = named(objs, kind, name)["spec"]["template"]["spec"]["containers"]
        assert "exec" in c["readinessProbe"], name
        assert "exec" in c["livenessProbe"], name


def test_migrations_run_as_a_job_that_the_other_portal_pods_wait_for(overlay):
    objs = render(overlay)
    job = named(objs, "Job", "portal-migrate")
    assert job["spec"]["template"]["spec"]["restartPolicy"] == "Never"
    assert job["spec"]["backoffLimit"] >= 1
    for owner, tpl in portal_templates(objs):
        if owner["kind"] == "Deployment":
            [wait] = tpl["spec"]["initContainers"]
            assert "migrate --check" in wait["command"][-1], owner["metadata"]["name"]


# --- Labels, selectors, services ---------------------------------------------------------------------------


def test_labels_follow_the_app_kubernetes_io_conventions_and_selectors_match(overlay):
    objs = render(overlay)
    for obj in objs:
        assert obj["metadata"]["labels"]["app.kubernetes.io/part-of"] == "mlops-portal", obj["metadata"]["name"]
    templates = [tpl["metadata"]["labels"] for _, tpl in pod_templates(objs)]
    for owner, tpl in pod_templates(objs):
        labels = tpl["metadata"]["labels"]
        assert {"app.kubernetes.io/name", "app.kubernetes.io/component"} <= set(labels)
        if owner["kind"] != "Job":
            assert owner["spec"]["selector"]["matchLabels"].items() <= labels.items()
    for service in of_kind(objs, "Service"):
        selector = service["spec"]["selector"].items()
        assert any(selector <= labels.items() for labels in templates), service["metadata"]["name"]
    for policy in of_kind(objs, "NetworkPolicy"):
        assert any(policy["spec"]["podSelector"]["matchLabels"].items() <= t.items() for t in templates)


# --- Configuration --------------------------------------------------------------------------------------------


def test_configuration_agrees_with_the_objects_it_names(overlay):
    objs = render(overlay)
    env = config(objs)
    namespace = NAMESPACES[overlay]
    assert env["PORTAL_RUNTIME"] == "kubernetes"
    # Built-in task templates run on the cluster in the portal's own image: the one every portal pod runs.
    portal_images = {c["image"] for _, tpl in portal_templates(objs) for c in containers(tpl)}
    assert portal_images == {env["PORTAL_IMAGE"]}
    # Tasks reach the API at SITE_URL: the web Service's cluster name, which ALLOWED_HOSTS must accept.
    site = urlsplit(env["SITE_URL"]).hostname
    assert site == f"portal-web.{namespace}.svc.cluster.local"
    assert site in env["ALLOWED_HOSTS"].split(",") or env["ALLOWED_HOSTS"] == "*"
    named(objs, "Service", "portal-web")
    named(objs, "Service", urlsplit(env["REDIS_URL"]).hostname)
    # The shared folders are where settings look for them, and the work folder is its own claim (the one
    # task pods mount as the Cluster's work volume claim).
    var_dir, work_dir = env["PORTAL_VAR_DIR"], env["PORTAL_WORK_DIR"]
    assert env["MEDIA_ROOT"].startswith(var_dir + "/")
    claims = {c["metadata"]["name"]: c for c in of_kind(objs, "PersistentVolumeClaim")}
    for name in ("portal-web", "portal-worker", "portal-controller"):
        tpl = named(objs, "Deployment", name)["spec"]["template"]
        volumes = {v["name"]: v.get("persistentVolumeClaim", {}).get("claimName") for v in tpl["spec"]["volumes"]}
        mounts = {m["mountPath"]: volumes[m["name"]] for m in tpl["spec"]["containers"][0]["volumeMounts"]}
        assert mounts[var_dir] == "portal-data", name
        assert mounts[work_dir] == "portal-work", name
    assert set(claims) == {"portal-data", "portal-work"}
    if overlay == "prod":
        assert {tuple(c["spec"]["accessModes"]) for c in claims.values()} == {("ReadWriteMany",)}


def test_every_portal_container_reads_the_config_and_the_secret(overlay):
    objs = render(overlay)
    config_name = generated(objs, "ConfigMap", "portal-config")["metadata"]["name"]
    secret_names = {
        ref["secretRef"]["name"]
        for _, tpl in portal_templates(objs)
        for c in containers(tpl)
        for ref in c["envFrom"]
        if "secretRef" in ref
    }
    [secret_name] = secret_names
    for owner, tpl in portal_templates(objs):
        for c in containers(tpl):
            sources = sorted(next(iter(ref.values()))["name"] for ref in c["envFrom"])
            assert sources == sorted([config_name, secret_name]), f"{owner['metadata']['name']}/{c['name']}"
    if overlay == "prod":
        # Never a secret in the repository: prod reads the Secret the operator created (k8s/README.md).
        assert not of_kind(objs, "Secret")
        assert secret_name == "portal-secrets"
    else:
        data = generated(objs, "Secret", "portal-secrets")
        assert data["metadata"]["name"] == secret_name
        assert set(data["data"]) == {"SECRET_KEY", "DATABASE_URL", "POSTGRES_PASSWORD"}


def test_dev_secret_points_the_portal_at_the_bundled_database():
    objs = render("dev")
    values = {k: base64.b64decode(v).decode() for k, v in generated(objs, "Secret", "portal-secrets")["data"].items()}
    url = urlsplit(values["DATABASE_URL"])
    postgres = named(objs, "StatefulSet", "portal-postgres")["spec"]["template"]["spec"]["containers"][0]
    env = {e["name"]: e.get("value") for e in postgres["env"]}
    assert (url.hostname, url.port, url.path) == ("portal-postgres", 5432, "/" + env["POSTGRES_DB"])
    assert (url.username, url.password) == (env["POSTGRES_USER"], values["POSTGRES_PASSWORD"])


# --- Production -----------------------------------------------------------------------------------------------


def test_prod_is_redundant_and_autoscaled():
    objs = render("prod")
    for name in ("portal-web", "portal-worker", "portal-kube-worker"):
        assert named(objs, "Deployment", name)["spec"]["replicas"] >= 2
        pdb = named(objs, "PodDisruptionBudget", name)
        pods = named(objs, "Deployment", name)["spec"]["template"]["metadata"]["labels"]
        assert pdb["spec"]["selector"]["matchLabels"].items() <= pods.items()
        assert pdb["spec"]["minAvailable"] >= 1
    [hpa] = of_kind(objs, "HorizontalPodAutoscaler")
    assert hpa["spec"]["scaleTargetRef"] == {"apiVersion": "apps/v1", "kind": "Deployment", "name": "portal-web"}
    assert hpa["spec"]["minReplicas"] >= 2


def test_prod_serves_tls_on_its_host_and_trusts_only_that_origin():
    objs = render("prod")
    env = config(objs)
    ingress = named(objs, "Ingress", "portal-web")
    [tls] = ingress["spec"]["tls"]
    [rule] = ingress["spec"]["rules"]
    assert rule["host"] in tls["hosts"]
    assert tls["secretName"]
    assert rule["host"] in env["ALLOWED_HOSTS"].split(",")
    assert env["CSRF_TRUSTED_ORIGINS"] == f"https://{rule['host']}"
    assert env["SESSION_COOKIE_SECURE"] == "true"
    assert env["DEBUG"] == "false"


def test_prod_pins_every_image():
    objs = render("prod")
    portal_images = set()
    for owner, tpl in pod_templates(objs):
        for c in containers(tpl):
            name, tag, digest = image_parts(c["image"])
            assert digest or (tag and tag != "latest"), f"{owner['metadata']['name']}/{c['name']}: {c['image']}"
            if name.endswith("/" + PORTAL_IMAGE):
                portal_images.add(c["image"])
    # The overlay pins the portal's image once, with its registry, for every portal process and the tasks.
    assert portal_images == {config(objs)["PORTAL_IMAGE"]}
    assert sum(1 for _ in portal_templates(objs)) == 6  # web, worker, kube-worker, beat, controller, migrate
