"""Kubernetes v1 Pod manifests, as kubectl prints them, become PodRequests."""

import pytest
import yaml

from schemas.exceptions import ManifestError
from schemas.manifest import manifest_warnings, pod_from_manifest

DEPLOYMENT_POD = """
apiVersion: v1
kind: Pod
metadata:
  name: web-7d4b9c-x2v9q
  namespace: shop
  uid: 3f1c2a8e-9b7d-4e0a-8c21-5d6f7a8b9c0d
  creationTimestamp: "2024-03-01T10:00:00Z"
  labels:
    app: web
    pod-template-hash: 7d4b9c
  ownerReferences:
  - apiVersion: apps/v1
    kind: ReplicaSet
    name: web-7d4b9c
    uid: 11111111-2222-3333-4444-555555555555
spec:
  schedulerName: default-scheduler
  priority: 1000
  nodeSelector:
    kubernetes.io/os: linux
  tolerations:
  - key: node.kubernetes.io/not-ready
    operator: Exists
    effect: NoExecute
    tolerationSeconds: 300
  affinity:
    nodeAffinity:
      requiredDuringSchedulingIgnoredDuringExecution:
        nodeSelectorTerms:
        - matchExpressions:
          - key: topology.kubernetes.io/zone
            operator: In
            values: [eu-1a, eu-1b]
  initContainers:
  - name: migrate
    image: web:1.2
    resources:
      requests: {cpu: "2", memory: 256Mi}
  containers:
  - name: app
    image: web:1.2
    ports:
    - containerPort: 8080
      hostPort: 8080
      protocol: TCP
    resources:
      requests: {cpu: 500m, memory: 512Mi}
      limits: {cpu: "1", memory: 512Mi}
  - name: sidecar
    image: proxy:2
    resources:
      limits: {cpu: 100m, memory: 64Mi}
  overhead: {cpu: 10m}
"""

GPU_JOB_POD = """
apiVersion: v1
kind: Pod
metadata:
  name: train-0
  labels:
    pod-group.scheduling.sigs.k8s.io/name: train
    pod-group.scheduling.sigs.k8s.io/min-available: "4"
spec:
  schedulerName: binpack
  containers:
  - name: worker
    image: trainer
    resources:
      limits: {nvidia.com/gpu: 2, cpu: "8", memory: 32Gi}
"""


def test_a_deployment_pod_keeps_identity_workload_and_scheduling_constraints():
    pod = pod_from_manifest(yaml.safe_load(DEPLOYMENT_POD))
    assert pod.uid == "3f1c2a8e-9b7d-4e0a-8c21-5d6f7a8b9c0d"
    assert (pod.name, pod.namespace, pod.workload) == ("web-7d4b9c-x2v9q", "shop", "web-7d4b9c")
    assert pod.scheduler_name == "default"
    assert pod.priority == 1000
    assert pod.node_selector == {"kubernetes.io/os": "linux"}
    assert pod.tolerations[0].tolerates("node.kubernetes.io/not-ready", "", "NoExecute")
    assert pod.node_affinity[0].match_expressions[0].values == ["eu-1a", "eu-1b"]
    assert [(p.port, p.protocol) for p in pod.host_ports] == [(8080, "TCP")]
    assert pod.created_at == 1709287200.0


def test_a_deployment_pod_gets_the_effective_request_kubernetes_would_compute():
    pod = pod_from_manifest(yaml.safe_load(DEPLOYMENT_POD))
    # containers: 500m + 100m (request defaulted from limit) = 600m < init 2000m; + 10m overhead
    assert pod.effective_requests == {"cpu": 2010, "memory": 576 * 2**20}
    assert pod.qos_class == "Burstable"


def test_a_gang_member_with_gpu_limits_is_guaranteed_and_grouped():
    pod = pod_from_manifest(yaml.safe_load(GPU_JOB_POD))
    assert pod.uid == "default/train-0"
    assert pod.scheduler_name == "binpack"
    assert pod.effective_requests["nvidia.com/gpu"] == 2
    assert pod.qos_class == "Guaranteed"
    assert pod.pod_group is not None and pod.pod_group.min_available == 4


@pytest.mark.parametrize(
    ("case", "manifest", "field"),
    [
        ("a Deployment is not a Pod", {"apiVersion": "apps/v1", "kind": "Deployment"}, "kind"),
        ("a Pod of another API version is refused", {"apiVersion": "v2", "kind": "Pod"}, "apiVersion"),
        (
            "a Pod without a name is refused",
            {"apiVersion": "v1", "kind": "Pod", "spec": {"containers": [{}]}},
            "metadata.name",
        ),
        (
            "a Pod without containers is refused",
            {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "a"}, "spec": {}},
            "spec.containers",
        ),
        (
            "a bad quantity names the container path",
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": "a"},
                "spec": {"containers": [{"resources": {"requests": {"cpu": "lots"}}}]},
            },
            "spec.containers[0].resources.requests.cpu",
        ),
        (
            "a pod anti-affinity term without a topology key names its manifest path",
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": "a"},
                "spec": {
                    "containers": [{}],
                    "affinity": {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [{}]}},
                },
            },
            "spec.affinity.podAntiAffinity.requiredDuringSchedulingIgnoredDuringExecution[0].topologyKey",
        ),
        (
            "a topology spread constraint without whenUnsatisfiable names its manifest path",
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": "a"},
                "spec": {
                    "containers": [{}],
                    "topologySpreadConstraints": [{"maxSkew": 1, "topologyKey": "z"}],
                },
            },
            "spec.topologySpreadConstraints[0].whenUnsatisfiable",
        ),
        (
            "a node selector on a field other than the node's name names the term",
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": "a"},
                "spec": {
                    "containers": [{}],
                    "affinity": {
                        "nodeAffinity": {
                            "requiredDuringSchedulingIgnoredDuringExecution": {
                                "nodeSelectorTerms": [
                                    {
                                        "matchFields": [
                                            {"key": "metadata.uid", "operator": "In", "values": ["x"]}
                                        ]
                                    }
                                ]
                            }
                        }
                    },
                },
            },
            "spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[0]",
        ),
        (
            "a pod-level request of an unsupported resource names spec.resources",
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": "a"},
                "spec": {"containers": [{}], "resources": {"requests": {"nvidia.com/gpu": 1}}},
            },
            "spec.resources",
        ),
    ],
)
def test_unusable_manifests_fail_naming_the_field(case, manifest, field):
    with pytest.raises(ManifestError) as error:
        pod_from_manifest(manifest)
    assert error.value.field == field
    assert "\n" not in str(error.value)


@pytest.mark.parametrize(
    ("spec", "warnings"),
    [
        pytest.param(
            {"volumes": [{"name": "c", "configMap": {}}]}, [], id="a config map volume warns of nothing"
        ),
        pytest.param(
            {
                "volumes": [
                    {"name": "c", "secret": {}},
                    {"name": "d", "persistentVolumeClaim": {"claimName": "x"}},
                ]
            },
            ["spec.volumes[1].persistentVolumeClaim"],
            id="a persistent volume claim is named as left out",
        ),
        pytest.param(
            {"resourceClaims": [{"name": "gpu"}]},
            ["spec.resourceClaims"],
            id="dynamic resource claims are named as left out",
        ),
    ],
)
def test_what_eyrie_cannot_model_is_named_in_a_warning(spec, warnings):
    document = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "a"},
        "spec": {"containers": [{}], **spec},
    }
    found = manifest_warnings(document)
    assert [warning.split(":")[0] for warning in found] == warnings
    pod_from_manifest(document)  # still converts
