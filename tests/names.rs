//! Contract 13, "Names": configuration and project names are 1 to 128 characters without control characters and never
//! another object's id; the admin API refuses anything else with 400 and changes nothing. Contract 14 adds bidi
//! controls, line and paragraph separators and names made only of invisible characters, for e-mails too where they
//! apply; and "another object's id" means any object's: a project named after a configuration, a server after a
//! project.

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
        let r = gw.post("/api/v1/configs", &json!({"config_name": name}));
        assert_eq!(r.status, 400, "{name:?}: {}", r.text);
    }
    // A name equal to another object's id would make that id mean two objects.
    let r = gw.post("/api/v1/projects", &json!({"project_name": PROJECT_ID}));
    assert_eq!(r.status, 400, "{}", r.text);
    assert!(r.text.contains("id of another project"), "{}", r.text);
    let r = gw.post("/api/v1/configs", &json!({"config_name": CONFIG_ID}));
    assert_eq!(r.status, 400, "{}", r.text);
    assert_eq!(fs::read(&gw.config_path).unwrap(), before, "nothing was written");
    // Ordinary names, Unicode included, are fine.
    gw.post("/api/v1/projects", &json!({"project_name": "Équipe données"})).ok(201);
}

#[test]
fn names_with_bidi_controls_separators_or_nothing_visible_are_refused() {
    let (_dir, gw) = start_fixture();
    let before = fs::read(&gw.config_path).unwrap();
    let bidi = ["a\u{202A}b", "evil\u{202E}txt", "x\u{2066}y", "x\u{2069}", "\u{200E}x", "x\u{200F}", "x\u{061C}y"];
    let separators = ["line\u{2028}two", "para\u{2029}two"];
    let invisible = ["\u{200B}", "\u{FEFF}", "\u{00AD}", "\u{200B}\u{FEFF}\u{00AD}\u{2060}"];
    for name in bidi.iter().chain(&separators).chain(&invisible) {
        let r = gw.post("/api/v1/projects", &json!({"project_name": name}));
        assert_eq!(r.status, 400, "{name:?}: {}", r.text);
        assert_eq!(r.body["error"], json!("VALIDATION_ERROR"), "{name:?}: {}", r.text);
        let r = gw.post("/api/v1/configs", &json!({"config_name": name}));
        assert_eq!(r.status, 400, "{name:?}: {}", r.text);
        assert!(r.text.contains("must"), "refused for its name: {}", r.text);
        let r = gw.put(&format!("/api/v1/projects/{PROJECT_ID}"), &json!({"project_name": name}));
        assert_eq!(r.status, 400, "{name:?}: {}", r.text);
    }
    for email in ["ev\u{202E}il@example.com", "a\u{2028}b@example.com", "a@exa\u{2066}mple.com"] {
        let r = gw.post("/api/v1/users", &json!({"email": email}));
        assert_eq!(r.status, 400, "{email:?}: {}", r.text);
    }
    // Server names are plain ASCII already; one with a bidi control is refused all the same.
    let r = gw.post(
        &format!("/api/v1/configs/{CONFIG_ID}/servers"),
        &json!({"server_name": "s\u{202E}x", "config": {"command": "echo"}}),
    );
    assert_eq!(r.status, 400, "{}", r.text);
    assert_eq!(fs::read(&gw.config_path).unwrap(), before, "nothing was written");
    // A zero-width character inside a name that shows is not a name of nothing.
    gw.post("/api/v1/projects", &json!({"project_name": "beta\u{200B}team"})).ok(201);
}

#[test]
fn a_name_equal_to_an_object_of_another_kind_s_id_is_refused() {
    let (_dir, gw) = start_fixture();
    let before = fs::read(&gw.config_path).unwrap();
    for id in [CONFIG_ID, ALICE_ID] {
        let r = gw.post("/api/v1/projects", &json!({"project_name": id}));
        assert_eq!(r.status, 400, "{id}: {}", r.text);
        assert!(r.text.contains("is the id of another"), "{}", r.text);
    }
    for id in [PROJECT_ID, BOB_ID, SPARE_CONFIG_ID] {
        let r = gw.post("/api/v1/configs", &json!({"config_name": id}));
        assert_eq!(r.status, 400, "{id}: {}", r.text);
        assert!(r.text.contains("is the id of another"), "{}", r.text);
        let r = gw.post(
            &format!("/api/v1/configs/{CONFIG_ID}/servers"),
            &json!({"server_name": id, "config": {"command": "echo"}}),
        );
        assert_eq!(r.status, 400, "{id}: {}", r.text);
    }
    // Renaming an existing object to another's id is refused as well.
    let r = gw.put(&format!("/api/v1/projects/{PROJECT_ID}"), &json!({"project_name": CONFIG_ID}));
    assert_eq!(r.status, 400, "{}", r.text);
    assert_eq!(fs::read(&gw.config_path).unwrap(), before, "nothing was written");
}
