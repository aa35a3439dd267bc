//! Sealing a forked sandbox: what the kernel still lets the child do once a script may run.
//!
//! In the order it happens (`child.rs`): only the IPC sockets stay open (stdio goes to
//! /dev/null), the child gets its own process group and dies with the zygote, the resource limits
//! drop (no core files, no files written, few descriptors, no new processes, a ceiling on memory),
//! and last `PR_SET_NO_NEW_PRIVS` and a seccomp-bpf allowlist: no `open*`, `socket`, `connect`,
//! `execve`, `ptrace`, `clone`/`fork`, `kill` of others; everything not listed fails with EPERM.
//! The zygote already runs in empty user and network namespaces where the kernel allows them.

use nix::sys::resource::{setrlimit, Resource};
use seccompiler::{
    BpfProgram, SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition, SeccompFilter,
    SeccompRule,
};
use std::collections::BTreeMap;
use std::os::fd::RawFd;

/// The child's descriptors once sealed: 0-2 are /dev/null, these two are the sockets.
pub const EVENTS_FD: RawFd = 3;
pub const SYNC_FD: RawFd = 4;

/// Moves the two sockets to [`EVENTS_FD`] and [`SYNC_FD`], points stdio at /dev/null and closes
/// every other descriptor the zygote had (its control socket, its runtime's epoll, ...).
pub fn keep_only_sockets(devnull: RawFd, events: RawFd, sync: RawFd) -> Result<(), String> {
    // SAFETY: plain descriptor syscalls on this (single-threaded) process's own table.
    unsafe {
        let events_high = libc::fcntl(events, libc::F_DUPFD, 100);
        let sync_high = libc::fcntl(sync, libc::F_DUPFD, 100);
        if events_high < 0 || sync_high < 0 {
            return Err(format!("dup: {}", std::io::Error::last_os_error()));
        }
        for fd in 0..3 {
            if libc::dup2(devnull, fd) < 0 {
                return Err(format!("dup2 stdio: {}", std::io::Error::last_os_error()));
            }
        }
        if libc::dup2(events_high, EVENTS_FD) < 0 || libc::dup2(sync_high, SYNC_FD) < 0 {
            return Err(format!("dup2: {}", std::io::Error::last_os_error()));
        }
        if libc::syscall(libc::SYS_close_range, 5u32, u32::MAX, 0u32) != 0 {
            // Kernels before 5.9: close them one by one.
            for fd in 5..1024 {
                libc::close(fd);
            }
        }
    }
    Ok(())
}

/// Own process group; killed if the zygote dies; `false` if it already has.
pub fn detach(zygote: libc::pid_t) -> bool {
    // SAFETY: attribute changes of this process only.
    unsafe {
        libc::setpgid(0, 0);
        libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0);
        libc::getppid() == zygote
    }
}

/// Resource limits. `data_bytes` bounds the child's private writable memory: a backstop under
/// the sandbox's own memory accounting, for any route that accounting might miss.
pub fn limit_resources(data_bytes: u64, open_files: u64) -> Result<(), String> {
    let set = |resource, value: u64| {
        setrlimit(resource, value, value).map_err(|e| format!("setrlimit {resource:?}: {e}"))
    };
    set(Resource::RLIMIT_CORE, 0)?;
    set(Resource::RLIMIT_FSIZE, 0)?;
    set(Resource::RLIMIT_NOFILE, open_files)?;
    set(Resource::RLIMIT_NPROC, 0)?;
    set(Resource::RLIMIT_DATA, data_bytes)?;
    Ok(())
}

/// Installs the syscall allowlist (after `PR_SET_NO_NEW_PRIVS`) on every thread of the child. From here on the child can only
/// compute, manage its own memory and threads' waits, and talk over the descriptors it holds.
pub fn seal(own_pid: libc::pid_t) -> Result<(), String> {
    let program = allowlist(own_pid)?;
    // SAFETY: prctl on this process.
    if unsafe { libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) } != 0 {
        return Err(format!(
            "PR_SET_NO_NEW_PRIVS: {}",
            std::io::Error::last_os_error()
        ));
    }
    seccompiler::apply_filter_all_threads(&program).map_err(|e| format!("seccomp: {e}"))
}

fn allowlist(own_pid: libc::pid_t) -> Result<BpfProgram, String> {
    let mut rules: BTreeMap<i64, Vec<SeccompRule>> = BTreeMap::new();
    let plain = [
        // I/O on the descriptors already open (the sockets and /dev/null).
        libc::SYS_read,
        libc::SYS_write,
        libc::SYS_readv,
        libc::SYS_writev,
        libc::SYS_recvfrom,
        libc::SYS_sendto,
        libc::SYS_recvmsg,
        libc::SYS_sendmsg,
        libc::SYS_close,
        libc::SYS_fcntl,
        libc::SYS_epoll_ctl,
        libc::SYS_epoll_pwait,
        libc::SYS_ppoll,
        // Memory: V8's heap and code space, wasm memories, malloc.
        libc::SYS_mmap,
        libc::SYS_munmap,
        libc::SYS_mprotect,
        libc::SYS_madvise,
        libc::SYS_mremap,
        libc::SYS_brk,
        // On CPUs with memory protection keys (Intel since Skylake-SP) V8 write-protects wasm
        // code with a key and flips it with pkey_mprotect: refused, compiling a wheel's wasm
        // module in a child was a V8 fatal error (SIGTRAP). Keys are this process's own.
        libc::SYS_pkey_mprotect,
        libc::SYS_pkey_alloc,
        libc::SYS_pkey_free,
        // Waiting and time.
        libc::SYS_futex,
        libc::SYS_sched_yield,
        libc::SYS_nanosleep,
        libc::SYS_clock_nanosleep,
        libc::SYS_clock_gettime,
        libc::SYS_clock_getres,
        libc::SYS_gettimeofday,
        // Signals (V8's wasm trap handler) and ending.
        libc::SYS_rt_sigreturn,
        libc::SYS_rt_sigprocmask,
        libc::SYS_rt_sigaction,
        libc::SYS_sigaltstack,
        libc::SYS_getpid,
        libc::SYS_gettid,
        libc::SYS_exit,
        libc::SYS_exit_group,
        libc::SYS_getrandom,
        libc::SYS_restart_syscall,
        // What glibc does when a thread starts and ends.
        libc::SYS_rseq,
        libc::SYS_set_robust_list,
    ];
    for nr in plain {
        rules.insert(nr, vec![]);
    }
    #[cfg(target_arch = "x86_64")]
    for nr in [libc::SYS_epoll_wait, libc::SYS_poll, libc::SYS_arch_prctl] {
        rules.insert(nr, vec![]);
    }
    let eq = |arg, value: u64| {
        SeccompCondition::new(arg, SeccompCmpArgLen::Qword, SeccompCmpOp::Eq, value)
            .map_err(|e| e.to_string())
    };
    // abort() signals its own thread; no other process may be signalled.
    rules.insert(
        libc::SYS_tgkill,
        vec![SeccompRule::new(vec![eq(0, own_pid as u64)?]).map_err(|e| e.to_string())?],
    );
    // V8 names its anonymous mappings; nothing else of prctl.
    const PR_SET_VMA: u64 = 0x53564d41;
    rules.insert(
        libc::SYS_prctl,
        vec![SeccompRule::new(vec![eq(0, PR_SET_VMA)?]).map_err(|e| e.to_string())?],
    );
    let arch = std::env::consts::ARCH
        .try_into()
        .map_err(|e| format!("seccomp: {e:?}"))?;
    let filter = SeccompFilter::new(
        rules,
        SeccompAction::Errno(libc::EPERM as u32),
        SeccompAction::Allow,
        arch,
    )
    .map_err(|e| format!("seccomp filter: {e}"))?;
    filter
        .try_into()
        .map_err(|e: seccompiler::BackendError| format!("seccomp program: {e}"))
}

/// Attempts to leave the sandbox, made from inside a sealed child when the tests ask for it
/// (compiled only with the `escape-probes` feature, which only the product's tests enable).
/// One line per attempt: `blocked` with the error, or `ESCAPED`.
#[cfg(feature = "escape-probes")]
pub fn escape_probes(zygote: libc::pid_t) -> String {
    use std::ffi::CString;
    let mut lines = Vec::new();
    let mut report = |what: &str, result: libc::c_long| {
        let verdict = if result < 0 {
            format!("blocked ({})", std::io::Error::last_os_error())
        } else {
            "ESCAPED".to_owned()
        };
        lines.push(format!("{what}: {verdict}"));
    };
    let path = CString::new("/etc/hostname").unwrap();
    let sh = CString::new("/bin/sh").unwrap();
    // SAFETY: each call either fails (the point) or is cleaned up at once; the process is a
    // throwaway sandbox child.
    unsafe {
        let fd = libc::open(path.as_ptr(), libc::O_RDONLY);
        report("open /etc/hostname", fd as libc::c_long);
        let fd = libc::openat(libc::AT_FDCWD, path.as_ptr(), libc::O_RDONLY);
        report("openat /etc/hostname", fd as libc::c_long);
        let s = libc::socket(libc::AF_INET, libc::SOCK_STREAM, 0);
        report("socket AF_INET", s as libc::c_long);
        let s = libc::socket(libc::AF_UNIX, libc::SOCK_STREAM, 0);
        report("socket AF_UNIX", s as libc::c_long);
        let argv = [sh.as_ptr(), std::ptr::null()];
        let envp = [std::ptr::null()];
        let r = libc::execve(sh.as_ptr(), argv.as_ptr(), envp.as_ptr());
        report("execve /bin/sh", r as libc::c_long);
        let r = libc::syscall(libc::SYS_clone, libc::SIGCHLD as libc::c_ulong, 0, 0, 0, 0);
        if r == 0 {
            libc::_exit(0);
        }
        report("clone (fork)", r);
        let r = libc::ptrace(libc::PTRACE_TRACEME, 0, 0, 0);
        report("ptrace", r as libc::c_long);
        let r = libc::kill(zygote, 0);
        report("kill the zygote", r as libc::c_long);
        let r = libc::write(1, b"x".as_ptr().cast(), 1);
        lines.push(format!(
            "write to fd 1: {}",
            if r == 1 { "reaches /dev/null" } else { "fails" }
        ));
    }
    lines.join("\n") + "\n"
}
