"""Multi-cluster placement by cluster resource models, after Karmada's.

Pure and synchronous, like the rest of `policies`: a cluster's incremental resource summary and per-grade
node counts (`summary`), Karmada's resource models with their validation and grading (`models`), the
general, model and accurate estimators (`estimators`), replica division with Webster remainders
(`division`), and the cluster policy a profile carries (`policy`). `documents` reads ``eyrie clusters``'
inputs and `placement` places workloads in two levels; both import the scheduler, so they are imported by
name rather than from here.
"""

from policies.clusters.division import Division, divide, proportional, webster
from policies.clusters.estimators import (
    accurate_estimate,
    estimate,
    estimate_all,
    general_estimate,
    model_estimate,
    per_replica,
)
from policies.clusters.models import (
    DEFAULT_MODELS,
    MAX_INT64,
    MAX_PODS_PER_MODEL_NODE,
    ResourceModels,
    default_models,
    parse_resource_models,
)
from policies.clusters.policy import (
    ESTIMATORS,
    STRATEGIES,
    ClusterPolicy,
    Estimator,
    Strategy,
    cluster_policy_of,
)
from policies.clusters.summary import ClusterStatus, ClusterSummary, ClusterView, allowed_pods

__all__ = [
    "DEFAULT_MODELS",
    "ESTIMATORS",
    "MAX_INT64",
    "MAX_PODS_PER_MODEL_NODE",
    "STRATEGIES",
    "ClusterPolicy",
    "ClusterStatus",
    "ClusterSummary",
    "ClusterView",
    "Division",
    "Estimator",
    "ResourceModels",
    "Strategy",
    "accurate_estimate",
    "allowed_pods",
    "cluster_policy_of",
    "default_models",
    "divide",
    "estimate",
    "estimate_all",
    "general_estimate",
    "model_estimate",
    "parse_resource_models",
    "per_replica",
    "proportional",
    "webster",
]
