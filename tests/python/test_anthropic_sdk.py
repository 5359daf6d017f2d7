"""The official Anthropic Python SDK against a running gateway's /v1/messages.

Environment:
  GATEWAY_BASE_URL      e.g. http://127.0.0.1:4000 (the SDK adds /v1/messages)
  GATEWAY_MASTER_KEY    the gateway's key, sent as x-api-key like Claude Code
  GATEWAY_MODEL         model group to call
  GATEWAY_TOOLS         "1" when the deployment behind the group calls tools
                        (the Anthropic mock does; the OpenAI mock does not)

Run directly (exits non-zero on any failure); tests/tests/python_sdk.rs starts
the mocks and a gateway and runs this file against an anthropic/ deployment
(passthrough) and an OpenAI one (translated).
"""

import os
import sys
import traceback

import anthropic

BASE_URL = os.environ.get("GATEWAY_BASE_URL", "")
MASTER_KEY = os.environ.get("GATEWAY_MASTER_KEY", "")
MODEL = os.environ.get("GATEWAY_MODEL", "claude")
TOOLS = os.environ.get("GATEWAY_TOOLS") == "1"
MESSAGES = [{"role": "user", "content": "Say hello"}]
WEATHER_TOOL = {
    "name": "get_weather",
    "description": "The weather in a city",
    "input_schema": {
        "type": "object",
        "properties": {"city": {"type": "string"}},
        "required": ["city"],
    },
}


def client(api_key=None):
    return anthropic.Anthropic(
        base_url=BASE_URL, api_key=api_key or MASTER_KEY, max_retries=0, timeout=30
    )


def test_message():
    msg = client().messages.create(
        model=MODEL, max_tokens=64, system="Be brief.", messages=MESSAGES
    )
    assert msg.type == "message" and msg.role == "assistant", msg
    text = "".join(b.text for b in msg.content if b.type == "text")
    assert text, f"no text in {msg!r}"
    assert msg.stop_reason == "end_turn", msg.stop_reason
    assert msg.usage.output_tokens > 0, msg.usage


def test_stream():
    with client().messages.stream(
        model=MODEL, max_tokens=64, messages=MESSAGES
    ) as stream:
        text = "".join(stream.text_stream)
        final = stream.get_final_message()
    assert text, "no streamed text"
    assert final.stop_reason == "end_turn", final
    assert final.usage.output_tokens > 0, final.usage


def test_claude_code_request_shape():
    """What Claude Code sends: beta headers, metadata.user_id, system blocks
    with cache_control, tools, streaming."""
    with client().messages.stream(
        model=MODEL,
        max_tokens=128,
        system=[
            {
                "type": "text",
                "text": "You are Claude Code.",
                "cache_control": {"type": "ephemeral"},
            }
        ],
        messages=[
            {
                "role": "user",
                "content": [
                    {
                        "type": "text",
                        "text": "list files",
                        "cache_control": {"type": "ephemeral"},
                    }
                ],
            }
        ],
        tools=[WEATHER_TOOL],
        metadata={"user_id": "user_abc_account_def_session_ghi"},
        extra_headers={
            "anthropic-beta": "claude-code-20250219,fine-grained-tool-streaming-2025-05-14"
        },
    ) as stream:
        final = stream.get_final_message()
    assert final.content, final


def test_tools_round_trip():
    if not TOOLS:
        return
    c = client()
    first = c.messages.create(
        model=MODEL,
        max_tokens=128,
        tools=[WEATHER_TOOL],
        tool_choice={"type": "any"},
        messages=[{"role": "user", "content": "Weather in Paris?"}],
    )
    assert first.stop_reason == "tool_use", first
    call = next(b for b in first.content if b.type == "tool_use")
    assert call.name == "get_weather" and call.input == {"city": "mock"}, call
    second = c.messages.create(
        model=MODEL,
        max_tokens=128,
        tools=[WEATHER_TOOL],
        messages=[
            {"role": "user", "content": "Weather in Paris?"},
            {"role": "assistant", "content": first.content},
            {
                "role": "user",
                "content": [
                    {"type": "tool_result", "tool_use_id": call.id, "content": "sunny"}
                ],
            },
        ],
    )
    assert second.stop_reason == "end_turn", second
    with c.messages.stream(
        model=MODEL,
        max_tokens=128,
        tools=[WEATHER_TOOL],
        tool_choice={"type": "tool", "name": "get_weather"},
        messages=[{"role": "user", "content": "Weather in Paris?"}],
    ) as stream:
        final = stream.get_final_message()
    call = next(b for b in final.content if b.type == "tool_use")
    assert call.input == {"city": "mock"}, call


def test_count_tokens():
    count = client().messages.count_tokens(model=MODEL, messages=MESSAGES)
    assert count.input_tokens > 0, count


def test_bad_key_raises_authentication_error():
    try:
        client(api_key="sk-definitely-wrong").messages.create(
            model=MODEL, max_tokens=8, messages=MESSAGES
        )
    except anthropic.AuthenticationError as e:
        assert e.status_code == 401, e
        assert e.body["error"]["type"] == "authentication_error", e.body
    else:
        raise AssertionError("a bad key did not raise AuthenticationError")


def test_unknown_model_raises_bad_request():
    try:
        client().messages.create(model="no-such-model", max_tokens=8, messages=MESSAGES)
    except anthropic.BadRequestError as e:
        assert e.status_code == 400, e
    else:
        raise AssertionError("an unknown model did not raise BadRequestError")


TESTS = [
    test_message,
    test_stream,
    test_claude_code_request_shape,
    test_tools_round_trip,
    test_count_tokens,
    test_bad_key_raises_authentication_error,
    test_unknown_model_raises_bad_request,
]


def main():
    if not BASE_URL or not MASTER_KEY:
        print("set GATEWAY_BASE_URL and GATEWAY_MASTER_KEY", file=sys.stderr)
        return 2
    print(f"anthropic {anthropic.__version__} against {BASE_URL} model {MODEL}")
    failed = []
    for test in TESTS:
        try:
            test()
        except Exception:  # noqa: BLE001 - report every failure, then exit non-zero
            failed.append(test.__name__)
            print(f"FAIL {test.__name__}")
            traceback.print_exc()
        else:
            print(f"ok   {test.__name__}")
    print(f"python sdk checks - {len(TESTS) - len(failed)} ok, {len(failed)} failing")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
