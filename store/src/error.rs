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
                (code.starts_with("22") || (code.starts_with("23") && code != "23505"))
                    && !is_partition_routing(&code, db.constraint())
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

/// Whether a database error is PostgreSQL's routing of a row to a partition, not the
/// row's data: a `23514` (check_violation) that names no constraint. PostgreSQL
/// raises it without one ("new row for relation … violates partition constraint",
/// "no partition of relation … found for row") when a statement routes a row with the
/// partitions it knew when it was planned and a day's creation changed them while it
/// waited for the default partition (security review 3, M1): the same row routes
/// right once retried. A CHECK constraint's violation names its constraint, and the
/// schema's only CHECKs are on `audit_window_size` (the deployment's window size,
/// never written by a batch or a roll-up): no traffic row can violate one, so a
/// `23514` on a traffic row is never its data. Classified as data, it sent the batch
/// or the roll-up into bisection, which quarantined a sound message as a reject.
fn is_partition_routing(code: &str, constraint: Option<&str>) -> bool {
    code == "23514" && constraint.is_none()
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

#[cfg(test)]
mod tests {
    use super::*;

    /// A database error as the PostgreSQL driver reports it: a SQLSTATE and, for a
    /// constraint's violation, the constraint's name.
    #[derive(Debug)]
    struct Db {
        code: &'static str,
        constraint: Option<&'static str>,
    }

    impl std::fmt::Display for Db {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            write!(f, "SQLSTATE {}", self.code)
        }
    }

    impl std::error::Error for Db {}

    impl sqlx::error::DatabaseError for Db {
        fn message(&self) -> &str {
            "test"
        }
        fn code(&self) -> Option<std::borrow::Cow<'_, str>> {
            Some(self.code.into())
        }
        fn constraint(&self) -> Option<&str> {
            self.constraint
        }
        fn as_error(&self) -> &(dyn std::error::Error + Send + Sync + 'static) {
            self
        }
        fn as_error_mut(&mut self) -> &mut (dyn std::error::Error + Send + Sync + 'static) {
            self
        }
        fn into_error(self: Box<Self>) -> Box<dyn std::error::Error + Send + Sync + 'static> {
            self
        }
        fn kind(&self) -> sqlx::error::ErrorKind {
            sqlx::error::ErrorKind::Other
        }
    }

    fn database(code: &'static str, constraint: Option<&'static str>) -> StoreError {
        StoreError::Database {
            context: "testing",
            source: sqlx::Error::Database(Box::new(Db { code, constraint })),
        }
    }

    #[test]
    fn a_partition_routing_check_violation_is_retried_not_bisected() {
        // A row routed with the partitions of before a day's creation: no constraint.
        assert!(!database("23514", None).is_data_error());
        // A CHECK constraint's violation names it: the data.
        assert!(database("23514", Some("audit_window_size_window_ms_check")).is_data_error());
    }

    #[test]
    fn the_other_integrity_and_data_errors_keep_their_class() {
        for (code, constraint, data) in [
            ("23505", Some("audit_message_pkey"), false),
            ("23502", None, true),
            ("23503", Some("fk"), true),
            ("22003", None, true),
            ("40P01", None, false),
            ("40001", None, false),
            ("XX000", None, false),
        ] {
            assert_eq!(
                database(code, constraint).is_data_error(),
                data,
                "{code} {constraint:?}"
            );
        }
        assert!(StoreError::Invalid("x".into()).is_data_error());
    }
}
