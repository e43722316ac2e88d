"""The expiry layer: session and item lifetimes over any Session, shared by a session family."""

from .session import TTL_TYPE, TTLSession

__all__ = ["TTL_TYPE", "TTLSession"]
