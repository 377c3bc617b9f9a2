//! MCP Apps (the `io.modelcontextprotocol/ui` extension) in transparent mode (contract 15): a server's views are
//! `ui://` resources, and its tools name theirs in `_meta.ui.resourceUri` (older servers: `_meta["ui/resourceUri"]`).
//!
//! Two servers may both have `ui://dashboard/view.html`, so a view is namespaced like a tool, keeping its scheme: the
//! view `ui://{rest}` of a server whose exposed names begin with `prefix` is `ui://{prefix}{rest}` to clients
//! (`ui://weather__dashboard/view.html`; with `tool_prefix: ""`, unchanged). Every place a client sees such a URI is
//! rewritten the same way: resource listings and templates, `resources/read` contents, a tool's `_meta` in
//! `tools/list`, and a call result's `_meta` and content. Other URIs are never touched. Pure functions over JSON.

use serde_json::Value;

/// The scheme of MCP Apps views.
pub const UI_SCHEME: &str = "ui://";

/// The legacy flat key of a tool's view.
const LEGACY_KEY: &str = "ui/resourceUri";

/// The URI clients see for the upstream URI `uri` of a server whose names begin with `prefix`: `ui://` URIs are
/// namespaced, others kept (`None`: unchanged).
pub fn exposed_uri(prefix: &str, uri: &str) -> Option<String> {
    let rest = uri.strip_prefix(UI_SCHEME)?;
    (!prefix.is_empty()).then(|| format!("{UI_SCHEME}{prefix}{rest}"))
}

/// The upstream URI of `uri` as a client sent it, for a server whose names begin with `prefix`: `None` when `uri` is
/// a `ui://` URI that is not this server's (it names another server's view), else the URI to send upstream.
pub fn upstream_uri(prefix: &str, uri: &str) -> Option<String> {
    match uri.strip_prefix(UI_SCHEME) {
        None => Some(uri.to_string()),
        Some(rest) => rest.strip_prefix(prefix).map(|rest| format!("{UI_SCHEME}{rest}")),
    }
}

/// Rewrites the string at `value` (when it is a `ui://` URI) to its exposed form.
fn rewrite(prefix: &str, value: Option<&mut Value>) {
    if let Some(Value::String(uri)) = value
        && let Some(exposed) = exposed_uri(prefix, uri)
    {
        *uri = exposed;
    }
}

/// A `_meta` object's view references: `ui.resourceUri` and the legacy `ui/resourceUri`.
fn rewrite_meta(prefix: &str, meta: Option<&mut Value>) {
    let Some(meta) = meta.and_then(Value::as_object_mut) else { return };
    rewrite(prefix, meta.get_mut("ui").and_then(|ui| ui.get_mut("resourceUri")));
    rewrite(prefix, meta.get_mut(LEGACY_KEY));
}

/// A tool definition as `tools/list` shows it: its view renamed.
pub fn rewrite_tool(prefix: &str, tool: &mut Value) {
    if !prefix.is_empty() {
        rewrite_meta(prefix, tool.get_mut("_meta"));
    }
}

/// A listed resource (`field` `uri`) or template (`uriTemplate`): its URI renamed when it is a view.
pub fn rewrite_listed(prefix: &str, item: &mut Value, field: &str) {
    if !prefix.is_empty() {
        rewrite(prefix, item.get_mut(field));
    }
}

/// A `tools/call` or `resources/read` result: the views it names (`_meta`, content items' and contents' `uri`,
/// embedded resources) renamed.
pub fn rewrite_result(prefix: &str, result: &mut Value) {
    if prefix.is_empty() {
        return;
    }
    rewrite_meta(prefix, result.get_mut("_meta"));
    for field in ["content", "contents"] {
        let Some(items) = result.get_mut(field).and_then(Value::as_array_mut) else { continue };
        for item in items {
            rewrite(prefix, item.get_mut("uri"));
            rewrite_meta(prefix, item.get_mut("_meta"));
            if let Some(resource) = item.get_mut("resource") {
                rewrite(prefix, resource.get_mut("uri"));
                rewrite_meta(prefix, resource.get_mut("_meta"));
            }
        }
    }
}

/// Whether a tool definition names a view (its server is an app, whose views may call its tools by their own names).
pub fn has_view(tool: &Value) -> bool {
    let meta = tool.get("_meta");
    let named = |uri: Option<&Value>| uri.and_then(Value::as_str).is_some_and(|uri| uri.starts_with(UI_SCHEME));
    named(meta.and_then(|m| m.get("ui")).and_then(|ui| ui.get("resourceUri")))
        || named(meta.and_then(|m| m.get(LEGACY_KEY)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn views_are_namespaced_keeping_their_scheme_and_other_uris_are_kept() {
        assert_eq!(
            exposed_uri("weather__", "ui://dashboard/view.html").as_deref(),
            Some("ui://weather__dashboard/view.html")
        );
        assert_eq!(exposed_uri("", "ui://dashboard/view.html"), None, "tool_prefix \"\": unchanged");
        assert_eq!(exposed_uri("weather__", "file:///x"), None);
        assert_eq!(
            upstream_uri("weather__", "ui://weather__dashboard/view.html").as_deref(),
            Some("ui://dashboard/view.html")
        );
        assert_eq!(upstream_uri("maps__", "ui://weather__dashboard/view.html"), None, "another server's view");
        assert_eq!(upstream_uri("maps__", "file:///x").as_deref(), Some("file:///x"));
    }

    #[test]
    fn tools_and_results_name_the_exposed_view() {
        let mut tool = json!({"name": "forecast", "_meta": {"ui": {"resourceUri": "ui://w/v.html", "visibility": ["app"]},
            "ui/resourceUri": "ui://w/v.html"}});
        assert!(has_view(&tool));
        rewrite_tool("weather__", &mut tool);
        assert_eq!(tool["_meta"]["ui"]["resourceUri"], json!("ui://weather__w/v.html"));
        assert_eq!(tool["_meta"]["ui/resourceUri"], json!("ui://weather__w/v.html"));
        assert_eq!(tool["_meta"]["ui"]["visibility"], json!(["app"]));
        let mut result = json!({"_meta": {"ui": {"resourceUri": "ui://w/v.html"}},
            "content": [{"type": "resource_link", "uri": "ui://w/v.html"}, {"type": "text", "text": "ui://w/v.html"},
                {"type": "resource", "resource": {"uri": "ui://w/v.html", "text": "<html>"}}],
            "contents": [{"uri": "ui://w/v.html", "mimeType": "text/html;profile=mcp-app"}, {"uri": "file:///a"}]});
        rewrite_result("weather__", &mut result);
        assert_eq!(result["_meta"]["ui"]["resourceUri"], json!("ui://weather__w/v.html"));
        assert_eq!(result["content"][0]["uri"], json!("ui://weather__w/v.html"));
        assert_eq!(result["content"][1]["text"], json!("ui://w/v.html"), "text is the server's own words");
        assert_eq!(result["content"][2]["resource"]["uri"], json!("ui://weather__w/v.html"));
        assert_eq!(result["contents"][0]["uri"], json!("ui://weather__w/v.html"));
        assert_eq!(result["contents"][1]["uri"], json!("file:///a"));
        assert!(!has_view(&json!({"name": "plain"})));
    }
}
