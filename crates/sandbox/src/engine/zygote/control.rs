//! The zygote's control packets (SOCK_SEQPACKET): kind, pid, status, then an optional text.

use nix::sys::socket::{sendmsg, ControlMessage, MsgFlags};
use std::io::IoSlice;
use std::os::fd::RawFd;

pub const FORK: u8 = 1;
pub const KILL: u8 = 2;
pub const READY: u8 = 10;
pub const BOOT_FAILED: u8 = 11;
pub const FORKED: u8 = 12;
pub const FORK_FAILED: u8 = 13;
pub const EXITED: u8 = 14;
/// Warm-up done: `pid` holds the rounds run, `status` the last round's microseconds, the text
/// how many pages each child copies ahead of its job (a number), or why none (see `prefault`).
pub const WARM: u8 = 15;

pub fn packet(kind: u8, pid: i32, status: i32, text: &[u8]) -> Vec<u8> {
    let mut p = Vec::with_capacity(12 + text.len());
    p.extend_from_slice(&u32::from(kind).to_le_bytes());
    p.extend_from_slice(&pid.to_le_bytes());
    p.extend_from_slice(&status.to_le_bytes());
    p.extend_from_slice(&text[..text.len().min(8192)]);
    p
}

pub fn send(fd: RawFd, kind: u8, pid: i32, status: i32, text: &[u8]) -> nix::Result<usize> {
    send_with_fds(fd, kind, pid, &[], status, text)
}

pub fn send_with_fds(
    fd: RawFd,
    kind: u8,
    pid: i32,
    fds: &[RawFd],
    status: i32,
    text: &[u8],
) -> nix::Result<usize> {
    let p = packet(kind, pid, status, text);
    let iov = [IoSlice::new(&p)];
    let rights = [ControlMessage::ScmRights(fds)];
    let cmsgs: &[ControlMessage] = if fds.is_empty() { &[] } else { &rights };
    sendmsg::<()>(fd, &iov, cmsgs, MsgFlags::empty(), None)
}

/// Kind and pid of a packet (0, 0 when it is too short).
pub fn parse(p: &[u8]) -> (u8, i32) {
    if p.len() < 12 {
        return (0, 0);
    }
    (p[0], i32::from_le_bytes([p[4], p[5], p[6], p[7]]))
}

pub fn status(p: &[u8]) -> i32 {
    p.get(8..12)
        .map(|b| i32::from_le_bytes([b[0], b[1], b[2], b[3]]))
        .unwrap_or(0)
}

pub fn text(p: &[u8]) -> String {
    String::from_utf8_lossy(p.get(12..).unwrap_or_default()).into_owned()
}
