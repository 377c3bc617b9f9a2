//! JSON Web Tokens as clients present them to the `oauth` provider (contract section 10): the JWS compact form
//! (RFC 7515) parsed, and its signature checked against a key of the issuer's JWKS (RFC 7517) with ring. Two
//! algorithms are accepted, RS256 (RSASSA-PKCS1-v1_5 with SHA-256, keys of 2048 bits and more) and ES256 (ECDSA P-256
//! with SHA-256); `none`, HMAC and every other algorithm are refused, and a key is only ever used for the algorithm of
//! its own type. The claims are checked by the caller (`oauth.rs`). Nothing here keeps or prints the token.

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use ring::signature::{self, RsaPublicKeyComponents, UnparsedPublicKey};
use serde_json::{Map, Value};

/// The largest token accepted (a header of 8 KiB could hold little else; real tokens are 1-3 KiB).
pub const MAX_TOKEN_BYTES: usize = 8 * 1024;

/// The signature algorithms the gateway verifies.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Alg {
    Rs256,
    Es256,
}

/// A parsed, not yet verified token.
pub struct Jwt {
    pub alg: Alg,
    pub kid: Option<String>,
    pub claims: Map<String, Value>,
    /// `header.payload`, what the signature covers.
    signing_input: String,
    signature: Vec<u8>,
}

impl std::fmt::Debug for Jwt {
    /// The algorithm and key id only: the claims are the caller's identity, and the signature is of no use in a log.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Jwt").field("alg", &self.alg).field("kid", &self.kid).finish_non_exhaustive()
    }
}

/// Whether `token` has the shape of a JWS (three base64url parts); anything else is taken for an API key.
pub fn looks_like_jwt(token: &str) -> bool {
    let mut parts = token.split('.');
    let shaped = (0..3).all(|_| {
        parts
            .next()
            .is_some_and(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_'))
    });
    shaped && parts.next().is_none() && token.starts_with("eyJ")
}

/// Parses a token; the error says what is wrong without quoting it.
pub fn parse(token: &str) -> Result<Jwt, String> {
    if token.len() > MAX_TOKEN_BYTES {
        return Err(format!("the token is longer than {MAX_TOKEN_BYTES} bytes"));
    }
    let mut parts = token.split('.');
    let (Some(header), Some(payload), Some(signature), None) = (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err("the token is not a JWT (three base64url parts)".into());
    };
    let decoded = |part: &str, what: &str| {
        URL_SAFE_NO_PAD.decode(part).map_err(|_| format!("the token's {what} is not base64url"))
    };
    let object = |bytes: Vec<u8>, what: &str| match serde_json::from_slice::<Value>(&bytes) {
        Ok(Value::Object(map)) => Ok(map),
        _ => Err(format!("the token's {what} is not a JSON object")),
    };
    let head = object(decoded(header, "header")?, "header")?;
    let claims = object(decoded(payload, "payload")?, "payload")?;
    let signature = decoded(signature, "signature")?;
    let alg = match head.get("alg").and_then(Value::as_str) {
        Some("RS256") => Alg::Rs256,
        Some("ES256") => Alg::Es256,
        Some(other) => return Err(format!("the token's algorithm {:?} is not accepted (RS256, ES256)", clip(other))),
        None => return Err("the token's header names no algorithm".into()),
    };
    if head.get("crit").is_some() {
        return Err("the token's header has critical extensions the gateway does not know".into());
    }
    let kid = head.get("kid").and_then(Value::as_str).map(str::to_string);
    let signing_input = token[..header.len() + 1 + payload.len()].to_string();
    Ok(Jwt { alg, kid, claims, signing_input, signature })
}

/// At most 40 characters of a value from a token, for messages.
pub fn clip(value: &str) -> String {
    value.chars().filter(|c| !c.is_control()).take(40).collect()
}

/// A public key of the issuer's JWKS that the gateway can use.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Jwk {
    pub kid: Option<String>,
    key: PublicKey,
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum PublicKey {
    Rsa {
        n: Vec<u8>,
        e: Vec<u8>,
    },
    /// An uncompressed P-256 point (`0x04 || x || y`).
    P256(Vec<u8>),
}

impl Jwk {
    /// A key of a JWKS document; `None` for one the gateway cannot use (another type or curve, an encryption key, an
    /// algorithm other than RS256 and ES256, malformed).
    pub fn from_json(value: &Value) -> Option<Jwk> {
        let field = |name: &str| value.get(name).and_then(Value::as_str);
        if field("use").is_some_and(|u| u != "sig") {
            return None;
        }
        let bytes = |name: &str| field(name).and_then(|v| URL_SAFE_NO_PAD.decode(v.trim_end_matches('=')).ok());
        let key = match (field("kty"), field("alg")) {
            (Some("RSA"), None | Some("RS256")) => {
                let (n, e) = (bytes("n")?, bytes("e")?);
                PublicKey::Rsa { n, e }
            }
            (Some("EC"), None | Some("ES256")) if field("crv") == Some("P-256") => {
                let (x, y) = (bytes("x")?, bytes("y")?);
                if x.len() != 32 || y.len() != 32 {
                    return None;
                }
                let mut point = Vec::with_capacity(65);
                point.push(4);
                point.extend(x);
                point.extend(y);
                PublicKey::P256(point)
            }
            _ => return None,
        };
        Some(Jwk { kid: field("kid").map(str::to_string), key })
    }

    /// Whether this key is of the type `alg` needs.
    pub fn fits(&self, alg: Alg) -> bool {
        matches!((&self.key, alg), (PublicKey::Rsa { .. }, Alg::Rs256) | (PublicKey::P256(_), Alg::Es256))
    }

    /// Whether `jwt`'s signature was made with this key.
    pub fn verifies(&self, jwt: &Jwt) -> bool {
        let message = jwt.signing_input.as_bytes();
        match (&self.key, jwt.alg) {
            (PublicKey::Rsa { n, e }, Alg::Rs256) => RsaPublicKeyComponents { n, e }
                .verify(&signature::RSA_PKCS1_2048_8192_SHA256, message, &jwt.signature)
                .is_ok(),
            (PublicKey::P256(point), Alg::Es256) => UnparsedPublicKey::new(&signature::ECDSA_P256_SHA256_FIXED, point)
                .verify(message, &jwt.signature)
                .is_ok(),
            _ => false,
        }
    }
}

/// The usable keys of a JWKS document (`{"keys": [...]}`).
pub fn keys_of(document: &Value) -> Vec<Jwk> {
    document
        .get("keys")
        .and_then(Value::as_array)
        .map(|keys| keys.iter().filter_map(Jwk::from_json).collect())
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use ring::rand::SystemRandom;
    use ring::signature::{ECDSA_P256_SHA256_FIXED_SIGNING, EcdsaKeyPair, KeyPair};
    use serde_json::json;

    fn es256_key() -> (EcdsaKeyPair, Value) {
        let rng = SystemRandom::new();
        let pkcs8 = EcdsaKeyPair::generate_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, &rng).unwrap();
        let pair = EcdsaKeyPair::from_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, pkcs8.as_ref(), &rng).unwrap();
        let point = pair.public_key().as_ref().to_vec();
        let jwk = json!({"kty": "EC", "crv": "P-256", "kid": "k1", "use": "sig",
                         "x": URL_SAFE_NO_PAD.encode(&point[1..33]), "y": URL_SAFE_NO_PAD.encode(&point[33..])});
        (pair, jwk)
    }

    fn sign(pair: &EcdsaKeyPair, header: Value, claims: Value) -> String {
        let input =
            format!("{}.{}", URL_SAFE_NO_PAD.encode(header.to_string()), URL_SAFE_NO_PAD.encode(claims.to_string()));
        let signature = pair.sign(&SystemRandom::new(), input.as_bytes()).unwrap();
        format!("{input}.{}", URL_SAFE_NO_PAD.encode(signature.as_ref()))
    }

    #[test]
    fn an_es256_token_verifies_with_its_key_only() {
        let (pair, jwk) = es256_key();
        let (_, other) = es256_key();
        let token = sign(&pair, json!({"alg": "ES256", "kid": "k1"}), json!({"sub": "ann"}));
        assert!(looks_like_jwt(&token));
        let jwt = parse(&token).unwrap();
        assert_eq!((jwt.alg, jwt.kid.as_deref()), (Alg::Es256, Some("k1")));
        assert!(Jwk::from_json(&jwk).unwrap().verifies(&jwt));
        assert!(!Jwk::from_json(&other).unwrap().verifies(&jwt));
        // The payload changed after signing.
        let mut parts: Vec<&str> = token.split('.').collect();
        let forged = URL_SAFE_NO_PAD.encode(json!({"sub": "root"}).to_string());
        parts[1] = &forged;
        let jwt = parse(&parts.join(".")).unwrap();
        assert!(!Jwk::from_json(&jwk).unwrap().verifies(&jwt));
    }

    #[test]
    fn other_algorithms_and_shapes_are_refused() {
        let none = format!("{}.{}.", URL_SAFE_NO_PAD.encode(r#"{"alg":"none"}"#), URL_SAFE_NO_PAD.encode("{}"));
        assert!(parse(&none).is_err());
        let hs = format!("{}.{}.c2ln", URL_SAFE_NO_PAD.encode(r#"{"alg":"HS256"}"#), URL_SAFE_NO_PAD.encode("{}"));
        assert!(parse(&hs).unwrap_err().contains("HS256"));
        assert!(!looks_like_jwt("gw_live_0123456789abcdef"));
        assert!(!looks_like_jwt("a.b.c.d"));
        assert!(parse(&"e".repeat(MAX_TOKEN_BYTES + 1)).is_err());
        assert!(Jwk::from_json(&json!({"kty": "oct", "k": "c2VjcmV0"})).is_none());
        assert!(Jwk::from_json(&json!({"kty": "EC", "crv": "P-384", "x": "AA", "y": "AA"})).is_none());
        assert!(Jwk::from_json(&json!({"kty": "RSA", "use": "enc", "n": "AQAB", "e": "AQAB"})).is_none());
    }
}
