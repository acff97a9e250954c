//! Database row shapes, private to the store: what a `SELECT` decodes into on both
//! backends (every column an i64, i32 or text), and their conversion to the public
//! domain types of domain.rs.

use crate::domain::*;

/// A row of `SELECT` [`crate::sql::WINDOW_COLUMNS`], decoded by position in that
/// order and without sqlx's per-value check of the column type (every column is a BIGINT
/// or TEXT of the migrated schema; a value that does not decode is still an error): by
/// name and checked, decoding was ~20 % of serve's CPU in a cold start.
pub(crate) struct WindowDb {
    pub id: i64,
    /// Not a column: set when the read's bucket cap left this row's latency out.
    pub latency_unread: bool,
    pub topic: String,
    pub tier: String,
    pub datacenter: String,
    pub window_start_ms: i64,
    pub window_end_ms: i64,
    pub count: i64,
    pub bytes: i64,
    pub no_time_count: i64,
    pub malformed_count: i64,
    pub out_of_bounds_count: i64,
    pub observation_time_count: i64,
    pub delivery_failed_count: i64,
    pub checksum: i64,
    pub latency_zero_count: i64,
    pub latency_negative_count: i64,
    pub latency_max_ms: i64,
    pub increments: i64,
    pub first_received_at_ms: i64,
    pub last_received_at_ms: i64,
    pub max_observed_at_ms: Option<i64>,
}

impl<'r, R: sqlx::Row> sqlx::FromRow<'r, R> for WindowDb
where
    usize: sqlx::ColumnIndex<R>,
    i64: sqlx::Decode<'r, R::Database> + sqlx::Type<R::Database>,
    Option<i64>: sqlx::Decode<'r, R::Database>,
    String: sqlx::Decode<'r, R::Database> + sqlx::Type<R::Database>,
{
    fn from_row(row: &'r R) -> Result<Self, sqlx::Error> {
        Ok(WindowDb {
            latency_unread: false,
            id: row.try_get_unchecked(0)?,
            topic: row.try_get_unchecked(1)?,
            tier: row.try_get_unchecked(2)?,
            datacenter: row.try_get_unchecked(3)?,
            window_start_ms: row.try_get_unchecked(4)?,
            window_end_ms: row.try_get_unchecked(5)?,
            count: row.try_get_unchecked(6)?,
            bytes: row.try_get_unchecked(7)?,
            no_time_count: row.try_get_unchecked(8)?,
            malformed_count: row.try_get_unchecked(9)?,
            out_of_bounds_count: row.try_get_unchecked(10)?,
            observation_time_count: row.try_get_unchecked(11)?,
            checksum: row.try_get_unchecked(12)?,
            latency_zero_count: row.try_get_unchecked(13)?,
            latency_negative_count: row.try_get_unchecked(14)?,
            latency_max_ms: row.try_get_unchecked(15)?,
            increments: row.try_get_unchecked(16)?,
            first_received_at_ms: row.try_get_unchecked(17)?,
            last_received_at_ms: row.try_get_unchecked(18)?,
            max_observed_at_ms: row.try_get_unchecked(19)?,
            delivery_failed_count: row.try_get_unchecked(20)?,
        })
    }
}

// Stored values were validated as non-negative; a negative one can only come from
// outside the store and reads as 0 rather than as a huge u64.
fn u(v: i64) -> u64 {
    u64::try_from(v).unwrap_or(0)
}

/// The rows of `children` (`(window_id, …)`, any order) that belong to window `id`,
/// once `children` is sorted by window id (binary search: no map nor vector per
/// window).
fn children_of<T>(children: &[(i64, i32, T)], id: i64) -> &[(i64, i32, T)] {
    let from = children.partition_point(|b| b.0 < id);
    let to = from + children[from..].partition_point(|b| b.0 == id);
    &children[from..to]
}

/// What one offset row of a window says of its partition: the latest record time
/// counted there (`None`: no increment carried one) and the highest offset counted.
#[derive(Debug, Clone, Copy)]
pub(crate) struct PartitionMax {
    pub record_time: Option<i64>,
    pub offset: i64,
}

/// `(window_id, partition, max_record_time_ms, max_offset)` rows as the reads decode
/// them, in the shape [`join_buckets`] takes.
pub(crate) fn partition_maxima(
    rows: Vec<(i64, i32, Option<i64>, i64)>,
) -> Vec<(i64, i32, PartitionMax)> {
    rows.into_iter()
        .map(|(id, p, record_time, offset)| {
            (
                id,
                p,
                PartitionMax {
                    record_time,
                    offset,
                },
            )
        })
        .collect()
}

/// Attaches `(window_id, bucket, count)` rows and `(window_id, partition, latest
/// record time and offset)` rows (any order) to their windows.
pub(crate) fn join_buckets(
    rows: Vec<WindowDb>,
    mut buckets: Vec<(i64, i32, i64)>,
    mut maxima: Vec<(i64, i32, PartitionMax)>,
) -> Vec<WindowRow> {
    // By window id (the reads' order already: then this is one pass).
    if !buckets.is_sorted_by_key(|b| b.0) {
        buckets.sort_by_key(|b| b.0);
    }
    if !maxima.is_sorted_by_key(|b| b.0) {
        maxima.sort_by_key(|b| b.0);
    }
    rows.into_iter()
        .map(|r| {
            let of_window = children_of(&maxima, r.id);
            let window_record_times = of_window
                .iter()
                .filter_map(|&(_, partition, m)| Some((partition, m.record_time?)))
                .collect();
            let max_offsets = of_window
                .iter()
                .map(|&(_, partition, m)| (partition, m.offset))
                .collect();
            // Stored indexes were validated (0 to MAX_BUCKET_INDEX); one outside can
            // only come from outside the store and is left out like a negative count.
            let window_buckets = children_of(&buckets, r.id)
                .iter()
                .filter_map(|&(_, bucket, count)| Some((u32::try_from(bucket).ok()?, u(count))));
            let latency = LatencyHistogram::from_buckets(
                u(r.latency_zero_count),
                u(r.latency_negative_count),
                r.latency_max_ms.max(0),
                window_buckets,
            )
            .unwrap_or_else(|e| {
                tracing::error!(window = r.id, error = %e, "stored latency histogram unreadable; read as empty");
                LatencyHistogram::new()
            });
            WindowRow {
                topic: r.topic,
                tier: r.tier,
                datacenter: r.datacenter,
                window_start_ms: r.window_start_ms,
                window_end_ms: r.window_end_ms,
                count: u(r.count),
                bytes: u(r.bytes),
                no_time_count: u(r.no_time_count),
                malformed_count: u(r.malformed_count),
                out_of_bounds_count: u(r.out_of_bounds_count),
                observation_time_count: u(r.observation_time_count),
                delivery_failed_count: u(r.delivery_failed_count),
                checksum: r.checksum as u64,
                latency,
                increments: u(r.increments),
                first_received_at_ms: r.first_received_at_ms,
                last_received_at_ms: r.last_received_at_ms,
                latency_unread: r.latency_unread,
                max_observed_at_ms: r.max_observed_at_ms,
                record_times: window_record_times,
                max_offsets,
            }
        })
        .collect()
}

/// Cuts child rows read with `LIMIT cap + 1` (in window id order) back to the
/// windows read whole: holding more than `cap` shows the cap was hit, and every
/// window with an id below that of row `cap` was read whole; that window and all after
/// it may not have been. Returns that first window id when the cap was hit.
fn cut_at_cap<T>(children: &mut Vec<(i64, i32, T)>, cap: usize) -> Option<i64> {
    let cut = children.get(cap)?.0;
    children.truncate(cap);
    while children.last().is_some_and(|b| b.0 >= cut) {
        children.pop();
    }
    Some(cut)
}

/// [`join_buckets`] for a read bounded to `cap` bucket rows and `cap` record-time
/// rows. Both must come in (window_id, …) order, at most `cap + 1` of them (the
/// queries' `LIMIT cap + 1`). Past the bucket cap, windows get no latency at all (an
/// empty histogram, zero and max counts cleared: a partial one would give wrong
/// percentiles); past the record-time cap, no per-partition record times (a partial
/// set would claim evidence for fewer partitions than were counted: the engine then
/// judges from the window's `max_observed_at_ms`, slower but right). One warning
/// names the read.
pub(crate) fn join_buckets_capped(
    mut rows: Vec<WindowDb>,
    mut buckets: Vec<(i64, i32, i64)>,
    mut record_times: Vec<(i64, i32, PartitionMax)>,
    cap: usize,
    topics: &str,
    range: TimeRange,
) -> Vec<WindowRow> {
    if cut_at_cap(&mut record_times, cap).is_some() {
        tracing::warn!(
            topics,
            start_ms = range.start_ms,
            end_ms = range.end_ms,
            cap,
            "a window read hit the record-time cap: windows past it are judged without per-partition record times"
        );
    }
    if let Some(cut) = cut_at_cap(&mut buckets, cap) {
        let mut cleared = 0usize;
        for r in rows.iter_mut().filter(|r| r.id >= cut) {
            r.latency_zero_count = 0;
            r.latency_negative_count = 0;
            r.latency_max_ms = 0;
            r.latency_unread = true;
            cleared += 1;
        }
        tracing::warn!(
            topics,
            start_ms = range.start_ms,
            end_ms = range.end_ms,
            cap,
            windows_without_latency = cleared,
            "a window read hit the latency-bucket cap: windows past it are returned without latency"
        );
    }
    join_buckets(rows, buckets, record_times)
}

/// The bucket query's LIMIT for a cap: one row past it shows whether it was hit.
pub(crate) fn bucket_limit(max_bucket_rows: usize) -> i64 {
    i64::try_from(max_bucket_rows)
        .unwrap_or(i64::MAX)
        .saturating_add(1)
}

/// `first..=last` of a page's topics, naming a range read in logs.
pub(crate) fn topic_span(topics: &[String]) -> String {
    match (topics.first(), topics.last()) {
        (Some(first), Some(last)) => format!("{first}..={last}"),
        _ => String::new(),
    }
}

/// Splits `limit + 1` fetched topics into the page and the cursor of the next one.
pub(crate) fn page(mut topics: Vec<String>, limit: u32) -> (Vec<String>, Option<String>) {
    let limit = limit.max(1) as usize;
    if topics.len() > limit {
        topics.truncate(limit);
        let next = topics.last().cloned();
        (topics, next)
    } else {
        (topics, None)
    }
}

#[derive(sqlx::FromRow)]
pub(crate) struct OffsetDb {
    pub partition_id: i32,
    pub min_offset: i64,
    pub max_offset: i64,
    pub max_record_time_ms: Option<i64>,
}

impl From<OffsetDb> for OffsetSpan {
    fn from(o: OffsetDb) -> Self {
        OffsetSpan {
            partition: o.partition_id,
            min: o.min_offset,
            max: o.max_offset,
            max_record_time: o.max_record_time_ms,
        }
    }
}

#[derive(sqlx::FromRow)]
pub(crate) struct ProgressDb {
    pub topic: String,
    pub tier: String,
    pub datacenter: String,
    pub partition_id: i32,
    pub host: String,
    pub next_offset: i64,
    pub record_time_ms: Option<i64>,
    pub lag: Option<i64>,
    pub emitted_at_ms: i64,
    pub received_at_ms: i64,
    pub max_record_time_ms: Option<i64>,
    pub log_append_time: bool,
}

impl From<ProgressDb> for ProgressRow {
    fn from(p: ProgressDb) -> Self {
        ProgressRow {
            topic: p.topic,
            tier: p.tier,
            datacenter: p.datacenter,
            partition: p.partition_id,
            host: p.host,
            next_offset: p.next_offset,
            record_time_ms: p.record_time_ms,
            lag: p.lag,
            emitted_at_ms: p.emitted_at_ms,
            received_at_ms: p.received_at_ms,
            max_record_time_ms: p.max_record_time_ms,
            log_append_time: p.log_append_time,
        }
    }
}

#[derive(sqlx::FromRow)]
pub(crate) struct EmitterDb {
    pub tier: String,
    pub datacenter: String,
    pub host: String,
    pub last_emitted_at_ms: i64,
    pub last_received_at_ms: i64,
    pub messages: i64,
}

impl From<EmitterDb> for EmitterRow {
    fn from(e: EmitterDb) -> Self {
        EmitterRow {
            tier: e.tier,
            datacenter: e.datacenter,
            host: e.host,
            last_emitted_at_ms: e.last_emitted_at_ms,
            last_received_at_ms: e.last_received_at_ms,
            messages: u(e.messages),
        }
    }
}

#[derive(sqlx::FromRow)]
pub(crate) struct RejectDb {
    pub id: i64,
    pub received_at_ms: i64,
    pub source: String,
    pub reason: String,
    pub payload: String,
}

impl From<RejectDb> for RejectRow {
    fn from(r: RejectDb) -> Self {
        RejectRow {
            id: r.id,
            received_at_ms: r.received_at_ms,
            source: r.source,
            reason: r.reason,
            payload: r.payload,
        }
    }
}
