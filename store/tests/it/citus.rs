//! The store distributed by topic on a Citus cluster, as docs/operations.md tells an
//! operator to do it.

use store::{Deployment, PgStore};

/// The operator's commands, run by the tests as they are published.
pub const DISTRIBUTE: &str = include_str!("../../../deploy/citus/distribute.sql");

/// Migrates the store at `url` (a database of a Citus cluster), distributes it with
/// [`DISTRIBUTE`], and connects to it as the services do when they start after that.
pub async fn distributed_store(url: &str) -> PgStore {
    let store = PgStore::connect(url).await.expect("connect to Citus");
    store.migrate().await.expect("migrate on Citus");
    sqlx::raw_sql(DISTRIBUTE)
        .execute(store.pool())
        .await
        .expect("deploy/citus/distribute.sql");
    store.pool().close().await;
    PgStore::connect(url).await.expect("connect to Citus")
}
