"""The response cache through the official OpenAI Python SDK: LiteLLM's
per-request controls in `extra_body`, `x-litellm-cache-key` on a hit, a
stored answer played back as a stream.

Environment: GATEWAY_BASE_URL, GATEWAY_MASTER_KEY, GATEWAY_MODEL (a chat
group on an upstream that numbers its answers), with
`litellm_settings.cache: true` (type local: one client keeps one
connection, which one core serves).
"""

import os
import sys

import openai

BASE_URL = os.environ["GATEWAY_BASE_URL"]
MASTER_KEY = os.environ["GATEWAY_MASTER_KEY"]
MODEL = os.environ.get("GATEWAY_MODEL", "gpt-4o")


def main():
    c = openai.OpenAI(base_url=BASE_URL, api_key=MASTER_KEY, max_retries=0, timeout=30)
    ask = dict(model=MODEL, messages=[{"role": "user", "content": "cache me"}], temperature=0)

    raw = c.chat.completions.with_raw_response.create(**ask)
    first = raw.parse()
    assert raw.headers.get("x-litellm-cache-key") is None, "a miss names no entry"

    raw = c.chat.completions.with_raw_response.create(**ask)
    key = raw.headers.get("x-litellm-cache-key")
    assert key and len(key) == 64, raw.headers
    assert raw.parse().id == first.id, (raw.parse(), first)

    # no-cache in extra_body: the upstream answers again, and that answer is stored.
    raw = c.chat.completions.with_raw_response.create(
        **ask, extra_body={"cache": {"no-cache": True}}
    )
    fresh = raw.parse()
    assert raw.headers.get("x-litellm-cache-key") is None
    assert fresh.id != first.id

    # A stream is played back from the entry, ending cleanly.
    stream = c.chat.completions.create(
        **ask, stream=True, extra_body={"cache": {"s-maxage": 600}}
    )
    ids, text, finish = set(), [], None
    for chunk in stream:
        ids.add(chunk.id)
        for choice in chunk.choices:
            text.append(choice.delta.content or "")
            finish = choice.finish_reason or finish
    assert ids == {fresh.id}, ids
    assert "".join(text) == fresh.choices[0].message.content
    assert finish == fresh.choices[0].finish_reason

    # A wrong control is a 400 naming it.
    try:
        c.chat.completions.create(**ask, extra_body={"cache": {"ttl": "soon"}})
        raise AssertionError("a string ttl was accepted")
    except openai.BadRequestError as e:
        assert "cache.ttl" in str(e), e

    print("cache checks passed")


if __name__ == "__main__":
    try:
        main()
    except Exception:
        import traceback

        traceback.print_exc()
        sys.exit(1)
