"""The official OpenAI Python SDK's images.generate against a running
gateway on Vertex AI's Imagen and Bedrock's Titan image models (translated
by the gateway): the SDK reads the images as OpenAI's b64_json.

Environment:
  GATEWAY_BASE_URL     e.g. http://127.0.0.1:4000/v1
  GATEWAY_MASTER_KEY   the gateway's master key
  GATEWAY_IMAGEN_MODEL a vertex_ai/ Imagen model group
  GATEWAY_TITAN_MODEL  a bedrock/ Titan image model group

Run by tests/tests/cloud_images.rs; exits non-zero on any failure.
"""

import base64
import os
import sys

import openai


def main():
    client = openai.OpenAI(
        base_url=os.environ["GATEWAY_BASE_URL"],
        api_key=os.environ["GATEWAY_MASTER_KEY"],
        max_retries=0,
    )
    for model, n in ((os.environ["GATEWAY_IMAGEN_MODEL"], 2), (os.environ["GATEWAY_TITAN_MODEL"], 3)):
        resp = client.images.generate(model=model, prompt="a lighthouse at dusk", n=n, size="1024x1024")
        assert len(resp.data) == n, resp
        for image in resp.data:
            assert base64.b64decode(image.b64_json).startswith(b"\x89PNG"), image
        assert resp.created > 0, resp
        print(f"PASS {model}")
    try:
        client.images.generate(model=os.environ["GATEWAY_IMAGEN_MODEL"], prompt="x", n=9)
    except openai.BadRequestError as e:
        assert "sampleCount" in str(e), e
        print("PASS refused")
    else:
        sys.exit("n=9 was not refused")


if __name__ == "__main__":
    main()
