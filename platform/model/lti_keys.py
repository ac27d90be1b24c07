"""The tool's own keys (LTI 1.3): RSA private keys kept in one Secret, their public halves
published at `/lti/jwks`, one of them signing (service client assertions, deep-linking
responses).

The Secret (`TOOL_KEYS_SECRET` in the LTI namespace) holds one entry per key,
`<kid>.pem` (a PKCS#8 or PKCS#1 PEM private key), where the kid starts with the UTC time the
key was made, `20261128T052000Z` (anything may follow: `20261128T052000Z-a1b2`). So an admin
can add a key with openssl and kubectl alone (docs/lti.md).

Rotation with two keys published during a rollover: a new key is published at once but signs
only once it is `ROLLOVER_SECONDS` old (platforms cache a tool's key set; a signature by a key
they have not fetched yet would fail); until then the previous key signs. `rotated` keeps the
newest `KEEP` keys, so the retired one leaves the key set at the next rotation. Pure: the PEM
parsing and JWK forming are computation (the key is made by platform/clients/lti_keys.py).
"""

from __future__ import annotations

import base64
import re
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.rsa import RSAPrivateKey
from jwt.algorithms import RSAAlgorithm

TOOL_KEYS_SECRET = "userland-lti-keys"
ROLLOVER_SECONDS = 3600
KEEP = 2
ALGORITHM = "RS256"
_KID_RE = re.compile(r"^(?P<stamp>[0-9]{8}T[0-9]{6}Z)(-[A-Za-z0-9]{1,32})?$")
_STAMP = "%Y%m%dT%H%M%SZ"


class InvalidToolKey(ValueError):
    """A Secret entry that is no usable key; the message says which and why."""


@dataclass(frozen=True)
class ToolKey:
    kid: str
    created: float
    private_key: RSAPrivateKey

    def public_jwk(self) -> dict[str, Any]:
        jwk: dict[str, Any] = RSAAlgorithm.to_jwk(self.private_key.public_key(), as_dict=True)
        return {**jwk, "kid": self.kid, "alg": ALGORITHM, "use": "sig"}

    def private_pem(self) -> bytes:
        return self.private_key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                              serialization.NoEncryption())


def kid_for(created: float, suffix: str) -> str:
    return datetime.fromtimestamp(created, UTC).strftime(_STAMP) + (f"-{suffix}" if suffix else "")


def created_of(kid: str) -> float | None:
    match = _KID_RE.fullmatch(kid)
    if match is None:
        return None
    return datetime.strptime(match["stamp"], _STAMP).replace(tzinfo=UTC).timestamp()


def parse_entry(name: str, pem: bytes) -> ToolKey:
    if not name.endswith(".pem"):
        raise InvalidToolKey(f"{name}: entries are named <kid>.pem")
    kid = name[: -len(".pem")]
    created = created_of(kid)
    if created is None:
        raise InvalidToolKey(f"{name}: the kid must start with the UTC time the key was made, "
                             "such as 20261128T052000Z.pem")
    try:
        key = serialization.load_pem_private_key(pem, password=None)
    except (ValueError, TypeError):
        raise InvalidToolKey(f"{name}: not an unencrypted PEM private key") from None
    if not isinstance(key, RSAPrivateKey) or key.key_size < 2048:
        raise InvalidToolKey(f"{name}: LTI needs an RSA key of at least 2048 bits")
    return ToolKey(kid=kid, created=created, private_key=key)


def parse_secret(data: dict[str, str] | None) -> tuple[list[ToolKey], list[str]]:
    """The keys of a Secret's `data` (base64 values), oldest first, and the problems found."""
    keys: list[ToolKey] = []
    problems: list[str] = []
    for name, value in sorted((data or {}).items()):
        try:
            keys.append(parse_entry(name, base64.b64decode(value)))
        except InvalidToolKey as exc:
            problems.append(str(exc))
        except ValueError:
            problems.append(f"{name}: not base64")
    keys.sort(key=lambda k: (k.created, k.kid))
    return keys, problems


def secret_data(keys: list[ToolKey]) -> dict[str, str]:
    return {f"{k.kid}.pem": base64.b64encode(k.private_pem()).decode() for k in keys}


def signing_key(keys: list[ToolKey], now: float | None = None) -> ToolKey | None:
    """The key that signs now: the newest one published for ROLLOVER_SECONDS, else the oldest."""
    if not keys:
        return None
    now = time.time() if now is None else now
    settled = [k for k in keys if k.created <= now - ROLLOVER_SECONDS]
    return settled[-1] if settled else keys[0]


def public_jwks(keys: list[ToolKey]) -> dict[str, Any]:
    """The key set `/lti/jwks` answers: every key's public half (two during a rollover)."""
    return {"keys": [k.public_jwk() for k in keys]}


def rotated(keys: list[ToolKey], new: ToolKey) -> list[ToolKey]:
    """The keys after adding `new`: the newest KEEP."""
    return sorted([*keys, new], key=lambda k: (k.created, k.kid))[-KEEP:]
