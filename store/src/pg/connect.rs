//! The PostgreSQL store itself: connecting (TLS errors in words), learning whether
//! Citus distributes the tables, migrating, and the parts of the contract whose
//! bodies are shared with SQLite (deployment settings, the alert ledger).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use sqlx::postgres::{PgConnectOptions, PgPoolOptions, PgSslMode};
use sqlx::PgPool;

use crate::contract::*;
use crate::error::{Context, Result, StoreError};

use super::routing::MessageReads;

static MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("../migrations/postgres");

pub(super) const DAY_MS: i64 = 86_400_000;

#[derive(Clone, Debug)]
pub struct PgStore {
    pub(super) pool: PgPool,
    /// Whether Citus distributes `audit_message`, which decides how rows are read by
    /// key ([`MessageReads`]). Looked up at connect, after migrating and at each
    /// partition upkeep (hourly), so a store distributed while running is read routed
    /// from the next upkeep on; until then reads are correct, only fanned out.
    pub(super) distributed: Arc<AtomicBool>,
    pub(super) window_size: crate::aggregate::WindowSizeCache,
}

impl PgStore {
    pub async fn connect(url: &str) -> Result<PgStore> {
        Self::connect_with(url, &crate::connection::StoreOptions::default()).await
    }

    pub async fn connect_with(
        url: &str,
        opts: &crate::connection::StoreOptions,
    ) -> Result<PgStore> {
        let options: PgConnectOptions = url.parse().map_err(|e: sqlx::Error| StoreError::Url {
            url: crate::connection::redact_url(url),
            reason: e.to_string(),
        })?;
        let pool = PgPoolOptions::new()
            .max_connections(opts.max_connections.max(1))
            .acquire_timeout(opts.acquire_timeout);
        let first = match pool.clone().connect_with(options.clone()).await {
            Ok(pool) => return Self::from_pool(pool).distribution_known().await,
            Err(e) => e,
        };
        let Some(cause) = tls_failure(&first) else {
            return Err(first).context("connecting to PostgreSQL");
        };
        let host = format!("{}:{}", options.get_host(), options.get_port());
        let mode = options.get_ssl_mode();
        if !matches!(mode, PgSslMode::Prefer) {
            return Err(StoreError::Tls {
                host,
                mode: libpq_name(mode),
                cause,
                source: first,
            });
        }
        // libpq's `prefer` (the default): "first try an SSL connection; if that fails,
        // try a non-SSL connection". sqlx treats a failed handshake as fatal instead.
        tracing::warn!(%host, %cause,
            "TLS with PostgreSQL failed under sslmode=prefer; connecting without TLS, as prefer allows \
             (sslmode=require or verify-full refuse to)");
        let pool = pool
            .connect_with(options.ssl_mode(PgSslMode::Disable))
            .await
            .context(
                "connecting to PostgreSQL (without TLS, after TLS failed under sslmode=prefer)",
            )?;
        Self::from_pool(pool).distribution_known().await
    }

    /// A store on `pool`, read as a store on one PostgreSQL until its next partition
    /// upkeep or migration finds out otherwise.
    pub fn from_pool(pool: PgPool) -> PgStore {
        PgStore {
            pool,
            distributed: Arc::new(AtomicBool::new(false)),
            window_size: Default::default(),
        }
    }

    /// Looks up whether Citus distributes `audit_message` (see `distributed`).
    pub(super) async fn distribution_known(self) -> Result<PgStore> {
        self.learn_distribution().await?;
        Ok(self)
    }

    pub(super) async fn learn_distribution(&self) -> Result<()> {
        let citus: bool = sqlx::query_scalar(
            "SELECT EXISTS (SELECT 1 FROM pg_extension WHERE extname = 'citus')",
        )
        .fetch_one(&self.pool)
        .await
        .context("looking for the citus extension")?;
        // pg_dist_partition exists only with Citus.
        let distributed = citus
            && sqlx::query_scalar(
                "SELECT EXISTS (SELECT 1 FROM pg_dist_partition
                                WHERE logicalrelid = to_regclass('audit_message'))",
            )
            .fetch_one(&self.pool)
            .await
            .context("asking Citus whether audit_message is distributed")?;
        self.distributed.store(distributed, Ordering::Relaxed);
        Ok(())
    }

    pub(super) fn message_reads(&self) -> MessageReads {
        if self.distributed.load(Ordering::Relaxed) {
            MessageReads::Routed
        } else {
            MessageReads::Local
        }
    }

    /// The connection pool, for tests and benchmarks that poison, lock or seed tables
    /// (feature `test-support`). Everything else goes through [`AuditStore`]: only
    /// this crate knows the schema.
    #[cfg(feature = "test-support")]
    pub fn pool(&self) -> &PgPool {
        &self.pool
    }

    /// PostgreSQL takes concurrent writers: nothing to serialize.
    pub(super) async fn lock_writer(&self) {}

    /// This store reading by key as on one PostgreSQL even where Citus distributes the
    /// tables (one query to every shard), for benchmarks that compare both (feature
    /// `test-support`).
    #[cfg(feature = "test-support")]
    pub fn unrouted(&self) -> PgStore {
        PgStore::from_pool(self.pool.clone())
    }
}

/// What went wrong in words, when `e` is a failure of TLS (the server refused it, or
/// the handshake failed), `None` for any other connection error. rustls' errors reach
/// here as I/O errors of kind `InvalidData` and are told apart by their text: the
/// store does not link rustls itself (sqlx does), so it cannot match their types.
fn tls_failure(e: &sqlx::Error) -> Option<String> {
    let text = match e {
        sqlx::Error::Tls(e) => e.to_string(),
        sqlx::Error::Io(e) if e.kind() == std::io::ErrorKind::InvalidData => e.to_string(),
        _ => return None,
    };
    let words = [
        (
            "UnsupportedCertVersion",
            "the server's certificate is X.509 v1, which rustls (kafka-audit's TLS library) \
             cannot use even unverified; give the server an X.509 v3 certificate, or connect \
             without TLS (sslmode=prefer or disable)",
        ),
        (
            "UnknownIssuer",
            "the server's certificate is not signed by a root of sslrootcert (nor by a \
             public web root)",
        ),
        (
            "NotValidForName",
            "the server's certificate is not valid for the URL's host name",
        ),
        ("Expired", "the server's certificate has expired"),
        ("NotValidYet", "the server's certificate is not valid yet"),
        (
            "server does not support TLS",
            "the server does not offer TLS (ssl = off)",
        ),
    ];
    let said = words
        .iter()
        .find(|(key, _)| text.contains(key))
        .map(|w| w.1);
    Some(match said {
        Some(words) => format!("{words} ({text})"),
        None => text,
    })
}

/// `sslmode` as libpq (and the URL) spells it.
fn libpq_name(mode: PgSslMode) -> &'static str {
    match mode {
        PgSslMode::Disable => "disable",
        PgSslMode::Allow => "allow",
        PgSslMode::Prefer => "prefer",
        PgSslMode::Require => "require",
        PgSslMode::VerifyCa => "verify-ca",
        PgSslMode::VerifyFull => "verify-full",
    }
}

impl Deployment for PgStore {
    async fn migrate(&self) -> Result<()> {
        MIGRATOR.run(&self.pool).await?;
        // Today and tomorrow at least; the collector prepares its whole range.
        let now = common::now_ms();
        self.prepare_partitions(now, now + DAY_MS).await?;
        Ok(())
    }

    async fn ping(&self) -> Result<()> {
        sqlx::query("SELECT 1")
            .execute(&self.pool)
            .await
            .context("pinging PostgreSQL")?;
        Ok(())
    }

    crate::shared::shared_deployment!();
}

impl AlertLedger for PgStore {
    crate::shared::alert_ledger!();
}
