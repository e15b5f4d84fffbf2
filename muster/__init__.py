"""muster: gang-aware queue admission for Kubernetes. This package holds the `muster` CLI."""

__version__ = "0.1.0"
