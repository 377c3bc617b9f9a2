//! Unit tests of `credentials` and `${user.NAME}`: references, substitution and every rule of the load.

use super::*;
use crate::config::model::{OAuthConfig, ServerCommand};
use indexmap::IndexMap;

fn entry(credentials: Option<ServerCredentials>, env: &[(&str, &str)], args: &[&str]) -> ServerEntry {
    ServerEntry {
        server_name: "github".into(),
        config: ServerCommand {
            command: "srv".into(),
            args: args.iter().map(|a| a.to_string()).collect(),
            env: Some(env.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect::<IndexMap<_, _>>()),
            ..ServerCommand::default()
        },
        credentials,
        ..ServerEntry::default()
    }
}

fn secret(names: &[&str]) -> Option<ServerCredentials> {
    Some(ServerCredentials {
        mode: Some(PER_USER.into()),
        kind: Some(SECRET.into()),
        names: Some(names.iter().map(|n| n.to_string()).collect()),
        ..ServerCredentials::default()
    })
}

fn problems(entry: &ServerEntry) -> Vec<String> {
    let mut found = Problems::new();
    check(entry, "e", &mut found);
    found
}

#[test]
fn references_are_read_in_order_and_malformed_ones_refused() {
    assert_eq!(references("Bearer ${user.TOKEN}").unwrap(), ["TOKEN"]);
    assert_eq!(references("${user.A}:${user.B_2}/${OTHER}").unwrap(), ["A", "B_2"]);
    assert!(references("no reference, ${HOME}").unwrap().is_empty());
    assert!(references("${user.TOKEN").unwrap_err().contains("not closed"));
    assert!(references("${user.}").unwrap_err().contains("not a name"));
    assert!(references("${user.1X}").unwrap_err().contains("not a name"));
    assert!(references("${user.A-B}").unwrap_err().contains("not a name"));
}

#[test]
fn substitution_puts_each_value_in_place_and_leaves_the_rest() {
    let values = HashMap::from([("TOKEN".to_string(), "t-1".to_string()), ("ORG".into(), "acme".into())]);
    assert_eq!(substitute("Bearer ${user.TOKEN}", &values), "Bearer t-1");
    assert_eq!(substitute("--org=${user.ORG}/${user.ORG}", &values), "--org=acme/acme");
    assert_eq!(substitute("${user.MISSING} ${HOME}", &values), "${user.MISSING} ${HOME}");
    assert_eq!(substitute("plain", &values), "plain");
    // A value that looks like a reference is not expanded again.
    let tricky = HashMap::from([("A".to_string(), "${user.B}".to_string()), ("B".into(), "b".into())]);
    assert_eq!(substitute("${user.A}", &tricky), "${user.B}");
}

#[test]
fn a_secret_entry_with_every_name_used_is_valid_and_names_its_kind() {
    let ok =
        entry(secret(&["GITHUB_TOKEN", "ORG"]), &[("GITHUB_TOKEN", "${user.GITHUB_TOKEN}")], &["--org=${user.ORG}"]);
    assert!(problems(&ok).is_empty(), "{:?}", problems(&ok));
    assert_eq!(ok.user_secret_names().unwrap(), ["GITHUB_TOKEN", "ORG"]);
    assert_eq!(ok.credential_kind(), "secret");
    let shared = entry(None, &[("A", "1")], &[]);
    assert!(shared.user_secret_names().is_none());
    assert_eq!(shared.credential_kind(), "shared");
    assert!(problems(&shared).is_empty());
}

#[test]
fn undeclared_and_unused_names_are_named_with_the_entry() {
    let found = problems(&entry(secret(&["TOKEN", "UNUSED"]), &[("T", "${user.TOKEN}"), ("X", "${user.OTHER}")], &[]));
    assert_eq!(found.len(), 2, "{found:?}");
    assert!(
        found
            .iter()
            .any(|p| p.contains("server \"github\"") && p.contains("${user.OTHER} is not in credentials.names"))
    );
    assert!(found.iter().any(|p| p.contains("\"UNUSED\" but nothing uses it")));
}

#[test]
fn names_must_be_a_non_empty_list_of_distinct_variable_names() {
    assert!(problems(&entry(secret(&[]), &[], &[]))[0].contains("non-empty list"));
    let found = problems(&entry(secret(&["A", "A", "bad-name"]), &[("A", "${user.A}")], &[]));
    assert!(found.iter().any(|p| p.contains("\"A\" is listed twice")), "{found:?}");
    assert!(found.iter().any(|p| p.contains("\"bad-name\" is not a name")), "{found:?}");
}

#[test]
fn references_need_per_user_and_must_be_well_formed() {
    assert!(problems(&entry(None, &[("T", "${user.TOKEN}")], &[]))[0].contains("needs credentials"));
    let shared = Some(ServerCredentials { mode: Some(SHARED.into()), ..ServerCredentials::default() });
    assert!(problems(&entry(shared, &[], &["${user.X}"]))[0].contains("needs credentials"));
    let found = problems(&entry(secret(&["T"]), &[("T", "${user.T}"), ("U", "${user.T")], &[]));
    assert_eq!(found, ["e (server \"github\"): config.env.U: a `${user.` reference is not closed with `}`"]);
}

#[test]
fn unknown_modes_and_kinds_and_misplaced_fields_are_refused() {
    let mode = Some(ServerCredentials { mode: Some("per-user".into()), ..ServerCredentials::default() });
    assert!(problems(&entry(mode, &[], &[]))[0].contains("must be \"shared\" or \"per_user\""));
    let no_kind = Some(ServerCredentials { mode: Some(PER_USER.into()), ..ServerCredentials::default() });
    assert!(problems(&entry(no_kind, &[], &[]))[0].contains("kind: is required"));
    let mut with_url = secret(&["T"]);
    with_url.as_mut().unwrap().token_url = Some("https://issuer.example/token".into());
    assert!(
        problems(&entry(with_url, &[("T", "${user.T}")], &[]))[0].contains("token_url: not a field of kind \"secret\"")
    );
    let shared_names = Some(ServerCredentials { names: Some(vec!["T".into()]), ..ServerCredentials::default() });
    assert!(problems(&entry(shared_names, &[], &[]))[0].contains("only for mode \"per_user\""));
}

#[test]
fn oauth_and_token_exchange_fields_and_their_one_reference_are_checked() {
    let oauth = Some(ServerCredentials {
        mode: Some(PER_USER.into()),
        kind: Some(OAUTH.into()),
        token_url: Some("not a url".into()),
        ..ServerCredentials::default()
    });
    let found = problems(&entry(oauth, &[], &[]));
    for expected in [
        "client_id: is required",
        "authorization_url: is required",
        "scopes: is required",
        "token_url: \"not a url\" is not a URL",
        "needs the user's token handed to it",
    ] {
        assert!(found.iter().any(|p| p.contains(expected)), "missing {expected:?} in {found:?}");
    }
    let exchange = Some(ServerCredentials {
        mode: Some(PER_USER.into()),
        kind: Some(TOKEN_EXCHANGE.into()),
        token_url: Some("https://issuer.example/token".into()),
        client_id: Some("c".into()),
        ..ServerCredentials::default()
    });
    assert_eq!(problems(&entry(exchange.clone(), &[], &[])).len(), 1, "a local server must reference the token");
    assert!(problems(&entry(exchange.clone(), &[("T", "${user.ACCESS_TOKEN}")], &[])).is_empty());
    let other = problems(&entry(exchange, &[("T", "${user.ACCESS_TOKEN}"), ("U", "${user.OTHER}")], &[]));
    assert!(other.len() == 1 && other[0].contains("one value per user"), "{other:?}");
}

#[test]
fn per_user_with_an_enabled_oauth_config_is_two_sources() {
    let mut both = entry(secret(&["T"]), &[("T", "${user.T}")], &[]);
    both.oauth_config = Some(OAuthConfig { enabled: Some(true), ..OAuthConfig::default() });
    assert!(problems(&both)[0].contains("two sources of credentials"));
    both.oauth_config = Some(OAuthConfig { enabled: Some(false), ..OAuthConfig::default() });
    assert!(problems(&both).is_empty());
}
