//! MirrorMaker 2's offset syncs are read from a topic others can write: any key and
//! value must parse without a panic, and whatever parses must be exactly an offset sync
//! (re-encoded, the same bytes).
#![no_main]

use common::replication::{offset_sync, parse_offset_sync};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some((&split, data)) = data.split_first() else {
        return;
    };
    let (key, value) = data.split_at(usize::from(split).min(data.len()));
    if let Some((topic, partition, upstream)) = parse_offset_sync(key, value) {
        let downstream = i64::from_be_bytes(value[8..16].try_into().unwrap());
        assert_eq!(
            offset_sync(topic, partition, upstream, downstream),
            (key.to_vec(), value.to_vec())
        );
    }
});
