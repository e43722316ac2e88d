"""``EncryptedSession``: AES-256-GCM encryption of every item, over any Session.

Each item is stored as an envelope ``{"type": "agent_sessions.enc", "v", "kid", "t", "n",
"c"}`` under a per-session key (HKDF-SHA256 of the master key ``kid``); the associated data
binds it to the session id, the version, the key id and the write time ``t``
(docs/encryption.md, "What is stored").
"""

from __future__ import annotations

import base64
import binascii
import hmac
import logging
import os
import re
import threading
import time
from binascii import a2b_base64, b2a_base64
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from datetime import timedelta
from functools import partial
from typing import TYPE_CHECKING, Any, ClassVar

from agents.memory import OpenAIResponsesCompactionSession, Session

from ...core import capabilities
from ...core.base import pop_checked_of
from ...core.capabilities import Capability
from ...core.codec import DEFAULT_MAX_ITEM_BYTES, dumps, encode_batch, loads
from ...core.commit import Expect, Op, commit_below
from ...core.extras import missing
from ...core.options import check_int
from ...errors import DecryptionError
from ..base import ContextForwardingWrapper, atomic_replace, check_max_item_bytes
from ..foreign import layers
from ..scoped import ContextScopedSession

try:
    from cryptography.exceptions import InvalidTag
    from cryptography.fernet import InvalidToken
    from cryptography.hazmat.primitives.ciphers.aead import AESGCM
except ImportError as exc:  # pragma: no cover - depends on the environment
    raise missing("EncryptedSession", "encryption", exc) from exc
# The "fast" extra's SIMD base64: 4x binascii on a 1 KB item, a third of a fresh read's cost.
_b64decode: Callable[[Any], bytes] = a2b_base64
_b64encode: Callable[[bytes], bytes] = partial(b2a_base64, newline=False)
try:
    import pybase64

    _b64decode, _b64encode = pybase64.b64decode, pybase64.b64encode
except ImportError:  # pragma: no cover - depends on the environment
    pass

if TYPE_CHECKING:
    from agents.items import TResponseInputItem

logger = logging.getLogger("agent_sessions")

ENC_TYPE = "agent_sessions.enc"
ENVELOPE_VERSION = 1
DEFAULT_KEY_ID = "default"
"""The key id of items written with ``encryption_key=`` (name the old key so in a keyring)."""
DEFAULT_TTL = 600
"""Item lifetime in seconds when built the SDK's way (``EncryptedSession(session_id, session,
key)`` or ``underlying_session=``) without ``ttl``: the SDK's Fernet default."""

_KID = re.compile(r"^[A-Za-z0-9._-]{1,64}$")
_HKDF_SALT = b"agent_sessions.enc.v1"
_NONCE_BYTES = 12
_TAG_BYTES = 16
_ENVELOPE_FIXED = len('{"type":"agent_sessions.enc","v":1,"kid":"","n":"","c":""}') + 16
_ROTATE_PAGE = 500
_DRAINED = object()
_NOT_FORWARDED = frozenset(
    name
    for protocol in vars(capabilities).values()
    if isinstance(protocol, type) and getattr(protocol, "_is_protocol", False)
    for name in vars(protocol)
    if not name.startswith("_")
) | {"inner", "underlying_session", "close", "rewrite_items", "rotate"}
"""Names never looked up on the wrapped session: a capability reached past this layer would
read or write ciphertext (or plaintext) behind its back."""


def master_key_bytes(key: str | bytes, name: str = "encryption_key") -> bytes:
    """Return HKDF input for ``key`` the way the Agents SDK reads it: a urlsafe-base64 text
    of 32 bytes (e.g. ``Fernet.generate_key()``) is decoded, anything else is a passphrase
    used as its UTF-8 bytes. Raises ValueError for a missing or empty key."""
    if isinstance(key, bytearray):
        key = bytes(key)
    if not key or not isinstance(key, (str, bytes)):
        problem = "is empty" if isinstance(key, (str, bytes)) else f"is a {type(key).__name__}"
        raise ValueError(
            f"{name} must be a 32-byte urlsafe-base64 key (e.g. Fernet.generate_key()) or a "
            f"long random passphrase (str or bytes); it {problem}"
        )
    try:
        decoded = base64.urlsafe_b64decode(key)
        if len(decoded) == 32:
            return decoded
    except (binascii.Error, ValueError):
        pass
    return key if isinstance(key, bytes) else key.encode("utf-8")


def is_encrypted(item: Any) -> bool:
    """Whether ``item``, as stored (read from the session under an ``EncryptedSession``), is
    an encrypted envelope: ours (``{"type": "agent_sessions.enc", ...}``) or the Agents SDK's
    ``EncryptedSession``'s (``{"__enc__": 1, ...}``). It says nothing of whether a key opens it.
    """
    if not isinstance(item, Mapping):
        return False
    if item.get("type") == ENC_TYPE:
        return isinstance(item.get("n"), str) and isinstance(item.get("c"), str)
    return item.get("__enc__") == 1 and isinstance(item.get("payload"), str)


class _PlainCache:
    """Plaintext of envelopes one object wrote or opened, by nonce text, as ``(copy of the
    envelope, plaintext)``: never shared, and used only for an equal envelope (which would
    authenticate to the same plaintext). At most ``capacity`` bytes."""

    __slots__ = ("capacity", "entries", "size")

    def __init__(self, capacity: int) -> None:
        self.entries: dict[str, tuple[dict[str, Any], bytes]] = {}
        self.size = 0
        self.capacity = capacity

    def add(self, envelope: dict[str, Any], plain: bytes) -> None:
        size = len(plain) + len(envelope["c"])
        entries, n = self.entries, envelope["n"]
        if size * 4 > self.capacity or n in entries:
            return
        while self.size + size > self.capacity:
            old, old_plain = entries.pop(next(iter(entries)))
            self.size -= len(old_plain) + len(old["c"])
        entries[n] = (dict(envelope), plain)
        self.size += size


class _Unreadable(Exception):
    """An envelope that cannot be opened; the message says why (never any plaintext)."""


class _NotAnEnvelope(_Unreadable):
    """A stored item that is not one of our envelopes: skipped; ``pop_item`` removes it on its
    way to the newest readable item, as the SDK's does."""


class _Expired(_Unreadable):
    """An authenticated envelope older than ``ttl``: skipped silently; ``pop_item`` removes it
    on its way (as the SDK's Fernet ttl)."""


class KeyMismatchError(DecryptionError, InvalidToken):
    """``pop_item`` found the newest stored item sealed under a key this session does not
    hold (or altered); nothing was removed. Also the SDK's ``InvalidToken``, which its
    ``EncryptedSession.pop_item`` raises in the same case."""


def _item(plain: bytes) -> Any:
    try:
        item = loads(plain)
    except ValueError:
        raise _Unreadable("the decrypted data is not JSON") from None
    if type(item) is not dict:
        raise _Unreadable("the decrypted data is not a JSON object")
    return item


def _hkdf_extract(master: bytes) -> bytes:
    """HKDF-SHA256's extract step (RFC 5869); with one HMAC to expand, the same bytes as
    ``cryptography``'s ``HKDF`` at a tenth of its cost."""
    return hmac.digest(_HKDF_SALT, master, "sha256")


class Keyring:
    """Master keys parsed once, for any number of :class:`EncryptedSession` objects
    (``EncryptedSession(inner, keyring=ring)``): the caller owns it and its derived keys.

    HKDF-SHA256's extract step runs once per master key here; a session's cipher (the expand
    step) is kept in a least-recently-used cache of ``max_sessions`` entries, so a fresh
    object per request skips key derivation. The same keys as ``encryption_key=`` / ``keys=``:
    items written one way read the other way.

    Args:
        encryption_key: one master key (key id ``"default"``), as for EncryptedSession.
        keys: keyring form ``{"k2": new, "k1": old}``; ``active``: the key id new items use.
        max_sessions: per-session ciphers kept (positive).
    """

    def __init__(
        self,
        encryption_key: str | bytes | None = None,
        *,
        keys: Mapping[str, str | bytes] | None = None,
        active: str | None = None,
        max_sessions: int = 1024,
    ) -> None:
        masters, self.active_key_id = _keyring(encryption_key, keys, active)
        if isinstance(max_sessions, bool) or not isinstance(max_sessions, int) or max_sessions < 1:
            raise ValueError(f"max_sessions must be a positive int, got {max_sessions!r}")
        self.max_sessions = max_sessions
        self.key_ids = frozenset(masters)
        """The key ids this ring opens."""
        self._masters = masters
        self._prk: dict[str, bytes] = {}  # HKDF's extract step, once per master key, on first use
        # Bounded: one entry per (session, key id) ever seen would grow with every conversation
        # a long-lived process serves (test_keyring_cache_is_bounded_and_clear_drops_it).
        self._ciphers: OrderedDict[tuple[str, str], tuple[AESGCM, bytes]] = OrderedDict()
        # A pop's check may derive a cipher off the event loop's thread.
        self._lock = threading.Lock()

    def __repr__(self) -> str:  # never the keys
        return f"Keyring(key_ids={sorted(self.key_ids)}, active={self.active_key_id!r})"

    def cipher(self, session_id: str, kid: str) -> tuple[AESGCM, bytes]:
        """The AEAD of key ``kid``'s per-session key for ``session_id`` and its associated data
        (KeyError for a key id not in the ring)."""
        key = (session_id, kid)
        with self._lock:
            entry = self._ciphers.get(key)
            if entry is not None:
                self._ciphers.move_to_end(key)
                return entry
        sid = session_id.encode("utf-8")
        info = b"agent_sessions.enc.session-key\x00" + sid
        aad = f"{ENC_TYPE}\x00{ENVELOPE_VERSION}\x00{kid}\x00".encode() + sid
        prk = self._prk.get(kid) or self._prk.setdefault(kid, _hkdf_extract(self._masters[kid]))
        entry = (AESGCM(hmac.digest(prk, info + b"\x01", "sha256")), aad)
        with self._lock:
            self._ciphers[key] = entry
            if len(self._ciphers) > self.max_sessions:
                self._ciphers.popitem(last=False)
        return entry

    def cached(self) -> int:
        """How many per-session ciphers the ring holds."""
        return len(self._ciphers)

    def clear(self) -> None:
        """Drop every per-session key derived so far (the ring derives them again on use)."""
        with self._lock:
            self._ciphers.clear()


class EncryptedSession(ContextForwardingWrapper):
    """Encrypt every item of ``inner`` with AES-256-GCM under a per-session key.

    Args:
        inner: any Session (``underlying_session=`` is accepted as the SDK's name).
        encryption_key: master key: a 32-byte urlsafe-base64 string (``Fernet.generate_key()``)
            or a passphrase (then it must be long and random: HKDF does not slow down guessing).
            Its key id is ``"default"``.
        keys: keyring form instead of ``encryption_key``: ``{"k2": new, "k1": old}``; every key
            still decrypts, new items use ``active``. Key ids: 1-64 of ``A-Za-z0-9._-``.
        active: the key id new items are written with (may be omitted for one key).
        keyring: a :class:`Keyring` instead of ``encryption_key``/``keys``/``active``: keys
            parsed and derived once for every object built on it (a fresh object per request).
        ttl: item lifetime in seconds or ``timedelta``, like the SDK's: an item older than
            ``ttl`` (by its authenticated write time) is skipped by reads and removed by
            ``pop_item`` on its way, but stays stored (stack a ``TTLSession`` under this layer
            to remove it physically). Built the SDK's way (``EncryptedSession(session_id,
            session, key)`` or ``underlying_session=``) it defaults to the SDK's 600 s
            (``no_ttl=True``: keep items forever); with ``inner=``, to no expiry.
        strict: raise :class:`DecryptionError` on an unreadable stored item instead of skipping
            it with a logged warning.
        session_id: optional, for the SDK's signature; must equal ``inner.session_id``.
        max_item_bytes: largest accepted item; default: what fits the inner session's cap
            once encrypted, or 16 MiB for a session without a cap.
        max_scan_items: the SDK's per-read budget of stored items (positive or None for
            unbounded): ``get_items`` reads growing windows until it has ``limit`` readable
            items, and raises RuntimeError when the budget runs out first (and ValueError for
            a negative limit, before reading).
        cache_bytes: plaintext kept of items this object wrote or opened (from its second
            read on: an object used for one call would never read it back), so re-reading the
            same envelope (each Runner turn re-reads the history) skips base64 and AES. Private
            to this object (no other object, session or key sees it), used only for a
            byte-identical envelope, emptied by ``clear_session``. 0: none.

    Passes on the inner's sequence numbers (one per stored item), range delete, rewrite,
    native expiry and family. Unreadable items (wrong or unknown key, altered bytes, copied
    from another session, not an envelope) are never returned as plaintext: reads skip them,
    ``get_items(limit=n)`` returns the latest ``n`` readable items.

    Methods this class does not define are looked up on the wrapped session (e.g. a custom
    ``get_stats()``), except the storage capabilities, which would bypass encryption. Over the
    SDK's ``OpenAIResponsesCompactionSession`` it offers ``run_compaction`` (items are
    decrypted for the compaction call and the result is stored encrypted).
    """

    passes: ClassVar[frozenset[Capability]] = frozenset(
        {  # not SEQUENCED_WRITE: a copy writes the stored envelopes, below this layer
            Capability.SEQUENCED,
            Capability.RANGE_DELETE,
            Capability.NATIVE_EXPIRY,
            Capability.REWRITE,
            Capability.FAMILY,
            Capability.CHECKED_POP,
            Capability.COMMIT,
        }
    )

    def __init__(
        self,
        inner: Session | str | None = None,
        underlying_session: Session | None = None,
        encryption_key: str | bytes | None = None,
        ttl: float | timedelta | None = None,
        *,
        keys: Mapping[str, str | bytes] | None = None,
        active: str | None = None,
        keyring: Keyring | None = None,
        strict: bool = False,
        session_id: str | None = None,
        max_item_bytes: int | None = None,
        max_scan_items: int | None = None,
        cache_bytes: int = 4 * 1024 * 1024,
        no_ttl: bool = False,
    ) -> None:
        sdk_form = isinstance(inner, str) or underlying_session is not None
        if isinstance(inner, str):  # the SDK's positional order: (session_id, session, key)
            session_id, inner = inner, None
        if inner is None:
            inner = underlying_session
        elif underlying_session is not None:
            raise TypeError("pass the inner session once (inner or underlying_session)")
        if ttl is None and sdk_form and not no_ttl:
            ttl = DEFAULT_TTL
        lifetime = ttl.total_seconds() if isinstance(ttl, timedelta) else ttl
        if lifetime is not None and (
            isinstance(lifetime, bool) or not isinstance(lifetime, (int, float)) or lifetime <= 0
        ):
            raise ValueError(f"ttl must be a positive number of seconds or None, got {ttl!r}")
        self._lifetime = lifetime
        self.expires_items = lifetime is not None
        """Whether items vanish from reads on their own (see ``foreign.expiring_layer``)."""
        if inner is None:
            raise TypeError("EncryptedSession needs the session to wrap (inner=...)")
        if max_scan_items is not None and (
            isinstance(max_scan_items, bool)
            or not isinstance(max_scan_items, int)
            or max_scan_items < 1
        ):  # the SDK's message, which its tests match
            raise ValueError("max_scan_items must be positive or None (a positive int)")
        self.max_scan_items = max_scan_items
        if session_id is not None and session_id != inner.session_id:
            raise ValueError(
                f"session_id {session_id!r} differs from the wrapped session's "
                f"{inner.session_id!r}; omit session_id or make them equal"
            )
        if keyring is None:  # the SDK's form: keys derived per object, as its class does
            keyring = Keyring(encryption_key, keys=keys, active=active)
        elif not isinstance(keyring, Keyring):
            raise TypeError(f"keyring must be a Keyring, got {type(keyring).__name__}")
        elif encryption_key is not None or keys is not None or active is not None:
            raise ValueError("pass either keyring= or encryption_key=/keys=/active=, not both")
        self.keyring = keyring
        """The :class:`Keyring` this object's keys come from (its own unless one was passed)."""
        self.active_key_id = keyring.active_key_id
        self.underlying_session = inner
        """The wrapped session (the SDK's attribute name; ``inner`` is the same)."""
        super().__init__(inner)
        if any(isinstance(layer, ContextScopedSession) for layer in layers(inner)):
            raise TypeError(
                "EncryptedSession over a ContextScopedSession would encrypt every scope with "
                "one key, bound to its own session id, not the scope's; for a key per scope "
                "(each scope then an encrypted session of its own) encrypt inside it: "
                "ContextScopedSession(store, scope=..., wrap=lambda session: "
                "EncryptedSession(session, ...))"
            )
        self.strict = strict
        self.ttl = ttl
        check_int("cache_bytes", cache_bytes)
        self.cache_bytes = cache_bytes
        self._plain = _PlainCache(cache_bytes) if cache_bytes else None
        self._ciphers: dict[str, tuple[AESGCM, bytes]] = {}  # derived on first use
        self._read = False  # whether get_items ran: from its second read on, remember
        if max_item_bytes is None:
            inner_cap = getattr(inner, "max_item_bytes", None)
            max_item_bytes = DEFAULT_MAX_ITEM_BYTES
            if isinstance(inner_cap, int):  # the base64 left once the envelope and kid are in
                b64_budget = inner_cap - _ENVELOPE_FIXED - max(map(len, keyring.key_ids)) - 16
                max_item_bytes = max(1, (b64_budget // 4) * 3 - _TAG_BYTES)
        self.max_item_bytes = check_max_item_bytes(max_item_bytes)

    def wrap_member(self, member: Session) -> EncryptedSession:
        """Return an EncryptedSession with the same keys over the side store ``member``."""
        return EncryptedSession(
            member,
            keyring=self.keyring,
            strict=self.strict,
            cache_bytes=self.cache_bytes,
        )

    # -- crypto --------------------------------------------------------------------------------

    def _cipher(self, kid: str) -> tuple[AESGCM, bytes]:
        """The AEAD of ``kid``'s per-session key and the associated data, from the keyring on
        first use, then kept by this object (a pop's check may ask off the event loop's
        thread: two threads would store equal entries, one dict assignment each)."""
        entry = self._ciphers[kid] = self.keyring.cipher(self.session_id, kid)
        return entry

    def _seal(self, text: str, t: int | None = None) -> dict[str, Any]:
        """Return the envelope of ``text``, stamped with write time ``t`` (now when None)."""
        kid = self.active_key_id
        cipher, aad = self._ciphers.get(kid) or self._cipher(kid)
        if t is None:
            t = int(time.time())
        nonce = os.urandom(_NONCE_BYTES)
        plain = text.encode("utf-8")
        n = _b64encode(nonce).decode("ascii")
        c = _b64encode(cipher.encrypt(nonce, plain, b"%b\x00t%d" % (aad, t))).decode("ascii")
        envelope = {"type": ENC_TYPE, "v": ENVELOPE_VERSION, "kid": kid, "t": t, "n": n, "c": c}
        if self._plain is not None:
            self._plain.add(envelope, plain)
        return envelope

    def _open(self, envelope: Any, remember: bool = True) -> Any:
        """Return the item inside ``envelope`` or raise _Unreadable (``remember``: add it to
        the plaintext cache)."""
        plain = self._hits([envelope])[0]
        return _item(plain if plain is not None else self._plaintext(envelope, remember))

    def _hits(self, envelopes: list[Any]) -> list[bytes | None]:
        """The cached plaintext of each live envelope equal to one this object wrote or opened
        (each Runner turn re-reads the history); None where there is none."""
        cache = self._plain
        if cache is None:
            return [None] * len(envelopes)
        entries, plains = cache.entries, []
        oldest = None if self._lifetime is None else time.time() - self._lifetime
        for envelope in envelopes:
            plain = None
            try:
                hit = entries.get(envelope["n"])
                if hit is not None and type(envelope) is dict and hit[0] == envelope:
                    t = envelope.get("t")  # None: written before write times were stamped
                    if oldest is None or t is None or t >= oldest:
                        plain = hit[1]
            except (TypeError, KeyError):  # not a dict, no "n" or an unhashable one
                pass
            plains.append(plain)
        return plains

    def _plaintext(self, envelope: Any, remember: bool = True) -> bytes:
        """Decrypt ``envelope``: its authenticated plaintext if live, else raise _Unreadable."""
        if type(envelope) is not dict or envelope.get("type") != ENC_TYPE:
            raise _NotAnEnvelope("it is not an encrypted envelope")
        if envelope.get("v") != ENVELOPE_VERSION:
            raise _Unreadable(f"envelope version {envelope.get('v')!r} is not supported")
        t, kid = envelope.get("t"), envelope.get("kid")
        if t is not None and type(t) is not int:
            raise _Unreadable("the envelope's write time is malformed")
        if type(kid) is not str or kid not in self.keyring.key_ids:
            raise _Unreadable(f"key id {kid!r} is not in the keyring")
        cipher, aad = self._ciphers.get(kid) or self._cipher(kid)
        try:
            # Lenient decoding is enough: GCM authenticates the bytes that come out.
            nonce, sealed = _b64decode(envelope.get("n")), _b64decode(envelope.get("c"))
        except (TypeError, ValueError):
            raise _Unreadable("the envelope's nonce or ciphertext is malformed") from None
        if len(nonce) != _NONCE_BYTES:
            raise _Unreadable("the envelope's nonce is malformed")
        # An envelope written before write times were stamped has no "t" (never expires).
        try:
            plain = cipher.decrypt(nonce, sealed, aad if t is None else b"%b\x00t%d" % (aad, t))
        except InvalidTag:
            raise _Unreadable(
                "authentication failed (wrong key, altered bytes, or copied from another session)"
            ) from None
        if remember and self._plain is not None:
            self._plain.add(envelope, plain)
        if t is not None and self._lifetime is not None and time.time() - t > self._lifetime:
            raise _Expired("it is older than ttl")
        return plain

    def _unreadable(self, reason: _Unreadable) -> None:
        if isinstance(reason, _Expired):
            return  # expiry is normal, as with the SDK's ttl: skipped without a warning
        message = f"EncryptedSession {self.session_id!r}: a stored item is unreadable: {reason}"
        if self.strict:
            raise DecryptionError(message)
        logger.warning("%s; skipping it", message)

    def _open_all(self, envelopes: list[Any]) -> list[TResponseInputItem]:
        """The items of the readable ``envelopes``, their JSON decoded in one call."""
        # What a fresh object per call opens it never reads again: an object remembers the
        # plaintext it opens from its second read on (what it writes, always).
        remember, self._read = self._read, True
        cache = self._plain
        hits = self._hits(envelopes) if cache is not None and cache.entries else None
        plains: list[bytes] = []
        for index, envelope in enumerate(envelopes):
            plain = None if hits is None else hits[index]
            if plain is None:
                try:
                    plain = self._plaintext(envelope, remember)
                except _Unreadable as reason:
                    self._unreadable(reason)
                    continue
            plains.append(plain)
        try:
            items = loads(b"[%b]" % b",".join(plains))
            if len(items) == len(plains) and all(type(item) is dict for item in items):
                return items  # type: ignore[no-any-return]
        except ValueError:
            pass
        out: list[TResponseInputItem] = []  # one is not a JSON object: find which
        for plain in plains:
            try:
                out.append(_item(plain))
            except _Unreadable as reason:
                self._unreadable(reason)
        return out

    # -- the Session API -----------------------------------------------------------------------

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") or name in _NOT_FORWARDED:
            raise AttributeError(name)
        inner = self.__dict__.get("underlying_session")
        if inner is None:
            raise AttributeError(name)
        if isinstance(inner, OpenAIResponsesCompactionSession):
            if name == "run_compaction":
                return self._run_encrypted_compaction
            if name == "_defer_compaction":
                return self._defer_encrypted_compaction
        return getattr(inner, name)

    async def get_items(
        self, limit: int | None = None, *, wrapper: Any = None
    ) -> list[TResponseInputItem]:
        """Return the latest ``limit`` items that decrypt, oldest first.

        Raises:
            ValueError: ``max_scan_items`` is set and the limit is negative (nothing read).
            RuntimeError: ``max_scan_items`` stored items were read without establishing the
                result (too many unreadable or expired items).
        """
        limit = self.resolve_limit(limit)
        budget = self.max_scan_items
        if budget is not None and limit is not None and limit < 0:
            raise ValueError(
                "limit must be non-negative when max_scan_items is set; use 0 for no items"
            )
        if limit is not None and limit <= 0:
            return []
        read = self.in_scope(wrapper).get_items
        if limit is None and budget is None:
            return self._open_all(await read(None))
        window = min(x for x in (limit, budget) if x is not None)
        remaining = budget
        while True:
            envelopes = await read(window)
            items = self._open_all(envelopes)
            if limit is not None and len(items) >= limit:
                return items[-limit:]
            if len(envelopes) < window:
                return items
            grown = window * 2
            if remaining is not None:
                remaining -= len(envelopes)
                grown = min(grown, remaining)
                if grown <= window:
                    raise RuntimeError(
                        f"EncryptedSession {self.session_id!r}: max_scan_items exhausted "
                        f"({budget} stored items read) before the latest readable items could "
                        "be established; raise max_scan_items or remove unreadable history"
                    )
            window = grown

    async def add_items(self, items: list[TResponseInputItem], *, wrapper: Any = None) -> None:
        """Encrypt and append ``items`` as one batch.

        Raises:
            InvalidItemError: an item is not a JSON object or is too large (nothing written).
        """
        await self.in_scope(wrapper).add_items(self._seal_items(items))

    def _seal_items(self, items: list[TResponseInputItem]) -> list[Any]:
        return [self._seal(text) for text in encode_batch(items, self.max_item_bytes)]

    async def pop_item(self, *, wrapper: Any = None) -> TResponseInputItem | None:
        """Remove and return the newest readable item (None when there is none), removing
        plaintext, foreign or expired items above it on the way, as the SDK's.

        Raises:
            KeyMismatchError: the newest envelope does not open with these keys (wrong or
                unknown key, altered bytes); it is kept. Also the SDK's ``InvalidToken``.
        """
        inner = self.in_scope(wrapper)
        while True:
            try:
                item = await pop_checked_of(inner, self._poppable)
            except _Unreadable as reason:
                raise self._mismatch(reason) from None
            if item is not _DRAINED:
                return item  # type: ignore[no-any-return]

    async def pop_checked(self, check: Callable[[Any], Any]) -> Any:
        """``pop_item`` that removes the newest readable item only if ``check(item)`` returns,
        and returns what it returns (None when there is none); when ``check`` raises, that
        item is kept (CHECKED_POP: the inner session's checked pop, one step where it is)."""
        inner = self._inner(Capability.CHECKED_POP)

        def checked(envelope: Any) -> Any:
            item = self._poppable(envelope)
            return item if item is _DRAINED else check(item)

        while True:
            try:
                result = await inner.pop_checked(checked)
            except _Unreadable as reason:
                raise self._mismatch(reason) from None
            if result is not _DRAINED:
                return result

    def _poppable(self, envelope: Any) -> Any:
        """The check run inside the pop: the item, ``_DRAINED`` (removed on the way) or
        ``_Unreadable`` (kept). May run off the event loop's thread: it does not fill the
        cache."""
        try:
            return self._open(envelope, remember=False)
        except (_NotAnEnvelope, _Expired):
            return _DRAINED

    def _mismatch(self, reason: _Unreadable) -> KeyMismatchError:
        return KeyMismatchError(
            f"EncryptedSession {self.session_id!r}: the newest stored item is unreadable "
            f"({reason}); it was not removed. Open the session with the key it was written "
            "with (add the old key to keys=) to pop it"
        )

    async def clear_session(self, *, wrapper: Any = None) -> None:
        """Delete every item of this session."""
        await self.in_scope(wrapper).clear_session()
        if self._plain is not None:
            self._plain.entries.clear()
            self._plain.size = 0

    # -- the SDK's compaction hooks ------------------------------------------------------------

    async def _run_encrypted_compaction(self, args: Any = None, *, wrapper: Any = None) -> None:
        """``run_compaction`` over the SDK's compaction session inside this one: it reads the
        decrypted history and stores the compacted items encrypted."""
        session = self.underlying_session
        assert isinstance(session, OpenAIResponsesCompactionSession)
        await session._run_compaction(
            args,
            wrapper=wrapper,
            read_items=self._read_compaction_items,
            prepare_items=self._seal_items,
            read_snapshot=self._get_compaction_snapshot,
        )

    async def _defer_encrypted_compaction(
        self, response_id: str, store: bool | None = None, *, wrapper: Any = None
    ) -> None:
        session = self.underlying_session
        assert isinstance(session, OpenAIResponsesCompactionSession)
        await session._defer_compaction(response_id, store, read_items=self._read_compaction_items)

    async def _read_compaction_items(
        self, limit: int | None, *, wrapper: Any = None
    ) -> tuple[list[TResponseInputItem], bool]:
        """The SDK's hook: the readable items among the latest ``limit`` stored ones, and
        whether those are all there is."""
        if limit is None:
            return await self.get_items(wrapper=wrapper), False
        envelopes = await self.in_scope(wrapper).get_items(limit)
        if len(envelopes) >= limit:
            return [], False
        return self._open_all(envelopes), True

    async def _get_compaction_snapshot(self, limit: int, *, prune_prefix: Any = None) -> Any:
        """The SDK's atomic-suffix hook, over the wrapped session's: decrypted items; the
        compacted suffix is stored encrypted. An unreadable item is never replaced."""
        backend: Any = self.inner
        if isinstance(backend, OpenAIResponsesCompactionSession):
            backend = backend.underlying_session
        reader = getattr(backend, "_get_compaction_snapshot", None)
        if reader is None:
            return None

        def expired(envelope: Any) -> bool:
            try:
                self._open(envelope)
            except _Unreadable as reason:
                return isinstance(reason, _Expired)
            return False

        raw = await reader(limit, prune_prefix=expired)
        if raw is None:
            return None
        items: list[TResponseInputItem] = []
        positions: list[int] = []
        boundary = 0
        for index, envelope in enumerate(raw.items):
            try:
                items.append(self._open(envelope))
                positions.append(index)
            except _Expired:
                continue  # replaceable, like the SDK's authenticated expired envelopes
            except _Unreadable:
                boundary = index + 1  # keep it and everything before it
                items.clear()
                positions.clear()

        async def replace_suffix(start: int, output: list[TResponseInputItem]) -> bool:
            raw_start = boundary if start == 0 else positions[start]
            return bool(await raw.replace_suffix(raw_start, self._seal_items(output)))

        return type(raw)(items, raw.complete and boundary == 0, replace_suffix)

    async def _atomic_replace_items(self, items: list[TResponseInputItem]) -> bool:
        """The SDK's hook: encrypt ``items`` and replace the whole history with them in one
        transaction of the wrapped session; False when it cannot (the SDK then clears and
        adds)."""
        return await atomic_replace(self.inner, self._seal_items(items))

    # -- capabilities passed on from the inner session -----------------------------------------

    async def add_sequenced_items(self, items: list[TResponseInputItem]) -> list[int]:
        """Like ``add_items``; returns the new items' sequence numbers (SEQUENCED)."""
        sealed = self._seal_items(items)
        if not sealed:
            return []
        return await self._inner(Capability.SEQUENCED).add_sequenced_items(sealed)  # type: ignore[no-any-return]

    async def commit(self, ops: Sequence[Op], expect: Expect = ()) -> list[Any]:
        """``core.commit.commit`` in the inner sessions' one commit: items sealed, a popped
        one opened (None when it does not open) (COMMIT)."""

        async def seal(session: EncryptedSession, items: list[Any]) -> list[Any]:
            return session._seal_items(items)

        return await commit_below(ops, expect, EncryptedSession, seal, _opened)

    async def get_sequenced_items(
        self, limit: int | None = None, *, after: int | None = None, before: int | None = None
    ) -> list[tuple[int, TResponseInputItem]]:
        """Return ``(seq, item)`` with after < seq < before, the latest ``limit``, oldest first;
        unreadable items are left out as in ``get_items``."""
        inner = self._inner(Capability.SEQUENCED)
        if limit is not None and limit <= 0:
            return []
        out = []
        for seq, envelope in await inner.get_sequenced_items(limit, after=after, before=before):
            try:
                out.append((seq, self._open(envelope)))
            except _Unreadable as reason:
                self._unreadable(reason)
        return out

    async def count_items(self, *, after: int | None = None, before: int | None = None) -> int:
        """Return how many stored items have after < seq < before (unreadable ones too)."""
        return await self._inner(Capability.SEQUENCED).count_items(after=after, before=before)  # type: ignore[no-any-return]

    async def delete_items(self, *, before: int) -> int:
        """Atomically delete the stored items with seq < ``before`` (unreadable ones too);
        return how many were deleted (RANGE_DELETE)."""
        return await self._inner(Capability.RANGE_DELETE).delete_items(before=before)  # type: ignore[no-any-return]

    async def rewrite_items(self, pairs: list[tuple[int, TResponseInputItem]]) -> int:
        """Encrypt each ``(seq, item)`` under the active key and replace stored item ``seq``
        with it, in one atomic step (REWRITE); returns how many were replaced."""
        inner = self._inner(Capability.REWRITE)
        sealed = self._seal_items([item for _, item in pairs])
        return await inner.rewrite_items(  # type: ignore[no-any-return]
            [(seq, envelope) for (seq, _), envelope in zip(pairs, sealed, strict=True)]
        )

    # -- rotation ------------------------------------------------------------------------------

    async def rotate(self, *, drop_unreadable: bool = False) -> int:
        """Re-encrypt every item of this session's family (the conversation and every side
        store) under the active key, in place; return how many items were re-encrypted.

        Items keep their sequence numbers and write times; items already under the active
        key, and expired ones, are left alone. Each member is rewritten in one atomic step, so
        an interrupted rotation leaves every item readable with the keyring and running it
        again finishes the job: keep the old key in the keyring until a rotation returned.

        Args:
            drop_unreadable: leave items that no key opens as they are instead of refusing.

        Raises:
            DecryptionError: an item is unreadable and ``drop_unreadable`` is False (nothing
                is changed).
            NotImplementedError: the inner session cannot rewrite items in place (clear and
                re-add would renumber the history under every layer above).
        """
        members: list[EncryptedSession] = [self]
        for purpose in await self.family_purposes():
            member = self.side_store(purpose)
            assert isinstance(member, EncryptedSession)
            members.append(member)
        plans = [await member._reseal_plan(drop_unreadable) for member in members]
        for member, plan in zip(members, plans, strict=True):
            if plan:
                await member.inner.rewrite_items(plan)  # type: ignore[attr-defined]
        return sum(len(plan) for plan in plans)

    async def _reseal_plan(self, drop_unreadable: bool) -> list[tuple[int, Any]]:
        """The ``(seq, new envelope)`` pairs that put this session under the active key."""
        inner = self._inner(Capability.REWRITE)
        plan: list[tuple[int, Any]] = []
        before = None
        while True:  # newest page first; only an empty page ends (reads may skip items)
            rows = await inner.get_sequenced_items(_ROTATE_PAGE, before=before)
            if not rows:
                plan.reverse()
                return plan
            for seq, envelope in reversed(rows):
                try:
                    item = self._open(envelope)
                except _Expired:
                    continue  # never shown again
                except _Unreadable as reason:
                    if not drop_unreadable:
                        raise DecryptionError(
                            f"EncryptedSession {self.session_id!r}: cannot rotate, stored item "
                            f"{seq} is unreadable: {reason}; pass drop_unreadable=True to "
                            "leave such items as they are, or add their key to the keyring"
                        ) from None
                    message = "EncryptedSession %r: item %d stays unreadable: %s"
                    logger.warning(message, self.session_id, seq, reason)
                    continue
                if envelope["kid"] != self.active_key_id:
                    plan.append((seq, self._seal(dumps(item), envelope.get("t"))))
            before = rows[0][0]


def _opened(session: EncryptedSession, envelope: Any) -> Any:
    """The item a commit popped, or None when it does not open (its removal stands)."""
    try:
        return session._open(envelope, remember=False)
    except _Unreadable:
        return None


def _keyring(
    encryption_key: str | bytes | None, keys: Mapping[str, str | bytes] | None, active: str | None
) -> tuple[dict[str, bytes], str]:
    """The master keys by key id, and the active key id (ValueError for a bad keyring)."""
    if encryption_key is not None and keys is not None:
        raise ValueError("pass either encryption_key= or keys=, not both")
    if keys is None:
        if encryption_key is None:
            raise ValueError(
                "encryption_key is required: a 32-byte urlsafe-base64 key (e.g. "
                "Fernet.generate_key()) or a long random passphrase, or keys={id: key}"
            )
        if active not in (None, DEFAULT_KEY_ID):
            raise ValueError(
                f"active={active!r} needs keys=; encryption_key's id is {DEFAULT_KEY_ID!r}"
            )
        return {DEFAULT_KEY_ID: master_key_bytes(encryption_key)}, DEFAULT_KEY_ID
    if not isinstance(keys, Mapping) or not keys:
        raise ValueError("keys must be a non-empty mapping of key id to key")
    ring = {}
    for kid, key in keys.items():
        if not isinstance(kid, str) or not _KID.fullmatch(kid):
            raise ValueError(f"key id {kid!r} is invalid: use 1-64 characters of A-Z a-z 0-9 . _ -")
        ring[kid] = master_key_bytes(key, f"keys[{kid!r}]")
    if active is None:
        if len(ring) > 1:
            raise ValueError(
                f"several keys given; name the one to write with: active= one of {sorted(ring)}"
            )
        active = next(iter(ring))
    if active not in ring:
        raise ValueError(f"active={active!r} is not in keys ({sorted(ring)})")
    return ring, active
