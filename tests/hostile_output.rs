//! Contract 13, "Output guardrails see every string", from outside: a hostile upstream hides a blocked keyword in
//! every place of a tool result a client would receive (an embedded resource's text or URI, a `resource_link`'s
//! name, description or URI, annotations, `_meta`, a field MCP does not define, `structuredContent`), and each time
//! the output stage blocks the call (`GUARDRAIL_VIOLATION`, stage `output`). An upstream error's message arrives cut
//! to 1 KiB, withheld when it holds a blocked keyword, with redacted data restored; PII placeholders are restored
//! wherever the upstream echoes them; and a result without blocked words arrives exactly as the upstream sent it.
//!
//! The mock upstream's `raw` tool answers its `result` argument verbatim, and `rpc_error` answers a JSON-RPC error
//! with the message it is given. Input guardrails are off (except for PII redaction), so the keyword reaches the
//! upstream in the arguments and comes back in the result.

mod common;
#[path = "common/mcp.rs"]
mod mcp;

use common::API_KEY;
use mcp::*;
use serde_json::{Value, json};

/// What the output stage blocks: a phrase, and a word for the places (URIs) where a space would look out of place.
const BLOCKED: [&str; 2] = ["top secret", "zebracorn"];

/// A gateway whose server `mock` has the output keyword check on (and the given input policy).
fn start(input: Value) -> TestGateway {
    let mut server = mock_server("mock");
    server["input_guardrails_policy"] = input;
    server["output_guardrails_policy"] = json!({"enabled": true});
    let mut config = config_with(vec![server], json!({}));
    config["plugins"]["guardrails"] = json!({"provider": "custom_keyword", "config": {"blocked_keywords": BLOCKED}});
    TestGateway::start(&config)
}

fn start_plain() -> TestGateway {
    start(json!({"enabled": false}))
}

/// Runs `gw_secure_call_tools` on `mock` with the given calls and returns the results.
fn secure_call(gw: &TestGateway, list: &[(&str, Value)]) -> Vec<Value> {
    runtime().block_on(async {
        let client = connect(&gw.mcp, API_KEY).await;
        let answer = call(&client, "gw_secure_call_tools", calls("mock", list)).await;
        client.cancel().await.unwrap();
        answer["results"].as_array().cloned().unwrap_or_else(|| panic!("no results: {answer}"))
    })
}

/// The upstream answers `result` as its `CallToolResult`; the gateway's result of that call.
fn raw(gw: &TestGateway, result: Value) -> Value {
    let mut results = secure_call(gw, &[("raw", json!({"result": result}))]);
    results.remove(0)
}

#[track_caller]
fn assert_blocked_output(result: &Value) {
    assert_eq!(result["status"], json!("blocked"), "{result}");
    assert_eq!(result["error_code"], json!("GUARDRAIL_VIOLATION"), "{result}");
    assert_eq!(result["stage"], json!("output"), "{result}");
    let violations = result["violations"].as_array().cloned().unwrap_or_default();
    assert_eq!(violations.first().map(|v| &v["type"]), Some(&json!("keyword_detector")), "{result}");
}

/// A result whose only text item is harmless, with `item` after it.
fn with_item(item: Value) -> Value {
    json!({"content": [{"type": "text", "text": "all fine"}, item]})
}

#[test]
fn a_blocked_keyword_in_an_embedded_resources_text_is_blocked() {
    let gw = start_plain();
    let resource = json!({"uri": "file:///notes.txt", "mimeType": "text/plain", "text": "the top secret plan"});
    assert_blocked_output(&raw(&gw, with_item(json!({"type": "resource", "resource": resource}))));
}

#[test]
fn a_blocked_keyword_in_an_embedded_resources_uri_is_blocked() {
    let gw = start_plain();
    let resource = json!({"uri": "file:///zebracorn/notes.txt", "mimeType": "text/plain", "text": "harmless"});
    assert_blocked_output(&raw(&gw, with_item(json!({"type": "resource", "resource": resource}))));
}

#[test]
fn a_blocked_keyword_in_a_resource_links_name_description_or_uri_is_blocked() {
    let gw = start_plain();
    let link = json!({"type": "resource_link", "name": "notes", "description": "my notes", "uri": "file:///notes.txt"});
    assert_eq!(raw(&gw, with_item(link.clone()))["status"], json!("success"), "the link alone passes");
    for (field, hidden) in
        [("name", "top secret"), ("description", "the top secret notes"), ("uri", "file:///zebracorn")]
    {
        let mut link = link.clone();
        link[field] = json!(hidden);
        let result = raw(&gw, with_item(link));
        assert_eq!(result["status"], json!("blocked"), "resource_link {field}: {result}");
        assert_blocked_output(&result);
    }
}

#[test]
fn a_blocked_keyword_in_annotations_is_blocked() {
    let gw = start_plain();
    let annotations = json!({"audience": ["user"], "lastModified": "top secret"});
    let item = json!({"type": "text", "text": "all fine", "annotations": annotations});
    assert_blocked_output(&raw(&gw, json!({"content": [item]})));
}

#[test]
fn a_blocked_keyword_in_meta_is_blocked() {
    let gw = start_plain();
    let result =
        json!({"content": [{"type": "text", "text": "all fine"}], "_meta": {"note": {"deep": ["top secret"]}}});
    assert_blocked_output(&raw(&gw, result));
    let in_item = json!({"type": "text", "text": "all fine", "_meta": {"note": "top secret"}});
    assert_blocked_output(&raw(&gw, json!({"content": [in_item]})));
}

#[test]
fn a_blocked_keyword_in_a_field_mcp_does_not_define_is_blocked() {
    let gw = start_plain();
    let result = json!({"content": [{"type": "text", "text": "all fine"}], "x-vendor-note": "top secret"});
    assert_blocked_output(&raw(&gw, result));
    let in_item = json!({"type": "text", "text": "all fine", "hint": ["top secret"]});
    assert_blocked_output(&raw(&gw, json!({"content": [in_item]})));
}

#[test]
fn a_blocked_keyword_in_structured_content_is_blocked_whatever_json_escapes() {
    let gw = start_plain();
    // As JSON text, the tab is `\t`: only a check of the string itself sees the words `top secret`.
    let result =
        json!({"content": [{"type": "text", "text": "all fine"}], "structuredContent": {"note": "top\tsecret"}});
    assert_blocked_output(&raw(&gw, result));
}

#[test]
fn an_upstream_error_of_100_kb_arrives_cut_to_1_kib() {
    let gw = start_plain();
    let results = secure_call(&gw, &[("rpc_error", json!({"message": "boom ", "bytes": 100_000}))]);
    let message = assert_error(&results[0], "UPSTREAM_ERROR");
    assert!(message.len() <= 1024, "{} bytes: {message:.200}", message.len());
    assert!(message.contains("boom x"), "the start of the upstream's message stays: {message}");
    // Cut on a character boundary too: a message of two-byte characters.
    let results = secure_call(&gw, &[("rpc_error", json!({"message": "é".repeat(2_000)}))]);
    let message = assert_error(&results[0], "UPSTREAM_ERROR");
    assert!(message.len() <= 1024 && message.ends_with('é'), "{} bytes: {message:.200}", message.len());
}

#[test]
fn an_upstream_error_with_a_blocked_keyword_is_withheld() {
    let gw = start_plain();
    let results = secure_call(
        &gw,
        &[
            ("rpc_error", json!({"message": "failed: the Top  Secret is out"})),
            ("rpc_error", json!({"message": "failed: nothing to hide"})),
        ],
    );
    assert_eq!(assert_error(&results[0], "UPSTREAM_ERROR"), "upstream error (message withheld by guardrails)");
    assert!(assert_error(&results[1], "UPSTREAM_ERROR").contains("failed: nothing to hide"), "{}", results[1]);
    // A keyword past the first KiB is cut off before the check: the message is relayed, cut.
    let late = format!("failed: {} top secret", "x".repeat(2_000));
    let results = secure_call(&gw, &[("rpc_error", json!({"message": late}))]);
    let message = assert_error(&results[0], "UPSTREAM_ERROR");
    assert!(message.len() <= 1024 && !message.contains("secret"), "{message:.200}");
}

#[test]
fn personal_data_is_restored_wherever_the_upstream_echoes_its_placeholder() {
    let gw = start(json!({"enabled": true, "additional_config": {"pii_redaction": true}}));
    let email = "jane.doe@example.com";
    let sent = json!({
        "content": [
            {"type": "text", "text": "see the resource"},
            {"type": "resource", "resource": {"uri": format!("mailto:{email}"), "text": format!("write to {email}")}},
            {"type": "resource_link", "name": "contact", "description": email, "uri": "file:///contact"},
        ],
        "_meta": {"owner": email},
        "x-contact": [email],
    });
    let result = raw(&gw, sent.clone());
    assert_eq!(result["status"], json!("success"), "{result}");
    assert_eq!(result["response"], sent, "every placeholder restored");
    let results = secure_call(&gw, &[("rpc_error", json!({"message": format!("no mailbox {email}")}))]);
    let message = assert_error(&results[0], "UPSTREAM_ERROR");
    assert!(message.ends_with(&format!("no mailbox {email}")), "restored in an upstream error too: {message}");
    assert!(!gw.logs().contains(email), "personal data never reaches a log");
    drop(gw);

    // The upstream saw placeholders: with the placeholder blocked, the embedded resource's copy is found.
    let mut server = mock_server("mock");
    server["input_guardrails_policy"] = json!({"enabled": true, "additional_config": {"pii_redaction": true}});
    server["output_guardrails_policy"] =
        json!({"enabled": true, "additional_config": {"blocked_keywords": ["[EMAIL_1]"]}});
    let mut config = config_with(vec![server], json!({}));
    config["plugins"]["guardrails"] = json!({"provider": "custom_keyword", "config": {"blocked_keywords": []}});
    let gw = TestGateway::start(&config);
    let hidden = json!({"type": "resource", "resource": {"uri": "file:///a", "text": format!("write to {email}")}});
    assert_blocked_output(&raw(&gw, with_item(hidden)));
}

#[test]
fn a_result_without_blocked_words_arrives_exactly_as_sent() {
    let gw = start_plain();
    let sent = json!({
        "content": [
            {
                "type": "text",
                "text": "plain text, ünïcödé, tab\there",
                "annotations": {"audience": ["user"], "priority": 0.5},
            },
            {"type": "resource", "resource": {"uri": "file:///notes.txt", "mimeType": "text/plain", "text": "notes"}},
            {"type": "resource", "resource": {"uri": "file:///blob.bin", "blob": "AAECAwQ="}},
            {"type": "resource_link", "name": "notes", "description": "my notes", "uri": "file:///notes.txt"},
            {"type": "image", "data": "iVBORw0KGgo=", "mimeType": "image/png"},
        ],
        "structuredContent": {"count": 3, "items": ["a", "b", null, true], "nested": {"deep": [{"x": 1.25}]}},
        "_meta": {"trace": "abc"},
        "isError": false,
        "x-vendor": {"kept": [1, "two"]},
    });
    let result = raw(&gw, sent.clone());
    assert_eq!(result["status"], json!("success"), "{result}");
    assert_eq!(result["response"], sent);
    assert_eq!(result["response"].to_string(), sent.to_string(), "byte for byte");
    // The everyday case: a text item and its structured copy.
    let echoed = secure_call(&gw, &[("echo", json!({"text": "hello"}))]);
    assert_eq!(echoed[0]["response"]["content"], json!([{"type": "text", "text": "hello"}]));
    assert_eq!(echoed[0]["response"]["structuredContent"], json!({"text": "hello"}));
}
