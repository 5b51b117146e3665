//! The small libc calls the agent needs besides libibverbs and librdmacm:
//! `poll` on a completion or event channel's fd, `getrusage(RUSAGE_THREAD)`,
//! and `malloc_trim`.

use std::os::fd::RawFd;
use std::time::Duration;

/// The calling thread's user and system CPU seconds (RUSAGE_THREAD).
pub fn thread_cpu_seconds() -> (f64, f64) {
    // SAFETY: an all-zero rusage is a valid value of this plain C struct.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: `usage` is a valid, writable rusage; RUSAGE_THREAD only reads the calling thread.
    let rc = unsafe { libc::getrusage(libc::RUSAGE_THREAD, &mut usage) };
    if rc != 0 {
        return (0.0, 0.0);
    }
    let secs = |tv: libc::timeval| tv.tv_sec as f64 + tv.tv_usec as f64 / 1e6;
    (secs(usage.ru_utime), secs(usage.ru_stime))
}

/// Waits until `fd` is readable or `timeout` passes; `Ok(false)` on timeout.
pub(crate) fn wait_readable(fd: RawFd, timeout: Duration) -> std::io::Result<bool> {
    let mut pfd = libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    };
    let ms = timeout.as_millis().min(i32::MAX as u128) as libc::c_int;
    loop {
        // SAFETY: `pfd` is one valid pollfd and we pass a count of 1.
        let rc = unsafe { libc::poll(&mut pfd, 1, ms) };
        if rc < 0 {
            let err = std::io::Error::last_os_error();
            if err.kind() == std::io::ErrorKind::Interrupted {
                continue;
            }
            return Err(err);
        }
        return Ok(rc > 0);
    }
}

/// Hands the allocator's free memory back to the kernel (glibc's
/// `malloc_trim`, which walks every arena). A session's buffers are freed
/// when its thread ends, but glibc keeps freed chunks of a thread's arena for
/// reuse, so an idle agent could hold a past run's hundreds of MB.
pub fn release_free_memory() {
    // SAFETY: malloc_trim takes no pointers and only walks the allocator's
    // own free lists; it is safe to call from any thread at any time.
    unsafe {
        libc::malloc_trim(0);
    }
}

/// Allocations at least this large get pages of their own from the kernel
/// (mmap), returned when freed.
pub const OWN_PAGES_FROM: usize = 256 * 1024;

/// Makes every allocation of [`OWN_PAGES_FROM`] bytes or more come from
/// mmap and go back to the kernel when freed. glibc's default threshold
/// moves: freeing a 16 MiB mmapped buffer raises it (and the trim threshold
/// with it) to 16 MiB, so the next session's buffer of that size lands in a
/// thread's arena, whose top `malloc_trim` never shrinks; measured, an idle
/// agent then stayed at 23.7 MB after one `labctl bulk --total 16MiB`
/// (7.3 MB before). Fixing the threshold turns that moving off. Call it at
/// start, before any thread.
pub fn keep_large_allocations_unpooled() {
    // SAFETY: mallopt takes two integers and only sets allocator parameters;
    // called before the agent starts any thread, so no allocation races it.
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, OWN_PAGES_FROM as libc::c_int);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn poll_times_out_on_a_quiet_pipe() {
        let mut fds = [0; 2];
        // SAFETY: test-only; `fds` has room for the two descriptors pipe writes.
        assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0);
        assert!(!wait_readable(fds[0], Duration::from_millis(10)).unwrap());
        // SAFETY: closing the two descriptors this test opened.
        unsafe {
            libc::close(fds[0]);
            libc::close(fds[1]);
        }
    }
}
