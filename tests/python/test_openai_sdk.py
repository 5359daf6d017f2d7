"""The official OpenAI Python SDK against a running gateway.

Environment:
  GATEWAY_BASE_URL          e.g. http://127.0.0.1:4000/v1
  GATEWAY_MASTER_KEY        the gateway's master key
  GATEWAY_MODEL             chat model group (default gpt-4o)
  GATEWAY_EMBEDDING_MODEL   embedding model group (default: GATEWAY_MODEL)

Chat, streaming, embeddings and the Responses API (`responses.create`,
whole and streamed, bridged through chat completions).

Run directly (exits non-zero on any failure); tests/tests/python_sdk.rs starts
a mock upstream and a gateway and runs this file.
"""

import os
import sys
import traceback

import openai

BASE_URL = os.environ.get("GATEWAY_BASE_URL", "")
MASTER_KEY = os.environ.get("GATEWAY_MASTER_KEY", "")
MODEL = os.environ.get("GATEWAY_MODEL", "gpt-4o")
EMBEDDING_MODEL = os.environ.get("GATEWAY_EMBEDDING_MODEL", MODEL)
MESSAGES = [{"role": "user", "content": "Say hello"}]


def client(api_key=None):
    return openai.OpenAI(
        base_url=BASE_URL,
        api_key=api_key or MASTER_KEY,
        max_retries=0,
        timeout=30,
    )


def test_chat():
    resp = client().chat.completions.create(model=MODEL, messages=MESSAGES)
    text = resp.choices[0].message.content
    assert text, f"empty completion: {resp!r}"
    assert resp.choices[0].message.role == "assistant", resp
    assert resp.usage is not None and resp.usage.total_tokens > 0, resp.usage


def test_chat_stream():
    stream = client().chat.completions.create(
        model=MODEL, messages=MESSAGES, stream=True
    )
    deltas = []
    chunks = 0
    for chunk in stream:
        chunks += 1
        if chunk.choices and chunk.choices[0].delta.content:
            deltas.append(chunk.choices[0].delta.content)
    assert chunks > 0, "no chunks"
    assert "".join(deltas), f"no delta text in {chunks} chunks"


def test_embeddings():
    resp = client().embeddings.create(
        model=EMBEDDING_MODEL, input=["first text", "second text"]
    )
    assert len(resp.data) == 2, resp
    for item in resp.data:
        assert item.embedding and all(isinstance(x, float) for x in item.embedding)


def test_responses():
    resp = client().responses.create(
        model=MODEL, input="Say hello", instructions="Be brief"
    )
    assert resp.object == "response" and resp.status == "completed", resp
    assert resp.output_text, f"empty output_text: {resp!r}"
    assert resp.usage is not None, resp
    assert resp.usage.input_tokens > 0 and resp.usage.output_tokens > 0, resp.usage


def test_responses_stream():
    stream = client().responses.create(model=MODEL, input="Say hello", stream=True)
    deltas = []
    kinds = []
    completed = None
    for event in stream:
        kinds.append(event.type)
        if event.type == "response.output_text.delta":
            deltas.append(event.delta)
        elif event.type == "response.completed":
            completed = event.response
    assert kinds[0] == "response.created", kinds
    assert "".join(deltas), f"no text deltas in {kinds}"
    assert completed is not None, f"no response.completed in {kinds}"
    assert completed.output_text == "".join(deltas), completed
    assert completed.usage is not None and completed.usage.output_tokens > 0, completed


def test_models_list():
    ids = [m.id for m in client().models.list()]
    assert MODEL in ids, f"{MODEL} not in {ids}"


def test_bad_key_raises_authentication_error():
    try:
        client(api_key="sk-definitely-wrong").chat.completions.create(
            model=MODEL, messages=MESSAGES
        )
    except openai.AuthenticationError as e:
        assert e.status_code == 401, e
    else:
        raise AssertionError("a bad key did not raise AuthenticationError")


def test_unknown_model_raises_bad_request():
    try:
        client().chat.completions.create(model="no-such-model", messages=MESSAGES)
    except openai.BadRequestError as e:
        assert e.status_code == 400, e
        assert "Invalid model name passed in model=no-such-model" in str(e), str(e)
    else:
        raise AssertionError("an unknown model did not raise BadRequestError")


TESTS = [
    test_chat,
    test_chat_stream,
    test_embeddings,
    test_responses,
    test_responses_stream,
    test_models_list,
    test_bad_key_raises_authentication_error,
    test_unknown_model_raises_bad_request,
]


def main():
    if not BASE_URL or not MASTER_KEY:
        print("set GATEWAY_BASE_URL and GATEWAY_MASTER_KEY", file=sys.stderr)
        return 2
    print(f"openai {openai.__version__} against {BASE_URL}")
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
