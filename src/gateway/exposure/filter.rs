//! Curation (contract section 8): which upstream tools a caller may see and call, one decision for every listing and
//! every call path.
//!
//! A server entry's `tool_filter` names upstream tool names; a project's names exposed names
//! (`{server_name}{sep}{tool_name}`). Each is `{"allow": [patterns], "deny": [patterns]}`: no `allow` means all,
//! `deny` wins, and a pattern's `*` matches any run of characters (none included) while every other character
//! matches itself. A tool is visible when both filters let it through.

use crate::auth::Identity;
use crate::config::model::ServerEntry;
pub use crate::config::model::ToolFilter;

/// The filters one caller is under: its project's, and each server entry's.
pub struct Curation<'a> {
    project: Option<&'a ToolFilter>,
    separator: String,
}

impl<'a> Curation<'a> {
    /// The curation of `identity`'s project and configuration.
    pub fn of(identity: &'a Identity) -> Curation<'a> {
        let snapshot = &identity.snapshot;
        let project = snapshot.file.projects.get(&identity.project_id).and_then(|p| p.tool_filter.as_ref());
        let separator = snapshot.exposure(identity.mcp_config_id.as_deref()).separator;
        Curation { project, separator }
    }

    /// Whether upstream tool `tool` of `entry` is visible: the project's filter sees it as
    /// `{server_name}{sep}{tool_name}` whatever the entry's `tool_prefix`, so one project filter reads the same
    /// under every prefix.
    pub fn visible(&self, entry: &ServerEntry, tool: &str) -> bool {
        let Some(project) = self.project else { return visible(entry.tool_filter.as_ref(), None, tool, "") };
        let exposed = format!("{}{}{tool}", entry.server_name, self.separator);
        visible(entry.tool_filter.as_ref(), Some(project), tool, &exposed)
    }
}

impl Curation<'_> {
    /// Whether anything of `entry`'s server can be visible (contract 14): a server none of whose tools, prompts,
    /// resources or templates either filter could let through is absent from every listing, `gw_list_all_servers`
    /// included. Decided from the patterns alone, so it costs no discovery.
    pub fn server_visible(&self, entry: &ServerEntry) -> bool {
        let server = entry.tool_filter.as_ref().is_none_or(could_allow_some);
        let Some(project) = self.project else { return server };
        let prefix = format!("{}{}", entry.server_name, self.separator);
        server && could_allow_with_prefix(project, &prefix)
    }
}

/// Whether `filter` lets at least one name through.
fn could_allow_some(filter: &ToolFilter) -> bool {
    could_allow_with_prefix(filter, "")
}

/// Whether `filter` lets through at least one name that begins with `prefix`: an `allow` pattern could match such
/// a name, and no `deny` pattern matches every one of them (a pattern that is the prefix, or a start of it, followed
/// by `*` only).
fn could_allow_with_prefix(filter: &ToolFilter, prefix: &str) -> bool {
    let allowed = filter.allow.as_ref().is_none_or(|patterns| patterns.iter().any(|p| could_match_prefix(p, prefix)));
    let denies_all = filter.deny.iter().flatten().any(|p| {
        let literal = p.trim_end_matches('*');
        p.len() > literal.len() && !literal.contains('*') && prefix.starts_with(literal)
    });
    allowed && !denies_all
}

/// Whether `pattern` matches some name that begins with `prefix` (the rest of the pattern can always be met by what
/// follows the prefix).
fn could_match_prefix(pattern: &str, prefix: &str) -> bool {
    glob(pattern, prefix).is_some()
}

/// Whether `name` passes `filter`.
pub fn allows(filter: &ToolFilter, name: &str) -> bool {
    let allowed = filter.allow.as_ref().is_none_or(|patterns| patterns.iter().any(|p| matches(p, name)));
    allowed && !filter.deny.iter().flatten().any(|p| matches(p, name))
}

/// The one decision: whether the tool `tool` of a server, exposed as `exposed`, is visible to a caller of `project`.
pub fn visible(server: Option<&ToolFilter>, project: Option<&ToolFilter>, tool: &str, exposed: &str) -> bool {
    server.is_none_or(|f| allows(f, tool)) && project.is_none_or(|f| allows(f, exposed))
}

/// Whether `name` matches `pattern` (`*`: any run of characters; everything else literally). Linear in the lengths
/// for the common shapes, and never worse than their product.
pub fn matches(pattern: &str, name: &str) -> bool {
    glob(pattern, name).is_some_and(|rest| rest.iter().all(|b| *b == b'*'))
}

/// `name` read through `pattern` from the start: what is left of the pattern once the whole name is matched, or
/// `None` when no way of matching takes the whole name.
fn glob<'p>(pattern: &'p str, name: &str) -> Option<&'p [u8]> {
    let pattern = pattern.as_bytes();
    let name = name.as_bytes();
    let (mut p, mut n) = (0, 0);
    // Where the last `*` was, and the name position it has matched up to.
    let mut star: Option<(usize, usize)> = None;
    while n < name.len() {
        if p < pattern.len() && pattern[p] == b'*' {
            star = Some((p, n));
            p += 1;
        } else if p < pattern.len() && pattern[p] == name[n] {
            p += 1;
            n += 1;
        } else if let Some((star_p, star_n)) = star {
            // Let the last `*` take one more character and try again from there.
            p = star_p + 1;
            n = star_n + 1;
            star = Some((star_p, star_n + 1));
        } else {
            return None;
        }
    }
    Some(&pattern[p..])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn patterns(allow: Option<&[&str]>, deny: &[&str]) -> ToolFilter {
        let strings = |list: &[&str]| list.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        filter(allow.map(strings), strings(deny))
    }

    #[test]
    fn a_server_is_visible_when_a_filter_could_let_one_of_its_names_through() {
        assert!(could_allow_with_prefix(&patterns(None, &[]), "github__"));
        assert!(could_allow_with_prefix(&patterns(Some(&["github__*"]), &[]), "github__"));
        assert!(could_allow_with_prefix(&patterns(Some(&["git*"]), &[]), "github__"));
        assert!(could_allow_with_prefix(&patterns(Some(&["*search*"]), &[]), "github__"));
        assert!(
            could_allow_with_prefix(&patterns(Some(&["github"]), &[]), "git"),
            "the pattern goes on past the prefix"
        );
        assert!(!could_allow_with_prefix(&patterns(Some(&["gitlab__*"]), &[]), "github__"));
        assert!(!could_allow_with_prefix(&patterns(Some(&["github"]), &[]), "github__"), "ends inside the prefix");
        assert!(!could_allow_with_prefix(&patterns(Some(&[]), &[]), "github__"));
        assert!(!could_allow_with_prefix(&patterns(None, &["github__*"]), "github__"));
        assert!(!could_allow_with_prefix(&patterns(None, &["*"]), "github__"));
        assert!(could_allow_with_prefix(&patterns(None, &["github__delete_*"]), "github__"));
        assert!(!could_allow_some(&patterns(None, &["*"])));
        assert!(could_allow_some(&patterns(Some(&["read_*"]), &[])));
    }
    use proptest::prelude::*;

    #[test]
    fn stars_match_any_run_and_the_rest_literally() {
        assert!(matches("*", ""));
        assert!(matches("*", "anything"));
        assert!(matches("read_*", "read_file"));
        assert!(matches("read_*", "read_"));
        assert!(!matches("read_*", "write_file"));
        assert!(matches("*_file", "read_file"));
        assert!(matches("a*b*c", "a-b-b-c"));
        assert!(!matches("a*b*c", "a-b-b-d"));
        assert!(matches("exact", "exact"));
        assert!(!matches("exact", "exactly"));
        assert!(!matches("ex.ct", "exact"), "a dot is a dot");
        assert!(matches("gh__*", "gh__create_issue"));
    }

    fn filter(allow: Option<Vec<String>>, deny: Vec<String>) -> ToolFilter {
        ToolFilter { allow, deny: Some(deny), extra: Default::default() }
    }

    #[test]
    fn no_allow_means_all_and_deny_wins() {
        let open = ToolFilter::default();
        assert!(allows(&open, "anything"));
        let deny = filter(None, vec!["delete_*".into()]);
        assert!(allows(&deny, "read"));
        assert!(!allows(&deny, "delete_repo"));
        let both = filter(Some(vec!["*".into()]), vec!["*_admin".into()]);
        assert!(!allows(&both, "repo_admin"), "deny wins over allow");
        let none = filter(Some(vec![]), vec![]);
        assert!(!allows(&none, "read"), "an empty allow list allows nothing");
    }

    #[test]
    fn a_tool_is_visible_when_the_server_and_the_project_let_it_through() {
        let server = filter(Some(vec!["read_*".into()]), vec![]);
        let project = filter(None, vec!["fs__read_secret*".into()]);
        assert!(visible(Some(&server), Some(&project), "read_file", "fs__read_file"));
        assert!(!visible(Some(&server), Some(&project), "write_file", "fs__write_file"), "the server's filter");
        assert!(!visible(Some(&server), Some(&project), "read_secrets", "fs__read_secrets"), "the project's filter");
        assert!(visible(None, None, "anything", "x__anything"));
    }

    /// The same question asked of a regular expression built from the pattern.
    fn by_regex(pattern: &str, name: &str) -> bool {
        let body: String = pattern.split('*').map(regex::escape).collect::<Vec<_>>().join(".*");
        regex::Regex::new(&format!("^(?s:{body})$")).is_ok_and(|re| re.is_match(name))
    }

    proptest! {
        #[test]
        fn matching_agrees_with_a_regular_expression(pattern in "[ab*.]{0,8}", name in "[ab.]{0,10}") {
            prop_assert_eq!(matches(&pattern, &name), by_regex(&pattern, &name));
        }
    }
}
