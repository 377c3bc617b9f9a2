//! Backup and restore stay in one directory (contract 13): `gw_backup_dir`, by default `backups` beside the config
//! file, created 0700. A path outside it (a device, another folder, a `..` or a symlinked folder that leads out) is
//! refused with 400 `VALIDATION_ERROR` and nothing is written; an existing file gets 409 `CONFLICT` unless
//! `"overwrite": true`; a backup is a regular 0600 file; a restore reads only a regular file of at most 64 MiB and
//! answers at once for `/dev/zero`, a FIFO or a huge file; a path the server cannot use is a 400, never a 500. The
//! command line follows the same rules in file mode and with `--admin-url`.
//!
//! The cheap checks come first in each test, so that a gateway without the confinement fails before it is asked to
//! read `/dev/zero` or a FIFO (which it would do until the request times out).

mod common;

use std::fs::{self, File};
use std::os::unix::fs::{FileTypeExt, PermissionsExt, symlink};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use common::*;
use reqwest::Method;
use serde_json::{Value, json};

/// A restore that cannot answer within this long is reading what it should not.
const QUICK: Duration = Duration::from_secs(5);
/// 64 MiB, the largest backup a restore reads.
const MAX_RESTORE_BYTES: u64 = 64 << 20;

/// The default backup directory of a gateway's config.
fn backups(gw: &Gateway) -> PathBuf {
    gw.config_path.parent().unwrap().join("backups")
}

/// A backup request; a relative `output_file` here names a file in the backup directory (the API itself takes
/// absolute paths only: see `a_relative_path_is_refused`).
fn backup(gw: &Gateway, mut body: Value) -> Resp {
    if let Some(name) = body["output_file"].as_str().filter(|name| !name.starts_with('/')) {
        body["output_file"] = json!(format!("{}/{name}", backups(gw).display()));
    }
    gw.post("/api/v1/system/backup", &body)
}

/// A restore on a client that gives up after [`QUICK`] (a hung request fails the test instead of hanging it).
fn restore_quickly(gw: &Gateway, input_file: &str) -> (Resp, Duration) {
    let quick = reqwest::blocking::Client::builder().no_proxy().timeout(QUICK).build().unwrap();
    let url = format!("{}/api/v1/system/restore", gw.admin);
    let started = Instant::now();
    let r = send(
        &quick,
        Method::POST,
        &url,
        Some(&format!("Bearer {ADMIN_KEY}")),
        Some(&json!({"input_file": input_file})),
    );
    (r, started.elapsed())
}

fn path_str(path: &Path) -> &str {
    path.to_str().unwrap()
}

#[track_caller]
fn assert_validation(r: &Resp, what: &str) {
    assert_eq!(r.status, 400, "{what}: {}", r.text);
    r.err(400, "VALIDATION_ERROR");
}

#[test]
fn backups_to_a_device_or_another_folder_are_refused_and_write_nothing() {
    let (_dir, gw) = start_fixture();
    let config_before = fs::read(&gw.config_path).unwrap();
    let outside = tempfile::tempdir().unwrap();
    let elsewhere = outside.path().join("stolen.json");
    assert_validation(&backup(&gw, json!({"output_file": path_str(&elsewhere)})), "a file in another folder");
    assert!(!elsewhere.exists(), "a backup was written outside the backup directory");

    assert_validation(&backup(&gw, json!({"output_file": "/dev/null"})), "/dev/null");
    assert_validation(&backup(&gw, json!({"output_file": "/dev/null", "overwrite": true})), "/dev/null, overwrite");
    let null = fs::metadata("/dev/null").unwrap();
    assert!(null.file_type().is_char_device(), "/dev/null is no longer a device");

    let cron = Path::new("/etc/cron.d/mcpgw-backup-confinement-test");
    assert_validation(&backup(&gw, json!({"output_file": path_str(cron), "overwrite": true})), "/etc/cron.d");
    assert!(!cron.exists(), "a backup was written to /etc/cron.d");
    assert_eq!(fs::read(&gw.config_path).unwrap(), config_before);
}

#[test]
fn dot_dot_and_symlinked_folders_that_lead_out_are_refused() {
    let (dir, gw) = start_fixture();
    let inside = backups(&gw);
    fs::create_dir(&inside).unwrap();
    let up = format!("{}/../escape.json", inside.display());
    assert_validation(&backup(&gw, json!({"output_file": up})), "an absolute path with ..");
    assert_validation(&backup(&gw, json!({"output_file": "../escape.json"})), "a relative path with ..");
    assert_validation(&backup(&gw, json!({"output_file": "sub/../../escape.json"})), "a deeper ..");
    assert!(!dir.path().join("escape.json").exists(), "a backup escaped through ..");

    let outside = tempfile::tempdir().unwrap();
    symlink(outside.path(), inside.join("link")).unwrap();
    let through_link = inside.join("link/x.json");
    assert_validation(&backup(&gw, json!({"output_file": path_str(&through_link)})), "a symlinked folder");
    assert_validation(&backup(&gw, json!({"output_file": "link/x.json", "overwrite": true})), "a symlinked folder");
    assert!(!outside.path().join("x.json").exists(), "a backup escaped through a symlinked folder");

    // A restore through the same folder is refused too, even of a good backup.
    backup(&gw, json!({"output_file": "good.json"})).ok(200);
    fs::copy(inside.join("good.json"), outside.path().join("good.json")).unwrap();
    let (r, _) = restore_quickly(&gw, path_str(&inside.join("link/good.json")));
    assert_validation(&r, "a restore through a symlinked folder");
    let (r, _) = restore_quickly(&gw, path_str(&outside.path().join("good.json")));
    assert_validation(&r, "a restore from another folder");
    // A folder inside the backup directory is fine.
    fs::create_dir(inside.join("daily")).unwrap();
    backup(&gw, json!({"output_file": "daily/one.json"})).ok(200);
    let (r, _) = restore_quickly(&gw, path_str(&inside.join("daily/one.json")));
    r.ok(200);
}

#[test]
fn an_existing_file_is_kept_unless_overwrite_is_true_and_backups_are_0600() {
    let (_dir, gw) = start_fixture();
    backup(&gw, json!({"output_file": "b.json"})).ok(200);
    let inside = backups(&gw);
    assert_eq!(file_mode(&inside), 0o700, "the backup directory is created 0700");
    let file = inside.join("b.json");
    assert!(fs::symlink_metadata(&file).unwrap().file_type().is_file());
    assert_eq!(file_mode(&file), 0o600, "backup file mode");
    assert!(read_json(&file)["apikeys"].is_object());

    fs::write(&file, b"precious").unwrap();
    fs::set_permissions(&file, fs::Permissions::from_mode(0o644)).unwrap();
    let r = backup(&gw, json!({"output_file": "b.json"}));
    assert_eq!(r.status, 409, "{}", r.text);
    r.err(409, "CONFLICT");
    let r = backup(&gw, json!({"output_file": path_str(&file), "overwrite": false}));
    r.err(409, "CONFLICT");
    assert_eq!(fs::read(&file).unwrap(), b"precious", "an existing file was replaced");

    backup(&gw, json!({"output_file": "b.json", "overwrite": true})).ok(200);
    assert!(read_json(&file)["apikeys"].is_object(), "overwrite did not replace the file");
    assert_eq!(file_mode(&file), 0o600, "a replaced backup is 0600 too");

    // A symlink in the directory is never followed: a conflict, and with overwrite a refusal.
    let outside = tempfile::tempdir().unwrap();
    let target = outside.path().join("target.json");
    fs::write(&target, b"outside").unwrap();
    symlink(&target, inside.join("link.json")).unwrap();
    backup(&gw, json!({"output_file": "link.json"})).err(409, "CONFLICT");
    assert_validation(&backup(&gw, json!({"output_file": "link.json", "overwrite": true})), "a symlink");
    assert_eq!(fs::read(&target).unwrap(), b"outside", "a backup was written through a symlink");
    assert!(fs::symlink_metadata(inside.join("link.json")).unwrap().file_type().is_symlink());
}

#[test]
fn restore_reads_only_a_regular_file_of_at_most_64_mib_and_answers_at_once() {
    let (_dir, gw) = start_fixture();
    let config_before = fs::read(&gw.config_path).unwrap();
    let inside = backups(&gw);
    fs::create_dir(&inside).unwrap();
    backup(&gw, json!({"output_file": path_str(&inside.join("good.json"))})).ok(200);

    // A sparse file one byte over the cap: refused for its size, without being read.
    let huge = inside.join("huge.json");
    File::create(&huge).unwrap().set_len(MAX_RESTORE_BYTES + 1).unwrap();
    let (r, took) = restore_quickly(&gw, path_str(&huge));
    let detail = r.err(400, "VALIDATION_ERROR");
    assert!(detail.contains("64 MiB"), "the refusal names the cap: {detail}");
    assert!(took < QUICK, "{took:?}");

    let fifo = inside.join("pipe.json");
    nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
    symlink("/dev/zero", inside.join("zero.json")).unwrap();
    fs::create_dir(inside.join("folder.json")).unwrap();
    let named = |name: &str| path_str(&inside.join(name)).to_string();
    let inputs =
        ["/dev/zero".to_string(), named("pipe.json"), named("zero.json"), named("folder.json"), named("missing.json")];
    for input in &inputs {
        let (r, took) = restore_quickly(&gw, input);
        assert_validation(&r, input);
        assert!(took < QUICK, "{input}: {took:?}");
    }
    assert_eq!(fs::read(&gw.config_path).unwrap(), config_before, "a refused restore changed the file");
    assert!(fs::metadata(&fifo).unwrap().file_type().is_fifo());

    // The gateway is not stuck on any of them: a good backup still restores.
    let good = backups(&gw).join("good.json");
    let (r, _) = restore_quickly(&gw, path_str(&good));
    r.ok(200);
    assert_eq!(gw.system_health()["status"], json!("healthy"));
}

#[test]
fn a_good_backup_restores_and_the_restore_keeps_the_backup_directory() {
    let (dir, path) = fixture_dir();
    let mut config = fixture();
    config["common_mcp_gateway_config"]["gw_backup_dir"] = json!("saved");
    replace_json(&path, &config);
    let gw = Gateway::start(&path);
    let saved = dir.path().join("saved/state.json");
    backup(&gw, json!({"output_file": path_str(&saved)})).ok(200);
    assert_eq!(file_mode(&saved), 0o600);
    assert!(!backups(&gw).exists(), "the default folder is not used when gw_backup_dir is set");

    gw.delete(&format!("/api/v1/users/{BOB_ID}")).ok(200);
    // The operator moves the backup directory and the backup with it: the restore works once the edit is loaded.
    let mut moved = read_json(&path);
    moved["common_mcp_gateway_config"]["gw_backup_dir"] = json!("moved");
    fs::create_dir(dir.path().join("moved")).unwrap();
    fs::rename(&saved, dir.path().join("moved/state.json")).unwrap();
    replace_json(&path, &moved);
    let moved_in = wait_until(RELOAD_DEADLINE, || {
        let (r, _) = restore_quickly(&gw, path_str(&dir.path().join("moved/state.json")));
        r.status == 200
    });
    assert!(moved_in, "the restore from the moved directory never worked: {}", gw.logs());
    gw.get(&format!("/api/v1/users/{BOB_ID}")).ok(200);
    // The backup said "saved"; the restored file keeps the directory the operator set.
    assert_eq!(read_json(&path)["common_mcp_gateway_config"]["gw_backup_dir"], json!("moved"));
}

#[test]
fn paths_the_server_cannot_use_are_400_never_500() {
    let (dir, path) = fixture_dir();
    let gw = Gateway::start(&path);
    backup(&gw, json!({"output_file": "first.json"})).ok(200);
    fs::create_dir(backups(&gw).join("sub")).unwrap();
    let nul = "a\u{0}b.json";
    let bodies = [
        json!({"output_file": path_str(&backups(&gw).join("sub")), "overwrite": true}),
        json!({"output_file": "sub", "overwrite": true}),
        json!({"output_file": "no-such-folder/x.json"}),
        json!({"output_file": "first.json/x.json"}),
        json!({"output_file": "sub/"}),
        json!({"output_file": "."}),
        json!({"output_file": ".."}),
        json!({"output_file": ""}),
        json!({"output_file": nul}),
        json!({"output_file": 17}),
        json!({"output_file": "x.json", "overwrite": "yes"}),
        json!({}),
    ];
    for body in &bodies {
        assert_validation(&backup(&gw, body.clone()), &body.to_string());
    }
    backup(&gw, json!({"output_file": "sub"})).err(409, "CONFLICT");
    for input in ["sub", "no-such-folder/x.json", "", nul, ".."] {
        let (r, _) = restore_quickly(&gw, input);
        assert_validation(&r, input);
    }
    drop(gw);

    // A backup directory that cannot be made (its parent is a file) is a 400 too.
    let mut config = read_json(&path);
    config["common_mcp_gateway_config"]["gw_backup_dir"] = json!("gw_mcp_config.json/backups");
    replace_json(&path, &config);
    let gw = Gateway::start(&path);
    let unusable = dir.path().join("gw_mcp_config.json/backups/x.json");
    assert_validation(&backup(&gw, json!({"output_file": path_str(&unusable)})), "an unusable backup directory");
    let (r, _) = restore_quickly(&gw, path_str(&unusable));
    assert_validation(&r, "an unusable backup directory");
    assert!(fs::metadata(dir.path().join("gw_mcp_config.json")).unwrap().is_file());
}

/// The exit code of a `mcpgw` run (the code of its validation refusal is 3, of a conflict 5).
fn cli(args: &[&str], envs: &[(&str, &str)]) -> (i32, String) {
    let (status, out, err) = run_cli(args, envs);
    (status.code().unwrap_or(-1), format!("{out}{err}"))
}

#[test]
fn the_command_line_follows_the_same_rules_in_file_mode_and_with_admin_url() {
    let (dir, path) = fixture_dir();
    let config = path_str(&path).to_string();
    let file_mode_run = |args: &[&str]| {
        let mut all = args.to_vec();
        all.extend(["--config", config.as_str()]);
        cli(&all, &[])
    };
    let outside = tempfile::tempdir().unwrap();
    let elsewhere = outside.path().join("x.json");
    let cli_json = dir.path().join("backups/cli.json");
    let cli_json = path_str(&cli_json);
    let api_json = dir.path().join("backups/api.json");
    let api_json = path_str(&api_json);
    let (code, text) = file_mode_run(&["system", "backup", path_str(&elsewhere)]);
    assert_eq!(code, 3, "file mode, outside: {text}");
    assert!(!elsewhere.exists(), "file mode wrote outside the backup directory");
    let (code, text) = file_mode_run(&["system", "backup", "/dev/null", "--overwrite"]);
    assert_eq!(code, 3, "file mode, /dev/null: {text}");
    assert!(fs::metadata("/dev/null").unwrap().file_type().is_char_device());

    let (code, text) = file_mode_run(&["system", "backup", cli_json]);
    assert_eq!(code, 0, "{text}");
    let written = dir.path().join("backups/cli.json");
    assert_eq!(file_mode(&written), 0o600);
    assert_eq!(file_mode(&dir.path().join("backups")), 0o700);
    let (code, text) = file_mode_run(&["system", "backup", cli_json]);
    assert_eq!(code, 5, "an existing file is a conflict: {text}");
    let (code, text) = file_mode_run(&["system", "backup", cli_json, "--overwrite"]);
    assert_eq!(code, 0, "{text}");
    fs::copy(&written, outside.path().join("cli.json")).unwrap();
    let (code, text) = file_mode_run(&["system", "restore", path_str(&outside.path().join("cli.json"))]);
    assert_eq!(code, 3, "file mode, restore from outside: {text}");
    let started = Instant::now();
    let (code, text) = file_mode_run(&["system", "restore", "/dev/zero"]);
    assert_eq!(code, 3, "file mode, /dev/zero: {text}");
    assert!(started.elapsed() < QUICK * 2, "{:?}", started.elapsed());
    let (code, text) = file_mode_run(&["system", "restore", cli_json]);
    assert_eq!(code, 0, "{text}");

    let gw = Gateway::start(&path);
    let api = |args: &[&str]| {
        let mut all = args.to_vec();
        all.extend(["--admin-url", gw.admin.as_str()]);
        cli(&all, &[("GW_ADMIN_APIKEY", ADMIN_KEY)])
    };
    let (code, text) = api(&["system", "backup", path_str(&elsewhere)]);
    assert_eq!(code, 3, "admin url, outside: {text}");
    assert!(!elsewhere.exists(), "the admin API wrote outside the backup directory");
    let (code, text) = api(&["system", "backup", cli_json]);
    assert_eq!(code, 5, "admin url, existing file: {text}");
    let (code, text) = api(&["system", "backup", api_json]);
    assert_eq!(code, 0, "{text}");
    assert_eq!(file_mode(&dir.path().join("backups/api.json")), 0o600);
    let (code, text) = api(&["system", "backup", api_json, "--overwrite"]);
    assert_eq!(code, 0, "{text}");
    let (code, text) = api(&["system", "restore", api_json]);
    assert_eq!(code, 0, "{text}");
    let (code, text) = api(&["system", "restore", "/dev/zero"]);
    assert_eq!(code, 3, "admin url, /dev/zero: {text}");
    // With --admin-url the path is the server's: a relative one is refused, as the API refuses it.
    let (code, text) = api(&["system", "backup", "api.json"]);
    assert_eq!(code, 3, "admin url, relative: {text}");
}

#[test]
fn a_relative_path_is_refused() {
    let (dir, gw) = start_fixture();
    for body in [json!({"output_file": "relative.json"}), json!({"output_file": "backups/relative.json"})] {
        let r = gw.post("/api/v1/system/backup", &body);
        assert_validation(&r, "a relative output_file");
        assert!(r.body["detail"].as_str().unwrap_or("").contains("absolute"), "{}", r.text);
    }
    let r = gw.post("/api/v1/system/restore", &json!({"input_file": "relative.json"}));
    assert_validation(&r, "a relative input_file");
    assert!(!dir.path().join("relative.json").exists() && !dir.path().join("backups/relative.json").exists());
}
