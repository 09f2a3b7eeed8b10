"""One rule for the secrets of a line (autoselect/redact.py): names, URL credentials, JSON keys, token shapes."""

from __future__ import annotations

import json

import pytest

from autoselect.redact import REDACTED, is_secret_name, redacted_env, redacted_json, redacted_text, redacted_words


@pytest.mark.parametrize("name", ["HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN",
                                  "OPENAI_API_KEY", "--api-key", "--hf-token", "db.password", "GITHUB_PAT",
                                  "kv_connector_auth", "Authorization", "private_key", "NGC_API_KEY"])
def test_secret_looking_names(name):
    assert is_secret_name(name)


@pytest.mark.parametrize("name", ["--max-num-batched-tokens", "VLLM_ALL2ALL_BACKEND", "--token-file", "HF_TOKEN_PATH",
                                  "MAX_TOKENS", "--keyboard", "kv_role", "NCCL_PROTO", "--kv-transfer-config"])
def test_names_that_only_look_alike_are_not_secrets(name):
    assert not is_secret_name(name)


@pytest.mark.parametrize("text, secret", [
    ("HF_TOKEN=hf_abcdefghijklmnopqrstuvwxyz012345 vllm serve m", "hf_abcdefghijklmnopqrstuvwxyz012345"),
    ("vllm serve m --api-key sk-live-1234567890abcdef", "sk-live-1234567890abcdef"),
    ("vllm serve m --api-key=s3cr3t-value", "s3cr3t-value"),
    ("--model https://alice:hunter2@models.example/m", "hunter2"),
    ("--model https://ghp_abcdefghijklmnopqrstuvwxyz0123@github.com/o/r", "ghp_abcdefghijklmnopqrstuvwxyz0123"),
    ('--kv-transfer-config \'{"kv_connector":"X","kv_connector_extra_config":{"api_key":"k-42-secret"}}\'',
     "k-42-secret"),
    ("{'password': 'p4ss w0rd'}", "p4ss w0rd"),
    ("an error quoting AKIAABCDEFGHIJKLMNOP inside", "AKIAABCDEFGHIJKLMNOP"),
    ("xoxb-1234567890-abcdefghij in a message", "xoxb-1234567890-abcdefghij"),
    ('"aws_secret_access_key": 12345678', "12345678"),
])
def test_the_secret_is_gone_and_the_rest_stays(text, secret):
    out = redacted_text(text)
    assert secret not in out and REDACTED in out
    assert out.split(REDACTED)[0] == text.split(secret)[0][:len(out.split(REDACTED)[0])]


def test_text_without_secrets_is_unchanged():
    for text in ("vllm serve m -dp 8 --max-num-batched-tokens 4096 --all2all-backend deepep_low_latency",
                 "--token-file /run/secrets/token: cannot read it (No such file or directory)",
                 "http://autoselect.fleet:8765/v1/recommend?model=m", '{"kv_role": "kv_both"}'):
        assert redacted_text(text) == text


def test_words_env_and_json():
    words = ["vllm", "serve", "m", "--hf-token", "hf_x", "--api-key=abc", "--kv-transfer-config",
             json.dumps({"kv_connector": "N", "extra": {"secret": "v1", "auth_token": "v2"}}),
             "--model-url=https://u:p4ss@h/m"]
    out = redacted_words(words)
    joined = " ".join(out)
    assert not any(s in joined for s in ("hf_x", "abc", "v1", "v2", "p4ss"))
    assert out[:4] == ["vllm", "serve", "m", "--hf-token"] and out[4] == REDACTED
    assert redacted_env({"HF_TOKEN": "x", "A": "https://u:pw@h", "B": "1"}) == {
        "HF_TOKEN": REDACTED, "A": f"https://u:{REDACTED}@h", "B": "1"}
    assert redacted_json({"kv_role": "kv_both", "cfg": [{"token": 1}, "https://t@h"]}) == {
        "kv_role": "kv_both", "cfg": [{"token": REDACTED}, f"https://{REDACTED}@h"]}
