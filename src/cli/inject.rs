//! `mcpgw inject [FILE|-]`: adds the mcpgw sidecar to the workloads of a Kubernetes manifest (contract section 12).
//!
//! The manifest (a file, or stdin) is read whole into documents first ([`yaml::read_documents`]); each workload's pod
//! spec then gets, unless it has them already (found by name, so a second run changes nothing):
//! - the gateway as a native sidecar: the container `mcpgw` at the end of `initContainers`, with `restartPolicy:
//!   Always`, the same container as `k8s/sidecar` and the chart's snippet;
//! - its volumes: `mcpgw-config` (the Secret, mounted as a directory so the gateway sees edits), `mcpgw-tmp`, `mcpgw-home`;
//! - `MCPGW_URL=http://localhost:8000/mcp/` in the env of every regular container;
//! - the pod label `mcpgw.io/sidecar: "true"` (what the chart's PodMonitor selects).
//!
//! Only then is anything written, so bad input leaves stdout empty. A pod that already runs a regular container named
//! `mcpgw` (the sidecar as it was before native sidecars) is left as it is, with a warning on stderr: moving a
//! container someone may have tuned is the user's call. Workloads are found by `apiVersion` and `kind`
//! (Deployment, StatefulSet, DaemonSet, Job, CronJob, Pod, and the items of a `List`); every other document and
//! field passes through unchanged.

mod yaml;

use std::io::{Read, Write};
use std::path::PathBuf;
use std::process::ExitCode;

use clap::Args;
use serde_json::{Map, Value, json};

/// `mcpgw inject` arguments.
#[derive(Debug, Args)]
pub struct InjectArgs {
    /// The manifest to read; `-` or nothing reads stdin.
    #[arg(value_name = "FILE|-")]
    pub file: Option<PathBuf>,
    /// The Secret that holds the config file, mounted at /etc/mcpgw.
    #[arg(long, value_name = "NAME", default_value = "mcpgw-config", value_parser = clap::builder::NonEmptyStringValueParser::new())]
    pub secret: String,
    /// The key of the config file in that Secret.
    #[arg(long, value_name = "KEY", default_value = "gw_mcp_config.json", value_parser = clap::builder::NonEmptyStringValueParser::new())]
    pub secret_key: String,
    /// The gateway's image.
    #[arg(long, value_name = "IMAGE", default_value = DEFAULT_IMAGE, value_parser = clap::builder::NonEmptyStringValueParser::new())]
    pub image: String,
}

/// The image the chart and `k8s/` use: built from the repository's Dockerfile, tagged with the version.
const DEFAULT_IMAGE: &str = concat!("mcpgw:", env!("CARGO_PKG_VERSION"));
/// What the agent containers are told.
const GATEWAY_URL: &str = "http://localhost:8000/mcp/";
const SIDECAR: &str = "mcpgw";
const CONFIG_VOLUME: &str = "mcpgw-config";

/// Runs `mcpgw inject`.
pub fn run(args: &InjectArgs) -> ExitCode {
    let (source, text) = match read_input(args.file.as_ref()) {
        Ok(read) => read,
        Err(e) => return super::fail(e),
    };
    let mut documents = match yaml::read_documents(&text) {
        Ok(documents) => documents,
        Err(e) => return super::fail(format!("{source}: {e}")),
    };
    let mut warnings = Vec::new();
    for (index, document) in documents.iter_mut().enumerate() {
        if let Err(e) = inject_document(document, args, &mut warnings) {
            return super::fail(format!("{source}: document {}: {e}", index + 1));
        }
    }
    for warning in &warnings {
        eprintln!("mcpgw: warning: {source}: {warning}");
    }
    let mut stdout = std::io::stdout().lock();
    match stdout.write_all(yaml::write_documents(&documents).as_bytes()).and_then(|()| stdout.flush()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => super::fail(format!("cannot write to stdout: {e}")),
    }
}

/// The most `mcpgw inject` reads (contract 14): a manifest is kilobytes; more is a mistake or an attack on the reader.
const MAX_INPUT_BYTES: u64 = 4 * 1024 * 1024;

/// The manifest's name (for messages) and text, refused past [`MAX_INPUT_BYTES`] without reading further.
fn read_input(file: Option<&PathBuf>) -> Result<(String, String), String> {
    let (source, reader): (String, Box<dyn Read>) = match file {
        Some(path) if path.as_os_str() != "-" => {
            let file = std::fs::File::open(path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
            (path.display().to_string(), Box::new(file))
        }
        _ => ("stdin".to_string(), Box::new(std::io::stdin())),
    };
    let mut bytes = Vec::new();
    reader.take(MAX_INPUT_BYTES + 1).read_to_end(&mut bytes).map_err(|e| format!("cannot read {source}: {e}"))?;
    if bytes.len() as u64 > MAX_INPUT_BYTES {
        return Err(format!("{source} is larger than 4 MiB, the most mcpgw inject reads"));
    }
    let text = String::from_utf8(bytes).map_err(|_| format!("{source} is not UTF-8 text"))?;
    Ok((source, text))
}

/// Where the pod spec of each workload kind sits, for the API groups Kubernetes defines them in.
fn pod_spec_path(api_version: &str, kind: &str) -> Option<&'static [&'static str]> {
    match (api_version, kind) {
        ("v1", "Pod") => Some(&["spec"]),
        ("apps/v1", "Deployment" | "StatefulSet" | "DaemonSet") | ("batch/v1", "Job") => {
            Some(&["spec", "template", "spec"])
        }
        ("batch/v1", "CronJob") => Some(&["spec", "jobTemplate", "spec", "template", "spec"]),
        _ => None,
    }
}

fn inject_document(document: &mut Value, args: &InjectArgs, warnings: &mut Vec<String>) -> Result<(), String> {
    let Value::Object(object) = document else {
        return Err("not a mapping (a Kubernetes object)".to_string());
    };
    let api_version = object.get("apiVersion").and_then(Value::as_str).unwrap_or_default().to_string();
    let kind = object.get("kind").and_then(Value::as_str).unwrap_or_default().to_string();
    let name = object.get("metadata").and_then(|m| m.get("name")).and_then(Value::as_str).unwrap_or("(no name)");
    let name = name.to_string();
    if kind == "List" || kind.ends_with("List") {
        if let Some(Value::Array(items)) = object.get_mut("items") {
            for (index, item) in items.iter_mut().enumerate() {
                inject_document(item, args, warnings).map_err(|e| format!("item {}: {e}", index + 1))?;
            }
        }
        return Ok(());
    }
    let Some(path) = pod_spec_path(&api_version, &kind) else { return Ok(()) };
    let what = format!("{kind} {name}");
    // The pod's metadata sits beside its spec: the object's own for a Pod, the template's otherwise.
    let mut parent = &mut *object;
    for key in &path[..path.len() - 1] {
        parent = match parent.get_mut(*key) {
            Some(Value::Object(inner)) => inner,
            _ => return Err(format!("{what}: no {} (a mapping)", path.join("."))),
        };
    }
    let Some(Value::Object(pod)) = parent.get_mut("spec") else {
        return Err(format!("{what}: no {} (a mapping)", path.join(".")));
    };
    if !inject_pod(pod, args, &what, warnings)? {
        return Ok(());
    }
    let metadata = object_field(parent, "metadata", &what)?;
    let labels = object_field(metadata, "labels", &what)?;
    labels.entry("mcpgw.io/sidecar").or_insert_with(|| Value::from("true"));
    Ok(())
}

/// Adds what is missing to one pod spec; false when the pod was left alone (an old-style sidecar).
fn inject_pod(
    pod: &mut Map<String, Value>,
    args: &InjectArgs,
    what: &str,
    warnings: &mut Vec<String>,
) -> Result<bool, String> {
    let named = |list: Option<&Value>, name: &str| {
        list.and_then(Value::as_array)
            .is_some_and(|items| items.iter().any(|item| item.get("name").and_then(Value::as_str) == Some(name)))
    };
    if named(pod.get("containers"), SIDECAR) {
        warnings.push(format!(
            "{what}: a regular container named {SIDECAR} (a sidecar of the old kind) is there; the pod is left as it is. \
             Remove that container and run mcpgw inject again to get the native sidecar"
        ));
        return Ok(false);
    }
    // Without an fsGroup the gateway's uid is not in the Secret files' group, so they must be readable by all (only
    // the mcpgw container mounts them).
    let has_fs_group = pod.get("securityContext").and_then(|c| c.get("fsGroup")).is_some();
    if !named(pod.get("initContainers"), SIDECAR) {
        array_field(pod, "initContainers", what)?.push(sidecar_container(args));
    }
    for volume in sidecar_volumes(args, if has_fs_group { 0o440 } else { 0o444 }) {
        let name = volume.get("name").and_then(Value::as_str).unwrap_or_default().to_string();
        if !named(pod.get("volumes"), &name) {
            array_field(pod, "volumes", what)?.push(volume);
        }
    }
    for container in array_field(pod, "containers", what)? {
        let Value::Object(container) = container else {
            return Err(format!("{what}: a container that is not a mapping"));
        };
        let env = array_field(container, "env", what)?;
        if !env.iter().any(|e| e.get("name").and_then(Value::as_str) == Some("MCPGW_URL")) {
            env.push(json!({"name": "MCPGW_URL", "value": GATEWAY_URL}));
        }
    }
    Ok(true)
}

fn object_field<'a>(
    map: &'a mut Map<String, Value>,
    key: &str,
    what: &str,
) -> Result<&'a mut Map<String, Value>, String> {
    let field = map.entry(key).or_insert_with(|| Value::Object(Map::new()));
    if field.is_null() {
        *field = Value::Object(Map::new());
    }
    field.as_object_mut().ok_or_else(|| format!("{what}: {key} is not a mapping"))
}

fn array_field<'a>(map: &'a mut Map<String, Value>, key: &str, what: &str) -> Result<&'a mut Vec<Value>, String> {
    let field = map.entry(key).or_insert_with(|| Value::Array(Vec::new()));
    if field.is_null() {
        *field = Value::Array(Vec::new());
    }
    field.as_array_mut().ok_or_else(|| format!("{what}: {key} is not a list"))
}

/// The container of `k8s/sidecar/20-deployment.yaml` and the chart's `mcpgw.sidecarContainer`.
fn sidecar_container(args: &InjectArgs) -> Value {
    let probe = |path: &str, period: u32, failures: u32| {
        json!({"httpGet": {"path": path, "port": "metrics"}, "periodSeconds": period, "timeoutSeconds": 2,
               "failureThreshold": failures})
    };
    let liveness = json!({"httpGet": {"path": "/healthz", "port": "metrics"}, "initialDelaySeconds": 2,
                          "periodSeconds": 10, "timeoutSeconds": 2, "failureThreshold": 3});
    json!({
        "name": SIDECAR,
        "restartPolicy": "Always",
        "image": args.image,
        "imagePullPolicy": "IfNotPresent",
        "args": ["serve"],
        "env": [
            {"name": "GW_CONFIG_PATH", "value": format!("/etc/mcpgw/{}", args.secret_key)},
            {"name": "GW_GATEWAY_ADDR", "value": "127.0.0.1:8000"},
            {"name": "GW_ADMIN_ADDR", "value": "127.0.0.1:8001"},
            {"name": "HOME", "value": "/home/mcpgw"}
        ],
        "ports": [
            {"name": "gateway", "containerPort": 8000, "protocol": "TCP"},
            {"name": "admin", "containerPort": 8001, "protocol": "TCP"},
            {"name": "metrics", "containerPort": 9464, "protocol": "TCP"}
        ],
        "startupProbe": probe("/readyz", 2, 60),
        "livenessProbe": liveness,
        "readinessProbe": probe("/readyz", 5, 2),
        "resources": {"requests": {"cpu": "50m", "memory": "64Mi"}, "limits": {"cpu": "1", "memory": "256Mi"}},
        "securityContext": {
            "runAsNonRoot": true, "runAsUser": 10001, "runAsGroup": 10001, "allowPrivilegeEscalation": false,
            "readOnlyRootFilesystem": true, "capabilities": {"drop": ["ALL"]},
            "seccompProfile": {"type": "RuntimeDefault"}
        },
        "volumeMounts": [
            {"name": CONFIG_VOLUME, "mountPath": "/etc/mcpgw", "readOnly": true},
            {"name": "mcpgw-tmp", "mountPath": "/tmp"},
            {"name": "mcpgw-home", "mountPath": "/home/mcpgw"}
        ]
    })
}

/// The Secret as a directory (never `subPath`, which would freeze the file) and the two emptyDirs.
fn sidecar_volumes(args: &InjectArgs, mode: u32) -> [Value; 3] {
    [
        json!({"name": CONFIG_VOLUME, "secret": {"secretName": args.secret, "defaultMode": mode}}),
        json!({"name": "mcpgw-tmp", "emptyDir": {"sizeLimit": "64Mi"}}),
        json!({"name": "mcpgw-home", "emptyDir": {"sizeLimit": "512Mi"}}),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args() -> InjectArgs {
        InjectArgs {
            file: None,
            secret: "mcpgw-config".into(),
            secret_key: "gw_mcp_config.json".into(),
            image: DEFAULT_IMAGE.into(),
        }
    }

    #[test]
    fn only_the_kubernetes_groups_of_each_kind_are_workloads() {
        assert!(pod_spec_path("apps/v1", "Deployment").is_some());
        assert!(pod_spec_path("batch/v1", "CronJob").is_some());
        assert!(pod_spec_path("example.com/v1", "Deployment").is_none());
        assert!(pod_spec_path("v1", "Service").is_none());
    }

    #[test]
    fn a_pod_with_an_old_style_sidecar_is_left_alone_with_a_warning() {
        let mut doc = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"},
            "spec": {"containers": [{"name": "agent"}, {"name": "mcpgw"}]}});
        let before = doc.clone();
        let mut warnings = Vec::new();
        inject_document(&mut doc, &args(), &mut warnings).unwrap();
        assert_eq!(doc, before);
        assert!(warnings[0].contains("Pod p: a regular container named mcpgw"), "{warnings:?}");
    }

    #[test]
    fn a_workload_without_a_pod_spec_is_an_error() {
        let mut doc = json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d"}, "spec": {}});
        let err = inject_document(&mut doc, &args(), &mut Vec::new()).unwrap_err();
        assert_eq!(err, "Deployment d: no spec.template.spec (a mapping)");
    }
}
