//! OpenAI's `POST /v1/images/generations` on Vertex AI's Imagen models
//! (`:predict`, with the service account's access token, which the mock's
//! token endpoint grants and its Vertex paths check) and on Bedrock's
//! Titan and Stability image models (InvokeModel, SigV4 signatures the mock
//! verifies), translated both ways: OpenAI's `data` of `b64_json`, spend
//! per image returned at the deployment's or the price map's
//! `output_cost_per_image`; Nova Canvas likewise; and through the
//! official OpenAI SDK (`tests/python/test_cloud_images.py`).

use e2e::{assert_error, to_yaml, Gateway, MockServer, MASTER_KEY};
use serde_json::{json, Value};
use std::io::Write;

const KEY_FILE: &str = include_str!("../../loadgen/src/mock/api/vertex/service_account.json");
const SECRET: &str = "mock-aws-secret-access-key";

fn key_file(port: u16) -> tempfile::NamedTempFile {
    let mut f = tempfile::NamedTempFile::new().unwrap();
    let key = KEY_FILE.replace(
        "https://oauth2.googleapis.com/token",
        &format!("http://127.0.0.1:{port}/token"),
    );
    f.write_all(key.as_bytes()).unwrap();
    f
}

fn bedrock(group: &str, model: &str, mock: &MockServer, secret: &str) -> Value {
    json!({"model_name": group, "litellm_params": {
        "model": format!("bedrock/{model}"),
        "aws_bedrock_runtime_endpoint": format!("http://127.0.0.1:{}", mock.port()),
        "aws_access_key_id": "AKIDMOCK",
        "aws_secret_access_key": secret,
        "aws_region_name": "us-east-1",
    }})
}

fn start(models: Vec<Value>) -> Gateway {
    let config = json!({
        "model_list": models,
        "general_settings": {"master_key": MASTER_KEY},
        "router_settings": {"num_retries": 0},
    });
    Gateway::start(&to_yaml(&config), &[])
}

/// Generates images; the answer and its spend row.
fn generate(gw: &Gateway, body: Value) -> (e2e::http::Response, Option<Value>) {
    let resp = gw.post("/v1/images/generations", &body);
    let row = (resp.status == 200).then(|| {
        let call_id = resp.header("x-litellm-call-id").unwrap().to_string();
        gw.spend_row(&call_id)
    });
    (resp, row)
}

fn images(resp: &e2e::http::Response) -> Vec<String> {
    let body = resp.json();
    assert!(body["created"].as_i64().unwrap() > 0, "{body}");
    body["data"]
        .as_array()
        .unwrap_or_else(|| panic!("no data: {body}"))
        .iter()
        .map(|d| d["b64_json"].as_str().unwrap().to_string())
        .collect()
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() < 1e-12
}

#[test]
fn imagen_generates_images_through_predict() {
    let mock = MockServer::start(&[]);
    let key = key_file(mock.port());
    let imagen = |group: &str, model: &str| {
        json!({"model_name": group, "litellm_params": {
            "model": format!("vertex_ai/{model}"),
            "api_base": format!("http://127.0.0.1:{}", mock.port()),
            "vertex_location": "us-central1",
            "vertex_credentials": key.path().to_str().unwrap(),
        }})
    };
    let mut priced = imagen("imagen-priced", "imagen-3.0-generate-002");
    priced["model_info"] = json!({"output_cost_per_image": 0.04});
    let gw = start(vec![
        imagen("imagen", "imagen-3.0-generate-002"),
        imagen("gemini", "gemini-2.0-flash"),
        priced,
    ]);
    let (resp, row) = generate(
        &gw,
        json!({"model": "imagen", "prompt": "a red fox in snow", "n": 2, "size": "1792x1024", "quality": "hd"}),
    );
    assert_eq!(resp.status, 200, "{}", resp.text());
    let data = images(&resp);
    assert_eq!(data.len(), 2);
    assert!(data[0].starts_with("iVBOR"), "a PNG: {}", data[0]);
    let row = row.unwrap();
    assert_eq!(row["call_type"], "aimage_generation", "{row}");
    assert_eq!(row["custom_llm_provider"], "vertex_ai", "{row}");
    // LiteLLM's price map prices no vertex_ai Imagen model: unpriced.
    assert_eq!(row["spend"].as_f64(), Some(0.0), "{row}");

    // A sample withheld by Imagen's filter is not an image.
    let (resp, _) = generate(
        &gw,
        json!({"model": "imagen", "prompt": "something filtered", "n": 3}),
    );
    assert_eq!(images(&resp).len(), 2, "{}", resp.text());

    // A deployment's `model_info.output_cost_per_image` prices what the
    // map does not, billed per image returned (LiteLLM's
    // `len(response.data)`): three asked, one withheld, two paid.
    let (resp, row) = generate(
        &gw,
        json!({"model": "imagen-priced", "prompt": "something filtered", "n": 3}),
    );
    assert_eq!(images(&resp).len(), 2, "{}", resp.text());
    let row = row.unwrap();
    let spend = row["spend"].as_f64().unwrap();
    assert!(close(spend, 2.0 * 0.04), "{row}");
    // `/model/info` shows the deployment's price.
    let info = gw.get("/model/info").json();
    let priced = info["data"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["model_name"] == "imagen-priced")
        .unwrap_or_else(|| panic!("{info}"));
    assert_eq!(
        priced["model_info"]["output_cost_per_image"], 0.04,
        "{priced}"
    );

    // Imagen's own limits come back as Google's errors; a chat model does
    // not generate images.
    let resp = gw.post(
        "/v1/images/generations",
        &json!({"model": "imagen", "prompt": "x", "n": 5}),
    );
    let err = assert_error(&resp, 400);
    assert!(
        err["message"].as_str().unwrap().contains("sampleCount"),
        "{err:?}"
    );
    let resp = gw.post(
        "/v1/images/generations",
        &json!({"model": "gemini", "prompt": "x"}),
    );
    assert_error(&resp, 400);
}

#[test]
fn bedrock_titan_and_stability_generate_images_priced_per_image() {
    let mock = MockServer::start(&[]);
    let gw = start(vec![
        bedrock("titan", "amazon.titan-image-generator-v2:0", &mock, SECRET),
        bedrock("sd3", "stability.sd3-large-v1:0", &mock, SECRET),
        bedrock("sdxl", "stability.stable-diffusion-xl-v1", &mock, SECRET),
        bedrock(
            "unsigned",
            "amazon.titan-image-generator-v2:0",
            &mock,
            "not-the-secret",
        ),
    ]);
    let (resp, row) = generate(
        &gw,
        json!({"model": "titan", "prompt": "a lighthouse", "n": 3, "size": "1024x1024", "quality": "hd"}),
    );
    assert_eq!(resp.status, 200, "{}", resp.text());
    assert_eq!(images(&resp).len(), 3);
    let row = row.unwrap();
    // amazon.titan-image-generator-v2:0: 0.008 USD a generated image.
    let spend = row["spend"].as_f64().unwrap();
    assert!(close(spend, 3.0 * 0.008), "{row}");
    assert_eq!(row["custom_llm_provider"], "bedrock", "{row}");

    let (resp, row) = generate(&gw, json!({"model": "sd3", "prompt": "a lighthouse"}));
    assert_eq!(images(&resp).len(), 1, "{}", resp.text());
    assert!(close(row.unwrap()["spend"].as_f64().unwrap(), 0.08));
    let (resp, row) = generate(
        &gw,
        json!({"model": "sdxl", "prompt": "a lighthouse", "size": "1024x1024"}),
    );
    assert_eq!(images(&resp).len(), 1, "{}", resp.text());
    // 1024-x-1024/50-steps/stability.stable-diffusion-xl-v1.
    assert!(close(row.unwrap()["spend"].as_f64().unwrap(), 0.04));

    // Stability makes one image a call; its content filter is a 400.
    let resp = gw.post(
        "/v1/images/generations",
        &json!({"model": "sd3", "prompt": "x", "n": 2}),
    );
    assert_error(&resp, 400);
    let resp = gw.post(
        "/v1/images/generations",
        &json!({"model": "sd3", "prompt": "something filtered"}),
    );
    let err = assert_error(&resp, 400);
    assert!(
        err["message"].as_str().unwrap().contains("Filter reason"),
        "{err:?}"
    );
    // Titan's limits are AWS's; a wrong secret is refused by the signature check.
    let resp = gw.post(
        "/v1/images/generations",
        &json!({"model": "titan", "prompt": "x", "n": 6}),
    );
    assert_error(&resp, 400);
    let resp = gw.post(
        "/v1/images/generations",
        &json!({"model": "unsigned", "prompt": "x"}),
    );
    assert_eq!(resp.status, 403, "{}", resp.text());
}

#[test]
fn nova_canvas_generates_images_through_invoke_model() {
    let mock = MockServer::start(&[]);
    let gw = start(vec![
        bedrock("nova", "amazon.nova-canvas-v1:0", &mock, SECRET),
        bedrock(
            "nova-unsigned",
            "amazon.nova-canvas-v1:0",
            &mock,
            "not-the-secret",
        ),
    ]);
    let (resp, row) = generate(
        &gw,
        json!({"model": "nova", "prompt": "a lighthouse at dusk", "n": 2, "size": "1024x1024", "quality": "hd", "seed": 12}),
    );
    assert_eq!(resp.status, 200, "{}", resp.text());
    assert_eq!(images(&resp).len(), 2);
    let row = row.unwrap();
    assert_eq!(row["custom_llm_provider"], "bedrock", "{row}");
    assert_eq!(row["call_type"], "aimage_generation", "{row}");
    // amazon.nova-canvas-v1:0: 0.06 USD a generated image.
    let spend = row["spend"].as_f64().unwrap();
    assert!(close(spend, 2.0 * 0.06), "{row}");

    // Nova Canvas's own tasks, with their parameters, pass through.
    let (resp, row) = generate(
        &gw,
        json!({"model": "nova", "prompt": "a red lighthouse", "taskType": "COLOR_GUIDED_GENERATION",
               "colorGuidedGenerationParams": {"colors": ["#FF0000", "#FFFFFF"]},
               "imageGenerationConfig": {"cfgScale": 6.5}}),
    );
    assert_eq!(images(&resp).len(), 1, "{}", resp.text());
    assert!(close(row.unwrap()["spend"].as_f64().unwrap(), 0.06));

    // AWS's refusals are relayed; a task Nova Canvas has no translation
    // for never reaches it; a wrong secret fails the signature check.
    let resp = gw.post(
        "/v1/images/generations",
        &json!({"model": "nova", "prompt": "something filtered"}),
    );
    let err = assert_error(&resp, 400);
    assert!(
        err["message"].as_str().unwrap().contains("content filters"),
        "{err:?}"
    );
    let resp = gw.post(
        "/v1/images/generations",
        &json!({"model": "nova", "prompt": "x", "n": 6}),
    );
    let err = assert_error(&resp, 400);
    assert!(
        err["message"].as_str().unwrap().contains("numberOfImages"),
        "{err:?}"
    );
    let resp = gw.post(
        "/v1/images/generations",
        &json!({"model": "nova", "prompt": "x", "taskType": "OUTPAINTING"}),
    );
    let err = assert_error(&resp, 400);
    assert_eq!(err["param"], "taskType", "{err:?}");
    let resp = gw.post(
        "/v1/images/generations",
        &json!({"model": "nova-unsigned", "prompt": "x"}),
    );
    assert_eq!(resp.status, 403, "{}", resp.text());
}

#[test]
fn the_openai_sdk_generates_images_on_imagen_and_titan() {
    let mock = MockServer::start(&[]);
    let key = key_file(mock.port());
    let gw = start(vec![
        json!({"model_name": "imagen", "litellm_params": {
            "model": "vertex_ai/imagen-3.0-generate-002",
            "api_base": format!("http://127.0.0.1:{}", mock.port()),
            "vertex_credentials": key.path().to_str().unwrap(),
        }}),
        bedrock("titan", "amazon.titan-image-generator-v2:0", &mock, SECRET),
    ]);
    let base_url = format!("http://127.0.0.1:{}/v1", gw.port());
    let run = e2e::python::run_script(
        "test_cloud_images.py",
        &[
            ("GATEWAY_BASE_URL", &base_url),
            ("GATEWAY_MASTER_KEY", MASTER_KEY),
            ("GATEWAY_IMAGEN_MODEL", "imagen"),
            ("GATEWAY_TITAN_MODEL", "titan"),
        ],
        std::time::Duration::from_secs(60),
    );
    let text = run.output;
    let status = run
        .status
        .unwrap_or_else(|| panic!("test_cloud_images.py timed out:\n{text}"));
    assert!(status.success(), "{text}\n{}", gw.output());
    assert_eq!(text.matches("PASS ").count(), 3, "{text}");
}
