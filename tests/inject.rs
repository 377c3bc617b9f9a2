//! `mcpgw inject` (contract 12), through the binary: every kind of workload gets the native sidecar, its config volume
//! from the Secret and `MCPGW_URL` in its agent containers; other documents and fields pass unchanged and keep their
//! key order; what was there (env, volumes, init containers) stays; a second run changes nothing; bad input is an
//! error on stderr with nothing on stdout, YAML nested deeper than 64 levels or larger than 4 MiB included.

use std::io::Write;
use std::path::PathBuf;
use std::process::{Command, Output, Stdio};

use serde::Deserialize;
use serde_json::{Value, json};

const URL: &str = "http://localhost:8000/mcp/";

fn examples(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("k8s/examples").join(name)
}

/// Runs `mcpgw inject ARGS` with `stdin` on its standard input.
fn inject(args: &[&str], stdin: &str) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_mcpgw"))
        .arg("inject")
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(stdin.as_bytes()).unwrap();
    child.wait_with_output().unwrap()
}

/// The output of a successful run.
#[track_caller]
fn injected(args: &[&str], stdin: &str) -> String {
    let out = inject(args, stdin);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "mcpgw inject failed: {stderr}");
    String::from_utf8(out.stdout).unwrap()
}

fn documents(text: &str) -> Vec<Value> {
    serde_norway::Deserializer::from_str(text)
        .map(|doc| Value::deserialize(doc).unwrap())
        .filter(|doc| !doc.is_null())
        .collect()
}

fn named<'a>(list: &'a Value, name: &str) -> Vec<&'a Value> {
    list.as_array().map(|items| items.iter().filter(|i| i["name"] == name).collect()).unwrap_or_default()
}

/// Checks one pod spec: the sidecar once, as a native sidecar with its probes; its volumes once; MCPGW_URL once in
/// every agent container.
#[track_caller]
fn assert_sidecar(pod: &Value, secret: &str) {
    let sidecars = named(&pod["initContainers"], "mcpgw");
    assert_eq!(sidecars.len(), 1, "one mcpgw init container: {pod:#}");
    let sidecar = sidecars[0];
    assert_eq!(sidecar["restartPolicy"], "Always");
    assert_eq!(sidecar["image"], format!("mcpgw:{}", env!("CARGO_PKG_VERSION")));
    assert_eq!(sidecar["args"], json!(["serve"]));
    assert_eq!(sidecar["startupProbe"]["httpGet"], json!({"path": "/readyz", "port": "metrics"}));
    assert_eq!(sidecar["livenessProbe"]["httpGet"]["path"], "/healthz");
    assert_eq!(sidecar["readinessProbe"]["httpGet"]["path"], "/readyz");
    let ports: Vec<_> = sidecar["ports"].as_array().unwrap().iter().map(|p| p["containerPort"].clone()).collect();
    assert_eq!(ports, [json!(8000), json!(8001), json!(9464)]);
    assert_eq!(named(&sidecar["env"], "GW_CONFIG_PATH")[0]["value"], "/etc/mcpgw/gw_mcp_config.json");
    assert_eq!(sidecar["securityContext"]["readOnlyRootFilesystem"], true);
    assert_eq!(named(&sidecar["volumeMounts"], "mcpgw-config")[0]["mountPath"], "/etc/mcpgw");
    assert!(named(&sidecar["volumeMounts"], "mcpgw-config")[0].get("subPath").is_none());
    let config = named(&pod["volumes"], "mcpgw-config");
    assert_eq!(config.len(), 1, "{pod:#}");
    assert_eq!(config[0]["secret"]["secretName"], secret);
    assert_eq!(named(&pod["volumes"], "mcpgw-tmp").len(), 1);
    assert_eq!(named(&pod["volumes"], "mcpgw-home").len(), 1);
    for container in pod["containers"].as_array().unwrap() {
        let urls = named(&container["env"], "MCPGW_URL");
        assert_eq!(urls.len(), 1, "one MCPGW_URL in {container:#}");
        assert_eq!(urls[0]["value"], URL);
    }
}

#[test]
fn a_deployment_gets_the_sidecar_and_the_documents_around_it_pass_unchanged() {
    let input = std::fs::read_to_string(examples("agent-deployment.yaml")).unwrap();
    let out = injected(&[examples("agent-deployment.yaml").to_str().unwrap()], "");
    let (before, after) = (documents(&input), documents(&out));
    assert_eq!(after.len(), 3);
    // The ConfigMap and the Service: unchanged, even the string "yes" that YAML 1.1 would read as a boolean.
    assert_eq!(after[0], before[0]);
    assert_eq!(after[2], before[2]);
    assert!(out.contains("VERBOSE: \"yes\""), "{out}");
    let pod = &after[1]["spec"]["template"]["spec"];
    assert_sidecar(pod, "mcpgw-config");
    // What was there stays, in its place: the init container first, the key, the volumes, the octal file mode.
    assert_eq!(pod["initContainers"][0]["name"], "wait-for-db");
    assert_eq!(pod["initContainers"][1]["name"], "mcpgw");
    let agent = &pod["containers"][0];
    assert_eq!(agent["env"][0]["name"], "MCP_GATEWAY_KEY");
    assert_eq!(agent["env"][1], json!({"name": "MCPGW_URL", "value": URL}));
    assert_eq!(pod["volumes"][0]["name"], "work");
    assert_eq!(pod["volumes"][1]["secret"], json!({"secretName": "agent-certs", "defaultMode": 0o400}));
    assert_eq!(after[1]["spec"]["template"]["metadata"]["labels"]["mcpgw.io/sidecar"], "true");
    // Keys keep their order: the Deployment reads as the input did, apart from what was added.
    let keys = |v: &Value| v.as_object().unwrap().keys().cloned().collect::<Vec<_>>();
    assert_eq!(keys(&after[1]), ["apiVersion", "kind", "metadata", "spec"]);
    assert_eq!(keys(&after[1]["spec"]), ["replicas", "selector", "template"]);
    assert_eq!(
        keys(agent),
        ["name", "image", "args", "envFrom", "env", "ports", "resources", "volumeMounts"],
        "the agent container's keys in their order"
    );
}

#[test]
fn a_second_run_changes_nothing() {
    for example in ["agent-deployment.yaml", "agent-batch.yaml", "agent-pods.yaml"] {
        let once = injected(&[examples(example).to_str().unwrap()], "");
        let twice = injected(&["-"], &once);
        assert_eq!(twice, once, "{example}");
    }
}

#[test]
fn jobs_cronjobs_statefulsets_daemonsets_and_pods_get_the_sidecar() {
    let batch = documents(&injected(&[examples("agent-batch.yaml").to_str().unwrap()], ""));
    assert_sidecar(&batch[0]["spec"]["template"]["spec"], "mcpgw-config");
    assert_eq!(batch[0]["spec"]["template"]["spec"]["restartPolicy"], "Never");
    let cron_pod = &batch[1]["spec"]["jobTemplate"]["spec"]["template"]["spec"];
    assert_sidecar(cron_pod, "mcpgw-config");
    assert_eq!(batch[1]["spec"]["schedule"], "*/15 * * * *");

    let pods = documents(&injected(&[], &std::fs::read_to_string(examples("agent-pods.yaml")).unwrap()));
    assert_sidecar(&pods[0]["spec"]["template"]["spec"], "mcpgw-config");
    assert_eq!(pods[0]["spec"]["volumeClaimTemplates"][0]["metadata"]["name"], "data");
    assert_sidecar(&pods[1]["spec"]["template"]["spec"], "mcpgw-config");
    assert_sidecar(&pods[2]["spec"], "mcpgw-config");
    assert_eq!(pods[2]["metadata"]["labels"]["mcpgw.io/sidecar"], "true");
    // No fsGroup in these pods: the gateway (uid 10001) could not read a 0440 Secret file, so the mode is 0444.
    assert_eq!(named(&pods[2]["spec"]["volumes"], "mcpgw-config")[0]["secret"]["defaultMode"], 0o444);
}

#[test]
fn an_existing_mcpgw_url_is_kept() {
    let batch = documents(&injected(&[examples("agent-batch.yaml").to_str().unwrap()], ""));
    let triage = &batch[1]["spec"]["jobTemplate"]["spec"]["template"]["spec"]["containers"][0];
    assert_eq!(triage["env"], json!([{"name": "MCPGW_URL", "value": URL}]));

    let custom = "apiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec:\n  containers:\n  - name: a\n    image: a\n    \
                  env: [{name: MCPGW_URL, value: 'http://elsewhere:8000/mcp/'}]\n";
    let pod = &documents(&injected(&[], custom))[0];
    assert_eq!(
        pod["spec"]["containers"][0]["env"],
        json!([{"name": "MCPGW_URL", "value": "http://elsewhere:8000/mcp/"}])
    );
}

#[test]
fn secret_secret_key_and_image_flags_are_used() {
    let out = injected(
        &["--secret", "team-a-gateway", "--secret-key", "config.json", "--image", "registry.example.com/mcpgw:9", "-"],
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: p\nspec:\n  containers:\n    - name: a\n      image: a\n",
    );
    let pod = &documents(&out)[0]["spec"];
    assert_eq!(named(&pod["volumes"], "mcpgw-config")[0]["secret"]["secretName"], "team-a-gateway");
    let sidecar = named(&pod["initContainers"], "mcpgw")[0];
    assert_eq!(sidecar["image"], "registry.example.com/mcpgw:9");
    assert_eq!(named(&sidecar["env"], "GW_CONFIG_PATH")[0]["value"], "/etc/mcpgw/config.json");
}

#[test]
fn other_kinds_and_lookalikes_pass_through() {
    let input = "apiVersion: example.com/v1\nkind: Deployment\nmetadata:\n  name: custom\nspec:\n  x: 1\n---\n\
                 apiVersion: v1\nkind: Secret\nmetadata:\n  name: s\nstringData:\n  a: \"on\"\n";
    let out = injected(&[], input);
    assert_eq!(documents(&out), documents(input));
    assert!(out.contains("a: \"on\""), "{out}");
}

#[test]
fn the_items_of_a_list_are_injected() {
    let input = "apiVersion: v1\nkind: List\nitems:\n- apiVersion: v1\n  kind: Pod\n  metadata: {name: p}\n  spec:\n    \
                 containers: [{name: a, image: a}]\n";
    let list = &documents(&injected(&[], input))[0];
    assert_sidecar(&list["items"][0]["spec"], "mcpgw-config");
}

#[test]
fn an_old_style_sidecar_is_left_alone_with_a_warning() {
    let input = "apiVersion: v1\nkind: Pod\nmetadata:\n  name: old\nspec:\n  containers:\n    - name: agent\n      \
                 image: a\n    - name: mcpgw\n      image: mcpgw:0.0.9\n";
    let out = inject(&[], input);
    assert!(out.status.success());
    assert_eq!(documents(&String::from_utf8(out.stdout).unwrap()), documents(input));
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert!(
        stderr.contains("warning") && stderr.contains("Pod old") && stderr.contains("regular container named mcpgw"),
        "{stderr}"
    );
}

#[test]
fn bad_input_is_an_error_with_nothing_on_stdout() {
    let cases: [(&[&str], &str, &str); 4] = [
        (&[], "apiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec: {containers: [}\n", "not valid YAML"),
        (
            &[],
            "apiVersion: v1\nkind: Service\nmetadata: {name: s}\n---\n- just\n- a list\n",
            "document 2: not a mapping",
        ),
        (
            &[],
            "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: d}\nspec: {replicas: 1}\n",
            "no spec.template.spec",
        ),
        (&["/nonexistent/agent.yaml"], "", "cannot read /nonexistent/agent.yaml"),
    ];
    for (args, input, wanted) in cases {
        let out = inject(args, input);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{input}");
        assert!(out.stdout.is_empty(), "nothing half-written for {input}");
        assert!(stderr.contains(wanted) && stderr.starts_with("mcpgw: error:"), "{stderr}");
        assert!(!stderr.contains("panicked"), "{stderr}");
    }
}

/// A one-line error naming why, a failure exit, nothing on stdout and no panic.
#[track_caller]
fn assert_refused(out: &Output, wanted: &str) {
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(out.stdout.is_empty(), "nothing written");
    assert!(stderr.starts_with("mcpgw: error:") && stderr.contains(wanted), "{stderr}");
    assert_eq!(stderr.trim_end().lines().count(), 1, "one line: {stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
}

#[test]
fn yaml_nested_deeper_than_64_levels_is_refused() {
    let nested = |levels: usize| format!("{}1{}\n", "{a: ".repeat(levels), "}".repeat(levels));
    // 64 levels is a (strange) document like any other: it passes unchanged.
    let out = injected(&[], &nested(64));
    assert_eq!(documents(&out).len(), 1, "{out}");
    for levels in [65, 129, 20_000] {
        assert_refused(&inject(&[], &nested(levels)), "nested deeper than 64 levels");
    }
    // Sequences count as levels too, and a deep document after a good one still leaves stdout empty.
    let deep = format!(
        "apiVersion: v1\nkind: Pod\nmetadata: {{name: p}}\nspec: {{containers: [{{name: a}}]}}\n---\n{}{}\n",
        "[".repeat(65),
        "]".repeat(65)
    );
    assert_refused(&inject(&[], &deep), "document 2: nested deeper than 64 levels");
}

#[test]
fn yaml_larger_than_4_mib_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("big.yaml");
    let pod = "apiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec: {containers: [{name: a}]}\n";
    let mut text = pod.to_string();
    while text.len() <= 4 * 1024 * 1024 {
        text.push_str("# padding padding padding padding padding padding padding padding padding padding\n");
    }
    std::fs::write(&path, &text).unwrap();
    let file = path.to_str().unwrap();
    assert_refused(&inject(&[file], ""), "larger than 4 MiB");
    // The same manifest under the bound is injected.
    let mut text = pod.to_string();
    text.push_str(&"# padding\n".repeat(1000));
    std::fs::write(&path, &text).unwrap();
    assert_sidecar(&documents(&injected(&[file], ""))[0]["spec"], "mcpgw-config");
}
