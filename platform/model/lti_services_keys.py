"""The tool's signing key for LTI Advantage services: RS256 JWTs the tool signs. Pure, no I/O.

The tool signs two kinds of JWT with its private key: the client assertion it sends to a
platform's token endpoint (lti_services_token.py) and the deep-linking response it sends back
through the browser (lti_services_deeplink.py). Both are RS256 with the key's `kid` in the
header, so the platform finds the public key in the tool's JWKS.

A `ToolKey` holds the private key as PEM and its kid; it is read once (from the Secret the
registration names) by the I/O layer and passed in. Its repr never shows the key.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from joserfc import jwt
from joserfc.errors import JoseError
from joserfc.jwk import RSAKey

ALGORITHM = "RS256"
MIN_RSA_BITS = 2048  # IMS Security Framework: RSA keys of at least 2048 bits


class ToolKeyError(ValueError):
    """str() says what is wrong with the tool's key, without the key."""


@dataclass(frozen=True)
class ToolKey:
    """The tool's RSA private key (PEM) and the kid its JWKS publishes it under."""

    kid: str
    private_pem: str = field(repr=False)

    def __post_init__(self) -> None:
        if not self.kid:
            raise ToolKeyError("the tool's key has no kid: its JWKS could not name it")

    def rsa(self) -> RSAKey:
        try:
            with warnings.catch_warnings():  # joserfc warns of a small key: refused below, in words
                warnings.simplefilter("ignore")
                key = RSAKey.import_key(self.private_pem)
        except (JoseError, ValueError, TypeError) as err:
            raise ToolKeyError(
                f"the tool's key {self.kid!r} is not an RSA private key in PEM: {type(err).__name__}"
            ) from None
        if not key.is_private:
            raise ToolKeyError(f"the tool's key {self.kid!r} is a public key; signing needs the private key")
        bits = key.private_key.key_size if key.private_key is not None else 0
        if bits < MIN_RSA_BITS:
            raise ToolKeyError(
                f"the tool's key {self.kid!r} has {bits} bits; at least {MIN_RSA_BITS} are needed"
            )
        return key

    def public_jwk(self) -> dict[str, Any]:
        """The public half as a JWK, as the tool's JWKS publishes it."""
        public = dict(self.rsa().as_dict(private=False))
        return {**public, "kid": self.kid, "alg": ALGORITHM, "use": "sig"}


def sign(claims: Mapping[str, Any], key: ToolKey) -> str:
    """An RS256 JWT of `claims`, with `kid` and `typ: JWT` in its header."""
    return jwt.encode(
        {"alg": ALGORITHM, "kid": key.kid, "typ": "JWT"}, dict(claims), key.rsa(), algorithms=[ALGORITHM]
    )
