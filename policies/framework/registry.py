"""The registry: plugin name → (args model, factory). Enabling a plugin is configuration, not code.

Each plugin module exposes ``NAME``, an ``Args`` pydantic model (defaults + validation, ``None`` when the
plugin takes none) and ``new(args, handle)``. The table below is the whole list; a name not in it is an
"unknown plugin" error when a profile loads.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from types import ModuleType
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel

if TYPE_CHECKING:
    from policies.framework.profile import Handle

__all__ = ["PluginSpec", "registry"]


@dataclass(frozen=True, slots=True)
class PluginSpec:
    name: str
    args: type[BaseModel] | None
    factory: Callable[[Any, Handle], Any]


def _spec(module: ModuleType, name: str | None = None) -> PluginSpec:
    return PluginSpec(name or module.NAME, getattr(module, "Args", None), module.new)


_REGISTRY: dict[str, PluginSpec] | None = None


def registry() -> dict[str, PluginSpec]:
    """Name → spec for every built-in plugin (built on first use: plugin modules import the framework)."""
    global _REGISTRY  # noqa: PLW0603 - a lazily built constant
    if _REGISTRY is None:
        from policies.plugins import (
            coscheduling,
            gpushare,
            imagelocality,
            interpodaffinity,
            limitsum,
            loadaware,
            nodeaffinity,
            nodename,
            nodeports,
            noderesources,
            nodeunschedulable,
            podtopologyspread,
            portrait,
            preemption,
            queuesort,
            rolespread,
            schedulinggates,
            tainttoleration,
        )
        from policies.plugins.gpushare import bestfit as gpushare_bestfit
        from policies.plugins.gpushare import clustering as gpushare_clustering
        from policies.plugins.gpushare import dotproduct as gpushare_dotproduct
        from policies.plugins.gpushare import fgd as gpushare_fgd
        from policies.plugins.gpushare import packing as gpushare_packing
        from policies.plugins.gpushare import randomfit as gpushare_randomfit

        specs = [
            _spec(schedulinggates),
            _spec(noderesources.fit),
            _spec(noderesources.balanced),
            _spec(tainttoleration),
            _spec(nodeaffinity),
            _spec(nodeaffinity, "NodeSelector"),  # the same required-labels check under another name
            _spec(nodeports),
            _spec(nodename),
            _spec(imagelocality),
            _spec(interpodaffinity),
            _spec(podtopologyspread),
            _spec(nodeunschedulable),
            _spec(queuesort.priority),
            _spec(queuesort.qos),
            _spec(queuesort.gpudemand),
            _spec(limitsum),
            _spec(rolespread),
            _spec(coscheduling),
            _spec(preemption),
            _spec(loadaware.targetloadpacking),
            _spec(loadaware.loadvariation),
            _spec(loadaware.loadthresholds),
            _spec(loadaware.peakreference),
            _spec(loadaware.globalvariance),
            _spec(portrait.fits),
            _spec(portrait.balance),
            _spec(gpushare.fit),
            _spec(gpushare_fgd),
            _spec(gpushare_bestfit),
            _spec(gpushare_dotproduct),
            _spec(gpushare_packing),
            _spec(gpushare_clustering),
            _spec(gpushare_randomfit),
        ]
        _REGISTRY = {spec.name: spec for spec in specs}
    return _REGISTRY
