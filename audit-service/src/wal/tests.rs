use super::*;
use std::fs::OpenOptions;

fn range(p: i32, start: i64, end: i64) -> CommittedRange {
    CommittedRange {
        topic: "t".into(),
        partition: p,
        start: Some(start),
        end,
    }
}

fn msg(s: &str) -> WalMessage {
    WalMessage {
        key: "t".into(),
        payload: s.into(),
    }
}

fn opts() -> WalOptions {
    WalOptions {
        segment_bytes: 1 << 20,
        ..Default::default()
    }
}

fn only_segment(dir: &Path) -> PathBuf {
    let mut segs: Vec<_> = fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| fs::metadata(p).unwrap().len() > 0)
        .collect();
    assert_eq!(segs.len(), 1, "{segs:?}");
    segs.pop().unwrap()
}

#[test]
fn pending_entries_survive_reopen_and_published_ones_do_not() {
    let dir = tempfile::tempdir().unwrap();
    let (mut wal, _) = Wal::open(dir.path(), opts()).unwrap();
    let a = wal.append(vec![range(0, 0, 10)], vec![msg("a")]).unwrap();
    let b = wal.append(vec![range(0, 10, 20)], vec![msg("b")]).unwrap();
    let c = wal.append(vec![range(1, 0, 5)], vec![msg("c")]).unwrap();
    wal.mark_published(a).unwrap();
    wal.discard(c).unwrap();
    drop(wal);
    let (wal, rec) = Wal::open(dir.path(), opts()).unwrap();
    assert!(rec.truncated.is_empty());
    let pending = wal.pending_entries().unwrap();
    assert_eq!(pending.len(), 1);
    assert_eq!(pending[0].id, b);
    assert_eq!(pending[0].ranges, vec![range(0, 10, 20)]);
    assert_eq!(pending[0].messages, vec![msg("b")]);
    // ids keep growing across restarts, so order is publication order
    drop(wal);
    let (mut wal, _) = Wal::open(dir.path(), opts()).unwrap();
    assert!(wal.append(vec![], vec![]).unwrap() > c);
}

#[test]
fn torn_last_record_is_truncated_and_earlier_entries_kept() {
    let dir = tempfile::tempdir().unwrap();
    let (mut wal, _) = Wal::open(dir.path(), opts()).unwrap();
    let a = wal.append(vec![range(0, 0, 10)], vec![msg("a")]).unwrap();
    wal.append(vec![range(0, 10, 20)], vec![msg("b")]).unwrap();
    drop(wal);
    let seg = only_segment(dir.path());
    let len = fs::metadata(&seg).unwrap().len();
    // a crash in the middle of the second write
    OpenOptions::new()
        .write(true)
        .open(&seg)
        .unwrap()
        .set_len(len - 7)
        .unwrap();
    let (wal, rec) = Wal::open(dir.path(), opts()).unwrap();
    assert_eq!(rec.truncated.len(), 1);
    assert_eq!(rec.truncated[0].0, seg);
    let ids = wal.pending_ids();
    assert_eq!(ids, vec![a]);
    assert_eq!(
        fs::metadata(&seg).unwrap().len(),
        rec.truncated[0].1,
        "file truncated on disk"
    );
}

#[test]
fn flipped_byte_is_detected_and_the_tail_from_there_dropped() {
    let dir = tempfile::tempdir().unwrap();
    let (mut wal, _) = Wal::open(dir.path(), opts()).unwrap();
    let a = wal.append(vec![range(0, 0, 10)], vec![msg("a")]).unwrap();
    let b = wal
        .append(vec![range(0, 10, 20)], vec![msg("bbbbbbbbbbbbbbbb")])
        .unwrap();
    let c = wal.append(vec![range(0, 20, 30)], vec![msg("c")]).unwrap();
    let sizes: Vec<u64> = wal.pending.values().map(|p| p.len).collect();
    drop(wal);
    let seg = only_segment(dir.path());
    let mut data = fs::read(&seg).unwrap();
    let in_b = (sizes[0] + sizes[1] / 2) as usize;
    data[in_b] ^= 0x20;
    fs::write(&seg, &data).unwrap();
    let (wal, rec) = Wal::open(dir.path(), opts()).unwrap();
    assert_eq!(
        rec.truncated,
        vec![(seg.clone(), sizes[0], sizes[1] + sizes[2])]
    );
    let ids = wal.pending_ids();
    assert_eq!(
        ids,
        vec![a],
        "b is corrupt, c follows it: both dropped ({b}, {c})"
    );
}

#[test]
fn corrupt_length_does_not_allocate_or_panic() {
    let dir = tempfile::tempdir().unwrap();
    let (mut wal, _) = Wal::open(dir.path(), opts()).unwrap();
    wal.append(vec![range(0, 0, 10)], vec![msg("a")]).unwrap();
    drop(wal);
    let seg = only_segment(dir.path());
    let mut data = fs::read(&seg).unwrap();
    data[3] = 0xff;
    fs::write(&seg, &data).unwrap();
    let (wal, rec) = Wal::open(dir.path(), opts()).unwrap();
    assert_eq!(wal.pending_count(), 0);
    assert_eq!(rec.truncated[0].1, 0);
}

#[test]
fn published_segments_are_removed_and_limit_tracks_pending_bytes() {
    let dir = tempfile::tempdir().unwrap();
    let o = WalOptions {
        segment_bytes: 200,
        max_pending_bytes: 1000,
        fsync: FsyncPolicy::Never,
    };
    let (mut wal, _) = Wal::open(dir.path(), o.clone()).unwrap();
    let mut ids = Vec::new();
    for i in 0..20 {
        ids.push(
            wal.append(
                vec![range(0, i * 10, i * 10 + 10)],
                vec![msg(&"x".repeat(100))],
            )
            .unwrap(),
        );
    }
    assert!(wal.over_limit(), "{} pending bytes", wal.pending_bytes());
    let segs = fs::read_dir(dir.path()).unwrap().count();
    assert!(segs > 5, "{segs} segments");
    for id in &ids {
        wal.mark_published(*id).unwrap();
    }
    assert!(!wal.over_limit());
    assert_eq!(wal.pending_bytes(), 0);
    let left = fs::read_dir(dir.path()).unwrap().count();
    assert!(
        left <= 2,
        "{left} segments left after everything was published"
    );
    drop(wal);
    let (wal, _) = Wal::open(dir.path(), o).unwrap();
    assert_eq!(wal.pending_count(), 0);
}

#[test]
fn marks_in_a_later_segment_keep_resolving_after_rotation() {
    let dir = tempfile::tempdir().unwrap();
    let o = WalOptions {
        segment_bytes: 150,
        max_pending_bytes: 1 << 20,
        fsync: FsyncPolicy::Always,
    };
    let (mut wal, _) = Wal::open(dir.path(), o.clone()).unwrap();
    let a = wal
        .append(vec![range(0, 0, 1)], vec![msg(&"a".repeat(200))])
        .unwrap();
    let b = wal
        .append(vec![range(0, 1, 2)], vec![msg(&"b".repeat(200))])
        .unwrap();
    wal.mark_published(b).unwrap();
    drop(wal);
    let (wal, _) = Wal::open(dir.path(), o.clone()).unwrap();
    assert_eq!(wal.pending_ids(), vec![a]);
    drop(wal);
    let (mut wal, _) = Wal::open(dir.path(), o.clone()).unwrap();
    wal.mark_published(a).unwrap();
    drop(wal);
    let (wal, _) = Wal::open(dir.path(), o).unwrap();
    assert_eq!(wal.pending_count(), 0);
}

#[test]
fn a_failed_or_partial_write_leaves_the_wal_usable_and_nothing_behind() {
    let dir = tempfile::tempdir().unwrap();
    let (mut wal, _) = Wal::open(dir.path(), opts()).unwrap();
    let a = wal.append(vec![range(0, 0, 10)], vec![msg("a")]).unwrap();
    // Disk full half-way through the next record.
    wal.active.faults.partial_write = Some(13);
    wal.append(vec![range(0, 10, 20)], vec![msg("lost")])
        .unwrap_err();
    // fsync fails after a complete write: not durable, so not an entry either.
    wal.active.faults.fail_sync = true;
    wal.append(vec![range(0, 10, 20)], vec![msg("unsynced")])
        .unwrap_err();
    let c = wal.append(vec![range(0, 10, 30)], vec![msg("c")]).unwrap();
    assert_eq!(wal.read(a).unwrap().messages, vec![msg("a")]);
    assert_eq!(
        wal.read(c).unwrap().messages,
        vec![msg("c")],
        "an entry after a failed write reads back"
    );
    assert_eq!(wal.pending_ids(), vec![a, c]);
    drop(wal);
    let (wal, rec) = Wal::open(dir.path(), opts()).unwrap();
    assert!(rec.truncated.is_empty(), "{rec:?}");
    assert_eq!(wal.pending_ids(), vec![a, c], "no failed record came back");
}
