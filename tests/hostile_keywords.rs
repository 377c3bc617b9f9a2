//! Keyword guardrails against spelling (contracts 13 and 14), from outside: a blocked keyword written with other
//! whitespace, separators, comments or blank fillers, hidden characters, fullwidth, look-alike or confusable letters,
//! or split over two arguments is still blocked on input; an upstream answer spelled around a keyword is blocked on
//! output; ordinary calls pass, and what the upstream receives is what the client sent, byte for byte (the
//! normalisation is for matching only).

mod common;
#[path = "common/mcp.rs"]
mod mcp;

use common::API_KEY;
use mcp::*;
use serde_json::{Value, json};

/// A gateway whose one server `mock` checks input against the plugin's keyword (written with capitals and a double
/// space, as a config may) and output against its own extra keyword, written the same way.
fn start() -> TestGateway {
    let mut server = mock_server("mock");
    server["input_guardrails_policy"] = json!({"enabled": true, "policy_name": "default"});
    server["output_guardrails_policy"] =
        json!({"enabled": true, "additional_config": {"blocked_keywords": ["Top  SECRET"]}});
    let mut config = config_with(vec![server], json!({}));
    config["plugins"]["guardrails"] =
        json!({"provider": "custom_keyword", "config": {"blocked_keywords": ["DROP  Table"]}});
    TestGateway::start(&config)
}

/// `gw_secure_call_tools` on `mock` with the given calls; the answer's `results`.
fn secure_call(gw: &TestGateway, list: &[(&str, Value)]) -> Vec<Value> {
    let answer = runtime().block_on(async {
        let client = connect(&gw.mcp, API_KEY).await;
        let answer = call(&client, "gw_secure_call_tools", calls("mock", list)).await;
        client.cancel().await.unwrap();
        answer
    });
    answer["results"].as_array().cloned().unwrap_or_else(|| panic!("no results: {answer}"))
}

/// Whether `result` is the blocked result of the keyword guardrail at `stage`, naming `keyword` as configured.
fn blocked_by_keyword(result: &Value, stage: &str, keyword: &str) -> bool {
    let violations = result["violations"].as_array().cloned().unwrap_or_default();
    result["status"] == json!("blocked")
        && result["error_code"] == json!("GUARDRAIL_VIOLATION")
        && result["stage"] == json!(stage)
        && violations.len() == 1
        && violations[0]["type"] == json!("keyword_detector")
        && violations[0]["detector"] == json!("custom_keyword")
        && violations[0]["message"].as_str().is_some_and(|m| m.contains(keyword))
}

/// Asserts that every case was blocked, naming all those that were not.
#[track_caller]
fn assert_all_blocked(cases: &[&str], results: &[Value], stage: &str, keyword: &str) {
    let passed: Vec<String> = cases
        .iter()
        .zip(results)
        .filter(|(_, result)| !blocked_by_keyword(result, stage, keyword))
        .map(|(case, result)| format!("{case}: {result}"))
        .collect();
    assert!(passed.is_empty(), "not blocked on {stage}:\n{}", passed.join("\n"));
}

/// The spellings of "drop table" that once passed, each as the `text` of an `echo` call.
const SPELLINGS: [(&str, &str); 11] = [
    ("plain", "please drop table users"),
    ("no-break space", "drop\u{00A0}table"),
    ("tab", "drop\ttable"),
    ("newline", "drop\ntable"),
    ("double space", "drop  table"),
    ("zero-width space in a word", "dr\u{200B}op table"),
    ("zero-width space beside the space", "drop\u{200B} table"),
    ("soft hyphen", "dr\u{00AD}op ta\u{00AD}ble"),
    ("fullwidth letters", "ｄｒｏｐ ｔａｂｌｅ"),
    ("Greek omicron", "drοp table"),
    ("all at once", "Ｄ\u{200D}RΟP\u{00A0}\t ТＡble"),
];

#[test]
fn a_blocked_keyword_is_blocked_on_input_however_it_is_spelled() {
    let gw = start();
    let mut list: Vec<(&str, Value)> = SPELLINGS.iter().map(|(_, text)| ("echo", json!({"text": text}))).collect();
    list.push(("echo", json!({"a": "drop", "b": "table"})));
    // An ordinary call, spelled as oddly as the others: it passes, and the upstream gets it byte for byte.
    let ordinary = "ＬＩＳＴ\u{00A0}the\ttables we mαy  drop\u{200B} later,\nsoft hy\u{00AD}phen";
    list.push(("echo", json!({"text": ordinary})));
    let results = secure_call(&gw, &list);
    assert_eq!(results.len(), list.len());
    let mut cases: Vec<&str> = SPELLINGS.iter().map(|(case, _)| *case).collect();
    cases.push("split over two arguments");
    assert_all_blocked(&cases, &results, "input", "DROP  Table");
    let result = &results[SPELLINGS.len() + 1];
    assert_eq!(success_text(result, "echo"), ordinary, "an ordinary call passes, its text never normalised");
    assert_eq!(result["response"]["structuredContent"]["text"], json!(ordinary));
}

#[test]
fn an_upstream_answer_spelled_around_a_blocked_keyword_is_blocked_on_output() {
    let gw = start();
    // The input policy does not know "top secret": the upstream echoes it, and the output check must catch it.
    let answers = [
        ("plain", "this is top secret"),
        ("no-break space and capitals", "this is TOP\u{00A0}Secret"),
        ("tab and newline", "top\t\nsecret"),
        ("zero-width joiner", "to\u{200D}p secret"),
        ("fullwidth", "ｔｏｐ ｓｅｃｒｅｔ"),
        ("Cyrillic o, p, e, c", "tор ѕесrеt"),
    ];
    let list: Vec<(&str, Value)> = answers.iter().map(|(_, text)| ("echo", json!({"text": text}))).collect();
    let results = secure_call(&gw, &list);
    let cases: Vec<&str> = answers.iter().map(|(case, _)| *case).collect();
    assert_all_blocked(&cases, &results, "output", "Top  SECRET");
    let results = secure_call(&gw, &[("echo", json!({"text": "top of the secretariat"}))]);
    assert_eq!(success_text(&results[0], "echo"), "top of the secretariat", "an ordinary answer passes");
}

/// The spellings of contract 14: separators and comments, blank fillers, confusables (TS #39 skeletons).
const CONTRACT_14_SPELLINGS: [(&str, &str); 14] = [
    ("underscore", "drop_table"),
    ("hyphen", "drop-table"),
    ("empty comment", "drop/**/table"),
    ("comment with text", "DROP/* harmless */TABLE users"),
    ("dot", "drop.table"),
    ("slash", "drop/table"),
    ("Braille blank", "drop\u{2800}table"),
    ("Hangul filler", "drop\u{3164}table"),
    ("Hangul choseong filler", "drop\u{115F}table"),
    ("halfwidth Hangul filler", "drop\u{FFA0}table"),
    ("Mongolian vowel separator", "drop\u{180E}table"),
    ("a mix of separators", "drop _-/. table"),
    ("Cherokee and Lisu capitals", "ᎠᏒꓳᏢ ꓔꓮꓐꓡꓰ"),
    ("keyword inside a comment", "select 1 /* drop table */"),
];

#[test]
fn contract_14_spellings_are_blocked_on_input_and_on_output() {
    let gw = start();
    let mut list: Vec<(&str, Value)> =
        CONTRACT_14_SPELLINGS.iter().map(|(_, text)| ("echo", json!({"text": text}))).collect();
    // Ordinary text full of separators and comments passes, untouched.
    let ordinary = "see /docs/drop-in_tables.md /* v1.2 */ and tab-le drop";
    list.push(("echo", json!({"text": ordinary})));
    let results = secure_call(&gw, &list);
    let cases: Vec<&str> = CONTRACT_14_SPELLINGS.iter().map(|(case, _)| *case).collect();
    assert_all_blocked(&cases, &results, "input", "DROP  Table");
    assert_eq!(success_text(&results[CONTRACT_14_SPELLINGS.len()], "echo"), ordinary);

    // The same spellings of the output keyword in the upstream's answer.
    let answers = [
        ("underscore", "top_secret"),
        ("comment", "top/**/secret"),
        ("Braille blank", "top\u{2800}secret"),
        ("Hangul filler", "TOP\u{3164}SECRET"),
        ("Mongolian vowel separator", "top\u{180E}secret"),
        ("confusables", "tօp ꜱecret"),
    ];
    let list: Vec<(&str, Value)> = answers.iter().map(|(_, text)| ("echo", json!({"text": text}))).collect();
    let results = secure_call(&gw, &list);
    let cases: Vec<&str> = answers.iter().map(|(case, _)| *case).collect();
    assert_all_blocked(&cases, &results, "output", "Top  SECRET");
}

#[test]
fn a_keyword_written_with_separators_matches_its_own_spelling_and_the_others() {
    let mut config = config_with(vec![mock_server("mock")], json!({}));
    config["plugins"]["guardrails"] =
        json!({"provider": "custom_keyword", "config": {"blocked_keywords": ["rm -rf", "api_key", ".env"]}});
    config["mcp_configs"][common::CONFIG_ID]["mcp_config"][0]["input_guardrails_policy"] =
        json!({"enabled": true, "policy_name": "default"});
    let gw = TestGateway::start(&config);
    let texts = ["rm -rf /", "RM_-RF", "rm\u{2800}rf", "the api_key", "API-KEY", "cat .env", "cat x_env"];
    let keywords = ["rm -rf", "rm -rf", "rm -rf", "api_key", "api_key", ".env", ".env"];
    let mut list: Vec<(&str, Value)> = texts.iter().map(|text| ("echo", json!({"text": text}))).collect();
    list.push(("echo", json!({"text": "myenv, rmrf, apikey"})));
    let results = secure_call(&gw, &list);
    for ((text, keyword), result) in texts.iter().zip(keywords).zip(&results) {
        assert!(blocked_by_keyword(result, "input", keyword), "{text:?} not blocked by {keyword:?}: {result}");
    }
    assert_eq!(success_text(&results[texts.len()], "echo"), "myenv, rmrf, apikey");
}
