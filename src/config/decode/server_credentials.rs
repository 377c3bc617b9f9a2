//! The decoder of a server entry's `credentials` (contract 16): every field of every kind, typed, so that an unknown
//! key or a wrong type is a problem of the file; what the values must be is checked in `config/server_credentials.rs`.

use super::fields::Fields;
use crate::config::model::ServerCredentials;

pub(super) fn decode(mut f: Fields<'_>) -> ServerCredentials {
    ServerCredentials {
        mode: f.string("mode"),
        kind: f.string("kind"),
        names: f.string_list("names"),
        authorization_url: f.string("authorization_url"),
        token_url: f.string("token_url"),
        client_id: f.string("client_id"),
        client_secret: f.string("client_secret"),
        scopes: f.string_list("scopes"),
        resource: f.string("resource"),
        audience: f.string("audience"),
        issuer: f.string("issuer"),
        revocation_url: f.string("revocation_url"),
        extra: f.rest(),
    }
}
