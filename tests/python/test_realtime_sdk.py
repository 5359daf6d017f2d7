"""OpenAI's realtime API through the gateway with the official OpenAI
Python SDK (`client.beta.realtime.connect`, over `websockets`): the
session opens with a virtual key, `session.created` arrives, a
`response.create` is answered up to its `response.done` with usage, and a
wrong key is refused before the upgrade.

Environment:
  GATEWAY_BASE_URL  e.g. http://127.0.0.1:4000/v1
  GATEWAY_KEY       a virtual key allowed the model
  REALTIME_MODEL    the model group

Run directly (exits non-zero on any failure); tests/tests/realtime.rs
starts the realtime mock and a gateway and runs this file.
"""

import os
import sys

import openai

BASE_URL = os.environ["GATEWAY_BASE_URL"]
KEY = os.environ["GATEWAY_KEY"]
MODEL = os.environ["REALTIME_MODEL"]


# The SDK turns an http:// base into wss://; the test gateway speaks plain ws://.
WS_BASE_URL = BASE_URL.replace("http://", "ws://", 1)


def main():
    client = openai.OpenAI(api_key=KEY, base_url=BASE_URL, websocket_base_url=WS_BASE_URL)
    with client.beta.realtime.connect(model=MODEL) as conn:
        first = conn.recv()
        assert first.type == "session.created", first
        conn.response.create()
        seen = []
        for event in conn:
            seen.append(event.type)
            if event.type == "response.done":
                usage = event.response.usage
                assert usage.input_tokens > 0 and usage.output_tokens > 0, usage
                break
        assert seen[0] == "response.created", seen
    wrong = openai.OpenAI(api_key="sk-wrong", base_url=BASE_URL, websocket_base_url=WS_BASE_URL)
    try:
        with wrong.beta.realtime.connect(model=MODEL) as conn:
            conn.recv()
    except Exception as e:  # websockets' InvalidStatus
        assert "401" in str(e), repr(e)
    else:
        raise AssertionError("a wrong key was let through")
    print("ok")


if __name__ == "__main__":
    try:
        main()
    except Exception:
        import traceback

        traceback.print_exc()
        sys.exit(1)
