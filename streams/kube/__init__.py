"""Kubernetes for development and tests: a local control plane built from a pinned release
(`streams.kube.controlplane`)."""

from __future__ import annotations

__all__: list[str] = []
