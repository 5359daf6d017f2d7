"""OpenAI's Files and Batch APIs through the gateway with the official
OpenAI Python SDK: an upload (multipart, LiteLLM's custom-llm-provider
header), retrieve, content, list, a batch created, polled to completion and
its output read, a completed batch's cancel refused, the file deleted, a
3 MB upload streamed through and read back; a
second virtual key is refused the first key's file and batch (403,
PermissionDeniedError) and lists none of them.

Environment:
  GATEWAY_BASE_URL    e.g. http://127.0.0.1:4000/v1
  GATEWAY_MASTER_KEY  the gateway's master key (issues the two keys)

Run directly (exits non-zero on any failure); tests/tests/files_batches.rs
starts a mock upstream and a gateway and runs this file.
"""

import json
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
ROOT = BASE_URL.rsplit("/v1", 1)[0]
PROVIDER = {"custom-llm-provider": "openai"}


def new_key():
    resp = httpx.post(
        f"{ROOT}/key/generate",
        headers={"Authorization": f"Bearer {MASTER_KEY}"},
        json={},
        timeout=30,
    )
    assert resp.status_code == 200, resp.text
    return resp.json()["key"]


def client(key):
    return openai.OpenAI(base_url=BASE_URL, api_key=key, max_retries=0, timeout=30)


ALICE = client(new_key())
BOB = client(new_key())
STATE = {}

LINES = b"".join(
    json.dumps(
        {
            "custom_id": f"req-{i}",
            "method": "POST",
            "url": "/v1/chat/completions",
            "body": {"model": "gpt-4o-mini", "messages": [{"role": "user", "content": f"question {i}"}]},
        }
    ).encode()
    + b"\n"
    for i in range(3)
)


def test_1_upload_retrieve_content_list():
    created = ALICE.files.create(file=("input.jsonl", LINES), purpose="batch", extra_headers=PROVIDER)
    assert created.object == "file" and created.purpose == "batch", created
    assert created.bytes == len(LINES), created
    STATE["file"] = created.id
    got = ALICE.files.retrieve(created.id)
    assert got.id == created.id and got.filename == "input.jsonl", got
    assert ALICE.files.content(created.id).content == LINES
    assert created.id in [f.id for f in ALICE.files.list()]


def test_2_another_key_is_refused_the_file():
    try:
        BOB.files.retrieve(STATE["file"])
        raise AssertionError("another key retrieved the file")
    except openai.PermissionDeniedError as e:
        assert "does not have access" in str(e), e
    assert STATE["file"] not in [f.id for f in BOB.files.list()]


def test_3_batch_runs_and_its_output_is_read():
    batch = ALICE.batches.create(
        input_file_id=STATE["file"], endpoint="/v1/chat/completions", completion_window="24h"
    )
    assert batch.object == "batch" and batch.status == "validating", batch
    STATE["batch"] = batch.id
    try:
        BOB.batches.retrieve(batch.id)
        raise AssertionError("another key retrieved the batch")
    except openai.PermissionDeniedError:
        pass
    done = ALICE.batches.retrieve(batch.id)
    assert done.status == "completed", done
    assert done.request_counts.completed == 3, done.request_counts
    lines = ALICE.files.content(done.output_file_id).text.splitlines()
    assert len(lines) == 3, lines
    usage = json.loads(lines[0])["response"]["body"]["usage"]
    assert usage["prompt_tokens"] > 0, usage
    assert batch.id in [b.id for b in ALICE.batches.list()]
    assert batch.id not in [b.id for b in BOB.batches.list()]


def test_4_cancel_of_a_completed_batch_and_delete():
    try:
        ALICE.batches.cancel(STATE["batch"])
        raise AssertionError("a completed batch was cancelled")
    except openai.BadRequestError:
        pass
    deleted = ALICE.files.delete(STATE["file"])
    assert deleted.deleted is True, deleted


def test_5_a_large_upload_is_streamed_through():
    # Over the gateway's 256 KiB, with the SDK's field order (purpose, then
    # the file): relayed as it arrives rather than read whole.
    content = bytes(range(256)) * (3 << 12)
    created = ALICE.files.create(file=("big.bin", content), purpose="user_data", extra_headers=PROVIDER)
    assert created.bytes == len(content), created
    assert ALICE.files.content(created.id).content == content
    assert ALICE.files.delete(created.id).deleted is True


def main():
    failed = 0
    for name, fn in sorted(globals().items()):
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
