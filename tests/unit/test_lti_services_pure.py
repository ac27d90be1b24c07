"""The pure parts of the LTI Advantage services: tokens, roster pages, line items, deep links.

Keys are real RS256 keys; signatures are checked with joserfc against the public JWK alone, the
way a platform checks them. The roster diff and the passback state machine have their own files.
"""

from __future__ import annotations

import json
from datetime import UTC

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from joserfc import jwt
from joserfc.jwk import RSAKey

from userland.platform.model import lti_services_deeplink as dl
from userland.platform.model import lti_services_grades as grades
from userland.platform.model import lti_services_roster as roster
from userland.platform.model import lti_services_token as tok
from userland.platform.model.lti_services_keys import ToolKey, ToolKeyError, sign

PEM = RSAKey.generate_key(2048).as_pem(private=True).decode()
KEY = ToolKey(kid="k1", private_pem=PEM)
# A 1024-bit key, made with cryptography (joserfc warns when it makes one).
WEAK_PEM = (
    rsa.generate_private_key(65537, 1024)
    .private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    .decode()
)
CREDS = tok.ServiceCredentials(client_id="cid", token_url="https://lms.example/token", key=KEY)


def verify(token: str, key: ToolKey = KEY) -> tuple[dict, dict]:
    public = RSAKey.import_key(key.public_jwk())
    decoded = jwt.decode(token, public, algorithms=["RS256"])
    return dict(decoded.header), dict(decoded.claims)


def test_the_key_never_shows_and_weak_or_public_keys_are_refused() -> None:
    assert "PRIVATE" not in repr(KEY) and PEM[40:80] not in repr(KEY)
    with pytest.raises(ToolKeyError, match="1024 bits"):
        ToolKey("weak", WEAK_PEM).rsa()
    with pytest.raises(ToolKeyError, match="public key"):
        ToolKey("pub", RSAKey.import_key(PEM).as_pem(private=False).decode()).rsa()
    with pytest.raises(ToolKeyError, match="not an RSA private key"):
        ToolKey("junk", "-----BEGIN PRIVATE KEY-----\nnope\n-----END PRIVATE KEY-----").rsa()
    assert "d" not in KEY.public_jwk() and KEY.public_jwk()["kid"] == "k1"


def test_the_client_assertion_says_who_the_tool_is_to_whom_and_for_how_long() -> None:
    form = tok.token_request_form(CREDS, [tok.SCOPE_SCORE, tok.SCOPE_LINEITEM], now=1_000_000, jti="j1")
    assert form["grant_type"] == "client_credentials"
    assert form["client_assertion_type"] == "urn:ietf:params:oauth:client-assertion-type:jwt-bearer"
    assert form["scope"] == f"{tok.SCOPE_LINEITEM} {tok.SCOPE_SCORE}"
    header, claims = verify(form["client_assertion"])
    assert header == {"alg": "RS256", "kid": "k1", "typ": "JWT"}
    assert claims == {
        "iss": "cid",
        "sub": "cid",
        "aud": "https://lms.example/token",
        "iat": 1_000_000,
        "exp": 1_000_300,
        "jti": "j1",
    }
    other = tok.ServiceCredentials(
        "cid", "https://lms.example/token", KEY, audience="https://api.example/auth"
    )
    assert verify(tok.client_assertion(other, now=1, jti="x"))[1]["aud"] == "https://api.example/auth"
    with pytest.raises(ValueError, match="not an LTI Advantage service scope"):
        tok.token_request_form(CREDS, ["openid", tok.SCOPE_SCORE], now=1, jti="j")
    with pytest.raises(ValueError, match="at least one scope"):
        tok.check_scopes([])


@pytest.mark.parametrize(
    "url,ok",
    [
        ("https://lms.example/token", True),
        ("http://127.0.0.1:8080/token", True),
        ("http://localhost/t", True),
        ("http://[::1]:9/t", True),
        ("http://lms.example/token", False),
        ("ftp://lms.example/t", False),
        ("https://user:pw@lms.example/t", False),
        ("/relative", False),
        ("https://", False),
    ],
)
def test_credentials_go_over_https_or_to_this_machine_only(url: str, ok: bool) -> None:
    if ok:
        assert tok.check_url(url, "x") == url
    else:
        with pytest.raises(ValueError):
            tok.check_url(url, "x")


def answer(
    status: int, body: object, asked: frozenset[str] = frozenset({tok.SCOPE_SCORE})
) -> tok.AccessToken:
    raw = body if isinstance(body, bytes) else json.dumps(body).encode()
    return tok.parse_token_response(status, raw, asked=asked, now=1000.0, where="https://lms/token")


def test_a_token_answer_is_read_and_kept_until_shortly_before_it_expires() -> None:
    token = answer(
        200,
        {
            "access_token": "secret-value",
            "token_type": "Bearer",
            "expires_in": 3600,
            "scope": tok.SCOPE_SCORE,
        },
    )
    assert token.expires_at == 1000 + 3600 - 60 and "secret-value" not in repr(token)
    assert answer(200, {"access_token": "a", "token_type": "bearer", "expires_in": 40}).expires_at == 1030
    cache = tok.TokenCache()
    key = tok.cache_key(CREDS, {tok.SCOPE_SCORE})
    cache.put(key, token)
    assert cache.get(key, 4000) is token and cache.get(key, 4540) is None and len(cache) == 0
    # Another scope set or another registration is another token.
    cache.put(key, token)
    assert cache.get(tok.cache_key(CREDS, {tok.SCOPE_LINEITEM}), 1001) is None
    assert (
        cache.get(
            tok.cache_key(tok.ServiceCredentials("other", CREDS.token_url, KEY), {tok.SCOPE_SCORE}), 1001
        )
        is None
    )


@pytest.mark.parametrize(
    "status,body,words,retryable",
    [
        (200, b"<html>login</html>", "not a token", True),
        (200, [1, 2], "not a token", True),
        (200, {"token_type": "bearer"}, "without a usable access_token", True),
        (200, {"access_token": "a\nb", "token_type": "bearer"}, "without a usable access_token", True),
        (200, {"access_token": "a", "token_type": "mac"}, "not a bearer token", False),
        (200, {"access_token": "a", "token_type": "bearer", "expires_in": -5}, "no usable lifetime", True),
        (200, {"access_token": "a", "token_type": "bearer", "scope": "other"}, "did not grant", False),
        (
            401,
            {"error": "invalid_client", "error_description": "bad\x00sig"},
            "refused Userland's credentials with HTTP 401: invalid_client (bad sig)",
            False,
        ),
        (503, b"", "HTTP 503", True),
    ],
)
def test_a_bad_token_answer_says_what_is_wrong(
    status: int, body: object, words: str, retryable: bool
) -> None:
    with pytest.raises(tok.TokenError) as err:
        answer(status, body)
    assert words in str(err.value) and err.value.retryable is retryable


def test_roster_pages_are_read_with_roles_statuses_and_unreadable_entries() -> None:
    body = json.dumps(
        {
            "id": "x",
            "context": {"id": "ctx-9"},
            "members": [
                {
                    "user_id": "u1",
                    "roles": [f"{roster.LIS}#Learner"],
                    "name": "Ana",
                    "email": "ana.b@uni.edu",
                },
                {
                    "user_id": "u2",
                    "roles": ["Instructor"],
                    "status": "Inactive",
                    "given_name": "Bo",
                    "family_name": "K",
                },
                {
                    "user_id": "u3",
                    "roles": [f"{roster.LIS}/Instructor#TeachingAssistant", f"{roster.LIS}#Learner"],
                    "status": "Weird",
                    "message": [{"https://purl.imsglobal.org/spec/lti/claim/custom": {"username": "c3"}}],
                },
                {"roles": ["Learner"]},
                "junk",
                {"user_id": "u4", "roles": "Learner"},
            ],
        }
    ).encode()
    page = roster.parse_page(body, issuer="iss", context="c1")
    assert page.context_id == "ctx-9" and page.unreadable == 3
    a, b, c = page.members
    assert (a.key, a.status, roster.course_role(a.roles)) == (("iss", "u1"), "Active", "student")
    assert (b.name, b.status, roster.course_role(b.roles)) == ("Bo K", "Inactive", "instructor")
    assert (c.status, roster.course_role(c.roles), dict(c.custom)) == (
        "Inactive",
        "assistant",
        {"username": "c3"},
    )
    assert roster.course_role(["http://purl.imsglobal.org/vocab/lis/v2/institution/person#Student"]) is None
    assert roster.course_role([f"{roster.LIS}#Mentor"]) is None
    for garbage in (b"<html>", b"[]", b'{"members": 3}'):
        with pytest.raises(roster.RosterError):
            roster.parse_page(garbage, issuer="i", context="c")


def test_the_next_page_link_is_found_and_may_not_leave_the_platform() -> None:
    here = "https://lms.example/api/roster?page=1"
    assert (
        roster.next_link(['<https://lms.example/api/roster?page=2>; rel="next"'], here)
        == "https://lms.example/api/roster?page=2"
    )
    assert (
        roster.next_link(['</api/roster?page=3>; rel="prev", </api/roster?page=2>; rel="next last"'], here)
        == "https://lms.example/api/roster?page=2"
    )
    assert roster.next_link(['<https://lms.example/x>; rel="prev"'], here) is None
    assert roster.next_link([], here) is None
    for elsewhere in ("https://evil.example/steal", "http://lms.example/api/roster?page=2"):
        with pytest.raises(roster.RosterError, match="another site"):
            roster.next_link([f"<{elsewhere}>; rel=next"], here)


@pytest.mark.parametrize(
    "claim,member,login",
    [
        ("email", roster.Member("i", "c", "1", (), email="Jane.Doe_2@uni.edu"), "jane-doe-2"),
        ("email", roster.Member("i", "c", "1", (), email="x" * 60 + "@u.edu"), "x" * 39),
        ("sourcedid", roster.Member("i", "c", "1", (), sourcedid="S-0042"), "s-0042"),
        ("custom:username", roster.Member("i", "c", "1", (), custom=(("username", "JDoe"),)), "jdoe"),
    ],
)
def test_a_login_is_made_from_the_claim_the_registration_names(
    claim: str, member: roster.Member, login: str
) -> None:
    assert roster.login_candidate(member, claim) == (login, "")


@pytest.mark.parametrize(
    "claim,member,words",
    [
        ("email", roster.Member("i", "c", "1", ()), "gives no email address"),
        ("email", roster.Member("i", "c", "1", (), email="...@uni.edu"), "no letters or digits"),
        ("sourcedid", roster.Member("i", "c", "1", ()), "no student number"),
        ("custom:username", roster.Member("i", "c", "1", ()), "custom field 'username'"),
        ("phone", roster.Member("i", "c", "1", ()), "unknown login source"),
    ],
)
def test_a_member_without_a_usable_login_claim_gets_a_reason(
    claim: str, member: roster.Member, words: str
) -> None:
    login, why = roster.login_candidate(member, claim)
    assert login == "" and words in why


def test_line_items_scores_and_their_urls() -> None:
    spec = grades.LineItemSpec(resource_id="course-a/lab1", label="Lab 1", score_maximum=10, tag="userland")
    assert spec.body() == {
        "scoreMaximum": 10,
        "label": "Lab 1",
        "resourceId": "course-a/lab1",
        "tag": "userland",
    }
    assert (
        grades.service_url(
            "https://m.example/mod/lti/services.php/2/lineitems/7/lineitem?type_id=3", "scores"
        )
        == "https://m.example/mod/lti/services.php/2/lineitems/7/lineitem/scores?type_id=3"
    )
    assert (
        grades.with_query("https://c.example/li?a=1&resource_id=old", resource_id="x y")
        == "https://c.example/li?a=1&resource_id=x+y"
    )
    items = grades.parse_line_items(
        json.dumps(
            [
                {"id": "u1", "resourceId": "other", "scoreMaximum": 5},
                {"id": "u2", "resourceId": "course-a/lab1", "scoreMaximum": 10},
                {"id": "u3", "resourceId": "course-a/lab1"},
                {"no": "id"},
            ]
        ).encode()
    )
    assert grades.pick(items, "course-a/lab1").id == "u2" and grades.pick(items, "none") is None
    due = grades.LineItem("u", "L", 1, end="2026-12-01T23:59:00.000+01:00").due()
    assert due is not None and due.isoformat() == "2026-12-01T23:59:00+01:00"
    assert grades.LineItem("u", "L", 1, end="next friday").due() is None and items[0].due() is None
    from datetime import datetime

    when = datetime(2026, 11, 28, 5, 30, 0, 123456, tzinfo=UTC)
    body = grades.score_body("u1", grades.Grade(8, 10, "well done"), when)
    assert body == {
        "userId": "u1",
        "scoreGiven": 8,
        "scoreMaximum": 10,
        "comment": "well done",
        "activityProgress": "Completed",
        "gradingProgress": "FullyGraded",
        "timestamp": "2026-11-28T05:30:00.123+00:00",
    }
    assert "scoreGiven" not in grades.score_body(
        "u1", grades.Grade(None, 10, activity="Started", grading="NotReady"), when
    )
    for bad in (
        lambda: grades.Grade(-1, 10),
        lambda: grades.Grade(1, 0),
        lambda: grades.Grade(float("nan"), 1),
        lambda: grades.LineItemSpec("r", " ", 10),
        lambda: grades.LineItemSpec("", "L", 10),
    ):
        with pytest.raises(ValueError):
            bad()
    with pytest.raises(grades.GradesError):
        grades.parse_line_items(b'{"not": "a list"}')


SETTINGS = {
    "deep_link_return_url": "https://lms.example/dl/return",
    "accept_types": ["ltiResourceLink", "link"],
    "accept_multiple": False,
    "data": "opaque",
}


def test_the_deep_linking_response_is_signed_and_carries_the_line_item() -> None:
    settings = dl.Settings.parse(SETTINGS)
    column = grades.LineItemSpec(resource_id="course-a/lab1", label="Lab 1", score_maximum=10)
    item = dl.resource_link(
        url="https://userland.example/lti/launch",
        title="Lab 1",
        line_item=column,
        custom={"assignment": "lab1"},
    )
    token = dl.deep_linking_response(
        KEY,
        client_id="cid",
        platform_issuer="https://lms.example",
        deployment_id="d1",
        settings=settings,
        items=[item],
        now=2000,
        nonce="n1",
    )
    header, claims = verify(token)
    assert header["kid"] == "k1"
    assert claims["iss"] == "cid" and claims["aud"] == "https://lms.example" and claims["exp"] == 2300
    assert claims[dl.CLAIM + "message_type"] == "LtiDeepLinkingResponse"
    assert claims[dl.CLAIM + "version"] == "1.3.0" and claims[dl.CLAIM + "deployment_id"] == "d1"
    assert claims[dl.DL_CLAIM + "data"] == "opaque" and claims["nonce"] == "n1"
    assert claims[dl.DL_CLAIM + "content_items"] == [
        {
            "type": "ltiResourceLink",
            "title": "Lab 1",
            "url": "https://userland.example/lti/launch",
            "lineItem": {"scoreMaximum": 10, "label": "Lab 1", "resourceId": "course-a/lab1"},
            "custom": {"assignment": "lab1"},
        }
    ]


def test_a_deep_linking_response_the_lms_would_not_take_is_refused_with_words() -> None:
    settings = dl.Settings.parse({**SETTINGS, "accept_types": ["link"]})
    item = dl.resource_link(url="https://u.example/l", title="T")
    with pytest.raises(dl.DeepLinkError, match="does not accept links of type 'ltiResourceLink'"):
        dl.response_claims(
            client_id="c",
            platform_issuer="i",
            deployment_id="d",
            settings=settings,
            items=[item],
            now=1,
            nonce="n",
        )
    with pytest.raises(dl.DeepLinkError, match="accepts one link"):
        dl.response_claims(
            client_id="c",
            platform_issuer="i",
            deployment_id="d",
            settings=dl.Settings.parse(SETTINGS),
            items=[item, item],
            now=1,
            nonce="n",
        )
    with pytest.raises(dl.DeepLinkError, match="https"):
        dl.resource_link(url="http://u.example/l", title="T")
    with pytest.raises(dl.DeepLinkError, match="no return address"):
        dl.Settings.parse({"accept_types": []})
    with pytest.raises(dl.DeepLinkError, match="https"):
        dl.Settings.parse({**SETTINGS, "deep_link_return_url": "http://lms.example/r"})
    assert dl.Settings.parse({**SETTINGS, "data": 5}).data is None


def test_signing_needs_the_private_key() -> None:
    header, claims = verify(sign({"a": 1}, KEY))
    assert claims == {"a": 1} and header["alg"] == "RS256"
