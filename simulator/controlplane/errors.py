"""The error every part of the local control plane raises when it cannot be started or used."""

from __future__ import annotations


class ClusterError(RuntimeError):
    """The local control plane could not be started or used; the message says what to do."""
