//! The WAL's record codec: `len: u32 LE | crc32: u32 LE | body`, where `crc32` covers
//! the body and the body is `kind: u8 | payload`. Pure: no file is touched here.

/// Upper bound of one record, so that a corrupted length cannot make recovery
/// allocate gigabytes.
pub(super) const MAX_RECORD_BYTES: u32 = 256 * 1024 * 1024;
const HEADER_BYTES: usize = 8;
pub(super) const KIND_ENTRY: u8 = 1;
pub(super) const KIND_PUBLISHED: u8 = 2;
pub(super) const KIND_DISCARDED: u8 = 3;

/// One record of a segment's valid prefix.
pub(super) struct Decoded {
    pub(super) kind: u8,
    pub(super) payload: Vec<u8>,
    /// Bytes on disk, header included.
    pub(super) len: u64,
    /// Where it starts in the segment.
    pub(super) offset: u64,
}

/// The record of `kind` with `payload`, framed.
pub(super) fn encode(kind: u8, payload: &[u8]) -> Vec<u8> {
    let mut buf = Vec::with_capacity(payload.len() + HEADER_BYTES + 1);
    let body_len = payload.len() as u32 + 1;
    let mut hasher = crc32fast::Hasher::new();
    hasher.update(&[kind]);
    hasher.update(payload);
    buf.extend_from_slice(&body_len.to_le_bytes());
    buf.extend_from_slice(&hasher.finalize().to_le_bytes());
    buf.push(kind);
    buf.extend_from_slice(payload);
    buf
}

/// The records of `data` up to the first that is short, too long, fails its checksum
/// or is of no known kind, and the length of that valid prefix.
pub(super) fn decode_prefix(data: &[u8]) -> (Vec<Decoded>, u64) {
    let mut records = Vec::new();
    let mut pos = 0usize;
    loop {
        let rest = &data[pos..];
        if rest.len() < HEADER_BYTES {
            break;
        }
        let len = u32::from_le_bytes(rest[0..4].try_into().expect("4 bytes"));
        let crc = u32::from_le_bytes(rest[4..8].try_into().expect("4 bytes"));
        if len == 0 || len > MAX_RECORD_BYTES || rest.len() < HEADER_BYTES + len as usize {
            break;
        }
        let body = &rest[HEADER_BYTES..HEADER_BYTES + len as usize];
        if crc32fast::hash(body) != crc {
            break;
        }
        let kind = body[0];
        let payload = &body[1..];
        let valid = match kind {
            KIND_ENTRY => true,
            KIND_PUBLISHED | KIND_DISCARDED => payload.len() == 8,
            _ => false,
        };
        if !valid {
            break;
        }
        let total = HEADER_BYTES + len as usize;
        records.push(Decoded {
            kind,
            payload: payload.to_vec(),
            len: total as u64,
            offset: pos as u64,
        });
        pos += total;
    }
    (records, pos as u64)
}

/// The payload of one whole entry record read back (`buf` is the record, header
/// included), or None if it is corrupt or not an entry.
pub(super) fn entry_payload(buf: &[u8]) -> Option<&[u8]> {
    if buf.len() <= HEADER_BYTES {
        return None;
    }
    let crc = u32::from_le_bytes(buf[4..8].try_into().expect("4 bytes"));
    let body = &buf[HEADER_BYTES..];
    (crc32fast::hash(body) == crc && body[0] == KIND_ENTRY).then(|| &body[1..])
}

/// The entry id a mark (published or discarded) refers to.
pub(super) fn mark_id(payload: &[u8]) -> u64 {
    u64::from_le_bytes(
        payload[..8]
            .try_into()
            .expect("length checked in decode_prefix"),
    )
}
