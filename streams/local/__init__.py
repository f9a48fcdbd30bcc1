"""Services the project builds and starts itself for development and tests: a Kafka broker (KRaft) and a
Kubernetes control plane (etcd and kube-apiserver)."""
