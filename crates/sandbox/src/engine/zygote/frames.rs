//! The frames a forked sandbox and its parent exchange over their two sockets.
//!
//! A frame is a 4-byte little-endian length, a 1-byte tag and the payload. Both sides read with
//! a size limit: neither trusts the other to be well-formed (the child least of all).

use bytes::{Buf, BytesMut};
use std::io;
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};
use tokio_util::codec::{Decoder, FramedRead};

/// Parent to child, on the events socket.
pub const JOB: u8 = 1;
pub const CALL_RESULT: u8 = 2;
/// Child to parent, on the events socket.
pub const STDOUT: u8 = 10;
pub const STDERR: u8 = 11;
pub const DROPPED: u8 = 12;
pub const CALL: u8 = 13;
pub const WAIT_READY: u8 = 14;
pub const REPORT: u8 = 15;
pub const DIED: u8 = 16;
/// Child to parent on the sync socket (the parent answers each with one frame of the same tag).
pub const CATALOG_INDEX: u8 = 20;
pub const SERVER_TOOLS: u8 = 21;

pub struct Frame {
    pub tag: u8,
    pub payload: Vec<u8>,
}

fn too_large(len: usize, max: usize) -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidData,
        format!("a frame of {len} bytes, more than the {max} allowed"),
    )
}

pub fn header(tag: u8, len: usize) -> [u8; 5] {
    let mut h = [0u8; 5];
    h[..4].copy_from_slice(&(len as u32).to_le_bytes());
    h[4] = tag;
    h
}

/// Frames read from `r`, at most `max` bytes of payload each. Reading is cancel-safe (what was
/// read of a frame stays in the reader's buffer), so it can race other work in a `select!`.
pub fn reader<R: AsyncRead>(r: R, max: usize) -> FramedRead<R, FrameCodec> {
    FramedRead::new(r, FrameCodec { max })
}

pub struct FrameCodec {
    max: usize,
}

impl Decoder for FrameCodec {
    type Item = Frame;
    type Error = io::Error;

    fn decode(&mut self, src: &mut BytesMut) -> io::Result<Option<Frame>> {
        let Some(h) = src.get(..5) else {
            return Ok(None);
        };
        let len = u32::from_le_bytes([h[0], h[1], h[2], h[3]]) as usize;
        if len > self.max {
            return Err(too_large(len, self.max));
        }
        if src.len() < 5 + len {
            src.reserve(5 + len - src.len());
            return Ok(None);
        }
        let tag = src[4];
        src.advance(5);
        let payload = src.split_to(len).to_vec();
        Ok(Some(Frame { tag, payload }))
    }
}

pub async fn write<W: AsyncWrite + Unpin>(w: &mut W, tag: u8, parts: &[&[u8]]) -> io::Result<()> {
    let header = header(tag, parts.iter().map(|p| p.len()).sum());
    let mut slices = slices(&header, parts);
    let mut bufs = &mut slices[..];
    // One writev for the whole frame (as the peer reads it), looped for partial writes.
    while !bufs.is_empty() {
        match w.write_vectored(bufs).await? {
            0 => return Err(io::ErrorKind::WriteZero.into()),
            n => io::IoSlice::advance_slices(&mut bufs, n),
        }
    }
    Ok(())
}

/// A frame as slices: its header, then its parts.
fn slices<'a>(header: &'a [u8; 5], parts: &[&'a [u8]]) -> Vec<io::IoSlice<'a>> {
    std::iter::once(&header[..])
        .chain(parts.iter().copied())
        .map(io::IoSlice::new)
        .collect()
}

/// The blocking twins, for the child's synchronous requests.
pub fn write_blocking<W: io::Write>(w: &mut W, tag: u8, parts: &[&[u8]]) -> io::Result<()> {
    let header = header(tag, parts.iter().map(|p| p.len()).sum());
    let mut slices = slices(&header, parts);
    let mut bufs = &mut slices[..];
    while !bufs.is_empty() {
        match w.write_vectored(bufs) {
            Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
            Ok(n) => io::IoSlice::advance_slices(&mut bufs, n),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    w.flush()
}

pub fn read_blocking<R: io::Read>(r: &mut R, max: usize) -> io::Result<Frame> {
    let mut h = [0u8; 5];
    r.read_exact(&mut h)?;
    let len = u32::from_le_bytes([h[0], h[1], h[2], h[3]]) as usize;
    if len > max {
        return Err(too_large(len, max));
    }
    let mut payload = vec![0u8; len];
    r.read_exact(&mut payload)?;
    Ok(Frame { tag: h[4], payload })
}

/// A call's payload: `id`, then each byte string prefixed by its u32 length.
pub fn encode_call(id: u64, fields: &[&[u8]]) -> Vec<u8> {
    let mut out = Vec::with_capacity(8 + fields.iter().map(|f| 4 + f.len()).sum::<usize>());
    out.extend_from_slice(&id.to_le_bytes());
    for f in fields {
        out.extend_from_slice(&(f.len() as u32).to_le_bytes());
        out.extend_from_slice(f);
    }
    out
}

/// The inverse of [`encode_call`]: `None` when the payload is malformed.
pub fn decode_call(payload: &[u8], n: usize) -> Option<(u64, Vec<&[u8]>)> {
    let id = u64::from_le_bytes(payload.get(..8)?.try_into().ok()?);
    let mut rest = &payload[8..];
    let mut fields = Vec::with_capacity(n);
    for _ in 0..n {
        let len = u32::from_le_bytes(rest.get(..4)?.try_into().ok()?) as usize;
        fields.push(rest.get(4..4 + len)?);
        rest = &rest[4 + len..];
    }
    rest.is_empty().then_some((id, fields))
}

/// A result's payload: `id` and the text.
pub fn encode_result(id: u64, text: &str) -> Vec<u8> {
    let mut out = Vec::with_capacity(8 + text.len());
    out.extend_from_slice(&id.to_le_bytes());
    out.extend_from_slice(text.as_bytes());
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures::StreamExt;

    #[tokio::test]
    async fn a_frame_written_in_parts_through_a_narrow_pipe_reads_back_whole() {
        // 7 bytes at a time: every vectored write is partial, across the header and the parts.
        let (mut writer, read_end) = tokio::io::duplex(7);
        let parts: [&[u8]; 3] = [b"id", &[9u8; 100], b""];
        let writing =
            tokio::spawn(async move { write(&mut writer, CALL, &[b"id", &[9u8; 100], b""]).await });
        let frame = reader(read_end, 1024).next().await.unwrap().unwrap();
        writing.await.unwrap().unwrap();
        assert_eq!((frame.tag, frame.payload), (CALL, parts.concat()));
        let mut blocking = Vec::new();
        write_blocking(&mut blocking, REPORT, &parts).unwrap();
        let frame = read_blocking(&mut &blocking[..], 1024).unwrap();
        assert_eq!((frame.tag, frame.payload), (REPORT, parts.concat()));
    }

    /// The parent races frame reads against finished tool calls in a `select!`: a read that
    /// loses the race mid-frame must lose nothing (it once dropped the bytes it had read, and
    /// the stream went out of step: "it sent an unknown frame (0)").
    #[tokio::test]
    async fn a_read_cancelled_mid_frame_loses_nothing() {
        let (mut writer, read_end) = tokio::io::duplex(64);
        let payload = vec![7u8; 300];
        let sent = payload.clone();
        tokio::spawn(async move {
            for (tag, bytes) in [(STDOUT, sent.clone()), (REPORT, b"done".to_vec())] {
                let mut frame = header(tag, bytes.len()).to_vec();
                frame.extend_from_slice(&bytes);
                for piece in frame.chunks(7) {
                    writer.write_all(piece).await.unwrap();
                    tokio::time::sleep(std::time::Duration::from_millis(2)).await;
                }
            }
        });
        let mut frames = reader(read_end, 1024);
        let mut got = Vec::new();
        let mut cancelled = 0;
        while got.len() < 2 {
            tokio::select! {
                frame = frames.next() => got.push(frame.unwrap().unwrap()),
                _ = tokio::time::sleep(std::time::Duration::from_millis(1)) => cancelled += 1,
            }
        }
        assert!(
            cancelled > 10,
            "the reads were interrupted mid-frame ({cancelled} times)"
        );
        assert_eq!((got[0].tag, &got[0].payload), (STDOUT, &payload));
        assert_eq!((got[1].tag, &got[1].payload[..]), (REPORT, &b"done"[..]));
    }

    #[tokio::test]
    async fn a_frame_over_the_limit_is_refused() {
        let (mut writer, read_end) = tokio::io::duplex(64);
        writer.write_all(&header(STDOUT, 2000)).await.unwrap();
        let mut frames = reader(read_end, 1024);
        let e = frames.next().await.unwrap().err().expect("refused");
        assert!(
            e.to_string()
                .contains("2000 bytes, more than the 1024 allowed"),
            "{e}"
        );
    }

    #[test]
    fn calls_round_trip_and_malformed_ones_are_refused() {
        let p = encode_call(7, &[b"fs", b"read", b"{}"]);
        let (id, f) = decode_call(&p, 3).unwrap();
        assert_eq!((id, f), (7, vec![&b"fs"[..], b"read", b"{}"]));
        assert!(decode_call(&p, 2).is_none(), "trailing bytes");
        assert!(decode_call(&p[..p.len() - 1], 3).is_none(), "short");
        let mut huge = encode_call(1, &[b"x"]);
        huge[8..12].copy_from_slice(&u32::MAX.to_le_bytes());
        assert!(decode_call(&huge, 1).is_none(), "a length past the end");
    }
}
