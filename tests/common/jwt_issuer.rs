//! A local OAuth authorization server for black-box tests of the `oauth` provider (contract section 10): its OpenID
//! configuration and JWKS served over HTTP by [`HttpMock`], and tokens signed here, RS256 with a fixed test key and
//! ES256 with keys generated per run. `rotate` replaces the JWKS by a new EC key, as an issuer rotating its keys does.

// Each test file uses part of this module.
#![allow(dead_code)]

use std::time::{SystemTime, UNIX_EPOCH};

use base64::Engine as _;
use base64::engine::general_purpose::{STANDARD, URL_SAFE_NO_PAD};
use ring::rand::SystemRandom;
use ring::signature::{self, ECDSA_P256_SHA256_FIXED_SIGNING, EcdsaKeyPair, KeyPair, RsaKeyPair};
use serde_json::{Value, json};

use super::http_mock::HttpMock;

/// A 2048-bit RSA key (PKCS#1 `RSAPrivateKey` DER, base64): made for these tests only (`openssl genpkey`), never
/// used anywhere else.
const TEST_RSA_DER: &[&str] = &[
    "MIIEoQIBAAKCAQEAsgwlwgL9AD+JoLoMvajyI7Eo7bAo5rcHlcuvKVKOU/EsuAhvUkbceaX0jrZzSvo0VHuFQkIHo0FeuT60HNtr",
    "PaxTe4VJPBfZcviUV+4kqkOcXnoPkzL+/bPPccH+Sg6ndQRq92laRxyGG1DF0rv3tFHEeY9kK4jvb43vz+kjLfURrg9XuXjcdZ3d",
    "a8/tZ0ymqUfpylROjSoUdFM6ZOX1mTV0NEgUvJFt3jOCzyRmIPMX1sE1xtbDRr9IluUgdFJsFsJN1N2MCauUy3rNfGAbIS/9m74w",
    "R9VIpvfUsRjWQdgFF+/vvq50pCINt/LG9Hge8KdoFFYBQdsNsuf20ja0AwIDAQABAoH/RI4fspRPaKR8EIuSpXRnx5+T2ahDzkj0",
    "WZSmJmejQUFSiPeR5Yn1o7zU/9VAj1TsPwkHaw4BmbYkMJ1h4ShSIpGlk1e+2xt4Vafzdno7o+XST7L5J7R7DKJ4q1SZJ1h9If8j",
    "wvtgEJPGfQcvJIeE2Q4QmL3CHUpTeXwI2pd8YevoMxNeXZBZaTshU6oZSxowwqEi983U6Mo8VqU4P1iE+s996JNJ4Miy4PLpHsII",
    "APgVylPdeH2UjaO2BwMoTkU2PLW/6aKLRfrKkPaqfKLyZtR2caIdrRCR6WIaClUGL0c/q2wNm4UK6bCsGxgIaiRQq9jLzrxoFyXN",
    "SKt9iZFBAoGBAOfkXcRyrcfi12L8/hDI814OJJndrjqC+64LmnouMs3cmbHRxjI9nYa0lXuNo6Rl/T1pUbZXIclS0NRR0ICBTin5",
    "Jy6vmNtHxzjWgiNqCmD4ej10QiH1waprB6CWMW3jIPiG8Hd6hCL8wOT3GB5TdeRwnV9LOPHUlwkU/OOzr48xAoGBAMSOv0+4IMiU",
    "m4TbUX+afMHp48P8A7kkw4rOUUWvqnw5hn/1/yWVxGYu/BI1Adj7JRy4yuuN8s2wNQCi7HI6/tU0EeFsnggvGCIlGRTd+nG2Rm1y",
    "7CHsUg06k2pJRF1ho75q5XoLZXoVhdqgz+j6VyaUZTP6j4S/TfGv/FtMwTFzAoGANT6yaREL5gGoAwqkK6Z4evg0X0APaU/6ChSP",
    "+83vzGUCxVmtcIvFR9DfIed705u3cgpkwMFw+JETciz2+wq1r92NqaKYLoFktSBL8WW/zFRBfSrcpH+RYFgDAFR8NQcZ4vbY8BYp",
    "kP8IK4qw9wWi5DkXaXIUOTLfGy6+gmoXvYECgYEAuC+bjjRYZBz9bo2l3REC/yMQz8IEKyYMJrIW7loiQ64UHyyBHtMs6yP0CYuq",
    "Y41TxYpUfE7Ty3Lm9+Wz84bc7SSR7M8/dyPKVZS14BvyZ0QK0tzx8QfmC4dsRBjL+0VXj0PULX0oZjJs7+XpbcPIjtpXy1Fr01UA",
    "0Q28SEGwd4kCgYAzUYWKFKTEHbkwqB+KRiCgYzHkqDi6sU9v5Y8KhekKZO7kVcKUzN3/geJhc5Mnab19/LufqHeCT3ZFWyAhlyq0",
    "jZNPiYIzB/TKnrQ0D+UEbyrKD4kHLPJNgQ4cH59gZby1sqIZhxX3q03yzU/YBuxNBxB2Tdcv2sop1dSYV7eIrQ==",
];

pub const AUDIENCE: &str = "mcpgw";
pub const RSA_KID: &str = "rsa-1";

pub struct JwtIssuer {
    pub mock: HttpMock,
    /// The issuer URL (`iss`), the mock's base URL.
    pub issuer: String,
    rsa: RsaKeyPair,
    /// The EC key of a rotation, when one happened.
    ec: std::sync::Mutex<Option<(String, EcdsaKeyPair)>>,
}

pub fn now() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_secs()
}

fn rsa_jwk(pair: &RsaKeyPair, kid: &str) -> Value {
    let public: signature::RsaPublicKeyComponents<Vec<u8>> = pair.public().into();
    json!({"kty": "RSA", "kid": kid, "use": "sig", "alg": "RS256",
           "n": URL_SAFE_NO_PAD.encode(&public.n), "e": URL_SAFE_NO_PAD.encode(&public.e)})
}

fn ec_jwk(pair: &EcdsaKeyPair, kid: &str) -> Value {
    let point = pair.public_key().as_ref();
    json!({"kty": "EC", "crv": "P-256", "kid": kid, "use": "sig", "alg": "ES256",
           "x": URL_SAFE_NO_PAD.encode(&point[1..33]), "y": URL_SAFE_NO_PAD.encode(&point[33..])})
}

pub fn new_ec_key() -> EcdsaKeyPair {
    let rng = SystemRandom::new();
    let pkcs8 = EcdsaKeyPair::generate_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, &rng).unwrap();
    EcdsaKeyPair::from_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, pkcs8.as_ref(), &rng).unwrap()
}

impl JwtIssuer {
    /// Serves `/.well-known/openid-configuration` and `/jwks` (the RSA key, kid [`RSA_KID`]).
    pub fn start() -> JwtIssuer {
        let der = STANDARD.decode(TEST_RSA_DER.concat()).unwrap();
        let rsa = RsaKeyPair::from_der(&der).unwrap();
        let mock = HttpMock::start(vec![("/jwks", 200, json!({"keys": [rsa_jwk(&rsa, RSA_KID)]}))]);
        let issuer = mock.base_url.clone();
        mock.set(
            "/.well-known/openid-configuration",
            200,
            json!({
                "issuer": issuer, "jwks_uri": format!("{issuer}/jwks"),
                "authorization_endpoint": format!("{issuer}/authorize"), "token_endpoint": format!("{issuer}/token"),
            }),
        );
        JwtIssuer { mock, issuer, rsa, ec: std::sync::Mutex::new(None) }
    }

    /// Claims of a valid token for `user` in `project`, with scope `mcp`, living five minutes.
    pub fn claims(&self, user: &str, project: &str) -> Value {
        let now = now();
        json!({"iss": self.issuer, "aud": AUDIENCE, "sub": user, "email": user, "mcpgw_project": project,
               "scope": "openid mcp", "iat": now, "nbf": now, "exp": now + 300})
    }

    /// An RS256 token of the issuer's RSA key.
    pub fn sign(&self, claims: &Value) -> String {
        self.sign_rs256(&self.rsa, RSA_KID, claims)
    }

    pub fn sign_rs256(&self, pair: &RsaKeyPair, kid: &str, claims: &Value) -> String {
        let input = signing_input(&json!({"alg": "RS256", "typ": "JWT", "kid": kid}), claims);
        let mut signature = vec![0; pair.public().modulus_len()];
        pair.sign(&signature::RSA_PKCS1_SHA256, &SystemRandom::new(), input.as_bytes(), &mut signature).unwrap();
        format!("{input}.{}", URL_SAFE_NO_PAD.encode(signature))
    }

    /// An ES256 token of `pair`, named `kid`.
    pub fn sign_es256(&self, pair: &EcdsaKeyPair, kid: &str, claims: &Value) -> String {
        let input = signing_input(&json!({"alg": "ES256", "typ": "JWT", "kid": kid}), claims);
        let signature = pair.sign(&SystemRandom::new(), input.as_bytes()).unwrap();
        format!("{input}.{}", URL_SAFE_NO_PAD.encode(signature.as_ref()))
    }

    /// The issuer rotates its keys: the JWKS now holds only a new EC key, `kid`; returns a token of it.
    pub fn rotate(&self, kid: &str, claims: &Value) -> String {
        let pair = new_ec_key();
        self.mock.set("/jwks", 200, json!({"keys": [ec_jwk(&pair, kid)]}));
        let token = self.sign_es256(&pair, kid, claims);
        *self.ec.lock().unwrap() = Some((kid.to_string(), pair));
        token
    }

    /// The JWKS of the issuer's RSA key (what `/jwks` serves first).
    pub fn jwks(&self) -> Value {
        json!({"keys": [rsa_jwk(&self.rsa, RSA_KID)]})
    }

    /// How many times the JWKS was fetched.
    pub fn jwks_fetches(&self) -> usize {
        self.mock.seen().iter().filter(|seen| seen.path == "/jwks").count()
    }
}

fn signing_input(header: &Value, claims: &Value) -> String {
    format!("{}.{}", URL_SAFE_NO_PAD.encode(header.to_string()), URL_SAFE_NO_PAD.encode(claims.to_string()))
}
