//! What a connection needs beyond the URL, and the URL as errors and logs may show it.

/// Connection settings beyond the URL.
#[derive(Clone, Debug)]
pub struct StoreOptions {
    /// Most connections the pool opens (PostgreSQL; SQLite uses a few readers).
    pub max_connections: u32,
    /// How long getting a connection may take, reconnecting included. While the
    /// database is down a write fails after this long, and the caller's retry and
    /// backoff take over.
    pub acquire_timeout: std::time::Duration,
}

impl Default for StoreOptions {
    fn default() -> Self {
        StoreOptions {
            max_connections: 8,
            acquire_timeout: std::time::Duration::from_secs(5),
        }
    }
}

/// The URL with its password replaced by `***`, for errors and logs. The password is
/// everything between the first `:` after `scheme://` and the last `@`, so one with
/// un-encoded `@`, `#`, `/` or `?` is masked whole.
pub fn redact_url(url: &str) -> String {
    let Some(s) = url.find("://") else {
        return url.to_string();
    };
    let rest = &url[s + 3..];
    match rest.rfind('@') {
        Some(at) => match rest[..at].split_once(':') {
            Some((user, _)) => format!("{}{user}:***{}", &url[..s + 3], &rest[at..]),
            None => url.to_string(),
        },
        None => url.to_string(),
    }
}
