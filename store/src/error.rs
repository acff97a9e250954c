//! The store's one error type and the `context` shorthand its SQL calls use.

/// Errors of the store. Every database error is worth retrying (connection lost,
/// server restarting, serialization conflict) except [`StoreError::Invalid`].
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("database error while {context}: {source}")]
    Database {
        context: &'static str,
        #[source]
        source: sqlx::Error,
    },
    #[error("migration failed: {0}")]
    Migrate(#[from] sqlx::migrate::MigrateError),
    /// `url` has its password masked ([`crate::redact_url`]).
    #[error("invalid store url {url:?}: {reason}")]
    Url { url: String, reason: String },
    #[error("invalid input: {0}")]
    Invalid(String),
    /// TLS with the server failed in a mode that requires it (`require`, `verify-ca`,
    /// `verify-full`): `host` is the URL's `host:port`, `mode` its `sslmode` as libpq
    /// spells it, `cause` what went wrong in words (docs/operations.md, "TLS to
    /// PostgreSQL"). Retried like any connection error: a server's certificate can
    /// be fixed while the process waits.
    #[error("TLS with PostgreSQL at {host} failed (sslmode={mode}): {cause}")]
    Tls {
        host: String,
        mode: &'static str,
        cause: String,
        #[source]
        source: sqlx::Error,
    },
}

impl StoreError {
    /// An error the data of the batch caused (validation, or a PostgreSQL data or
    /// integrity exception other than a unique violation): retrying the same batch
    /// cannot succeed, so the caller must set the offending message aside instead.
    pub fn is_data_error(&self) -> bool {
        match self {
            StoreError::Invalid(_) => true,
            StoreError::Database {
                source: sqlx::Error::Database(db),
                ..
            } => db.code().is_some_and(|code| {
                // 22: data exception; 23: integrity constraint violation (23505, a
                // concurrent writer of the same UUID, is retried by the store itself).
                code.starts_with("22") || (code.starts_with("23") && code != "23505")
            }),
            StoreError::Database {
                source:
                    sqlx::Error::Encode(_) | sqlx::Error::Decode(_) | sqlx::Error::ColumnDecode { .. },
                ..
            } => true,
            _ => false,
        }
    }
}

pub type Result<T, E = StoreError> = std::result::Result<T, E>;

pub(crate) trait Context<T> {
    fn context(self, context: &'static str) -> Result<T>;
}

impl<T> Context<T> for std::result::Result<T, sqlx::Error> {
    fn context(self, context: &'static str) -> Result<T> {
        self.map_err(|source| StoreError::Database { context, source })
    }
}
