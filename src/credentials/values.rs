//! Opened values: a secret string and a map of them, whose `Debug` never shows a value and whose memory is wiped
//! when dropped. What [`super::user_values`] returns and what the command line carries a value read from stdin in.

use std::collections::HashMap;

use zeroize::Zeroizing;

/// One secret value. `Debug` prints `[redacted]`; read it with [`SecretValue::expose`].
#[derive(Clone, Default, PartialEq, Eq)]
pub struct SecretValue(Zeroizing<String>);

impl SecretValue {
    /// The value itself: for the place it is meant for (an upstream's environment, a request body), nowhere else.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl From<Zeroizing<String>> for SecretValue {
    fn from(value: Zeroizing<String>) -> SecretValue {
        SecretValue(value)
    }
}

impl From<String> for SecretValue {
    fn from(value: String) -> SecretValue {
        SecretValue(Zeroizing::new(value))
    }
}

impl std::fmt::Debug for SecretValue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("[redacted]")
    }
}

/// One slot's values by name.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct SecretValues(HashMap<String, SecretValue>);

impl SecretValues {
    pub(super) fn with_capacity(n: usize) -> SecretValues {
        SecretValues(HashMap::with_capacity(n))
    }

    pub(super) fn insert(&mut self, name: String, value: SecretValue) {
        self.0.insert(name, value);
    }

    /// The value set for `name`.
    pub fn get(&self, name: &str) -> Option<&str> {
        self.0.get(name).map(SecretValue::expose)
    }

    /// The names set, sorted.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        let mut names: Vec<&str> = self.0.keys().map(String::as_str).collect();
        names.sort_unstable();
        names.into_iter()
    }

    /// Every (name, value).
    pub fn iter(&self) -> impl Iterator<Item = (&str, &str)> {
        self.0.iter().map(|(name, value)| (name.as_str(), value.expose()))
    }

    /// How many values are set.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Whether none is set.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

/// Names only.
impl std::fmt::Debug for SecretValues {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_map().entries(self.names().map(|name| (name, "[redacted]"))).finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debug_shows_names_never_values() {
        let mut values = SecretValues::default();
        values.insert("TOKEN".into(), SecretValue::from("marker-value".to_string()));
        assert_eq!(format!("{values:?}"), "{\"TOKEN\": \"[redacted]\"}");
        assert_eq!(format!("{:?}", SecretValue::from("marker".to_string())), "[redacted]");
        assert_eq!(values.get("TOKEN"), Some("marker-value"));
        assert_eq!(values.iter().count(), values.len());
    }
}
