"""The response cache through the official SDKs' streams: Anthropic's
`messages.stream` (a streamed miss stored, then played back to the SDK as
Anthropic's events, and served whole) and OpenAI's Responses stream (the
same), on a gateway with `litellm_settings.cache: true` (type local, one
worker: every connection sees every entry).

Environment: GATEWAY_BASE_URL (without /v1), GATEWAY_MASTER_KEY,
GATEWAY_ANTHROPIC_MODEL and GATEWAY_OPENAI_MODEL (groups on upstreams that
number their answers).
"""

import os
import sys

import anthropic
import openai

BASE_URL = os.environ["GATEWAY_BASE_URL"]
MASTER_KEY = os.environ["GATEWAY_MASTER_KEY"]
ANTHROPIC_MODEL = os.environ.get("GATEWAY_ANTHROPIC_MODEL", "claude")
OPENAI_MODEL = os.environ.get("GATEWAY_OPENAI_MODEL", "gpt-4o")


def anthropic_streams():
    c = anthropic.Anthropic(base_url=BASE_URL, api_key=MASTER_KEY, max_retries=0, timeout=30)
    ask = dict(model=ANTHROPIC_MODEL, max_tokens=64, messages=[{"role": "user", "content": "cache my stream"}])
    with c.messages.stream(**ask) as stream:
        text = "".join(stream.text_stream)
        first = stream.get_final_message()
    assert text, "no streamed text"

    raw = c.messages.with_raw_response.create(**ask)
    whole = raw.parse()
    assert raw.headers.get("x-litellm-cache-key"), "the streamed answer was stored"
    assert whole.id == first.id, (whole, first)
    assert "".join(b.text for b in whole.content if b.type == "text") == text
    assert whole.usage.output_tokens == first.usage.output_tokens

    with c.messages.stream(**ask) as stream:
        again = "".join(stream.text_stream)
        final = stream.get_final_message()
    assert again == text, (again, text)
    assert final.id == first.id and final.stop_reason == first.stop_reason, final
    assert final.usage.output_tokens == first.usage.output_tokens, final.usage


def responses_streams():
    c = openai.OpenAI(base_url=BASE_URL + "/v1", api_key=MASTER_KEY, max_retries=0, timeout=30)
    ask = dict(model=OPENAI_MODEL, input="cache my response stream")
    text, completed = [], None
    for event in c.responses.create(**ask, stream=True):
        if event.type == "response.output_text.delta":
            text.append(event.delta)
        if event.type == "response.completed":
            completed = event.response
    assert completed is not None and text

    raw = c.responses.with_raw_response.create(**ask)
    assert raw.headers.get("x-litellm-cache-key"), "the streamed answer was stored"
    whole = raw.parse()
    assert whole.id == completed.id and whole.output_text == "".join(text), whole

    types, again, replayed = [], [], None
    for event in c.responses.create(**ask, stream=True):
        types.append(event.type)
        if event.type == "response.output_text.delta":
            again.append(event.delta)
        if event.type == "response.completed":
            replayed = event.response
    assert types[0] == "response.created" and types[-1] == "response.completed", types
    # Played back as one delta per text part.
    assert "".join(again) == "".join(text), (again, text)
    assert replayed.id == completed.id and replayed.output_text == whole.output_text


def main():
    anthropic_streams()
    responses_streams()
    print("SDK cache stream checks passed")


if __name__ == "__main__":
    try:
        main()
    except Exception:
        import traceback

        traceback.print_exc()
        sys.exit(1)
