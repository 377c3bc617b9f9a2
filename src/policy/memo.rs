//! What a caller's decisions remember (contract 17's cost): most of a decision is the same at every call of one
//! caller to one target, so it is worked out once and kept with the caller's identity.
//!
//! Of a rule's variables only `request` and `now` change from one call of a caller to a target to the next
//! ([`Rule::varies`]). The first decision about a target evaluates, in a scope that binds `principal` and `target`
//! only ([`Scope::without_call`]):
//!
//! - every rule that does not vary, until one matches: for a listing, where rules that read `request` are passed over
//!   or make the target visible ([`decide`](super::decide)), the rules that vary before it are still tried in order;
//! - for a call, also each rule that varies: CEL's `&&` and `||` give a result when one side decides it, whatever the
//!   other side is (an error, a value of another type), so a rule whose condition evaluates to a boolean without
//!   `request` and `now` (`target.server == 'deploy' && now > ...` on another server) has that outcome at every call.
//!   The others are *pending*: evaluated at each call, in order, before the first rule known to match.
//!
//! A later call binds `request` and `now` only when a pending rule reads them, and evaluates only the pending rules.
//! The result is the sequential decision's ([`Scope::decide`]); `tests.rs` compares the two over mixes of rules.
//!
//! A target is known by its key (kind, server, name) and the fingerprint of what else rules read of it (its
//! annotations): an upstream that changes a tool's annotations gets a fresh evaluation. A memo lives with an identity,
//! which lives with one snapshot of the configuration: new rules, a new principal or a new snapshot start empty. At
//! most [`MEMO_TARGETS`] targets are kept per caller (past it the memo starts again empty).

use std::collections::HashMap;
use std::hash::{BuildHasher, Hash, Hasher};
use std::sync::{Arc, LazyLock, Mutex, PoisonError};

use serde_json::Value;

use super::{Decision, Input, Rule, Scope};

/// The targets one caller's [`Memo`] keeps.
pub const MEMO_TARGETS: usize = 1024;

/// What is known of the rules about one target, whatever the call.
#[derive(Debug)]
struct Known {
    /// The target's key (its parts, to check a hit against).
    key: [Box<str>; 3],
    /// The first rule that does not vary and matches (a listing's decision starts from it).
    listing: Option<u32>,
    /// The first rule that matches at every call (one that does not vary, or one that varies and whose outcome is a
    /// match without `request` and `now`).
    call: Option<u32>,
    /// The rules before `call` whose outcome depends on the call, in order.
    pending: Box<[u32]>,
}

/// One caller's remembered outcomes, per target.
#[derive(Default)]
pub struct Memo {
    /// By [`Recall::hash`].
    targets: Mutex<HashMap<u64, Arc<Known>>>,
    /// What the audit records of this caller's calls keep for the simulator, in written form: per target (by
    /// [`Recall::hash`], at most [`MEMO_TARGETS`]), and the caller's own part.
    written: Mutex<HashMap<u64, Written>>,
    principal_written: std::sync::OnceLock<Arc<str>>,
}

/// A target's text in an audit record, and the key it was written for (to check a hit against).
struct Written {
    key: [Box<str>; 3],
    text: Arc<str>,
}

impl Memo {
    /// The audit text of the target `recall` names, written by `write` the first time.
    pub fn target_text(&self, recall: &Recall<'_>, write: impl FnOnce() -> String) -> Arc<str> {
        let hash = recall.hash();
        let mut written = self.written.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(known) = written.get(&hash)
            && known.key.iter().zip(recall.key).all(|(known, part)| **known == *part)
        {
            return Arc::clone(&known.text);
        }
        let text: Arc<str> = write().into();
        if written.len() >= MEMO_TARGETS && !written.contains_key(&hash) {
            written.clear();
        }
        let key = recall.key.map(Box::from);
        written.insert(hash, Written { key, text: Arc::clone(&text) });
        text
    }

    /// The caller's audit text, written by `write` the first time.
    pub fn principal_text(&self, write: impl FnOnce() -> String) -> Arc<str> {
        Arc::clone(self.principal_written.get_or_init(|| write().into()))
    }

    fn recall(&self, recall: &Recall<'_>) -> Option<Arc<Known>> {
        let targets = self.targets.lock().unwrap_or_else(PoisonError::into_inner);
        let known = targets.get(&recall.hash())?;
        let same = known.key.iter().zip(recall.key).all(|(known, part)| **known == *part);
        same.then(|| Arc::clone(known))
    }

    fn remember(&self, recall: &Recall<'_>, known: Arc<Known>) {
        let mut targets = self.targets.lock().unwrap_or_else(PoisonError::into_inner);
        let hash = recall.hash();
        if targets.len() >= MEMO_TARGETS && !targets.contains_key(&hash) {
            targets.clear();
        }
        targets.insert(hash, known);
    }

    /// How many targets are remembered.
    pub fn len(&self) -> usize {
        self.targets.lock().unwrap_or_else(PoisonError::into_inner).len()
    }

    /// Whether nothing is remembered.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl Clone for Memo {
    /// An empty memo: what it remembered belongs to the identity it was kept with.
    fn clone(&self) -> Memo {
        Memo::default()
    }
}

impl std::fmt::Debug for Memo {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Memo").field("targets", &self.len()).finish()
    }
}

/// A target as a [`Memo`] knows it: `key` names it (its kind, server and name), `fingerprint` ([`fingerprint`])
/// covers the rest of what rules read of it.
pub struct Recall<'m> {
    pub memo: &'m Memo,
    pub key: [&'m str; 3],
    pub fingerprint: u64,
}

impl Recall<'_> {
    /// The memo's key: the key and the fingerprint hashed together (a hit is checked against the key's parts).
    fn hash(&self) -> u64 {
        KEYS.hash_one((self.key, self.fingerprint))
    }
}

/// The hash keys of this process: no upstream can choose two values that share a fingerprint.
static KEYS: LazyLock<std::hash::RandomState> = LazyLock::new(std::hash::RandomState::new);

/// A fingerprint of `value`.
pub fn fingerprint(value: &Value) -> u64 {
    let mut hasher = KEYS.build_hasher();
    hash_json(value, &mut hasher);
    hasher.finish()
}

fn hash_json(value: &Value, hasher: &mut impl Hasher) {
    match value {
        Value::Null => 0u8.hash(hasher),
        Value::Bool(b) => (1u8, b).hash(hasher),
        Value::Number(n) => (2u8, n.as_i64(), n.as_u64(), n.as_f64().map(f64::to_bits)).hash(hasher),
        Value::String(s) => (3u8, s).hash(hasher),
        Value::Array(items) => {
            (4u8, items.len()).hash(hasher);
            items.iter().for_each(|item| hash_json(item, hasher));
        }
        Value::Object(fields) => {
            (5u8, fields.len()).hash(hasher);
            for (name, field) in fields {
                name.hash(hasher);
                hash_json(field, hasher);
            }
        }
    }
}

/// The variables of a decision, built only when a rule or condition is evaluated (`make` builds them; each is bound
/// when the first rule that reads it runs): a decision whose outcome is remembered builds nothing.
pub struct Lazy<'p, F> {
    make: F,
    scope: Option<Scope<'p>>,
}

impl<'p, F: Fn() -> Input<'p>> Lazy<'p, F> {
    pub fn new(make: F) -> Lazy<'p, F> {
        Lazy { make, scope: None }
    }

    /// The scope, made at the first use.
    pub fn scope(&mut self) -> &mut Scope<'p> {
        let make = &self.make;
        self.scope.get_or_insert_with(|| Scope::new(&make()))
    }
}

/// What is known of `rules` about the target of `vars` whatever the call ([`Known`]).
fn learn<'r, 'p>(rules: impl Iterator<Item = &'r Rule>, input: &Input<'p>, key: [&str; 3]) -> Known {
    let mut scope = Scope::without_call(input);
    let (mut listing, mut call, mut pending) = (None, None, Vec::new());
    for (i, rule) in (0u32..).zip(rules) {
        if !rule.varies() {
            if scope.matches(rule) {
                listing = Some(i);
                call = call.or(Some(i));
                break;
            }
        } else if call.is_none() {
            match scope.evaluate(rule) {
                Some(true) => call = Some(i),
                Some(false) => {}
                None => pending.push(i),
            }
        }
    }
    Known { key: key.map(Box::from), listing, call, pending: pending.into_boxed_slice() }
}

/// [`decide`](super::decide) with what is known of the rules about the target remembered in `recall`'s memo, and the
/// variables bound only when a rule is evaluated (see the module's documentation). `call`: whether `vars` binds
/// `request` (else a listing).
pub fn decide_lazily<'r, 'p, I, F>(
    rules: I,
    default_allow: bool,
    call: bool,
    recall: Option<&Recall<'_>>,
    vars: &mut Lazy<'p, F>,
) -> Decision<'r>
where
    I: IntoIterator<Item = &'r Rule>,
    I::IntoIter: Clone,
    F: Fn() -> Input<'p>,
{
    let rules = rules.into_iter();
    let remembered = recall.and_then(|r| r.memo.recall(r));
    let known = match remembered {
        Some(known) => known,
        None => {
            let known = Arc::new(learn(rules.clone(), &(vars.make)(), recall.map_or(["", "", ""], |r| r.key)));
            if let Some(r) = recall {
                r.memo.remember(r, Arc::clone(&known));
            }
            known
        }
    };
    let decided = |i: Option<u32>| match i.and_then(|i| rules.clone().nth(i as usize)) {
        Some(rule) => Decision { allowed: rule.allow, rule: Some(rule) },
        None => Decision { allowed: default_allow, rule: None },
    };
    if call {
        let mut pending = known.pending.iter().peekable();
        for (i, rule) in (0u32..).zip(rules.clone()) {
            let Some(&&next) = pending.peek() else { break };
            if i < next {
                continue;
            }
            pending.next();
            if vars.scope().matches(rule) {
                return Decision { allowed: rule.allow, rule: Some(rule) };
            }
        }
        return decided(known.call);
    }
    let before = known.listing.map_or(usize::MAX, |i| i as usize);
    for rule in rules.clone().take(before).filter(|rule| rule.varies()) {
        if rule.reads_request {
            // Could some call be allowed by it (an allow rule), or escape it (a deny rule)?
            if rule.allow {
                return Decision { allowed: true, rule: Some(rule) };
            }
            continue;
        }
        if vars.scope().matches(rule) {
            return Decision { allowed: rule.allow, rule: Some(rule) };
        }
    }
    decided(known.listing)
}
