//! Contract 13, "Names": configuration and project names are 1 to 128 characters without control characters and never
//! another object's id; the admin API refuses anything else with 400 and changes nothing.

mod common;

use std::fs;

use common::*;
use serde_json::json;

#[test]
fn names_with_control_characters_too_long_or_equal_to_another_id_are_refused() {
    let (_dir, gw) = start_fixture();
    let before = fs::read(&gw.config_path).unwrap();
    for name in ["a\u{0}b", "two\nlines", "tab\there", "", &"n".repeat(129)] {
        let r = gw.post("/api/v1/projects", &json!({"project_name": name}));
        assert_eq!(r.status, 400, "{name:?}: {}", r.text);
        let r = gw.post("/api/v1/configs", &json!({"mcp_config_name": name, "mcp_config": []}));
        assert_eq!(r.status, 400, "{name:?}: {}", r.text);
    }
    // A name equal to another object's id would make that id mean two objects.
    let r = gw.post("/api/v1/projects", &json!({"project_name": PROJECT_ID}));
    assert_eq!(r.status, 400, "{}", r.text);
    assert!(r.text.contains("id of another project"), "{}", r.text);
    let r = gw.post("/api/v1/configs", &json!({"mcp_config_name": CONFIG_ID, "mcp_config": []}));
    assert_eq!(r.status, 400, "{}", r.text);
    assert_eq!(fs::read(&gw.config_path).unwrap(), before, "nothing was written");
    // Ordinary names, Unicode included, are fine.
    gw.post("/api/v1/projects", &json!({"project_name": "Équipe données"})).ok(201);
}
