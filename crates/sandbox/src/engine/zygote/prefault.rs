//! The pages a job touches, made the child's own before the job comes; and the reading of
//! `/proc/self/maps` that every fork needs (`fork_to_all_mappings`).
//!
//! A child shares the zygote's memory copy-on-write, so the first write to each page is a fault
//! and a 4 KiB copy in the kernel: ~1,250 of them for `print(1)` (Python's objects, V8's heap,
//! malloc's), about a third of the CPU time a child spends on that job. And a fork copies no
//! page-table entries of a file mapping that was never written (the binary's code and read-only
//! data): each page of V8's or our code a child runs is a fault too, ~250 in a `print(1)` job
//! (measured with the `exceptions:page_fault_user` tracepoint). Most are the same pages in every
//! child. So the zygote learns them once, when its warm-up ends: it forks a probe that runs one
//! job and then reads from its pagemap which of the zygote's writable pages it holds a copy of
//! (mapped once: written since the fork), and which pages of read-only files it has mapped.
//! Every child then has the kernel copy the first (`MADV_POPULATE_WRITE`: a run of pages per
//! call, no fault per page) as the first thing after its fork, while it waits for a job it has
//! not been given yet: off the job's clock. A child that gets its job at once pays no more than
//! it would have during the job. The second come mapped with the fork itself, which copies a
//! page-table entry for far less than a child pays to map one (`map_read_pages_at_fork`), and
//! most code comes in huge pages, an entry per 2 MiB (`move_code_to_huge_pages`).
//!
//! Pages are written only where the zygote's mapping, read at the fork, is private, writable and
//! not executable, and only outside ranges V8 guards with a memory protection key (smaps'
//! `ProtectionKey`, read when learning): a write there would fault for good.

use std::time::{Duration, Instant};

const PAGE: usize = 4096;
/// pagemap: the page is present, and mapped by this process only.
const PRESENT: u64 = 1 << 63;
const EXCLUSIVE: u64 = 1 << 56;
/// How long the probe's job may take before it is given up (the zygote waits meanwhile).
const PROBE_LIMIT: Duration = Duration::from_secs(5);
/// The most pages learned of each kind (a bound on what each child copies ahead: 64 MiB).
const MAX_PAGES: usize = 16 << 10;

/// A mapping's address range, from a line of `/proc/<pid>/maps` or `smaps`.
struct Region {
    start: usize,
    end: usize,
    /// Private, writable, not executable, anonymous or not.
    writable: bool,
    /// Private and writable, executable or not (V8's wasm code space is both).
    private_writable: bool,
    /// A file's pages, mapped readable and not writable (code, read-only data).
    read_only_file: bool,
    /// Copy-on-write (`p`), not shared with the file (`s`).
    private: bool,
    /// Mapped executable (code).
    executable: bool,
    /// No file behind it.
    anonymous: bool,
}

fn parse_region(line: &str) -> Option<Region> {
    let mut fields = line.split_ascii_whitespace();
    let (start, end) = fields.next()?.split_once('-')?;
    let perms = fields.next()?.as_bytes();
    if perms.len() != 4 {
        return None;
    }
    // offset, device, inode: inode 0 is an anonymous mapping.
    let inode = fields.nth(2)?;
    Some(Region {
        start: usize::from_str_radix(start, 16).ok()?,
        end: usize::from_str_radix(end, 16).ok()?,
        writable: perms[0] == b'r' && perms[1] == b'w' && perms[2] != b'x' && perms[3] == b'p',
        private_writable: perms[0] == b'r' && perms[1] == b'w' && perms[3] == b'p',
        read_only_file: perms[0] == b'r' && perms[1] == b'-' && inode != "0",
        private: perms[3] == b'p',
        executable: perms[2] == b'x',
        anonymous: inode == "0",
    })
}

/// The shipped V8 marks its mappings MADV_DONTFORK (v8_enable_private_mapping_fork_optimization):
/// a child would fault on its first allocation. Re-mark every mapping of `maps` (this process's,
/// read just before the fork: the heap maps new ranges as it grows).
pub fn fork_to_all_mappings(maps: &str) {
    for region in maps.lines().filter_map(parse_region) {
        // SAFETY: changes only whether an existing mapping is inherited; errors ([vsyscall]) are
        // harmless.
        unsafe {
            libc::madvise(
                region.start as *mut libc::c_void,
                region.end - region.start,
                libc::MADV_DOFORK,
            )
        };
    }
}

/// The regions of a `maps` text that are of a kind (in address order, as the kernel lists them).
fn regions(maps: &[Region], of_kind: fn(&Region) -> bool) -> Vec<(usize, usize)> {
    maps.iter()
        .filter(|r| of_kind(r))
        .map(|r| (r.start, r.end))
        .collect()
}

fn parse_maps(maps: &str) -> Vec<Region> {
    maps.lines().filter_map(parse_region).collect()
}

fn writable(r: &Region) -> bool {
    r.writable
}

fn read_only_file(r: &Region) -> bool {
    r.read_only_file
}

/// The writable regions of this process that carry no protection key, from its smaps.
fn unkeyed_writable_regions() -> Result<Vec<(usize, usize)>, String> {
    unkeyed(writable)
}

/// This process's regions of a kind that carry no protection key, from its smaps.
fn unkeyed(of_kind: fn(&Region) -> bool) -> Result<Vec<(usize, usize)>, String> {
    Ok(smaps_with("ProtectionKey:")?
        .into_iter()
        .filter(|(r, key)| *key == 0 && of_kind(r))
        .map(|(r, _)| (r.start, r.end))
        .collect())
}

/// Every mapping of this process's smaps, with the number its `field` line holds (0 if none).
fn smaps_with(field: &str) -> Result<Vec<(Region, u64)>, String> {
    let smaps = std::fs::read_to_string("/proc/self/smaps").map_err(|e| format!("smaps: {e}"))?;
    let mut regions: Vec<(Region, u64)> = Vec::new();
    for line in smaps.lines() {
        if let Some(value) = line.strip_prefix(field) {
            if let Some((_, number)) = regions.last_mut() {
                let digits = value.trim().split_ascii_whitespace().next().unwrap_or("0");
                *number = digits.parse().unwrap_or(0);
            }
        } else if line.contains('-') && line.as_bytes().first().is_some_and(u8::is_ascii_hexdigit) {
            regions.extend(parse_region(line).map(|r| (r, 0)));
        }
    }
    Ok(regions)
}

/// A huge page: 2 MiB on x86-64 and (with 4 KiB pages) arm64.
const HUGE_PAGE: usize = 2 << 20;

/// A 2 MiB span of code with fewer pages than this mapped saves a fork and an exit too little to
/// be worth a huge page, which fills the rest (with the file's code, or zeroes) in the zygote's
/// memory, shared by every child.
const WORTH_A_HUGE_PAGE: usize = HUGE_PAGE / PAGE / 8;

/// Has the kernel back 2 MiB spans of this process's anonymous writable memory by one huge page
/// each, where it can: the data wholly resident (Pyodide's wasm memory above all), and the code
/// (V8's wasm code space, writable and executable) resident enough ([`WORTH_A_HUGE_PAGE`]). A
/// fork then copies one page-table entry for a span instead of one per resident page, and a
/// child's exit frees one: both are most of what a fork and an exit cost, and they cost a
/// child's CPU on a busy machine. A child's first write into one still copies only the 4 KiB
/// page written (the kernel splits a huge page shared copy-on-write, then copies as before), so
/// what a child owns does not grow. A span of data with holes stays as it is: the zygote goes on
/// writing some of its data (malloc's, as it forks), and a split then maps all 512 pages of a
/// span that had fewer; nothing writes the code once the warm-up is over, and its holes are
/// filled with zeroes, which is what they read before. `MADV_COLLAPSE` (Linux 6.1) leaves the
/// mappings' flags as they are (new memory is still mapped in small pages) and works whatever
/// the system's transparent-huge-page mode, but `never`; where it fails, nothing changes.
/// Returns how many bytes are now backed by huge pages.
pub fn collapse_resident_memory() -> usize {
    let data = unkeyed(|r| r.anonymous && r.writable);
    let code = unkeyed(|r| r.anonymous && r.private_writable && r.executable);
    data.map_or(0, |data| collapse_spans(&data, HUGE_PAGE / PAGE))
        + code.map_or(0, |code| collapse_spans(&code, WORTH_A_HUGE_PAGE))
}

/// Collapses each 2 MiB span of `regions` (anonymous, private, writable mappings) of which at
/// least `resident_pages` are resident.
fn collapse_spans(regions: &[(usize, usize)], resident_pages: usize) -> usize {
    let mut collapsed = 0;
    let mut resident = vec![0u8; HUGE_PAGE / PAGE];
    for &(start, end) in regions {
        let mut chunk = start.next_multiple_of(HUGE_PAGE);
        while chunk + HUGE_PAGE <= end {
            let at = chunk as *mut libc::c_void;
            // SAFETY: a range of this process's own mapping; mincore only reports residency, and
            // MADV_COLLAPSE keeps the contents (it copies them into the huge page).
            let worth = unsafe { libc::mincore(at, HUGE_PAGE, resident.as_mut_ptr()) == 0 }
                && resident.iter().filter(|page| *page & 1 == 1).count() >= resident_pages;
            if worth && unsafe { libc::madvise(at, HUGE_PAGE, libc::MADV_COLLAPSE) } == 0 {
                collapsed += HUGE_PAGE;
            }
            chunk += HUGE_PAGE;
        }
    }
    collapsed
}

/// Has this process's own code (the binary's text) run from anonymous huge pages: each 2 MiB
/// of it of which this process has mapped an eighth or more (what boot and warm-up ran) is
/// copied into one, which then takes the file's place at the same addresses (`mremap`: code
/// running meanwhile sees the same bytes throughout). A fork then copies one page-table entry
/// for it where it copied one per 4 KiB page mapped (after warm-up ~6,800 of them, two fifths of
/// all a fork copied and an exit freed), and a child faults on no page of it, whatever code its
/// job runs. Nothing writes to code: the pages stay shared with every child. It costs the zygote
/// the moved chunks' pages it had not mapped (measured, the page cache dropped first: 101 -> 111
/// MiB RSS). Where no huge page can be had (transparent huge pages `never`, no `MADV_COLLAPSE`
/// before Linux 6.1, memory too fragmented) the code left stays where it was. (A profiler that
/// reads symbols from the file a mapping names, as `perf` does, finds none for the moved code.)
/// Returns how many bytes of code moved; call from the zygote's only thread.
pub fn move_code_to_huge_pages() -> usize {
    use std::os::unix::fs::FileExt;
    let here = move_code_to_huge_pages as fn() -> usize as usize;
    let maps = std::fs::read_to_string("/proc/self/maps").unwrap_or_default();
    let Some(code) = parse_maps(&maps)
        .into_iter()
        .find(|r| r.executable && !r.anonymous && r.start <= here && here < r.end)
    else {
        return 0;
    };
    let Ok(pagemap) = std::fs::File::open("/proc/self/pagemap") else {
        return 0;
    };
    let mut entries = vec![0u8; HUGE_PAGE / PAGE * 8];
    let mut moved = 0;
    let mut chunk = code.start.next_multiple_of(HUGE_PAGE);
    while chunk + HUGE_PAGE <= code.end {
        let mapped = pagemap
            .read_exact_at(&mut entries, (chunk / PAGE * 8) as u64)
            .map_or(0, |()| {
                entries
                    .chunks_exact(8)
                    .filter(|e| {
                        u64::from_le_bytes((*e).try_into().expect("8 bytes")) & PRESENT != 0
                    })
                    .count()
            });
        if mapped >= WORTH_A_HUGE_PAGE {
            // SAFETY: a whole 2 MiB of this process's code mapping, which nothing writes; this
            // process has one thread (the caller's promise).
            if !unsafe { copy_to_huge_page(chunk) } {
                // No huge page now (none to be had, or none free): copying the rest of the code
                // only to throw it away would not get one either.
                break;
            }
            moved += HUGE_PAGE;
        }
        chunk += HUGE_PAGE;
    }
    moved
}

/// Copies the 2 MiB of code at `chunk` into an anonymous huge page and moves that page over it.
///
/// # Safety
/// `chunk` must be 2 MiB-aligned, wholly inside a mapping of code that nothing writes, and this
/// process must have no other thread.
unsafe fn copy_to_huge_page(chunk: usize) -> bool {
    // SAFETY (all below): a fresh anonymous mapping of our own, trimmed to 2 MiB aligned; the
    // copy reads code that is mapped readable; the page moves over `chunk` only once it holds
    // the same bytes, readable and executable as they were.
    unsafe {
        let area = libc::mmap(
            std::ptr::null_mut(),
            2 * HUGE_PAGE,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        );
        if area == libc::MAP_FAILED {
            return false;
        }
        let area = area as usize;
        let page = area.next_multiple_of(HUGE_PAGE);
        if page > area {
            libc::munmap(area as *mut libc::c_void, page - area);
        }
        libc::munmap(
            (page + HUGE_PAGE) as *mut libc::c_void,
            area + HUGE_PAGE - page,
        );
        let at = page as *mut libc::c_void;
        libc::madvise(at, HUGE_PAGE, libc::MADV_HUGEPAGE);
        std::ptr::copy_nonoverlapping(chunk as *const u8, page as *mut u8, HUGE_PAGE);
        let moved = libc::madvise(at, HUGE_PAGE, libc::MADV_COLLAPSE) == 0
            && libc::mprotect(at, HUGE_PAGE, libc::PROT_READ | libc::PROT_EXEC) == 0
            && libc::mremap(
                at,
                HUGE_PAGE,
                HUGE_PAGE,
                libc::MREMAP_MAYMOVE | libc::MREMAP_FIXED,
                chunk as *mut libc::c_void,
            ) as usize
                == chunk;
        if !moved {
            libc::munmap(at, HUGE_PAGE);
        }
        moved
    }
}

/// The pages a child makes its own before its job (addresses in ascending order).
#[derive(Default)]
pub struct HotPages {
    /// Of the zygote's writable memory: copied.
    pub written: Vec<usize>,
    /// Of read-only file mappings (code, read-only data): mapped.
    pub read: Vec<usize>,
}

/// What a probe found: the pages its first job touched, how long that job took, and how long the
/// fastest of the jobs it ran next took (the steady state).
pub struct Learned {
    pub pages: HotPages,
    pub first_job: Duration,
    pub steady_job: Duration,
}

/// Forks a probe that runs `probe`, which calls back once its first job is done: the probe then
/// reads from its own pagemap which pages of this process's writable memory it wrote, and hands
/// their addresses back through a shared mapping, with the two times `probe` returns (its first
/// job's, the steady state's). Call from the zygote's only thread. (The probe reads its own
/// pagemap: the zygote may not read another process's, having left its user namespace, which
/// makes it not dumpable.)
pub fn learn(probe: impl FnOnce(&mut dyn FnMut()) -> [Duration; 2]) -> Result<Learned, String> {
    let maps = std::fs::read_to_string("/proc/self/maps").unwrap_or_default();
    let read_only = regions(&parse_maps(&maps), read_only_file);
    let writable = unkeyed_writable_regions()?;
    // The shared words, written by the probe: a header, the written pages, the read ones.
    const FIRST_MICROS: usize = 0;
    const STEADY_MICROS: usize = 1;
    const LOOKED: usize = 2;
    const WRITTEN: usize = 3;
    const READ: usize = 4;
    const HEADER: usize = 5;
    let shared = SharedWords::new(HEADER + 2 * MAX_PAGES)?;
    fork_to_all_mappings(&maps);
    // SAFETY: this process has one thread; the child runs `probe` and ends in `_exit`.
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        return Err(format!("fork: {}", std::io::Error::last_os_error()));
    }
    if pid == 0 {
        let took = probe(&mut || {
            let written = present_pages(&writable, PRESENT | EXCLUSIVE);
            let read = present_pages(&read_only, PRESENT);
            if let (Ok(written), Ok(read)) = (written, read) {
                shared.set(LOOKED, 1);
                for (count, first, pages) in
                    [(WRITTEN, HEADER, written), (READ, HEADER + MAX_PAGES, read)]
                {
                    shared.set(count, pages.len());
                    pages
                        .iter()
                        .enumerate()
                        .for_each(|(i, &p)| shared.set(first + i, p));
                }
            }
        });
        for (slot, took) in [FIRST_MICROS, STEADY_MICROS].into_iter().zip(took) {
            shared.set(
                slot,
                usize::try_from(took.as_micros()).unwrap_or(usize::MAX),
            );
        }
        let code = if shared.get(LOOKED) == 1 { 0 } else { 70 };
        // SAFETY: ends the probe without the zygote's destructors.
        unsafe { libc::_exit(code) }
    }
    wait_exited(pid)?;
    let pages = |count, first| {
        let count = shared.get(count).min(MAX_PAGES);
        (first..first + count).map(|i| shared.get(i)).collect()
    };
    let micros = |i| Duration::from_micros(shared.get(i) as u64);
    Ok(Learned {
        pages: HotPages {
            written: pages(WRITTEN, HEADER),
            read: pages(READ, HEADER + MAX_PAGES),
        },
        first_job: micros(FIRST_MICROS),
        steady_job: micros(STEADY_MICROS),
    })
}

/// Makes every fork carry the learned pages of code and read-only data already mapped, so that
/// a child neither maps them itself nor faults on them in its job. Returns how many pages now
/// come with the fork; they leave `pages.read`. Call from the zygote's only thread, once.
///
/// A fork copies no page-table entry of a mapping that holds no anonymous memory (the kernel's
/// `anon_vma`): a child faults in each page of the binary's code it runs, or maps the learned ones
/// ahead with `MADV_POPULATE_READ`, which walks them a page at a time (measured with perf: ~1.5
/// ms of a child's CPU for ~4,400 pages, a sixth of what a `print(1)` execution costs in all).
/// A fork copies an entry in ~65 ns. So the zygote gives each private read-only file mapping that
/// holds learned pages an `anon_vma`: it writes one of its bytes back as it is through
/// `/proc/self/mem` (a forced write copies that page; the mapping stays read-only, and no byte of
/// it changes), unmaps the copy (the `anon_vma` stays), and maps the learned pages. Of read-only
/// data it unmaps all but the learned pages: what it read only to boot (the snapshot, Pyodide's
/// files: ~30 MiB) is not copied at each fork. Code it has mapped stays mapped: a child that runs
/// more than `print(1)` runs much of it too (V8's optimizing compiler in a busy loop), and
/// unmapped here, such a child would map it on its own, pages no other process maps, which count
/// as its private memory. (Most code has left the file by then, for huge pages: see
/// [`move_code_to_huge_pages`]; what is left here is the edges of the code and the 2 MiB spans
/// little of which ran.) A mapping that holds anonymous memory already (relocated
/// data made read-only) is copied at each fork as it is: the learned pages are only mapped in
/// it, nothing unmapped. Where the kernel refuses the write (booted with
/// `proc_mem.force_override=never`), nothing changes: children map those pages themselves.
pub fn map_read_pages_at_fork(pages: &mut HotPages) -> usize {
    use std::os::unix::fs::FileExt;
    let Ok(regions) = smaps_with("Anonymous:") else {
        return 0;
    };
    let Ok(mem) = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/proc/self/mem")
    else {
        return 0;
    };
    let advise = |start: usize, end: usize, advice| {
        if end > start {
            // SAFETY: advice over a range of one of this process's read-only file mappings: it
            // drops or makes page-table entries, and the pages read the same either way.
            unsafe { libc::madvise(start as *mut libc::c_void, end - start, advice) };
        }
    };
    let mut carried: Vec<(usize, usize)> = Vec::new();
    for (region, anonymous) in regions
        .iter()
        .filter(|(r, _)| r.read_only_file && r.private)
    {
        let lo = pages.read.partition_point(|&p| p < region.start);
        let hi = pages.read.partition_point(|&p| p < region.end);
        if lo == hi {
            continue;
        }
        let inside = &pages.read[lo..hi];
        if *anonymous != 0 {
            // Written before it was made read-only (relocations: RELRO): it has its `anon_vma`,
            // and pages unmapped would lose what was written. Only mapped.
            for (start, len) in runs(inside) {
                advise(start, start + len, libc::MADV_POPULATE_READ);
            }
            carried.push((region.start, region.end));
            continue;
        }
        // SAFETY: the first byte of a page of this readable mapping that the probe had mapped
        // (so within the file: no SIGBUS).
        let byte = unsafe { (inside[0] as *const u8).read_volatile() };
        if mem.write_at(&[byte], inside[0] as u64).ok() != Some(1) {
            continue;
        }
        if region.executable {
            advise(inside[0], inside[0] + PAGE, libc::MADV_DONTNEED);
        } else {
            advise(region.start, region.end, libc::MADV_DONTNEED);
        }
        for (start, len) in runs(inside) {
            advise(start, start + len, libc::MADV_POPULATE_READ);
        }
        if !region.executable {
            // Mapping a page maps its neighbours too (the kernel's fault-around): unmapped again.
            let mut from = region.start;
            for (start, len) in runs(inside) {
                advise(from, start, libc::MADV_DONTNEED);
                from = start + len;
            }
            advise(from, region.end, libc::MADV_DONTNEED);
        }
        carried.push((region.start, region.end));
    }
    let before = pages.read.len();
    pages
        .read
        .retain(|&p| !carried.iter().any(|&(start, end)| start <= p && p < end));
    before - pages.read.len()
}

/// A run of words in a MAP_SHARED mapping: a forked probe's writes are seen by its parent.
struct SharedWords {
    words: *mut usize,
    len: usize,
}

impl SharedWords {
    fn new(len: usize) -> Result<Self, String> {
        // SAFETY: a fresh anonymous mapping, unmapped on drop.
        let words = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len * size_of::<usize>(),
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if words == libc::MAP_FAILED {
            return Err(format!("mmap: {}", std::io::Error::last_os_error()));
        }
        Ok(Self {
            words: words.cast(),
            len,
        })
    }
    fn set(&self, i: usize, value: usize) {
        assert!(i < self.len);
        // SAFETY: in bounds; only the probe writes, and the parent reads after it has exited.
        unsafe { self.words.add(i).write_volatile(value) }
    }
    fn get(&self, i: usize) -> usize {
        assert!(i < self.len);
        // SAFETY: in bounds, see `set`.
        unsafe { self.words.add(i).read_volatile() }
    }
}

impl Drop for SharedWords {
    fn drop(&mut self) {
        // SAFETY: the mapping `new` made.
        unsafe { libc::munmap(self.words.cast(), self.len * size_of::<usize>()) };
    }
}

fn wait_exited(pid: libc::pid_t) -> Result<(), String> {
    let until = Instant::now() + PROBE_LIMIT;
    loop {
        let mut status = 0;
        // SAFETY: waitpid on our own child.
        let got = unsafe { libc::waitpid(pid, &mut status, libc::WNOHANG) };
        if got == pid {
            return match libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0 {
                true => Ok(()),
                false => Err(format!("the probe failed (status {status:#x})")),
            };
        }
        if got < 0 {
            return Err(format!("waitpid: {}", std::io::Error::last_os_error()));
        }
        if Instant::now() > until {
            // SAFETY: our own child, not yet reaped.
            unsafe {
                libc::kill(pid, libc::SIGKILL);
                libc::waitpid(pid, std::ptr::null_mut(), 0);
            }
            return Err(format!("the probe's job took over {PROBE_LIMIT:?}"));
        }
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// In the probe: the pages of `regions` whose pagemap entry has all the `bits`: present and
/// mapped once (held as a copy: written since the fork), or only present (for a file mapping
/// without written pages, which the fork did not copy: mapped since).
fn present_pages(regions: &[(usize, usize)], bits: u64) -> Result<Vec<usize>, String> {
    use std::os::unix::fs::FileExt;
    let pagemap = std::fs::File::open("/proc/self/pagemap").map_err(|e| format!("pagemap: {e}"))?;
    let mut pages = Vec::new();
    let mut entries = Vec::new();
    for &(start, end) in regions {
        entries.resize((end - start) / PAGE * 8, 0u8);
        pagemap
            .read_exact_at(&mut entries, (start / PAGE * 8) as u64)
            .map_err(|e| format!("pagemap: {e}"))?;
        for (i, entry) in entries.chunks_exact(8).enumerate() {
            let entry = u64::from_le_bytes(entry.try_into().expect("8 bytes"));
            if entry & bits == bits {
                pages.push(start + i * PAGE);
            }
        }
    }
    pages.truncate(MAX_PAGES);
    Ok(pages)
}

/// The learned pages still inside a region of their kind (of this process's maps, read just
/// before the fork that will touch them): what the zygote freed since learning is left out.
pub fn within(pages: &HotPages, maps: &str) -> HotPages {
    let keep = |pages: &[usize], regions: &[(usize, usize)]| {
        pages
            .iter()
            .copied()
            .filter(|&page| {
                let i = regions.partition_point(|&(_, end)| end <= page);
                regions.get(i).is_some_and(|&(start, _)| start <= page)
            })
            .collect()
    };
    // Parsed once: this runs before every fork.
    let maps = parse_maps(maps);
    HotPages {
        written: keep(&pages.written, &regions(&maps, writable)),
        read: keep(&pages.read, &regions(&maps, read_only_file)),
    }
}

/// Consecutive pages as runs: (first page, length in bytes). Allocates nothing: a child walks
/// them before anything of it may allocate or free.
fn runs(pages: &[usize]) -> impl Iterator<Item = (usize, usize)> + '_ {
    let mut rest = pages;
    std::iter::from_fn(move || {
        let (&start, _) = rest.split_first()?;
        let len = 1 + rest
            .windows(2)
            .take_while(|pair| pair[0] + PAGE == pair[1])
            .count();
        rest = &rest[len..];
        Some((start, len * PAGE))
    })
}

/// Has the kernel copy the written pages and map the read ones: the runs of a kind in one call
/// where the kernel takes a vector of them for this process (`process_madvise` with any advice,
/// on recent kernels: this machine's 6.18 does), a run per call otherwise. A child has ~330 runs
/// to copy; one call instead of 330 took 1.15–1.38 ms against 1.28–1.59 (a test program copying
/// 560 pages in 327 runs after a fork, three rounds alternating).
///
/// # Safety
/// See [`touch`]: where the kernel cannot populate (before Linux 5.14), the written pages are
/// touched by hand.
pub unsafe fn make_own(pages: &HotPages) {
    let populate = |(start, len): (usize, usize), advice| {
        // SAFETY: only faults pages in; an address that is not mapped as expected is an error
        // the call returns, never a signal.
        unsafe { libc::madvise(start as *mut libc::c_void, len, advice) == 0 }
    };
    // SAFETY: pidfd_open of this process; a descriptor closed below (the child closes every
    // descriptor but its sockets next, in any case).
    let own = unsafe { libc::syscall(libc::SYS_pidfd_open, libc::getpid(), 0) } as libc::c_int;
    for (pages, advice) in [
        (&pages.written, libc::MADV_POPULATE_WRITE),
        (&pages.read, libc::MADV_POPULATE_READ),
    ] {
        let done = match own >= 0 {
            true => populate_in_batches(own, pages, advice),
            false => 0,
        };
        for run in runs(pages).skip(done) {
            if !populate(run, advice)
                && advice == libc::MADV_POPULATE_WRITE
                && std::io::Error::last_os_error().raw_os_error() == Some(libc::EINVAL)
            {
                // SAFETY: the caller's promise.
                unsafe { touch(run) };
            }
            // Only a speed-up for read pages: a page not mapped now is a fault in the job, as
            // it would have been.
        }
    }
    if own >= 0 {
        // SAFETY: the descriptor opened above.
        unsafe { libc::close(own) };
    }
}

/// Populates the runs of `pages` a batch per `process_madvise` call on this process (`own`, its
/// pidfd). Returns how many runs were populated: a call that fails (a kernel that takes only
/// some advice through it) or stops short (a run not mapped as expected) leaves the rest to the
/// caller. Allocates nothing: the batch is on the stack.
fn populate_in_batches(own: libc::c_int, pages: &[usize], advice: libc::c_int) -> usize {
    /// The most a vector may hold (UIO_MAXIOV).
    const BATCH: usize = 1024;
    let mut batch = [libc::iovec {
        iov_base: std::ptr::null_mut(),
        iov_len: 0,
    }; BATCH];
    let mut runs = runs(pages).peekable();
    let mut done = 0;
    while runs.peek().is_some() {
        let mut len = 0;
        let mut bytes = 0;
        for (slot, (start, run_len)) in batch.iter_mut().zip(runs.by_ref()) {
            *slot = libc::iovec {
                iov_base: start as *mut libc::c_void,
                iov_len: run_len,
            };
            len += 1;
            bytes += run_len;
        }
        // SAFETY: `len` iovecs of `batch`; populating only faults pages of this process in.
        let advised = unsafe {
            libc::syscall(
                libc::SYS_process_madvise,
                own,
                batch.as_ptr(),
                len,
                advice,
                0,
            )
        };
        if advised != bytes as libc::c_long {
            // Whole runs advised before it stopped count; the one it stopped in is redone.
            let mut left = usize::try_from(advised).unwrap_or(0);
            return done
                + batch[..len]
                    .iter()
                    .take_while(|iov| {
                        let whole = left >= iov.iov_len;
                        left = left.saturating_sub(iov.iov_len);
                        whole
                    })
                    .count();
        }
        done += len;
    }
    done
}

/// Writes the first byte of each page of a run (first page, length in bytes) back as it is, so
/// that the kernel copies the page now. Volatile: an atomic `fetch_or(0)`, which changes nothing,
/// is compiled to a plain load, and a load copies nothing.
///
/// # Safety
/// Every page must be mapped writable in this process (see [`within`], checked against the maps
/// read before the fork, with no mapping changed since) and carry no protection key, and no
/// other thread may exist (a child right after its fork).
unsafe fn touch((start, len): (usize, usize)) {
    for page in (start..start + len).step_by(PAGE) {
        let byte = page as *mut u8;
        // SAFETY: the caller's promise: a writable page, and nobody else writing it.
        unsafe { byte.write_volatile(byte.read_volatile()) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_private_writable_data_regions_count() {
        let maps = "\
1000-3000 rw-p 00000000 00:00 0 \n\
3000-4000 r--p 00000000 00:00 0 \n\
4000-6000 rwxp 00000000 00:00 0 \n\
6000-7000 rw-s 00000000 00:05 12 /dev/zero (deleted)\n\
7000-9000 rw-p 00000000 00:00 0                          [heap]\n";
        assert_eq!(
            regions(&parse_maps(maps), writable),
            vec![(0x1000, 0x3000), (0x7000, 0x9000)]
        );
        let pages = [0x1000, 0x2000, 0x3000, 0x4000, 0x6000, 0x8000, 0x9000];
        let hot = HotPages {
            written: pages.to_vec(),
            read: vec![],
        };
        assert_eq!(within(&hot, maps).written, vec![0x1000, 0x2000, 0x8000]);
    }

    #[test]
    fn only_read_only_file_regions_are_read_ahead() {
        let maps = "\
1000-3000 r-xp 00001000 fe:00 18504                      /usr/bin/mcp-code-mode\n\
3000-4000 r--p 00000000 00:00 0 \n\
4000-5000 r--p 00003000 fe:00 18504                      /usr/bin/mcp-code-mode\n\
5000-6000 rw-p 00004000 fe:00 18504                      /usr/bin/mcp-code-mode\n\
6000-7000 ---p 00000000 00:00 0 \n";
        assert_eq!(
            regions(&parse_maps(maps), read_only_file),
            vec![(0x1000, 0x3000), (0x4000, 0x5000)]
        );
        let hot = HotPages {
            written: vec![0x5000],
            read: vec![0x1000, 0x3000, 0x4000, 0x5000, 0x6000],
        };
        let kept = within(&hot, maps);
        assert_eq!(kept.read, vec![0x1000, 0x4000]);
        assert_eq!(kept.written, vec![0x5000]);
    }

    #[test]
    fn consecutive_pages_make_one_run() {
        let p = PAGE;
        assert_eq!(
            runs(&[p, 2 * p, 3 * p, 5 * p, 7 * p, 8 * p]).collect::<Vec<_>>(),
            vec![(p, 3 * p), (5 * p, p), (7 * p, 2 * p)]
        );
        assert_eq!(runs(&[]).count(), 0);
    }

    /// A 16-page file (a memfd: no file left behind), each page filled with its own number,
    /// mapped private: read-only, or written first and then made read-only (as relocations are),
    /// or as code.
    fn mapped_file(written_then_read_only: bool, code: bool) -> usize {
        // SAFETY: a new memfd, filled, and mapped whole; the mapping lives until the test ends.
        unsafe {
            let fd = libc::memfd_create(c"prefault-test".as_ptr(), 0);
            assert!(fd >= 0);
            for page in 0..16u8 {
                assert_eq!(
                    libc::write(fd, [page; PAGE].as_ptr().cast(), PAGE),
                    PAGE as isize
                );
            }
            let protection = match (written_then_read_only, code) {
                (true, _) => libc::PROT_READ | libc::PROT_WRITE,
                (false, true) => libc::PROT_READ | libc::PROT_EXEC,
                (false, false) => libc::PROT_READ,
            };
            let at = libc::mmap(
                std::ptr::null_mut(),
                16 * PAGE,
                protection,
                libc::MAP_PRIVATE,
                fd,
                0,
            );
            assert_ne!(at, libc::MAP_FAILED);
            libc::close(fd);
            if written_then_read_only {
                *(at as *mut u8).add(3 * PAGE) = 99;
                assert_eq!(libc::mprotect(at, 16 * PAGE, libc::PROT_READ), 0);
            }
            at as usize
        }
    }

    /// In a forked child: whether each page is mapped the moment it starts (its pagemap, read
    /// with plain system calls: the test process has other threads, so the child must not
    /// allocate).
    fn mapped_in_a_child(pages: &[usize]) -> Vec<bool> {
        let mut mapped = Vec::new();
        for &page in pages {
            // SAFETY: the child only reads its own pagemap and exits with what it found.
            let pid = unsafe { libc::fork() };
            if pid == 0 {
                unsafe {
                    let fd = libc::open(c"/proc/self/pagemap".as_ptr(), libc::O_RDONLY);
                    let mut entry = 0u64;
                    let offset = (page / PAGE * 8) as libc::off_t;
                    let read = libc::pread(fd, (&raw mut entry).cast(), 8, offset);
                    libc::_exit(if read == 8 && entry & PRESENT != 0 {
                        0
                    } else {
                        1
                    })
                }
            }
            let mut status = 0;
            // SAFETY: our own child.
            assert_eq!(unsafe { libc::waitpid(pid, &mut status, 0) }, pid);
            mapped.push(libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0);
        }
        mapped
    }

    #[test]
    fn learned_read_pages_come_mapped_with_the_fork_and_no_others() {
        let at = mapped_file(false, false);
        let page = |i: usize| at + i * PAGE;
        // SAFETY: pages of the mapping above.
        let read = |i: usize| unsafe { (page(i) as *const u8).read_volatile() };
        assert_eq!((read(0), read(5), read(10)), (0, 5, 10));
        assert_eq!(
            mapped_in_a_child(&[page(5)]),
            [false],
            "without: a child maps it itself"
        );
        let mut hot = HotPages {
            written: vec![],
            read: vec![page(0), page(5), page(6)],
        };
        assert_eq!(map_read_pages_at_fork(&mut hot), 3);
        assert!(hot.read.is_empty(), "no child maps them itself now");
        let mapped = mapped_in_a_child(&[page(0), page(5), page(6), page(2), page(10)]);
        assert_eq!(mapped, [true, true, true, false, false]);
        assert_eq!((read(0), read(5), read(6), read(10)), (0, 5, 6, 10));
    }

    #[test]
    fn code_the_zygote_has_mapped_stays_mapped() {
        let at = mapped_file(false, true);
        let page = |i: usize| at + i * PAGE;
        // SAFETY: a page of the mapping above.
        assert_eq!(unsafe { (page(12) as *const u8).read_volatile() }, 12);
        let mut hot = HotPages {
            written: vec![],
            read: vec![page(0), page(5)],
        };
        assert_eq!(map_read_pages_at_fork(&mut hot), 2);
        assert_eq!(
            mapped_in_a_child(&[page(0), page(5), page(12)]),
            [true, true, true]
        );
    }

    /// Runs `move_code_in_a_process_of_its_own` in a new process of this test binary: moving
    /// code wants a process with one thread at work, which the test harness's is not.
    #[test]
    fn code_moved_to_huge_pages_reads_the_same_and_comes_with_the_fork() {
        let out = std::process::Command::new(std::env::current_exe().expect("the test binary"))
            .args([
                "engine::zygote::prefault::tests::move_code_in_a_process_of_its_own",
                "--exact",
                "--ignored",
                "--nocapture",
                "--test-threads=1",
            ])
            .env("MCP_CODE_MODE_TEST_MOVE_CODE", "1")
            .output()
            .expect("the test binary starts");
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success() && stdout.contains("1 passed"),
            "{stdout}{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    #[test]
    #[ignore = "run by code_moved_to_huge_pages_reads_the_same_and_comes_with_the_fork"]
    fn move_code_in_a_process_of_its_own() {
        if std::env::var_os("MCP_CODE_MODE_TEST_MOVE_CODE").is_none() {
            return;
        }
        use std::hash::{DefaultHasher, Hash, Hasher};
        let here = move_code_to_huge_pages as fn() -> usize as usize;
        let maps = std::fs::read_to_string("/proc/self/maps").unwrap();
        let code = parse_maps(&maps)
            .into_iter()
            .find(|r| r.executable && r.start <= here && here < r.end)
            .expect("this test's code is mapped");
        // Reading all of it maps every page, so that every 2 MiB is worth moving.
        let hash = || {
            let mut hasher = DefaultHasher::new();
            // SAFETY: the code mapping, readable, whose bytes never change.
            unsafe { std::slice::from_raw_parts(code.start as *const u8, code.end - code.start) }
                .hash(&mut hasher);
            hasher.finish()
        };
        let before = hash();
        let moved = move_code_to_huge_pages();
        assert_eq!(hash(), before, "the code reads the same");
        let huge_pages_to_be_had =
            !std::fs::read_to_string("/sys/kernel/mm/transparent_hugepage/enabled")
                .unwrap_or_default()
                .contains("[never]");
        let whole_chunks = (code.end / HUGE_PAGE).saturating_sub(code.start.div_ceil(HUGE_PAGE));
        if !huge_pages_to_be_had {
            assert_eq!(moved, 0);
            return;
        }
        assert_eq!(moved, whole_chunks * HUGE_PAGE, "every 2 MiB moved");
        // Where the file was, anonymous memory in huge pages, as much as moved.
        let in_huge_pages: u64 = smaps_with("AnonHugePages:")
            .unwrap()
            .into_iter()
            .filter(|(r, _)| {
                r.executable && r.anonymous && code.start <= r.start && r.end <= code.end
            })
            .map(|(_, kb)| kb << 10)
            .sum();
        assert_eq!(in_huge_pages, moved as u64);
        // A fork brings all of it mapped; and the code in it runs (this test goes on).
        let chunk = code.start.next_multiple_of(HUGE_PAGE);
        let pages: Vec<usize> = (0..moved)
            .step_by(HUGE_PAGE / 4)
            .map(|o| chunk + o)
            .collect();
        assert!(mapped_in_a_child(&pages).iter().all(|&mapped| mapped));
    }

    #[test]
    fn anonymous_memory_resident_enough_comes_in_huge_pages_and_reads_the_same() {
        let pages_per_span = HUGE_PAGE / PAGE;
        // `spans` 2 MiB-aligned spans of a fresh anonymous mapping (unmapped when the test ends).
        let aligned_mapping = |spans: usize, protection: libc::c_int| {
            // SAFETY: a fresh anonymous mapping of our own, trimmed to what is aligned.
            unsafe {
                let area = libc::mmap(
                    std::ptr::null_mut(),
                    (spans + 1) * HUGE_PAGE,
                    protection,
                    libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                    -1,
                    0,
                );
                assert_ne!(area, libc::MAP_FAILED);
                let start = (area as usize).next_multiple_of(HUGE_PAGE);
                if start > area as usize {
                    libc::munmap(area, start - area as usize);
                }
                let end = start + spans * HUGE_PAGE;
                libc::munmap(end as *mut libc::c_void, area as usize + HUGE_PAGE - start);
                start
            }
        };
        // Data: a span all resident, one three quarters (left: it has holes); code (writable
        // and executable, as V8's wasm code space): half resident, and a sixteenth (left: not
        // worth a huge page). Which pages are written, and with what.
        let data = aligned_mapping(2, libc::PROT_READ | libc::PROT_WRITE);
        let code = aligned_mapping(2, libc::PROT_READ | libc::PROT_WRITE | libc::PROT_EXEC);
        type Written = fn(usize) -> bool;
        let spans: [(usize, Written); 4] = [
            (data, |_| true),
            (data + HUGE_PAGE, |page| page % 4 != 0),
            (code, |page| page % 2 == 0),
            (code + HUGE_PAGE, |page| page % 16 == 0),
        ];
        let byte = |page: usize| (page % 251) as u8 + 1;
        let at = |span: usize, page: usize| (span + page * PAGE + 7) as *mut u8;
        for (span, written) in spans {
            for page in (0..pages_per_span).filter(|&page| written(page)) {
                // SAFETY: a byte of the mappings above.
                unsafe { at(span, page).write_volatile(byte(page)) };
            }
        }
        let collapsed = collapse_spans(&[(data, data + 2 * HUGE_PAGE)], pages_per_span)
            + collapse_spans(&[(code, code + 2 * HUGE_PAGE)], WORTH_A_HUGE_PAGE);
        for (span, written) in spans {
            let reads_as_written = (0..pages_per_span).all(|page| {
                // SAFETY: a byte of the mappings above.
                let read = unsafe { at(span, page).read_volatile() };
                read == if written(page) { byte(page) } else { 0 }
            });
            assert!(reads_as_written, "the span at {span:#x}");
        }
        let huge_within = |start: usize, end: usize| -> u64 {
            smaps_with("AnonHugePages:")
                .unwrap()
                .into_iter()
                .filter(|(r, _)| start <= r.start && r.end <= end)
                .map(|(_, kb)| kb << 10)
                .sum()
        };
        let (data_huge, code_huge) = (
            huge_within(data, data + 2 * HUGE_PAGE),
            huge_within(code, code + 2 * HUGE_PAGE),
        );
        // SAFETY: the mappings above, which nothing else refers to.
        unsafe {
            libc::munmap(data as *mut libc::c_void, 2 * HUGE_PAGE);
            libc::munmap(code as *mut libc::c_void, 2 * HUGE_PAGE);
        }
        let mode = std::fs::read_to_string("/sys/kernel/mm/transparent_hugepage/enabled")
            .unwrap_or_default();
        if mode.contains("[never]") {
            assert_eq!(collapsed, 0);
        } else {
            assert_eq!(
                collapsed,
                2 * HUGE_PAGE,
                "the data all resident and the code half"
            );
        }
        // Where every fault gets a huge page (`always`), the spans left may have had one since
        // their first write.
        if mode.contains("[always]") {
            assert!(data_huge >= HUGE_PAGE as u64 && code_huge >= HUGE_PAGE as u64);
        } else if !mode.contains("[never]") {
            assert_eq!((data_huge, code_huge), (HUGE_PAGE as u64, HUGE_PAGE as u64));
        }
    }

    #[test]
    fn a_read_only_mapping_that_was_written_keeps_what_was_written() {
        let at = mapped_file(true, false);
        let page = |i: usize| at + i * PAGE;
        let mut hot = HotPages {
            written: vec![],
            read: vec![page(1), page(8)],
        };
        assert_eq!(map_read_pages_at_fork(&mut hot), 2);
        // SAFETY: pages of the mapping above.
        let read = |i: usize| unsafe { (page(i) as *const u8).read_volatile() };
        assert_eq!((read(1), read(3), read(8)), (1, 99, 8));
        assert_eq!(mapped_in_a_child(&[page(1), page(8)]), [true, true]);
    }

    #[test]
    fn a_touched_page_keeps_its_bytes() {
        let mut page = vec![7u8; 2 * PAGE];
        let start = page.as_mut_ptr() as usize;
        let aligned = start.next_multiple_of(PAGE);
        // SAFETY: a page of our own writable buffer.
        unsafe { touch((aligned, PAGE)) };
        assert!(page.iter().all(|&b| b == 7));
        // SAFETY: the same page, and one of this binary's code (`make_own` itself).
        unsafe {
            make_own(&HotPages {
                written: vec![aligned],
                read: vec![(make_own as *const () as usize) & !(PAGE - 1)],
            })
        };
        assert!(page.iter().all(|&b| b == 7));
    }

    #[test]
    fn every_run_is_populated_over_several_calls_and_past_a_run_that_fails() {
        // Every other page of a fresh mapping: more runs than one call takes. One page in the
        // middle is unmapped: the call stops there, and the runs after it are still populated.
        let pages = 2 * 1100 + 1;
        // SAFETY: a fresh anonymous mapping of our own, unmapped below.
        let area = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                pages * PAGE,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        assert_ne!(area, libc::MAP_FAILED);
        let start = area as usize;
        let written: Vec<usize> = (0..pages).step_by(2).map(|i| start + i * PAGE).collect();
        let hole = written[700];
        // SAFETY: a page of the mapping above.
        assert_eq!(unsafe { libc::munmap(hole as *mut libc::c_void, PAGE) }, 0);
        // SAFETY: pages of the mapping above (the hole: an error the kernel returns).
        unsafe {
            make_own(&HotPages {
                written: written.clone(),
                read: Vec::new(),
            })
        };
        let resident = |page: usize| {
            let mut vec = [0u8; 1];
            // SAFETY: residency of one page; the hole answers ENOMEM.
            let known =
                unsafe { libc::mincore(page as *mut libc::c_void, PAGE, vec.as_mut_ptr()) } == 0;
            known && vec[0] & 1 == 1
        };
        for &page in written.iter().filter(|&&p| p != hole) {
            assert!(
                resident(page),
                "page {} of the run list",
                (page - start) / PAGE
            );
            assert!(!resident(page + PAGE) || page + PAGE == start + pages * PAGE);
        }
        // SAFETY: the mapping above (the hole is already gone).
        unsafe { libc::munmap(area, pages * PAGE) };
    }
}
