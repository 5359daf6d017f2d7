"""The official OpenAI and Anthropic Python SDKs against a gateway with
guardrails, seeing blocks and masks as LiteLLM's clients see them.

Environment:
  GATEWAY_BASE_URL      e.g. http://127.0.0.1:4000 (no /v1)
  GATEWAY_MASTER_KEY    the gateway's master key
  GATEWAY_MASK_MODEL    a model whose answer holds an email (a post_call
                        guardrail masks it)
  GATEWAY_SSN_MODEL     a model whose answer holds a US SSN (the
                        `answer-block` guardrail, named per request, blocks it)

The gateway (tests/tests/python_sdk.rs) runs `no-secrets` (pre_call,
default on: blocks the keyword "Project Falcon"), `answer-mask` (post_call,
default on: masks emails) and `answer-block` (post_call: blocks SSNs).

Run directly (exits non-zero on any failure).
"""

import os
import sys
import traceback

import anthropic
import openai

BASE_URL = os.environ.get("GATEWAY_BASE_URL", "")
MASTER_KEY = os.environ.get("GATEWAY_MASTER_KEY", "")
MASK_MODEL = os.environ.get("GATEWAY_MASK_MODEL", "local-mock")
SSN_MODEL = os.environ.get("GATEWAY_SSN_MODEL", "local-ssn")
SECRET = [{"role": "user", "content": "tell me about Project Falcon"}]
HELLO = [{"role": "user", "content": "hello"}]
BLOCKED_WORD = "Content blocked: keyword 'project falcon' detected"
BLOCKED_SSN = "Content blocked: us_ssn pattern detected"


def oai():
    return openai.OpenAI(
        base_url=BASE_URL + "/v1", api_key=MASTER_KEY, max_retries=0, timeout=30
    )


def claude():
    return anthropic.Anthropic(
        base_url=BASE_URL, api_key=MASTER_KEY, max_retries=0, timeout=30
    )


def test_openai_block_is_a_bad_request_with_litellms_body():
    try:
        oai().chat.completions.create(model=MASK_MODEL, messages=SECRET)
    except openai.BadRequestError as e:
        assert e.status_code == 400, e.status_code
        # The SDK keeps the `error` object as `body`: LiteLLM's fields.
        assert e.body["message"] == BLOCKED_WORD, e.body
        assert e.body["type"] == "invalid_request_error", e.body
        assert e.body["code"] == "400", e.body
        assert BLOCKED_WORD in str(e), str(e)
        return
    raise AssertionError("a blocked prompt was answered")


def test_openai_mask_in_a_whole_answer_and_the_header():
    raw = oai().chat.completions.with_raw_response.create(
        model=MASK_MODEL, messages=HELLO
    )
    applied = raw.headers.get("x-litellm-applied-guardrails", "")
    assert applied.split(",") == ["no-secrets", "answer-mask"], applied
    text = raw.parse().choices[0].message.content
    assert "[EMAIL_REDACTED]" in text and "@" not in text, text


def test_openai_mask_in_a_stream():
    stream = oai().chat.completions.create(
        model=MASK_MODEL, messages=HELLO, stream=True
    )
    text = "".join(
        c.choices[0].delta.content or "" for c in stream if c.choices
    )
    assert "[EMAIL_REDACTED]" in text and "@" not in text, text


def test_openai_post_call_block_whole_and_streamed():
    extra = {"guardrails": ["answer-block"]}
    try:
        oai().chat.completions.create(
            model=SSN_MODEL, messages=HELLO, extra_body=extra
        )
        raise AssertionError("a blocked answer was sent")
    except openai.BadRequestError as e:
        assert e.body["message"] == BLOCKED_SSN, e.body
    stream = oai().chat.completions.create(
        model=SSN_MODEL, messages=HELLO, stream=True, extra_body=extra
    )
    got = ""
    try:
        for chunk in stream:
            if chunk.choices:
                got += chunk.choices[0].delta.content or ""
    except openai.APIError as e:
        # The SDK raises on the stream's `data: {"error": ...}` event.
        assert BLOCKED_SSN in e.message, e.message
        assert "6789" not in got, got
        return
    raise AssertionError(f"a blocked stream ended cleanly: {got!r}")


def test_anthropic_block_is_a_bad_request():
    try:
        claude().messages.create(model=MASK_MODEL, max_tokens=50, messages=SECRET)
    except anthropic.BadRequestError as e:
        assert e.status_code == 400, e.status_code
        assert BLOCKED_WORD in str(e), str(e)
        return
    raise AssertionError("a blocked prompt was answered")


def test_anthropic_mask_whole_and_streamed():
    msg = claude().messages.create(model=MASK_MODEL, max_tokens=50, messages=HELLO)
    text = "".join(b.text for b in msg.content if b.type == "text")
    assert "[EMAIL_REDACTED]" in text and "@" not in text, text
    with claude().messages.stream(
        model=MASK_MODEL, max_tokens=50, messages=HELLO
    ) as stream:
        text = "".join(stream.text_stream)
    assert "[EMAIL_REDACTED]" in text and "@" not in text, text


def test_anthropic_stream_block_raises():
    got = ""
    try:
        with claude().messages.stream(
            model=SSN_MODEL,
            max_tokens=50,
            messages=HELLO,
            extra_body={"guardrails": ["answer-block"]},
        ) as stream:
            for text in stream.text_stream:
                got += text
    except anthropic.APIStatusError as e:
        # The SDK raises on the stream's `event: error`.
        assert BLOCKED_SSN in str(e), str(e)
        assert "6789" not in got, got
        return
    raise AssertionError(f"a blocked stream ended cleanly: {got!r}")


def main():
    tests = [(n, f) for n, f in globals().items() if n.startswith("test_")]
    failed = 0
    for name, fn in tests:
        try:
            fn()
            print(f"ok   {name}")
        except Exception:  # noqa: BLE001 - report every failure
            failed += 1
            print(f"FAIL {name}")
            traceback.print_exc()
    print(f"{len(tests) - failed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
