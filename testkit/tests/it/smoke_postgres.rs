//! Smoke test of the dev PostgreSQL: every migration in migrations/postgres applies to a
//! fresh database, and a write/read round trip works.

use std::path::{Path, PathBuf};

use sqlx::migrate::Migrator;
use sqlx::postgres::PgPoolOptions;
use sqlx::Row;

fn migrations_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../migrations/postgres")
}

/// Up-migration files as sqlx names them: `<version>_<description>.sql` or `.up.sql`.
fn migration_files(dir: &Path) -> Vec<String> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new(); // git keeps no empty directory
    };
    let mut names: Vec<String> = entries
        .map(|e| {
            e.expect("dir entry")
                .file_name()
                .to_string_lossy()
                .into_owned()
        })
        .filter(|n| n.ends_with(".sql") && !n.ends_with(".down.sql"))
        .collect();
    names.sort();
    names
}

#[tokio::test(flavor = "multi_thread")]
async fn migrations_apply_to_a_fresh_database_and_a_round_trip_works() {
    let db = testkit::fresh_database("smoke_pg").await;
    let pool = PgPoolOptions::new()
        .max_connections(2)
        .connect(db.url())
        .await
        .expect("connect");

    let dir = migrations_dir();
    let files = migration_files(&dir);
    let migrator = if files.is_empty() {
        Migrator::DEFAULT
    } else {
        Migrator::new(dir.as_path())
            .await
            .unwrap_or_else(|e| panic!("read {}: {e}", dir.display()))
    };
    migrator
        .run(&pool)
        .await
        .unwrap_or_else(|e| panic!("apply migrations of {}: {e}", dir.display()));

    let applied: Vec<(i64, bool)> =
        sqlx::query_as("SELECT version, success FROM _sqlx_migrations ORDER BY version")
            .fetch_all(&pool)
            .await
            .expect("read _sqlx_migrations");
    assert_eq!(
        applied.len(),
        files.len(),
        "one _sqlx_migrations row per file of {}: {files:?}",
        dir.display()
    );
    assert!(
        applied.iter().all(|&(_, success)| success),
        "every migration succeeded: {applied:?}"
    );
    let versions: Vec<i64> = files
        .iter()
        .map(|f| {
            f.split('_')
                .next()
                .and_then(|v| v.parse().ok())
                .expect("numeric version prefix")
        })
        .collect();
    assert_eq!(
        applied.iter().map(|&(v, _)| v).collect::<Vec<_>>(),
        versions,
        "applied versions"
    );

    // Round trip through a scratch table of the test's own (the schema may be empty).
    sqlx::query("CREATE TABLE smoke_round_trip (id BIGINT PRIMARY KEY, body JSONB NOT NULL, at TIMESTAMPTZ NOT NULL)")
        .execute(&pool)
        .await
        .expect("create table");
    let body = r#"{"topic": "orders", "count": 42}"#;
    let written = sqlx::query(
        "INSERT INTO smoke_round_trip VALUES ($1, $2::jsonb, '2026-01-02T03:04:05Z') ON CONFLICT DO NOTHING",
    )
    .bind(7_i64)
    .bind(body)
    .execute(&pool)
    .await
    .expect("insert");
    assert_eq!(written.rows_affected(), 1);
    let again =
        sqlx::query("INSERT INTO smoke_round_trip VALUES ($1, '{}', now()) ON CONFLICT DO NOTHING")
            .bind(7_i64)
            .execute(&pool)
            .await
            .expect("insert duplicate");
    assert_eq!(
        again.rows_affected(),
        0,
        "a duplicate key is not inserted twice"
    );

    let row = sqlx::query("SELECT body->>'topic' AS topic, (body->>'count')::bigint AS count, extract(epoch FROM at)::bigint AS at FROM smoke_round_trip WHERE id = $1")
        .bind(7_i64)
        .fetch_one(&pool)
        .await
        .expect("select");
    assert_eq!(row.get::<String, _>("topic"), "orders");
    assert_eq!(row.get::<i64, _>("count"), 42);
    assert_eq!(row.get::<i64, _>("at"), 1_767_323_045);
    pool.close().await;
}
