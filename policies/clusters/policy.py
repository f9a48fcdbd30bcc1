"""How a profile places workloads across clusters: which estimator, which division strategy.

Kept free of the scheduling framework's imports, so `policies.framework.profile` can name the type.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from schemas.codec import from_validation_error
from schemas.exceptions import ConfigError

if TYPE_CHECKING:
    from policies.framework.profile import Profile

__all__ = ["ESTIMATORS", "STRATEGIES", "ClusterPolicy", "Estimator", "Strategy", "cluster_policy_of"]

Estimator = Literal["general", "model", "accurate"]
Strategy = Literal["duplicated", "static", "dynamic", "aggregated"]
ESTIMATORS: tuple[Estimator, ...] = ("general", "model", "accurate")
STRATEGIES: tuple[Strategy, ...] = ("duplicated", "static", "dynamic", "aggregated")


class ClusterPolicy(BaseModel):
    """A profile's ``clusterPolicy``. The defaults are Karmada's scheduler with resource modeling on:
    replicas divided by the replicas each cluster can still take, estimated from its resource models."""

    model_config = ConfigDict(frozen=True, extra="forbid", populate_by_name=True)

    estimator: Estimator = "model"
    """``general``: the cluster's resource summary; ``model``: its resource models (the summary when it
    reports none, or when `modeling` is off); ``accurate``: its nodes, through the profile's filters."""
    strategy: Strategy = "dynamic"
    """``duplicated``: every cluster runs all replicas; ``static``: divided by `weights`; ``dynamic``:
    divided by estimated available replicas; ``aggregated``: as few clusters as fit."""
    weights: dict[str, Annotated[int, Field(ge=0)]] = Field(default_factory=dict)
    """Static weights by cluster name (clusters not named weigh 0; all 0 means equal weights)."""
    modeling: bool = True
    """Karmada's ``--enable-cluster-resource-modeling``: off, clusters keep no per-grade node counts (no
    regrading on pod events) and the model estimator uses the summary."""

    @classmethod
    def from_document(cls, raw: object, *, where: str = "clusterPolicy") -> ClusterPolicy:
        """Parse a profile's ``clusterPolicy`` mapping (None gives the defaults); errors are `ConfigError`."""
        if raw is None:
            return cls()
        if not isinstance(raw, Mapping):
            raise ConfigError(f"{where}: expected a mapping {{estimator, strategy, weights, modeling}}")
        try:
            return cls.model_validate(raw)
        except ValidationError as exc:
            raise ConfigError(f"{where}: {from_validation_error(exc)}") from None


def cluster_policy_of(profile: Profile | None, fallback: Any = None) -> ClusterPolicy:
    """The profile's cluster policy: its ``cluster_policy`` field, else a ``clusterPolicy`` entry of its
    document, else `fallback` (a `ClusterPolicy`, a mapping, or None for the defaults)."""
    if profile is not None:
        chosen = getattr(profile, "cluster_policy", None)
        if isinstance(chosen, ClusterPolicy):
            return chosen
        if chosen is not None:
            return ClusterPolicy.from_document(chosen, where=f"profile {profile.name}: clusterPolicy")
        raw = profile.document.get("clusterPolicy")
        if raw is not None:
            return ClusterPolicy.from_document(raw, where=f"profile {profile.name}: clusterPolicy")
    if isinstance(fallback, ClusterPolicy):
        return fallback
    return ClusterPolicy.from_document(fallback)
