"""A real, local Kubernetes control plane for tests and the kwok simulator engine.

Builds etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kubectl and kwok from their
Go modules (once, cached outside the repository, keyed by version), starts them on loopback with
a generated PKI, and creates kwok fake nodes. Nothing here is mocked: tests talk to a real
apiserver and a real scheduler.
"""
