"""eyrie's wire models: what flows on every topic, validated at construction, JSON on the wire."""

from schemas.codec import decode, decode_topic_value, encode
from schemas.events import Binding, BindingResult, BindingStatus, DeadLetter, MetricSample
from schemas.exceptions import (
    BrokerError,
    ConfigError,
    EventLogError,
    EyrieError,
    InvalidInput,
    ManifestError,
    QuantityError,
    ToolMissing,
)
from schemas.node import NodeEvent, NodeSpec, Taint
from schemas.pod import (
    Container,
    HostPort,
    NodeSelectorRequirement,
    NodeSelectorTerm,
    PodBound,
    PodDeleted,
    PodGroup,
    PodRequest,
    Toleration,
)
from schemas.quantity import ResourceList, parse_quantity, parse_resource_list

__all__ = [
    "Binding",
    "BindingResult",
    "BindingStatus",
    "BrokerError",
    "ConfigError",
    "Container",
    "DeadLetter",
    "EventLogError",
    "EyrieError",
    "HostPort",
    "InvalidInput",
    "ManifestError",
    "MetricSample",
    "NodeEvent",
    "NodeSelectorRequirement",
    "NodeSelectorTerm",
    "NodeSpec",
    "PodBound",
    "PodDeleted",
    "PodGroup",
    "PodRequest",
    "QuantityError",
    "ResourceList",
    "Taint",
    "Toleration",
    "ToolMissing",
    "decode",
    "decode_topic_value",
    "encode",
    "parse_quantity",
    "parse_resource_list",
]
