"""The scheduling framework, its plugins, TBESK and multi-cluster models: pure, no Kafka (issues 3, 6, 8)."""
