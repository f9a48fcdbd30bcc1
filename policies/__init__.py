"""The scheduling framework, its plugins, TBESK and multi-cluster models: pure, no Kafka."""
