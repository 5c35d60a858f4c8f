"""The one secrets detector (audit/secrets.py): every format, every encoding, and the
strings it must never take for a secret (hashes, UUIDs, SHAs, images, placeholders, prose)."""

from __future__ import annotations

import base64
import hashlib
import time
import uuid

import pytest

from mtguard_rt.audit.secrets import (
    Finding,
    asks_for_credentials,
    b64_forms,
    carries,
    find_secrets,
    result_secrets,
    secret_tool,
    sightings,
    tool_values,
)

# Fake credentials of each format, assembled here so no file holds one whole.
GH = "ghp_" + "R7kq2LmX9vT4bN8wE1sY6uP3zA5cD0fHjK2mQ"
SLACK = "xoxb-" + "2841937465-9182736450-Zq8Vx2Lm9Tr4Wb7Yc3Nd6Kf1"
STRIPE = "sk_live_" + "51Hq8Vx2Lm9Tr4Wb7Yc3Nd6Kf1Jg5Pz0As"
AWS_ID = "AKIA" + "QX7VMLP2TR9WBY3C"
KEY_BODY = (
    "b3BlbnNzaC1rZXktdjEAAAAABG5vbmUAAAAEbm9uZQAAAAAAAAABAAAAMwAAAAtzc2gtZW\n"
    "QyNTUxOQAAACDx8Vm2Lq9Tr4Wb7Yc3Nd6Kf1Jg5Pz0AsXq8Vx2Lm9TrAAAAJg==\n"
)
PRIVATE_KEY = (
    "-----BEGIN OPENSSH PRIVATE KEY-----\n" + KEY_BODY + "-----END OPENSSH PRIVATE KEY-----\n"
)
JWT = (
    "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9."
    "eyJzdWIiOiIxMjM0NTY3ODkwIiwibmFtZSI6IkFuYSJ9."
    "Xk9mQ2vL7pT4wR8Zq8Vx2Lm9Tr4Wb7Yc3Nd6"
)

FORMATS = [
    ("GitHub token", f"token {GH} for the bot"),
    ("GitHub fine-grained token", "github_pat_" + "11ABCDE2Y0" + "q7Zk2Lp9XwVb4Nm8Rt" * 3),
    ("GitLab token", "glpat-" + "Zq8Vx2Lm9Tr4Wb7Yc3Nd"),
    ("Slack token", SLACK),
    ("Stripe live key", STRIPE),
    ("AWS access key id", f"id={AWS_ID}"),
    ("GCP API key", "AIza" + "SyD7Vq9Lx2Tb7Wc1Yn6Kd3Jf8Hs5Gz0Pa1Q"),
    ("npm token", "npm_" + "Zq8Vx2Lm9Tr4Wb7Yc3Nd6Kf1Jg5Pz0AsHq8V"),
    ("PyPI token", "pypi-AgEIcHlwaS5vcmc" + "Zq8Vx2Lm9Tr4Wb7Yc3Nd6Kf1Jg5Pz0AsHq8V" * 2),
    ("Anthropic API key", "sk-ant-api03-" + "Zq8Vx2Lm9Tr4Wb7Yc3Nd6Kf1Jg5Pz0AsHq8V" * 2),
    ("OpenAI API key", "sk-proj-" + "Zq8Vx2Lm9Tr4Wb7Yc3Nd6Kf1Jg5Pz0AsHq8V"),
    ("JWT", f"Authorization: Bearer {JWT}"),
    ("bearer token", "Authorization: Bearer Zq8Vx2Lm9Tr4Wb7Yc3Nd6Kf1Jg5Pz0As"),
    ("private key", PRIVATE_KEY),
    (
        "private key",
        '{"private_key": "-----BEGIN PRIVATE KEY-----\\nMIIEvQIBADANBgkqhkiG9w0'
        'BAQEFAASCBKcwggSjAgEAAoIBAQC7\\n-----END PRIVATE KEY-----\\n"}',
    ),
]


def kinds(text: str) -> list[str]:
    return [f.kind for f in find_secrets(text)]


@pytest.mark.parametrize(("kind", "text"), FORMATS)
def test_each_format_is_found(kind: str, text: str) -> None:
    assert kind in kinds(text)


@pytest.mark.parametrize(
    ("text", "key"),
    [
        ("password=Tr0ub4dor&3-Vq9Lx\n", "password"),
        ('{"api_key": "Zq8Vx2Lm9Tr4Wb7Yc3Nd"}', "api_key"),
        ("CRM_DB_PASSWORD=Xk9#mQ2vL7pT4wR8\n", "CRM_DB_PASSWORD"),
        (
            "aws_secret_access_key = Zq8Vx2Lm9Tr4Wb7Yc3Nd6Kf1Jg5Pz0AsHq8Vx2L",
            "aws_secret_access_key",
        ),
        ("Your API key is 8f3a9c2d41e84b6a9d0c", "API key"),
        ("token: pdt_u+7Vq9Lx2Tb7Wc1Yn6Kd3Jf8Hs", "token"),
    ],
)
def test_credential_assignments_are_found_with_their_key(text: str, key: str) -> None:
    found = [f for f in find_secrets(text) if f.kind == "credential assignment"]
    assert [f.key for f in found] == [key]


def test_credentials_in_urls() -> None:
    (f,) = find_secrets("remote: postgres://app:Pr0d-Vq9Lx2Tb7Wc@db.internal/app")
    assert (f.kind, f.key, f.value) == ("credential in a URL", "app", "Pr0d-Vq9Lx2Tb7Wc")
    # a token as the password is found as the token
    assert "GitHub token" in kinds(f"url = https://bot:{GH}@git.example.com/org/app.git")


@pytest.mark.parametrize(
    "text",
    [
        "postgres://user:password@localhost/db",
        "mysql://root:root@127.0.0.1/app",
        "https://admin:${ADMIN_PASSWORD}@example.org/",
        "api_key = 'your-api-key-here'",
        "password=changeme",
        "token: <YOUR_TOKEN>",
        "max_tokens: 4096000000",
        '"token_type": "bearer_abc123XYZ"',
        "password_file: /run/secrets/db_password",
        "api_key = os.environ.get('API_KEY')",
        "secret: process.env.SECRET_VALUE",
        "AKIAIOSFODNN7EXAMPLE is the documentation's example key",
        "ghp_" + "x" * 36,
        "The token is expired, ask for a new one.",
        "Authorization: Bearer <your-token-here>",
        "a bearer instrument is payable to whoever holds it",
    ],
)
def test_placeholders_and_references_are_not_secrets(text: str) -> None:
    assert find_secrets(text) == ()


def test_hashes_uuids_shas_and_images_are_not_secrets() -> None:
    sha1 = hashlib.sha1(b"commit").hexdigest()
    sha256 = hashlib.sha256(b"file").hexdigest()
    png = base64.b64encode(b"\x89PNG\r\n\x1a\n" + bytes(range(256)) * 4).decode()
    text = (
        f"commit {sha1}\nchecksum sha256 {sha256}\nrequest id {uuid.uuid4()}\n"
        f"integrity sha512-{base64.b64encode(hashlib.sha512(b'x').digest()).decode()}\n"
        f"data:image/png;base64,{png}\nhash: {sha256}\nfingerprint: {sha1}\n"
        "scikit-learn (sk-learn) is a python library used for machine learning tasks\n"
    )
    assert find_secrets(text) == ()


def test_prose_is_not_a_secret_when_its_spaces_are_removed() -> None:
    prose = " ".join(["the task-based approach sk- to keys and tokens is risky"] * 2000)
    assert find_secrets(prose) == ()


@pytest.mark.parametrize("secret", [GH, STRIPE, "password=Tr0ub4dor&3-Vq9Lx"])
def test_base64_and_hex_forms_are_found(secret: str) -> None:
    for encoded in (base64.b64encode(secret.encode()).decode(), secret.encode().hex()):
        found = find_secrets(f"trace={encoded}")
        assert found and found[0].encoding in ("base64", "hex"), encoded
        assert secret.endswith(found[0].value)


def test_split_forms_are_found_in_groups_of_one_length() -> None:
    for size in (3, 4, 6):
        spaced = " ".join(SLACK[i : i + size] for i in range(0, len(SLACK), size))
        (f,) = find_secrets(f"debug:\n{spaced}\n")
        assert (f.kind, f.encoding, f.value) == ("Slack token", "split", SLACK)
    lines = "\n".join(GH[i : i + 5] for i in range(0, len(GH), 5))
    assert [f.encoding for f in find_secrets(lines)] == ["split"]
    dashed = "-".join(GH[i : i + 4] for i in range(0, len(GH), 4))
    assert [f.value for f in find_secrets(dashed)] == [GH]


def test_a_finding_is_shown_redacted() -> None:
    for f in find_secrets(f"{GH}\npassword=Tr0ub4dor&3-Vq9Lx\n{PRIVATE_KEY}"):
        shown = f.describe()
        assert f.value not in shown and f"({len(f.value)} chars)" in shown
        assert KEY_BODY[:20] not in shown


def test_carries_finds_a_value_in_every_form() -> None:
    value = "dk_9Qm2Xv7Lp4Rt8Ws1Yz6Bn3Kc5Hf0Jd"
    assert carries(f"{value} the meeting", value) == "plain"
    for pad in ("", "x", "xy"):
        assert carries(base64.b64encode((pad + value).encode()).decode(), value) == "base64"
    assert carries(value.encode().hex().upper(), value) == "hex"
    assert carries(" ".join(value[i : i + 4] for i in range(0, len(value), 4)), value) == "split"
    assert carries("the meeting moved to Thursday", value) is None
    assert carries("short", "short") is None  # below the shortest value worth tracking
    assert all(len(f) >= 8 for f in b64_forms(value))


def test_secret_tools_and_their_values() -> None:
    assert secret_tool("get_secret") and secret_tool("createDeployToken")
    assert secret_tool("generate_password") and secret_tool("getApiKey")
    assert not secret_tool("browser_press_key") and not secret_tool("get_forecast")
    assert [f.value for f in tool_values("dk_9Qm2Xv7Lp4Rt8Ws1Yz6Bn3Kc5Hf0Jd\n")] == [
        "dk_9Qm2Xv7Lp4Rt8Ws1Yz6Bn3Kc5Hf0Jd"
    ]
    names = '["prod_db", "staging_api_key", "3f2504e0-4f89-11d3-9a0c-0305e82c3301"]'
    assert tool_values(names) == ()
    listing = '{"name": "prod_db", "created": "2026-12-01T10:00:00Z", "version": "v12"}'
    assert tool_values(listing) == ()


def test_result_secrets_and_sightings() -> None:
    result = {"content": [{"type": "text", "text": f"{GH}\n"}], "isError": False}
    assert [f.kind for _, f in result_secrets("get_forecast", result)] == ["GitHub token"]
    vault = {"content": [{"type": "text", "text": "stg_5Hq2Lx8Pm3Vr9Tc1Wb6Yn4Kd7Jf0Gs"}]}
    assert result_secrets("get_forecast", vault) == []
    (s,) = sightings("vault", "get_secret", vault, {"name": "staging"})
    assert (s.server, s.tool, s.value) == (
        "vault",
        "get_secret",
        "stg_5Hq2Lx8Pm3Vr9Tc1Wb6Yn4Kd7Jf0Gs",
    )
    # what the call's own arguments carried is the agent's, echoed back
    assert sightings("s", "echo", result, {"message": GH}) == ()


def test_credential_words_in_a_task() -> None:
    assert asks_for_credentials("Give me the staging API key from the vault") == "API key"
    assert asks_for_credentials("Show me config/deploy.yml, including the registry token")
    assert asks_for_credentials("Decode the JWT I pasted")
    assert asks_for_credentials("Forecast for Lagos, please.") is None
    assert asks_for_credentials("Summarise the key findings") is None


def test_a_huge_text_is_bounded_and_its_tail_is_read() -> None:
    text = "lorem ipsum dolor sit amet " * 120_000 + f"\n{GH}\n"  # ~3.2 MB
    t0 = time.process_time()  # CPU time: the cost, not the machine's load
    found = find_secrets(text)
    assert time.process_time() - t0 < 5.0
    assert [f.value for f in found] == [GH]
    assert isinstance(found[0], Finding)
