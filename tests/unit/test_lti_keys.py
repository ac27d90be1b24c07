"""The tool's keys (platform/model/lti_keys.py): the Secret's layout, which key signs during a
rollover, what /lti/jwks publishes. Pure, with real RSA keys."""

from __future__ import annotations

import base64

import jwt
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from userland.platform.model.lti_keys import (
    ROLLOVER_SECONDS,
    ToolKey,
    kid_for,
    parse_secret,
    public_jwks,
    rotated,
    secret_data,
    signing_key,
)

T0 = 1_800_000_000.0


def key(created: float, suffix: str = "a") -> ToolKey:
    return ToolKey(
        kid=kid_for(created, suffix),
        created=created,
        private_key=rsa.generate_private_key(public_exponent=65537, key_size=2048),
    )


def test_the_secret_round_trips_and_names_say_when() -> None:
    keys = [key(T0, "a"), key(T0 + 10, "b")]
    data = secret_data(keys)
    assert sorted(data) == ["20270115T080000Z-a.pem", "20270115T080010Z-b.pem"]
    parsed, problems = parse_secret(data)
    assert problems == []
    assert [k.kid for k in parsed] == [k.kid for k in keys]
    assert parsed[0].created == T0


def test_entries_that_are_no_keys_are_reported_not_used() -> None:
    small = rsa.generate_private_key(public_exponent=65537, key_size=1024)
    pem = small.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    good = secret_data([key(T0)])
    data = {
        **good,
        "20270115T080000Z-small.pem": base64.b64encode(pem).decode(),
        "mykey.pem": next(iter(good.values())),
        "README": base64.b64encode(b"hello").decode(),
    }
    parsed, problems = parse_secret(data)
    assert len(parsed) == 1
    assert len(problems) == 3
    assert any("2048" in p for p in problems) and any("UTC time" in p for p in problems)


def test_a_new_key_is_published_at_once_but_signs_only_after_the_rollover() -> None:
    old = key(T0, "old")
    new = key(T0 + 86400, "new")
    keys = rotated([old], new)
    assert [k.kid for k in keys] == [old.kid, new.kid]
    published = {k["kid"] for k in public_jwks(keys)["keys"]}
    assert published == {old.kid, new.kid}  # two keys during the rollover
    assert signing_key(keys, now=T0 + 86400 + 60) is old
    assert signing_key(keys, now=T0 + 86400 + ROLLOVER_SECONDS) is new
    # The next rotation retires the oldest.
    newer = key(T0 + 2 * 86400, "newer")
    assert [k.kid for k in rotated(keys, newer)] == [new.kid, newer.kid]


def test_published_keys_verify_what_the_signing_key_signs() -> None:
    keys = [key(T0)]
    signer = signing_key(keys, now=T0)
    assert signer is not None
    token = jwt.encode({"iss": "tool"}, signer.private_key, algorithm="RS256", headers={"kid": signer.kid})
    (jwk,) = public_jwks(keys)["keys"]
    assert jwk["alg"] == "RS256" and jwk["use"] == "sig" and "d" not in jwk  # no private part
    assert jwt.decode(token, jwt.PyJWK(jwk).key, algorithms=["RS256"]) == {"iss": "tool"}
