"""Who a tenant is, as everything we keep knows it: one hash of its name, worked out once.

A tenant is a team or an API key (``proxy.request.caller.tenant_of``): its name must never reach a
store, a log, a folder or a metric, and what it sends must never be told apart from another's by
timing. So every place keyed by tenant uses this one hash of its name — the store's hash tags and
quotas, the learned counts per tenant, the seed mixed into every content fingerprint, the archive's
folders, the keys of what one tenant may read back — never one of its own making. (The values are
those the places computed each for itself before: an upgrade finds what they stored.)
"""

from __future__ import annotations

import functools
import hashlib

TENANTS_REMEMBERED = 4_096
"""Tenants whose digest is kept worked out (every request asks for its own)."""


@functools.lru_cache(maxsize=TENANTS_REMEMBERED)
def tenant_digest(tenant: str) -> bytes:
    """The tenant's digest: 8 bytes of BLAKE2b of its name."""
    return hashlib.blake2b(_utf8(tenant), digest_size=8).digest()


@functools.lru_cache(maxsize=TENANTS_REMEMBERED)
def tenant_tag(tenant: str) -> str:
    """The tenant as a short name (16 hex digits): Redis hash tags, stored estimates, folders."""
    return tenant_digest(tenant).hex()


@functools.lru_cache(maxsize=TENANTS_REMEMBERED)
def tenant_seed(tenant: str) -> int:
    """What a tenant's fingerprints are mixed with, so no tenant can tell by timing what another
    sent (the low four bits stay the wire formats')."""
    return int.from_bytes(tenant_digest(tenant), "big") & ~0xF


def tenant_scoped(tenant: str, name: str) -> bytes:
    """A 16-byte key for ``name`` (a handle, a session, a summary model) that only ``tenant`` reaches."""
    return hashlib.blake2b(_utf8(f"{tenant}\0{name}"), digest_size=16).digest()


def _utf8(text: str) -> bytes:
    return text.encode("utf-8", "surrogatepass")
