//! The console's sign-in sessions (contract 18): a random id in an `HttpOnly`, `SameSite=Strict` cookie (`Secure`
//! behind TLS), kept here by its digest with the session's CSRF token; 30 minutes idle, 8 hours at most; sign-out
//! forgets it. At most [`MAX_SESSIONS`] live at once (the least recently used goes first). Sessions live in this
//! replica's memory: behind a load balancer, the console wants sticky sessions (docs/console.md).

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use axum::http::HeaderMap;
use axum::http::header::COOKIE;

use crate::secrets;

/// The session cookie's name.
pub const COOKIE_NAME: &str = "mcpgw_console";
/// The sign-in form's own cookie (its CSRF token, before there is a session).
pub const LOGIN_COOKIE: &str = "mcpgw_console_login";
/// A session ends after this long without a request.
pub const IDLE: Duration = Duration::from_secs(30 * 60);
/// A session ends this long after sign-in, used or not.
pub const LIFETIME: Duration = Duration::from_secs(8 * 60 * 60);
/// The sessions kept at most.
pub const MAX_SESSIONS: usize = 1000;

/// One signed-in operator.
#[derive(Debug, Clone)]
pub struct Session {
    /// Every form of this session carries it.
    pub csrf: String,
    /// Who signed in: `admin key`, or the issuer's subject.
    pub operator: String,
    /// For a user of the gateway who is not a console admin (signed in with the issuer): their user id. Such a session
    /// reaches only the user's own page (`/ui/me`, their own upstream credentials, contract 16).
    pub own: Option<String>,
    started: Instant,
    used: Instant,
}

/// The live sessions, by the digest of their id.
#[derive(Debug, Default)]
pub struct Sessions {
    live: Mutex<HashMap<[u8; 32], Session>>,
}

impl Sessions {
    /// A new session for `operator`: its id (the cookie's value) and the session.
    pub fn start(&self, operator: &str) -> Result<(String, Session), secrets::RandomError> {
        self.start_as(operator, None)
    }

    /// A new session for `operator`, an admin's (`own` is `None`) or a user's own (`own`: their user id).
    pub fn start_as(&self, operator: &str, own: Option<String>) -> Result<(String, Session), secrets::RandomError> {
        let id = secrets::random_token()?;
        let now = Instant::now();
        let session =
            Session { csrf: secrets::random_token()?, operator: operator.to_string(), own, started: now, used: now };
        let mut live = self.lock();
        live.retain(|_, s| alive(s, now));
        if live.len() >= MAX_SESSIONS
            && let Some(oldest) = live.iter().min_by_key(|(_, s)| s.used).map(|(k, _)| *k)
        {
            live.remove(&oldest);
        }
        live.insert(secrets::digest(&id), session.clone());
        Ok((id, session))
    }

    /// The session of the cookie in `headers`, if it is live (its idle time starts again).
    pub fn find(&self, headers: &HeaderMap) -> Option<Session> {
        let id = cookie(headers, COOKIE_NAME)?;
        let now = Instant::now();
        let mut live = self.lock();
        let digest = secrets::digest(id);
        let session = live.get_mut(&digest)?;
        if !alive(session, now) {
            live.remove(&digest);
            return None;
        }
        session.used = now;
        Some(session.clone())
    }

    /// Forgets the session of the cookie in `headers`.
    pub fn end(&self, headers: &HeaderMap) {
        if let Some(id) = cookie(headers, COOKIE_NAME) {
            self.lock().remove(&secrets::digest(id));
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<[u8; 32], Session>> {
        self.live.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

fn alive(session: &Session, now: Instant) -> bool {
    now.duration_since(session.used) < IDLE && now.duration_since(session.started) < LIFETIME
}

/// The value of cookie `name` in `headers`.
pub fn cookie<'h>(headers: &'h HeaderMap, name: &str) -> Option<&'h str> {
    headers
        .get_all(COOKIE)
        .iter()
        .filter_map(|value| value.to_str().ok())
        .flat_map(|value| value.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(key, _)| *key == name)
        .map(|(_, value)| value)
        .filter(|value| !value.is_empty())
}

/// A `Set-Cookie` value for `name` (scoped to `/ui`, `HttpOnly`, `SameSite=Strict`, `Secure` when `secure`); `None`
/// clears it.
pub fn set_cookie(name: &str, value: Option<&str>, max_age: Duration, secure: bool) -> String {
    let secure = if secure { "; Secure" } else { "" };
    match value {
        Some(value) => {
            format!("{name}={value}; Path=/ui; HttpOnly; SameSite=Strict; Max-Age={}{secure}", max_age.as_secs())
        }
        None => format!("{name}=; Path=/ui; HttpOnly; SameSite=Strict; Max-Age=0{secure}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_session_is_found_by_its_cookie_until_it_ends() {
        let sessions = Sessions::default();
        let (id, session) = sessions.start("admin key").unwrap();
        let mut headers = HeaderMap::new();
        headers.insert(COOKIE, format!("other=1; {COOKIE_NAME}={id}").parse().unwrap());
        assert_eq!(sessions.find(&headers).unwrap().csrf, session.csrf);
        sessions.end(&headers);
        assert!(sessions.find(&headers).is_none());
        headers.insert(COOKIE, format!("{COOKIE_NAME}=forged").parse().unwrap());
        assert!(sessions.find(&headers).is_none());
    }

    #[test]
    fn sessions_are_bounded() {
        let sessions = Sessions::default();
        for _ in 0..MAX_SESSIONS + 5 {
            sessions.start("admin key").unwrap();
        }
        assert_eq!(sessions.lock().len(), MAX_SESSIONS);
    }
}
