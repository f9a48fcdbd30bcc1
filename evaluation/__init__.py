"""Offline evaluation, no Kafka: converters of public cluster traces into event logs, and the experiments
that replay them through the placement policies."""
