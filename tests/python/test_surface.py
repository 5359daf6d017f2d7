"""The rest of the API surface against a running gateway: the official
OpenAI Python SDK on Cohere chat (whole and streamed) and embeddings (the
SDK's default base64 encoding, decoded by the SDK), on moderations, on
image generation and edits, on text to speech (whole and streamed) and on
transcription and translation (multipart uploads); httpx (the SDK's own
HTTP client) on LiteLLM's /v1/rerank and /v2/rerank and on the provider
pass-through routes /anthropic/* (a virtual key in x-api-key) and /gemini/*
(the key in ?key=).

Environment:
  GATEWAY_BASE_URL          e.g. http://127.0.0.1:4000/v1
  GATEWAY_MASTER_KEY        the gateway's master key
  GATEWAY_CHAT_MODEL        a Cohere chat model group
  GATEWAY_EMBEDDING_MODEL   a Cohere embedding model group
  GATEWAY_RERANK_MODEL      a Cohere rerank model group
  GATEWAY_MODERATION_MODEL  an OpenAI moderation model group
  GATEWAY_IMAGE_MODEL       an OpenAI gpt-image model group
  GATEWAY_SPEECH_MODEL      an OpenAI text to speech model group
  GATEWAY_TRANSCRIBE_MODEL  an OpenAI whisper model group (also translates)
  GATEWAY_PASS_THROUGH      "1" when the gateway's Anthropic and Gemini
                            pass-through routes reach the mock

Run directly (exits non-zero on any failure); tests/tests/python_surface.rs
starts a mock upstream and a gateway and runs this file.
"""

import base64
import os
import sys
import traceback

import openai

try:
    import httpx
except ImportError:  # newer OpenAI SDKs ship their HTTP client as httpx2
    import httpx2 as httpx

BASE_URL = os.environ["GATEWAY_BASE_URL"]
MASTER_KEY = os.environ["GATEWAY_MASTER_KEY"]
CHAT = os.environ["GATEWAY_CHAT_MODEL"]
EMBEDDING = os.environ["GATEWAY_EMBEDDING_MODEL"]
RERANK = os.environ["GATEWAY_RERANK_MODEL"]
MODERATION = os.environ["GATEWAY_MODERATION_MODEL"]
IMAGE = os.environ["GATEWAY_IMAGE_MODEL"]
SPEECH = os.environ["GATEWAY_SPEECH_MODEL"]
TRANSCRIBE = os.environ["GATEWAY_TRANSCRIBE_MODEL"]


def client():
    return openai.OpenAI(base_url=BASE_URL, api_key=MASTER_KEY, max_retries=0, timeout=30)


def test_cohere_chat():
    resp = client().chat.completions.create(
        model=CHAT, messages=[{"role": "user", "content": "Say hello"}], max_tokens=50
    )
    assert resp.choices[0].message.content, resp
    assert resp.choices[0].finish_reason == "stop", resp
    assert resp.usage.completion_tokens > 0, resp.usage


def test_cohere_stream():
    stream = client().chat.completions.create(
        model=CHAT,
        messages=[{"role": "user", "content": "Say hello"}],
        stream=True,
        stream_options={"include_usage": True},
    )
    text, usage = "", None
    for chunk in stream:
        if chunk.choices and chunk.choices[0].delta.content:
            text += chunk.choices[0].delta.content
        if chunk.usage:
            usage = chunk.usage
    assert text, "no streamed text"
    assert usage is not None and usage.completion_tokens > 0, usage


def test_cohere_embeddings():
    resp = client().embeddings.create(model=EMBEDDING, input=["first", "second"])
    assert len(resp.data) == 2, resp
    assert len(resp.data[0].embedding) == 8, resp.data[0]
    assert all(isinstance(x, float) for x in resp.data[0].embedding)
    assert resp.usage.prompt_tokens > 0, resp.usage


def test_moderations():
    resp = client().moderations.create(model=MODERATION, input=["fine", "mock-flagged text"])
    assert [r.flagged for r in resp.results] == [False, True], resp
    assert resp.results[1].categories.harassment is True, resp


def test_images():
    resp = client().images.generate(model=IMAGE, prompt="a red fox", n=2, quality="low")
    assert len(resp.data) == 2, resp
    assert base64.b64decode(resp.data[0].b64_json).startswith(b"\x89PNG"), resp.data[0]
    assert resp.usage.output_tokens == 544, resp.usage


def test_speech():
    resp = client().audio.speech.create(model=SPEECH, voice="alloy", input="Hello there")
    assert resp.content.startswith(b"ID3"), resp.content[:8]
    assert len(resp.content) == 11 * 64, len(resp.content)
    with client().audio.speech.with_streaming_response.create(
        model=SPEECH, voice="nova", input="x" * 200, response_format="wav"
    ) as streamed:
        assert streamed.headers["content-type"] == "audio/wav", streamed.headers
        audio = b"".join(streamed.iter_bytes())
    assert audio.startswith(b"RIFF") and len(audio) == 200 * 64, len(audio)


def test_transcription():
    audio = b"RIFF" + bytes(47_996)  # three seconds of the mock's audio
    resp = client().audio.transcriptions.create(
        model=TRANSCRIBE, file=("talk.wav", audio), response_format="verbose_json"
    )
    assert resp.text == "mock transcript of talk.wav", resp
    assert resp.duration == 3.0, resp
    text = client().audio.transcriptions.create(
        model=TRANSCRIBE, file=("talk.mp3", audio), response_format="text"
    )
    assert text.strip() == "mock transcript of talk.mp3", text
    # Over 256 KiB: streamed to the upstream (the SDK writes its fields
    # before the file), one minute of the mock's audio.
    audio = b"RIFF" + bytes(959_996)
    resp = client().audio.transcriptions.create(
        model=TRANSCRIBE, file=("long.wav", audio), response_format="verbose_json"
    )
    assert resp.text == "mock transcript of long.wav", resp
    assert resp.duration == 60.0, resp


def test_image_edit():
    png = b"\x89PNG\r\n\x1a\n" + bytes(64)
    resp = client().images.edit(
        model=IMAGE, image=("cat.png", png, "image/png"), prompt="add a red hat", n=2, quality="low"
    )
    assert len(resp.data) == 2 and resp.data[0].b64_json, resp
    assert resp.usage.output_tokens == 2 * 272, resp


def test_translation():
    audio = b"RIFF" + bytes(31_996)  # two seconds of the mock's audio
    resp = client().audio.translations.create(
        model=TRANSCRIBE, file=("talk.wav", audio), response_format="verbose_json"
    )
    assert resp.text == "mock translation of talk.wav", resp
    assert resp.duration == 2.0, resp
    resp = client().audio.translations.create(model=TRANSCRIBE, file=("talk.mp3", audio))
    assert resp.text == "mock translation of talk.mp3", resp
    audio = b"RIFF" + bytes(479_996)  # streamed: thirty seconds
    resp = client().audio.translations.create(
        model=TRANSCRIBE, file=("long.wav", audio), response_format="verbose_json"
    )
    assert resp.duration == 30.0, resp


def test_pass_through():
    if os.environ.get("GATEWAY_PASS_THROUGH") != "1":
        return
    root = BASE_URL.removesuffix("/v1")
    resp = httpx.post(
        f"{root}/anthropic/v1/messages",
        headers={"x-api-key": MASTER_KEY, "anthropic-version": "2023-06-01"},
        json={"model": "claude-haiku-4-5", "max_tokens": 16, "messages": [{"role": "user", "content": "hi"}]},
        timeout=30,
    )
    assert resp.status_code == 200, resp.text
    assert resp.json()["type"] == "message", resp.text
    assert resp.headers["x-litellm-call-id"], resp.headers
    with httpx.stream(
        "POST",
        f"{root}/gemini/v1beta/models/gemini-2.0-flash:streamGenerateContent",
        params={"alt": "sse", "key": MASTER_KEY},
        json={"contents": [{"role": "user", "parts": [{"text": "hi"}]}]},
        timeout=30,
    ) as streamed:
        assert streamed.status_code == 200, streamed.read()
        events = [line for line in streamed.iter_lines() if line.startswith("data: ")]
    assert events and "candidates" in events[0], events
    resp = httpx.post(f"{root}/anthropic/v1/messages", json={}, timeout=30)
    assert resp.status_code == 401, resp.text


def test_rerank():
    headers = {"Authorization": f"Bearer {MASTER_KEY}"}
    root = BASE_URL.removesuffix("/v1")
    docs = ["the sky is blue", "Paris is the capital of France", "cats purr"]
    for url in (f"{BASE_URL}/rerank", f"{root}/v2/rerank"):
        resp = httpx.post(
            url,
            headers=headers,
            json={"model": RERANK, "query": "capital of France", "documents": docs, "top_n": 2},
            timeout=30,
        )
        assert resp.status_code == 200, resp.text
        body = resp.json()
        assert [r["index"] for r in body["results"]][0] == 1, body
        assert len(body["results"]) == 2, body
        assert body["meta"]["billed_units"]["search_units"] == 1, body
    resp = httpx.post(f"{BASE_URL}/rerank", headers=headers, json={"model": RERANK, "documents": docs})
    assert resp.status_code == 400, resp.text
    assert resp.json()["error"]["param"] == "query", resp.text


def main():
    failed = 0
    for name, fn in list(globals().items()):
        if name.startswith("test_") and callable(fn):
            try:
                fn()
                print(f"PASS {name}")
            except Exception:
                failed += 1
                print(f"FAIL {name}")
                traceback.print_exc()
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
