"""The encryption layer: AES-256-GCM envelopes under per-session keys, over any Session."""

from .session import (
    DEFAULT_KEY_ID,
    DEFAULT_TTL,
    ENC_TYPE,
    EncryptedSession,
    KeyMismatchError,
    Keyring,
    is_encrypted,
    master_key_bytes,
)

__all__ = [
    "DEFAULT_KEY_ID",
    "DEFAULT_TTL",
    "ENC_TYPE",
    "EncryptedSession",
    "KeyMismatchError",
    "Keyring",
    "is_encrypted",
    "master_key_bytes",
]
