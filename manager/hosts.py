"""A backend's host string, ``host@backend#pool``, taken apart: which
backend serves a row or a request, and the host without its pool."""

from __future__ import annotations


def backend_of(host: str) -> str:
    """'host@backend#pool' → 'backend'."""
    return host.split("@", 1)[1].split("#", 1)[0] if "@" in host else ""


def host_of(host: str) -> str:
    """'host@backend#pool' → 'host@backend' (pools belong to their backend)."""
    return host.split("#", 1)[0]
