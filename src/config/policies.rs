//! Authorization rules in the configuration (contract 17): the `policies` of `common_mcp_gateway_config`, of each MCP
//! configuration and of each project, and `policy_default`, compiled once when a snapshot is built
//! ([`PolicyBook::compile`]). A rule that does not compile, names an unknown variable, has an effect other than
//! `allow` or `deny`, or repeats a name of its list makes the configuration invalid, named by its path and its name.
//! The rules a caller is under come in that order: the common ones, its configuration's, its project's
//! ([`PolicyBook::rules`]); the decision itself is `crate::policy::decide`. The `quotas` of
//! `common_mcp_gateway_config` are compiled here too (`crate::policy::quota`), checked the same way.

use std::collections::{HashMap, HashSet};

use super::decode::Problems;
use super::model::{ConfigFile, PolicyRule, QuotaRule};
use crate::policy::Rule;
use crate::policy::quota::Quota;

/// Every compiled rule, by where it was written.
#[derive(Debug, Default)]
pub struct PolicyBook {
    common: Vec<Rule>,
    by_config: HashMap<String, Vec<Rule>>,
    by_project: HashMap<String, Vec<Rule>>,
    /// `policy_default` is `"allow"` (or absent).
    pub default_allow: bool,
    /// `common_mcp_gateway_config.quotas`, in order.
    pub quotas: Vec<Quota>,
}

impl PolicyBook {
    /// Compiles the rules of `file`, adding a problem for each that cannot be used.
    pub fn compile(file: &ConfigFile, problems: &mut Problems) -> PolicyBook {
        let common = file.common_mcp_gateway_config.as_ref();
        let default_allow = match common.and_then(|c| c.policy_default.as_deref()) {
            None | Some("allow") => true,
            Some("deny") => false,
            Some(other) => {
                problems.push(format!(
                    "common_mcp_gateway_config.policy_default: must be \"allow\" or \"deny\", found {other:?}"
                ));
                true
            }
        };
        let list = |rules: Option<&Vec<PolicyRule>>, at: &str, problems: &mut Problems| {
            compile_list(rules.map(Vec::as_slice).unwrap_or_default(), at, problems)
        };
        let quotas = compile_quotas(
            common.and_then(|c| c.quotas.as_deref()).unwrap_or_default(),
            "common_mcp_gateway_config.quotas",
            problems,
        );
        let mut book = PolicyBook {
            common: list(common.and_then(|c| c.policies.as_ref()), "common_mcp_gateway_config.policies", problems),
            default_allow,
            quotas,
            ..PolicyBook::default()
        };
        for (id, config) in &file.mcp_configs {
            let rules = list(config.policies.as_ref(), &format!("mcp_configs.{id}.policies"), problems);
            if !rules.is_empty() {
                book.by_config.insert(id.clone(), rules);
            }
        }
        for (id, project) in &file.projects {
            let rules = list(project.policies.as_ref(), &format!("projects.{id}.policies"), problems);
            if !rules.is_empty() {
                book.by_project.insert(id.clone(), rules);
            }
        }
        book
    }

    /// Whether nothing is decided by rules: no rule anywhere and the default allows (the common case costs nothing).
    pub fn allows_everything(&self) -> bool {
        self.default_allow && self.common.is_empty() && self.by_config.is_empty() && self.by_project.is_empty()
    }

    /// How many rules there are, at every level.
    pub fn len(&self) -> usize {
        self.common.len()
            + self.by_config.values().map(Vec::len).sum::<usize>()
            + self.by_project.values().map(Vec::len).sum::<usize>()
    }

    /// Whether there are no rules at all.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The rules of configuration `config_id` and of project `project_id`, without the common ones.
    pub fn scoped<'a>(&'a self, config_id: Option<&str>, project_id: &str) -> impl Iterator<Item = &'a Rule> {
        let config = config_id.and_then(|id| self.by_config.get(id)).into_iter().flatten();
        config.chain(self.by_project.get(project_id).into_iter().flatten())
    }

    /// The rules of a caller of configuration `config_id` in project `project_id`, in the order they are tried.
    pub fn rules<'a>(&'a self, config_id: Option<&str>, project_id: &str) -> impl Iterator<Item = &'a Rule> + Clone {
        let config = config_id.and_then(|id| self.by_config.get(id)).into_iter().flatten();
        let project = self.by_project.get(project_id).into_iter().flatten();
        self.common.iter().chain(config).chain(project)
    }
}

/// Where item `i` of the list at `at` is, for its problems (`…policies[2] ("name")`); a name that is empty or already
/// taken in the list is a problem.
fn named<'n>(at: &str, i: usize, name: &'n str, names: &mut HashSet<&'n str>, problems: &mut Problems) -> String {
    let here = format!("{at}[{i}] ({name:?})");
    if name.trim().is_empty() {
        problems.push(format!("{here}.name: must not be empty"));
    } else if !names.insert(name) {
        problems.push(format!("{here}.name: another item of this list has the name {name:?}"));
    }
    here
}

/// The rules of one list, compiled; each problem names the rule's path and name.
pub fn compile_list(rules: &[PolicyRule], at: &str, problems: &mut Problems) -> Vec<Rule> {
    let mut names = HashSet::new();
    let mut out = Vec::with_capacity(rules.len());
    for (i, rule) in rules.iter().enumerate() {
        let here = named(at, i, &rule.name, &mut names, problems);
        let allow = match rule.effect.as_str() {
            "allow" => true,
            "deny" => false,
            other => {
                problems.push(format!("{here}.effect: must be \"allow\" or \"deny\", found {other:?}"));
                continue;
            }
        };
        match Rule::compile(&rule.name, allow, &rule.when, rule.message.clone()) {
            Ok(compiled) => out.push(compiled),
            Err(why) => problems.push(format!("{here}.when: {why}")),
        }
    }
    out
}

/// The quotas of one list, compiled; each problem names the quota's path and name.
pub fn compile_quotas(quotas: &[QuotaRule], at: &str, problems: &mut Problems) -> Vec<Quota> {
    let mut names = HashSet::new();
    let mut out = Vec::with_capacity(quotas.len());
    for (i, quota) in quotas.iter().enumerate() {
        let here = named(at, i, &quota.name, &mut names, problems);
        let (when, rate, limit) = (quota.when.as_deref(), quota.rate.as_deref(), quota.limit.as_deref());
        match Quota::compile(&quota.name, &quota.per, when, rate, quota.burst, limit) {
            Ok(compiled) => out.push(compiled),
            Err(why) => problems.push(format!("{here}.{why}")),
        }
    }
    out
}
