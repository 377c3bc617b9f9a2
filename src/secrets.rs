//! Secrets: generating keys, naming them without revealing them, and comparing them.
//!
//! Keys come from the operating system's generator (32 bytes, URL-safe base64, 43 characters). A key is named in
//! listings by its `key_id` (the first 12 hex characters of its SHA-256) and shown masked; the whole key appears only in
//! the response that creates it. Comparisons of secrets are constant-time.

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

/// Prefix of the gateway (user) API keys the service creates; it helps secret scanners recognise them.
pub const GATEWAY_KEY_PREFIX: &str = "gw_";

/// Error from the operating system's random generator.
#[derive(Debug, thiserror::Error)]
#[error("the operating system's random generator failed: {0}")]
pub struct RandomError(String);

/// `n` random bytes from the operating system's generator.
pub fn random_bytes<const N: usize>() -> Result<[u8; N], RandomError> {
    let mut buf = [0u8; N];
    getrandom::fill(&mut buf).map_err(|e| RandomError(e.to_string()))?;
    Ok(buf)
}

/// 32 random bytes as URL-safe base64 without padding (43 characters).
pub fn random_token() -> Result<String, RandomError> {
    Ok(URL_SAFE_NO_PAD.encode(random_bytes::<32>()?))
}

/// A new admin key (43 URL-safe characters).
pub fn new_admin_key() -> Result<String, RandomError> {
    random_token()
}

/// A new gateway API key (`gw_` and 43 URL-safe characters).
pub fn new_gateway_key() -> Result<String, RandomError> {
    Ok(format!("{GATEWAY_KEY_PREFIX}{}", random_token()?))
}

/// Encrypts `plain` with AES-256-GCM under `key`, bound to `label` (what the value is) as associated data: a fresh
/// random nonce followed by the ciphertext and its tag. What backups and session ids use.
pub fn seal(key: &[u8; 32], plain: &[u8], label: &str) -> Result<Vec<u8>, RandomError> {
    use aes_gcm::aead::{Aead, KeyInit, Payload};
    let nonce_bytes = random_bytes::<12>()?;
    let cipher = aes_gcm::Aes256Gcm::new(&aes_gcm::Key::<aes_gcm::Aes256Gcm>::from(*key));
    let sealed = cipher
        .encrypt(&aes_gcm::Nonce::from(nonce_bytes), Payload { msg: plain, aad: label.as_bytes() })
        .map_err(|_| RandomError("encryption failed".to_string()))?;
    let mut out = nonce_bytes.to_vec();
    out.extend_from_slice(&sealed);
    Ok(out)
}

/// Decrypts what [`seal`] made with the same key and label; `None` when it is not that (a wrong key, a changed byte).
pub fn open(key: &[u8; 32], sealed: &[u8], label: &str) -> Option<Vec<u8>> {
    use aes_gcm::aead::{Aead, KeyInit, Payload};
    if sealed.len() < 12 + 16 {
        return None;
    }
    let (nonce, body) = sealed.split_at(12);
    let nonce = aes_gcm::Nonce::from(<[u8; 12]>::try_from(nonce).ok()?);
    let cipher = aes_gcm::Aes256Gcm::new(&aes_gcm::Key::<aes_gcm::Aes256Gcm>::from(*key));
    cipher.decrypt(&nonce, Payload { msg: body, aad: label.as_bytes() }).ok()
}

/// A 32-byte key for one purpose (`label`) derived from a secret: HMAC-SHA256(secret, label).
pub fn derive_key(secret: &[u8], label: &str) -> [u8; 32] {
    use ring::hmac;
    let tag = hmac::sign(&hmac::Key::new(hmac::HMAC_SHA256, secret), label.as_bytes());
    let mut out = [0u8; 32];
    out.copy_from_slice(tag.as_ref());
    out
}

/// SHA-256 of a key: the index key of the snapshot's key table.
pub fn digest(key: &str) -> [u8; 32] {
    Sha256::digest(key.as_bytes()).into()
}

/// The public name of a key: the first 12 hex characters of its SHA-256.
pub fn key_id(key: &str) -> String {
    key_id_from_digest(&digest(key))
}

/// [`key_id`] from an already computed digest.
pub fn key_id_from_digest(digest: &[u8; 32]) -> String {
    hex(&digest[..6])
}

/// `bytes` in lower-case hexadecimal (digests in keys, fingerprints, pins and audit records).
pub fn hex(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(bytes.len() * 2);
    push_hex(&mut out, bytes);
    out
}

/// [`hex`] appended to `out` (also the trace and span ids of exported spans, as OpenTelemetry writes them).
pub fn push_hex(out: &mut String, bytes: &[u8]) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    for b in bytes {
        out.push(char::from(HEX[usize::from(b >> 4)]));
        out.push(char::from(HEX[usize::from(b & 0x0f)]));
    }
}

/// Whether `s` has the shape of a key id (12 lowercase hex characters).
pub fn looks_like_key_id(s: &str) -> bool {
    s.len() == 12 && s.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

/// The most characters of a secret its masked form shows (contract section 13).
pub const MASK_SHOWN_CHARS: usize = 4;

/// A masked form of a secret: a value of 16 characters or more keeps its first [`MASK_SHOWN_CHARS`] characters (enough
/// to tell an `sk-l` from a `gw_a` in a log), a shorter one keeps nothing. The rest is always `****`, so the length
/// does not show either.
pub fn mask(secret: &str) -> String {
    if secret.chars().nth(15).is_some() {
        let head: String = secret.chars().take(MASK_SHOWN_CHARS).collect();
        format!("{head}****")
    } else {
        "********".to_string()
    }
}

/// An e-mail address for logs: the first character of the local part and the domain (`j***@example.com`).
pub fn mask_email(email: &str) -> String {
    match email.split_once('@') {
        Some((local, domain)) => {
            let first: String = local.chars().take(1).collect();
            format!("{first}***@{domain}")
        }
        None => "***".to_string(),
    }
}

/// Constant-time equality of two digests.
pub fn ct_eq_digest(a: &[u8; 32], b: &[u8; 32]) -> bool {
    a.ct_eq(b).into()
}

/// Constant-time equality of two secrets (the length may leak, the content does not). Eight bytes at a time, every
/// byte read whatever the first difference: a bearer token is about 1 KB and compared at every request
/// (`auth/oauth.rs`), where `subtle`'s byte-by-byte comparison took about a microsecond.
pub fn ct_eq(a: &str, b: &str) -> bool {
    let (a, b) = (a.as_bytes(), b.as_bytes());
    if a.len() != b.len() {
        return false;
    }
    let (a_words, b_words) = (a.chunks_exact(8), b.chunks_exact(8));
    let tails = a_words.remainder().ct_eq(b_words.remainder());
    let mut differ = 0u64;
    for (x, y) in a_words.zip(b_words) {
        let word = |bytes: &[u8]| u64::from_ne_bytes(bytes.try_into().unwrap_or_default());
        differ |= word(x) ^ word(y);
    }
    // Hidden from the optimiser, so that the loop is not cut short at the first difference.
    (std::hint::black_box(differ).ct_eq(&0) & tails).into()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generated_keys_are_long_and_url_safe() {
        let admin = new_admin_key().unwrap();
        assert_eq!(admin.len(), 43);
        let key = new_gateway_key().unwrap();
        assert!(key.starts_with("gw_") && key.len() == 46);
        assert!(key.chars().all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_'));
        assert_ne!(new_gateway_key().unwrap(), key);
    }

    #[test]
    fn key_id_is_twelve_hex_of_sha256() {
        // SHA-256("abc") = ba7816bf8f01cfea...
        assert_eq!(key_id("abc"), "ba7816bf8f01");
        assert!(looks_like_key_id(&key_id("anything")));
        assert!(!looks_like_key_id("BA7816BF8F01"));
    }

    #[test]
    fn emails_keep_their_first_character_and_domain() {
        assert_eq!(mask_email("jane.doe@example.com"), "j***@example.com");
        assert_eq!(mask_email("no-at-sign"), "***");
        assert_eq!(mask_email(""), "***");
    }

    #[test]
    fn masking_shows_at_most_four_characters_and_short_values_none() {
        assert_eq!(mask("gw_abcdefghijklmnopqrstuvwxyz"), "gw_a****");
        assert_eq!(mask("0123456789abcdef"), "0123****", "16 characters: the first four");
        assert_eq!(mask("0123456789abcde"), "********", "15 characters: none");
        assert_eq!(mask("short"), "********");
        assert_eq!(mask(""), "********");
        assert_eq!(mask("ééééééééééééééééé"), "éééé****");
    }

    #[test]
    fn no_masked_secret_shows_more_than_four_of_its_characters() {
        // Secrets of distinct characters, so every character of the masked form that comes from the secret counts.
        let alphabet: Vec<char> = ('A'..='Z').chain('a'..='z').chain('0'..='9').collect();
        for len in 0..=alphabet.len() {
            let secret: String = alphabet[..len].iter().collect();
            let masked = mask(&secret);
            let shown = masked.chars().filter(|c| secret.contains(*c)).count();
            assert!(shown <= MASK_SHOWN_CHARS, "{len} characters: {masked:?} shows {shown}");
        }
        let long = new_gateway_key().unwrap();
        assert!(!mask(&long).contains(&long[..MASK_SHOWN_CHARS + 1]));
    }

    #[test]
    fn ct_eq_compares_content() {
        assert!(ct_eq("same-key", "same-key"));
        assert!(!ct_eq("same-key", "same-kez"));
        assert!(!ct_eq("short", "longer-key"));
        // Long values (a bearer token): a difference in the eight-byte words, in the tail, or none.
        let token = "eyJ".repeat(341);
        for at in [0, 7, 8, 500, token.len() - 9, token.len() - 1] {
            let mut other = token.clone().into_bytes();
            other[at] ^= 1;
            assert!(!ct_eq(&token, std::str::from_utf8(&other).unwrap()), "a difference at {at}");
        }
        assert!(ct_eq(&token, &token.clone()));
        assert!(ct_eq("", ""));
    }
}
