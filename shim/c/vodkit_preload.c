/*
 * vodkit preload library: an LD_PRELOAD shim that gives unmodified programs serialized,
 * enlarged reads of files that miss the page cache.
 *
 * For every read-like call on a regular file that was opened through this library, the
 * requested byte range is checked for page-cache residency (cachestat, mincore fallback).
 * When part of it is missing, a request carrying a duplicate of the file descriptor is sent
 * to `vodkit prefetchd` over a Unix seqpacket socket and the calling thread waits (bounded)
 * for the reply. Afterwards the original libc call is always made and its exact result and
 * errno are returned, so the program cannot observe the library. Every failure inside the
 * library (no daemon, slow daemon, odd descriptors) falls back to the plain call and prints
 * one warning per process.
 *
 * Environment:
 *   VODKIT_PREFETCHD_SOCKET  path of the daemon's socket; unset = library stays passive
 *   VODKIT_PRELOAD_TIMEOUT_MS  longest wait for a reply (default 10000)
 *   VODKIT_PRELOAD_QUIET     set to 1 to suppress the one warning per process
 *
 * Rules kept in the hot path: no malloc, no stdio, no locks that a signal handler could
 * re-enter (a thread-local guard makes nested calls pass straight through), no reads of
 * application pointers that the kernel would have rejected with EFAULT (they are copied
 * with process_vm_readv), never any I/O on descriptors that are not regular files.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/sendfile.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "protocol.h"

#define VK_EXPORT __attribute__((visibility("default")))
#define VK_TLS __thread __attribute__((tls_model("initial-exec")))

#ifndef SYS_cachestat
#define SYS_cachestat 451
#endif
#ifndef MADV_POPULATE_READ
#define MADV_POPULATE_READ 22
#endif

/* Descriptors above this number are never tracked (they pass straight through). */
#define FD_TABLE 65536
/* Connections to the daemon shared by the threads of one process. */
#define POOL 128
/* Our sockets are moved to descriptor numbers at or above this one. */
#define SOCKET_FD_FLOOR 900
/* Longest range whose residency is checked and that may be prefetched in-process. */
#define MAX_CHECK (64ULL << 20)
/* Pause between attempts to reach an absent daemon. */
#define RECONNECT_NS 1000000000LL
/* Contiguous resident reads are told to the daemon in batches of at least this many bytes. */
#define NOTE_BATCH (256ULL << 10)

/* ---- original functions ------------------------------------------------------------ */

typedef int (*open_fn)(const char *, int, ...);
typedef int (*openat_fn)(int, const char *, int, ...);
typedef int (*open2_fn)(const char *, int);
typedef int (*openat2_fn)(int, const char *, int);
typedef int (*close_fn)(int);
typedef ssize_t (*read_fn)(int, void *, size_t);
typedef ssize_t (*read_chk_fn)(int, void *, size_t, size_t);
typedef ssize_t (*pread_fn)(int, void *, size_t, off_t);
typedef ssize_t (*pread_chk_fn)(int, void *, size_t, off_t, size_t);
typedef ssize_t (*readv_fn)(int, const struct iovec *, int);
typedef ssize_t (*preadv_fn)(int, const struct iovec *, int, off_t);
typedef ssize_t (*preadv2_fn)(int, const struct iovec *, int, off_t, int);
typedef ssize_t (*sendfile_fn)(int, int, off_t *, size_t);
typedef ssize_t (*cfr_fn)(int, off_t *, int, off_t *, size_t, unsigned int);
typedef ssize_t (*splice_fn)(int, off_t *, int, off_t *, size_t, unsigned int);
typedef pid_t (*fork_fn)(void);
typedef int (*dup_fn)(int);
typedef int (*dup2_fn)(int, int);
typedef int (*dup3_fn)(int, int, int);

static struct {
    open_fn open, open64;
    openat_fn openat, openat64;
    open2_fn open_2, open64_2;
    openat2_fn openat_2, openat64_2;
    close_fn close;
    read_fn read;
    read_chk_fn read_chk;
    pread_fn pread, pread64;
    pread_chk_fn pread_chk, pread64_chk;
    readv_fn readv;
    preadv_fn preadv, preadv64;
    preadv2_fn preadv2, preadv64v2;
    sendfile_fn sendfile, sendfile64;
    cfr_fn copy_file_range;
    splice_fn splice;
    fork_fn fork;
    dup_fn dup;
    dup2_fn dup2;
    dup3_fn dup3;
} real;

static void resolve_all(void) {
#define RESOLVE(field, name) real.field = (__typeof__(real.field))dlsym(RTLD_NEXT, name)
    RESOLVE(open, "open");
    RESOLVE(open64, "open64");
    RESOLVE(openat, "openat");
    RESOLVE(openat64, "openat64");
    RESOLVE(open_2, "__open_2");
    RESOLVE(open64_2, "__open64_2");
    RESOLVE(openat_2, "__openat_2");
    RESOLVE(openat64_2, "__openat64_2");
    RESOLVE(close, "close");
    RESOLVE(read, "read");
    RESOLVE(read_chk, "__read_chk");
    RESOLVE(pread, "pread");
    RESOLVE(pread64, "pread64");
    RESOLVE(pread_chk, "__pread_chk");
    RESOLVE(pread64_chk, "__pread64_chk");
    RESOLVE(readv, "readv");
    RESOLVE(preadv, "preadv");
    RESOLVE(preadv64, "preadv64");
    RESOLVE(preadv2, "preadv2");
    RESOLVE(preadv64v2, "preadv64v2");
    RESOLVE(sendfile, "sendfile");
    RESOLVE(sendfile64, "sendfile64");
    RESOLVE(copy_file_range, "copy_file_range");
    RESOLVE(splice, "splice");
    RESOLVE(fork, "fork");
    RESOLVE(dup, "dup");
    RESOLVE(dup2, "dup2");
    RESOLVE(dup3, "dup3");
#undef RESOLVE
}

/* ---- process state ------------------------------------------------------------------ */

struct slot {
    int busy;      /* taken by one thread; atomic */
    int fd;        /* socket, -1 when not connected */
    dev_t dev;     /* identity of the socket, to notice if the program replaced it */
    ino_t ino;
};

static struct slot pool[POOL];
static char socket_path[sizeof(((struct sockaddr_un *)0)->sun_path)];
static int active;            /* a socket path is configured */
static int timeout_ms = 10000;
static int quiet;
static int warned;            /* atomic */
static long long next_connect_ns; /* atomic; no connect attempts before this time */
static uint64_t seq;          /* atomic request counter */
static long page_size = 4096;
static int cachestat_missing; /* atomic; kernel has no cachestat */

/* Identity of each tracked descriptor: the (dev, ino) it had when opened, 0 = untracked. */
static uint64_t fd_dev[FD_TABLE];
static uint64_t fd_ino[FD_TABLE];

/* Resident reads already told to the daemon, per descriptor: the run [lo, hi) of bytes read
 * from memory and how far of it was sent (`sent`). Accounting only: a race between threads
 * on one descriptor can cost or add a note, never a wrong result. */
static uint64_t fd_note_lo[FD_TABLE];
static uint64_t fd_note_hi[FD_TABLE];
static uint64_t fd_note_sent[FD_TABLE];

static VK_TLS int in_shim;

static long long now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static void warn_once(const char *what) {
    if (quiet || __atomic_exchange_n(&warned, 1, __ATOMIC_RELAXED))
        return;
    char msg[256];
    const char *head = "vodkit-preload: ";
    const char *tail = "; continuing without prefetch\n";
    size_t n = 0;
    for (const char *p = head; *p && n < sizeof msg - 1; p++) msg[n++] = *p;
    for (const char *p = what; *p && n < sizeof msg - 1; p++) msg[n++] = *p;
    for (const char *p = tail; *p && n < sizeof msg - 1; p++) msg[n++] = *p;
    ssize_t ignored = syscall(SYS_write, 2, msg, n);
    (void)ignored;
}

static void forget_connections(void) {
    for (int i = 0; i < POOL; i++) {
        if (pool[i].fd >= 0)
            syscall(SYS_close, pool[i].fd);
        pool[i].fd = -1;
        __atomic_store_n(&pool[i].busy, 0, __ATOMIC_RELEASE);
    }
}

/* In a new child process: the parent's connections must not be shared. */
static void after_fork_child(void) {
    forget_connections();
    __atomic_store_n(&warned, 0, __ATOMIC_RELAXED);
    __atomic_store_n(&next_connect_ns, 0, __ATOMIC_RELAXED);
    in_shim = 0;
}

__attribute__((constructor(101))) static void vk_init(void) {
    int saved = errno;
    resolve_all();
    for (int i = 0; i < POOL; i++) pool[i].fd = -1;
    long ps = sysconf(_SC_PAGESIZE);
    if (ps > 0) page_size = ps;
    const char *path = getenv("VODKIT_PREFETCHD_SOCKET");
    if (path && *path && strlen(path) < sizeof socket_path) {
        memcpy(socket_path, path, strlen(path) + 1);
        active = 1;
    }
    const char *t = getenv("VODKIT_PRELOAD_TIMEOUT_MS");
    if (t && *t) {
        long v = strtol(t, NULL, 10);
        if (v >= 0 && v <= 3600000) timeout_ms = (int)v;
    }
    const char *q = getenv("VODKIT_PRELOAD_QUIET");
    quiet = q && *q == '1';
    pthread_atfork(NULL, NULL, after_fork_child);
    errno = saved;
}

__attribute__((destructor)) static void vk_fini(void) {
    int saved = errno;
    for (int i = 0; i < POOL; i++) {
        if (pool[i].fd >= 0 && __atomic_exchange_n(&pool[i].busy, 1, __ATOMIC_ACQUIRE) == 0) {
            syscall(SYS_close, pool[i].fd);
            pool[i].fd = -1;
        }
    }
    errno = saved;
}

/* ---- descriptor tracking ------------------------------------------------------------- */

/* The per-descriptor note state: run [lo, hi), of which up to `sent` was told. */
static void set_notes(int fd, uint64_t lo, uint64_t hi, uint64_t sent) {
    __atomic_store_n(&fd_note_lo[fd], lo, __ATOMIC_RELAXED);
    __atomic_store_n(&fd_note_hi[fd], hi, __ATOMIC_RELAXED);
    __atomic_store_n(&fd_note_sent[fd], sent, __ATOMIC_RELAXED);
}

static void forget_notes(int fd) {
    set_notes(fd, 0, 0, 0);
}

static void track_open(int fd, int flags) {
    if (fd < 0 || fd >= FD_TABLE)
        return;
    __atomic_store_n(&fd_ino[fd], 0, __ATOMIC_RELAXED);
    forget_notes(fd);
    if (!active || (flags & O_ACCMODE) == O_WRONLY || (flags & (O_PATH | O_DIRECT)))
        return;
    struct stat st;
    if (syscall(SYS_fstat, fd, &st) != 0 || !S_ISREG(st.st_mode))
        return;
    __atomic_store_n(&fd_dev[fd], (uint64_t)st.st_dev, __ATOMIC_RELAXED);
    __atomic_store_n(&fd_ino[fd], (uint64_t)st.st_ino | (1ULL << 63), __ATOMIC_RELAXED);
}

static void untrack(int fd) {
    if (fd >= 0 && fd < FD_TABLE)
        __atomic_store_n(&fd_ino[fd], 0, __ATOMIC_RELAXED);
}

/* After a successful dup: `to` refers to what `from` refers to. */
static void track_dup(int from, int to) {
    if (to < 0 || to >= FD_TABLE || from == to)
        return;
    uint64_t ino = 0, dev = 0;
    if (from >= 0 && from < FD_TABLE) {
        ino = __atomic_load_n(&fd_ino[from], __ATOMIC_RELAXED);
        dev = __atomic_load_n(&fd_dev[from], __ATOMIC_RELAXED);
    }
    __atomic_store_n(&fd_dev[to], dev, __ATOMIC_RELAXED);
    __atomic_store_n(&fd_ino[to], ino, __ATOMIC_RELAXED);
    forget_notes(to);
}

/* The file size when `fd` is a tracked regular file that still is what was opened. */
static int tracked_size(int fd, off_t *size) {
    if (fd < 0 || fd >= FD_TABLE)
        return 0;
    uint64_t ino = __atomic_load_n(&fd_ino[fd], __ATOMIC_RELAXED);
    if (ino == 0)
        return 0;
    struct stat st;
    if (syscall(SYS_fstat, fd, &st) != 0 || !S_ISREG(st.st_mode))
        return 0;
    if (((uint64_t)st.st_ino | (1ULL << 63)) != ino ||
        (uint64_t)st.st_dev != __atomic_load_n(&fd_dev[fd], __ATOMIC_RELAXED))
        return 0;
    *size = st.st_size;
    return 1;
}

/* ---- residency ----------------------------------------------------------------------- */

struct vk_cachestat_range { uint64_t off, len; };
struct vk_cachestat { uint64_t nr_cache, nr_dirty, nr_writeback, nr_evicted, nr_recently_evicted; };

static int resident_mincore(int fd, uint64_t first_page, uint64_t pages) {
    size_t len = (size_t)(pages * (uint64_t)page_size);
    void *map = mmap(NULL, len, PROT_READ, MAP_SHARED, fd, (off_t)(first_page * (uint64_t)page_size));
    if (map == MAP_FAILED)
        return 1; /* cannot tell: treat as resident, i.e. do nothing */
    unsigned char vec[256];
    int resident = 1;
    for (uint64_t done = 0; done < pages && resident; done += sizeof vec) {
        uint64_t n = pages - done < sizeof vec ? pages - done : sizeof vec;
        if (mincore((char *)map + done * (uint64_t)page_size, (size_t)(n * (uint64_t)page_size), vec) != 0)
            break;
        for (uint64_t i = 0; i < n; i++)
            if (!(vec[i] & 1)) { resident = 0; break; }
    }
    munmap(map, len);
    return resident;
}

/* Whether bytes [off, off+len) of the file (clamped to `size`) are all in the page cache. */
static int range_resident(int fd, uint64_t off, uint64_t len, uint64_t size) {
    if (off >= size || len == 0)
        return 1;
    if (len > size - off) len = size - off;
    if (len > MAX_CHECK) len = MAX_CHECK;
    uint64_t first = off / (uint64_t)page_size;
    uint64_t last = (off + len - 1) / (uint64_t)page_size;
    uint64_t pages = last - first + 1;
    if (!__atomic_load_n(&cachestat_missing, __ATOMIC_RELAXED)) {
        struct vk_cachestat_range r = { first * (uint64_t)page_size, pages * (uint64_t)page_size };
        struct vk_cachestat cs;
        if (syscall(SYS_cachestat, fd, &r, &cs, 0) == 0)
            return cs.nr_cache >= pages;
        if (errno == EPERM || errno == EACCES)
            /* Recent kernels only report residency to those who may write the file (and
             * mincore is restricted the same way). Processes that dropped privileges
             * (server workers) then let the daemon, which can check, decide. */
            return 0;
        if (errno != ENOSYS)
            return 1;
        __atomic_store_n(&cachestat_missing, 1, __ATOMIC_RELAXED);
    }
    return resident_mincore(fd, first, pages);
}

/* Read [off, off+len) into the page cache without a user buffer (prefetch-only mode). */
static void populate(int fd, uint64_t off, uint64_t len) {
    if (len == 0) return;
    if (len > MAX_CHECK) len = MAX_CHECK;
    uint64_t start = off - off % (uint64_t)page_size;
    size_t maplen = (size_t)(len + (off - start));
    void *map = mmap(NULL, maplen, PROT_READ, MAP_SHARED, fd, (off_t)start);
    if (map == MAP_FAILED) return;
    madvise(map, maplen, MADV_POPULATE_READ);
    munmap(map, maplen);
}

/* ---- daemon connection -------------------------------------------------------------- */

static int connect_daemon(struct slot *s) {
    long long now = now_ns();
    if (now < __atomic_load_n(&next_connect_ns, __ATOMIC_RELAXED))
        return -1;
    int fd = (int)syscall(SYS_socket, AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0) {
        warn_once("cannot create a socket");
        return -1;
    }
    struct sockaddr_un addr;
    memset(&addr, 0, sizeof addr);
    addr.sun_family = AF_UNIX;
    memcpy(addr.sun_path, socket_path, sizeof socket_path);
    if (syscall(SYS_connect, fd, &addr, sizeof addr) != 0) {
        syscall(SYS_close, fd);
        __atomic_store_n(&next_connect_ns, now + RECONNECT_NS, __ATOMIC_RELAXED);
        warn_once("prefetch daemon not reachable");
        return -1;
    }
    /* Move out of the range of descriptor numbers the program is likely to use. */
    int high = (int)syscall(SYS_fcntl, fd, F_DUPFD_CLOEXEC, SOCKET_FD_FLOOR);
    if (high >= 0) {
        syscall(SYS_close, fd);
        fd = high;
    }
    struct stat st;
    if (syscall(SYS_fstat, fd, &st) != 0) {
        syscall(SYS_close, fd);
        return -1;
    }
    s->fd = fd;
    s->dev = st.st_dev;
    s->ino = st.st_ino;
    return fd;
}

/* The slot's socket if it is still ours (the program may have closed or replaced it). */
static int slot_socket(struct slot *s) {
    if (s->fd < 0)
        return connect_daemon(s);
    struct stat st;
    if (syscall(SYS_fstat, s->fd, &st) != 0 || !S_ISSOCK(st.st_mode) || st.st_dev != s->dev ||
        st.st_ino != s->ino) {
        s->fd = -1; /* not ours any more: never close it */
        return connect_daemon(s);
    }
    return s->fd;
}

static struct slot *take_slot(void) {
    unsigned start = (unsigned)syscall(SYS_gettid) % POOL;
    for (unsigned i = 0; i < POOL; i++) {
        struct slot *s = &pool[(start + i) % POOL];
        if (__atomic_exchange_n(&s->busy, 1, __ATOMIC_ACQUIRE) == 0)
            return s;
    }
    return NULL;
}

static void drop_connection(struct slot *s) {
    if (s->fd >= 0) syscall(SYS_close, s->fd);
    s->fd = -1;
}

static struct vk_request request_for(uint16_t op, uint64_t off, uint64_t len, uint64_t size) {
    struct vk_request req;
    memset(&req, 0, sizeof req);
    req.magic = VK_MAGIC;
    req.version = VK_VERSION;
    req.op = op;
    req.pid = (uint32_t)syscall(SYS_getpid);
    req.offset = off;
    req.len = len;
    req.file_size = size;
    req.seq = __atomic_add_fetch(&seq, 1, __ATOMIC_RELAXED);
    return req;
}

/* Send one request with `fd` attached, never blocking; returns what sendmsg returned. */
static long send_with_fd(int sock, const struct vk_request *req, int fd) {
    struct iovec iov = { (void *)req, sizeof *req };
    union { char buf[CMSG_SPACE(sizeof(int))]; struct cmsghdr align; } ctrl;
    memset(&ctrl, 0, sizeof ctrl);
    struct msghdr msg;
    memset(&msg, 0, sizeof msg);
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    msg.msg_control = ctrl.buf;
    msg.msg_controllen = sizeof ctrl.buf;
    struct cmsghdr *c = CMSG_FIRSTHDR(&msg);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int));
    memcpy(CMSG_DATA(c), &fd, sizeof(int));
    return syscall(SYS_sendmsg, sock, &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
}

/* Send one miss to the daemon and wait (bounded) for its answer. */
static void report_miss(int fd, uint16_t op, uint64_t off, uint64_t len, uint64_t size) {
    struct slot *s = take_slot();
    if (!s) {
        warn_once("all daemon connections busy");
        return;
    }
    int sock = slot_socket(s);
    if (sock < 0) goto out;

    struct vk_request req = request_for(op, off, len, size);
    if (send_with_fd(sock, &req, fd) != (long)sizeof req) {
        warn_once(errno == EAGAIN ? "prefetch daemon is not keeping up" : "prefetch daemon went away");
        drop_connection(s);
        goto out;
    }

    long long deadline = now_ns() + (long long)timeout_ms * 1000000LL;
    struct vk_reply rep;
    for (;;) {
        long long left = deadline - now_ns();
        if (left <= 0) {
            warn_once("prefetch daemon too slow");
            drop_connection(s); /* a late reply must not be taken for the next one */
            goto out;
        }
        struct pollfd p = { sock, POLLIN, 0 };
        struct timespec ts = { left / 1000000000LL, left % 1000000000LL };
        long r = syscall(SYS_ppoll, &p, 1, &ts, NULL, 0);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) continue;
        long n = syscall(SYS_recvfrom, sock, &rep, sizeof rep, MSG_DONTWAIT, NULL, NULL);
        if (n < 0 && (errno == EAGAIN || errno == EINTR)) continue;
        if (n != (long)sizeof rep || rep.magic != VK_MAGIC) {
            warn_once("prefetch daemon went away");
            drop_connection(s);
            goto out;
        }
        if (rep.seq == req.seq) break;
        /* a reply to an older, abandoned request: keep waiting for ours */
    }
    if (rep.status == VK_STATUS_PREFETCH_HERE)
        populate(fd, rep.offset, rep.len);
out:
    __atomic_store_n(&s->busy, 0, __ATOMIC_RELEASE);
}

/* Tell the daemon, without waiting, that [off, off+len) of `fd` was read from memory. A
 * note that cannot be sent at once (no free connection, full socket) is dropped. */
static void send_note(int fd, uint16_t op, uint64_t off, uint64_t len, uint64_t size) {
    struct slot *s = take_slot();
    if (!s) return;
    int sock = slot_socket(s);
    if (sock >= 0) {
        struct vk_request req = request_for(op, off, len, size);
        req.flags = VK_FLAG_RESIDENT;
        if (send_with_fd(sock, &req, fd) != (long)sizeof req && errno != EAGAIN)
            drop_connection(s);
    }
    __atomic_store_n(&s->busy, 0, __ATOMIC_RELEASE);
}

/* Record a resident read of [off, end) on `fd`; sends a note for what the daemon has not
 * been told yet: a new run at once, a continuation of the run once NOTE_BATCH bytes piled up
 * (a server's repeated partial `sendfile`s of one response are told once). */
static void note_resident(int fd, uint16_t op, uint64_t off, uint64_t end, uint64_t size) {
    uint64_t lo = __atomic_load_n(&fd_note_lo[fd], __ATOMIC_RELAXED);
    uint64_t hi = __atomic_load_n(&fd_note_hi[fd], __ATOMIC_RELAXED);
    uint64_t sent = __atomic_load_n(&fd_note_sent[fd], __ATOMIC_RELAXED);
    if (hi > lo && off >= lo && end <= hi)
        return;
    if (hi > lo && off >= lo && off <= hi) {
        hi = end;
    } else {
        lo = off;
        hi = end;
        sent = off;
    }
    int flush = sent == lo || hi - sent >= NOTE_BATCH;
    if (flush) {
        send_note(fd, op, sent, hi - sent, size);
        sent = hi;
    }
    set_notes(fd, lo, hi, sent);
}

/* The common pre-call hook: prefetch [off, off+len) of `fd` if part of it is missing;
 * otherwise note the resident read for the daemon's accounting. */
static void before_read(int fd, uint16_t op, uint64_t off, uint64_t len) {
    off_t size;
    if (!tracked_size(fd, &size) || size <= 0 || off >= (uint64_t)size)
        return;
    if (len > (uint64_t)size - off) len = (uint64_t)size - off;
    if (range_resident(fd, off, len, (uint64_t)size)) {
        note_resident(fd, op, off, off + len, (uint64_t)size);
        return;
    }
    /* The miss's reply means the range is in memory now: later calls within it are told. */
    set_notes(fd, off, off + len, off + len);
    report_miss(fd, op, off, len, (uint64_t)size);
}

/* Enter the library for a read on `fd`; 0 when the call must pass straight through. */
static int enter(int fd) {
    if (!active || in_shim || fd < 0 || fd >= FD_TABLE)
        return 0;
    if (__atomic_load_n(&fd_ino[fd], __ATOMIC_RELAXED) == 0)
        return 0;
    in_shim = 1;
    return 1;
}

static void leave(int saved_errno) {
    in_shim = 0;
    errno = saved_errno;
}

static int current_offset(int fd, uint64_t *off) {
    off_t pos = (off_t)syscall(SYS_lseek, fd, 0, SEEK_CUR);
    if (pos < 0) return 0;
    *off = (uint64_t)pos;
    return 1;
}

/* Copy `len` bytes from the program's memory without faulting on bad pointers. */
static int copy_in(void *dst, const void *src, size_t len) {
    if (!src) return 0;
    struct iovec local = { dst, len };
    struct iovec remote = { (void *)src, len };
    return syscall(SYS_process_vm_readv, syscall(SYS_getpid), &local, 1, &remote, 1, 0) == (long)len;
}

static int iov_total(const struct iovec *iov, int cnt, uint64_t *total) {
    if (cnt <= 0 || cnt > IOV_MAX) return 0;
    struct iovec chunk[64];
    uint64_t sum = 0;
    for (int done = 0; done < cnt; done += 64) {
        int n = cnt - done < 64 ? cnt - done : 64;
        if (!copy_in(chunk, iov + done, (size_t)n * sizeof(struct iovec))) return 0;
        for (int i = 0; i < n; i++) sum += chunk[i].iov_len;
    }
    *total = sum;
    return 1;
}

static void hook_at(int fd, uint16_t op, uint64_t off, uint64_t len) {
    int saved = errno;
    if (!enter(fd)) return;
    if ((int64_t)off >= 0 && len > 0) before_read(fd, op, off, len);
    leave(saved);
}

static void hook_cur(int fd, uint16_t op, uint64_t len) {
    int saved = errno;
    if (!enter(fd)) return;
    uint64_t off;
    if (len > 0 && current_offset(fd, &off)) before_read(fd, op, off, len);
    leave(saved);
}

static void hook_ptr(int fd, uint16_t op, const off_t *offp, uint64_t len) {
    int saved = errno;
    if (!enter(fd)) return;
    uint64_t off;
    off_t given;
    if (offp == NULL) {
        if (len > 0 && current_offset(fd, &off)) before_read(fd, op, off, len);
    } else if (copy_in(&given, offp, sizeof given) && given >= 0 && len > 0) {
        before_read(fd, op, (uint64_t)given, len);
    }
    leave(saved);
}

static void hook_iov(int fd, uint16_t op, const struct iovec *iov, int cnt, int64_t off) {
    int saved = errno;
    if (!enter(fd)) return;
    uint64_t len, pos;
    if (iov_total(iov, cnt, &len) && len > 0) {
        if (off >= 0) before_read(fd, op, (uint64_t)off, len);
        else if (current_offset(fd, &pos)) before_read(fd, op, pos, len);
    }
    leave(saved);
}

/* ---- intercepted functions ------------------------------------------------------------ */

/* The `mode` argument of an open call whose last named argument is `flags`: passed only
 * with O_CREAT or O_TMPFILE. A macro, as only the variadic function may read it. */
#define OPEN_MODE(flags)                                                                   \
    ({                                                                                     \
        va_list ap_;                                                                       \
        va_start(ap_, flags);                                                              \
        mode_t mode_ = ((flags) & O_CREAT) || ((flags) & __O_TMPFILE) == __O_TMPFILE       \
                           ? (mode_t)va_arg(ap_, int)                                      \
                           : 0;                                                            \
        va_end(ap_);                                                                       \
        mode_;                                                                             \
    })

static int after_open(int fd, int flags) {
    int saved = errno;
    if (fd >= 0 && !in_shim) track_open(fd, flags);
    errno = saved;
    return fd;
}

VK_EXPORT int open(const char *path, int flags, ...) {
    mode_t mode = OPEN_MODE(flags);
    int fd = real.open ? real.open(path, flags, mode) : (int)syscall(SYS_openat, AT_FDCWD, path, flags, mode);
    return after_open(fd, flags);
}

VK_EXPORT int open64(const char *path, int flags, ...) {
    mode_t mode = OPEN_MODE(flags);
    int fd = real.open64 ? real.open64(path, flags, mode)
                         : (int)syscall(SYS_openat, AT_FDCWD, path, flags | O_LARGEFILE, mode);
    return after_open(fd, flags);
}

VK_EXPORT int openat(int dirfd, const char *path, int flags, ...) {
    mode_t mode = OPEN_MODE(flags);
    int fd = real.openat ? real.openat(dirfd, path, flags, mode) : (int)syscall(SYS_openat, dirfd, path, flags, mode);
    return after_open(fd, flags);
}

VK_EXPORT int openat64(int dirfd, const char *path, int flags, ...) {
    mode_t mode = OPEN_MODE(flags);
    int fd = real.openat64 ? real.openat64(dirfd, path, flags, mode)
                           : (int)syscall(SYS_openat, dirfd, path, flags | O_LARGEFILE, mode);
    return after_open(fd, flags);
}

VK_EXPORT int __open_2(const char *path, int flags) {
    int fd = real.open_2 ? real.open_2(path, flags) : (int)syscall(SYS_openat, AT_FDCWD, path, flags);
    return after_open(fd, flags);
}

VK_EXPORT int __open64_2(const char *path, int flags) {
    int fd = real.open64_2 ? real.open64_2(path, flags)
                           : (int)syscall(SYS_openat, AT_FDCWD, path, flags | O_LARGEFILE);
    return after_open(fd, flags);
}

VK_EXPORT int __openat_2(int dirfd, const char *path, int flags) {
    int fd = real.openat_2 ? real.openat_2(dirfd, path, flags) : (int)syscall(SYS_openat, dirfd, path, flags);
    return after_open(fd, flags);
}

VK_EXPORT int __openat64_2(int dirfd, const char *path, int flags) {
    int fd = real.openat64_2 ? real.openat64_2(dirfd, path, flags)
                             : (int)syscall(SYS_openat, dirfd, path, flags | O_LARGEFILE);
    return after_open(fd, flags);
}

VK_EXPORT int close(int fd) {
    untrack(fd);
    if (fd >= SOCKET_FD_FLOOR) {
        /* The program closes one of our sockets (e.g. a close-everything loop): let go of it. */
        for (int i = 0; i < POOL; i++)
            if (pool[i].fd == fd) pool[i].fd = -1;
    }
    return real.close ? real.close(fd) : (int)syscall(SYS_close, fd);
}

VK_EXPORT int dup(int fd) {
    int r = real.dup ? real.dup(fd) : (int)syscall(SYS_dup, fd);
    if (r >= 0) track_dup(fd, r);
    return r;
}

VK_EXPORT int dup2(int fd, int to) {
    int r = real.dup2 ? real.dup2(fd, to) : (int)syscall(SYS_dup2, fd, to);
    if (r >= 0) track_dup(fd, r);
    return r;
}

VK_EXPORT int dup3(int fd, int to, int flags) {
    int r = real.dup3 ? real.dup3(fd, to, flags) : (int)syscall(SYS_dup3, fd, to, flags);
    if (r >= 0) track_dup(fd, r);
    return r;
}

VK_EXPORT ssize_t read(int fd, void *buf, size_t n) {
    hook_cur(fd, VK_OP_READ, n);
    return real.read ? real.read(fd, buf, n) : syscall(SYS_read, fd, buf, n);
}

VK_EXPORT ssize_t __read_chk(int fd, void *buf, size_t n, size_t buflen) {
    hook_cur(fd, VK_OP_READ, n);
    if (real.read_chk) return real.read_chk(fd, buf, n, buflen);
    if (n > buflen) abort();
    return syscall(SYS_read, fd, buf, n);
}

VK_EXPORT ssize_t pread(int fd, void *buf, size_t n, off_t off) {
    hook_at(fd, VK_OP_PREAD, (uint64_t)off, n);
    return real.pread ? real.pread(fd, buf, n, off) : syscall(SYS_pread64, fd, buf, n, off);
}

VK_EXPORT ssize_t pread64(int fd, void *buf, size_t n, off_t off) {
    hook_at(fd, VK_OP_PREAD, (uint64_t)off, n);
    return real.pread64 ? real.pread64(fd, buf, n, off) : syscall(SYS_pread64, fd, buf, n, off);
}

VK_EXPORT ssize_t __pread_chk(int fd, void *buf, size_t n, off_t off, size_t buflen) {
    hook_at(fd, VK_OP_PREAD, (uint64_t)off, n);
    if (real.pread_chk) return real.pread_chk(fd, buf, n, off, buflen);
    if (n > buflen) abort();
    return syscall(SYS_pread64, fd, buf, n, off);
}

VK_EXPORT ssize_t __pread64_chk(int fd, void *buf, size_t n, off_t off, size_t buflen) {
    hook_at(fd, VK_OP_PREAD, (uint64_t)off, n);
    if (real.pread64_chk) return real.pread64_chk(fd, buf, n, off, buflen);
    if (n > buflen) abort();
    return syscall(SYS_pread64, fd, buf, n, off);
}

VK_EXPORT ssize_t readv(int fd, const struct iovec *iov, int cnt) {
    hook_iov(fd, VK_OP_READV, iov, cnt, -1);
    return real.readv ? real.readv(fd, iov, cnt) : syscall(SYS_readv, fd, iov, cnt);
}

VK_EXPORT ssize_t preadv(int fd, const struct iovec *iov, int cnt, off_t off) {
    hook_iov(fd, VK_OP_READV, iov, cnt, off);
    return real.preadv ? real.preadv(fd, iov, cnt, off) : syscall(SYS_preadv, fd, iov, cnt, off, 0);
}

VK_EXPORT ssize_t preadv64(int fd, const struct iovec *iov, int cnt, off_t off) {
    hook_iov(fd, VK_OP_READV, iov, cnt, off);
    return real.preadv64 ? real.preadv64(fd, iov, cnt, off) : syscall(SYS_preadv, fd, iov, cnt, off, 0);
}

VK_EXPORT ssize_t preadv2(int fd, const struct iovec *iov, int cnt, off_t off, int flags) {
    if (!(flags & RWF_NOWAIT)) /* the caller asked not to wait for I/O: do not make it */
        hook_iov(fd, VK_OP_READV, iov, cnt, off);
    return real.preadv2 ? real.preadv2(fd, iov, cnt, off, flags)
                        : syscall(SYS_preadv2, fd, iov, cnt, off, 0, flags);
}

VK_EXPORT ssize_t preadv64v2(int fd, const struct iovec *iov, int cnt, off_t off, int flags) {
    if (!(flags & RWF_NOWAIT)) /* the caller asked not to wait for I/O: do not make it */
        hook_iov(fd, VK_OP_READV, iov, cnt, off);
    return real.preadv64v2 ? real.preadv64v2(fd, iov, cnt, off, flags)
                           : syscall(SYS_preadv2, fd, iov, cnt, off, 0, flags);
}

VK_EXPORT ssize_t sendfile(int out_fd, int in_fd, off_t *off, size_t n) {
    hook_ptr(in_fd, VK_OP_SENDFILE, off, n);
    return real.sendfile ? real.sendfile(out_fd, in_fd, off, n) : syscall(SYS_sendfile, out_fd, in_fd, off, n);
}

VK_EXPORT ssize_t sendfile64(int out_fd, int in_fd, off_t *off, size_t n) {
    hook_ptr(in_fd, VK_OP_SENDFILE, off, n);
    return real.sendfile64 ? real.sendfile64(out_fd, in_fd, off, n)
                           : syscall(SYS_sendfile, out_fd, in_fd, off, n);
}

VK_EXPORT ssize_t copy_file_range(int in_fd, off_t *in_off, int out_fd, off_t *out_off, size_t n,
                                  unsigned int flags) {
    hook_ptr(in_fd, VK_OP_COPY, in_off, n);
    return real.copy_file_range ? real.copy_file_range(in_fd, in_off, out_fd, out_off, n, flags)
                                : syscall(SYS_copy_file_range, in_fd, in_off, out_fd, out_off, n, flags);
}

VK_EXPORT ssize_t splice(int in_fd, off_t *in_off, int out_fd, off_t *out_off, size_t n,
                         unsigned int flags) {
    hook_ptr(in_fd, VK_OP_SPLICE, in_off, n);
    return real.splice ? real.splice(in_fd, in_off, out_fd, out_off, n, flags)
                       : syscall(SYS_splice, in_fd, in_off, out_fd, out_off, n, flags);
}

VK_EXPORT pid_t fork(void) {
    if (!real.fork) real.fork = (fork_fn)dlsym(RTLD_NEXT, "fork");
    pid_t pid = real.fork();
    if (pid == 0) {
        int saved = errno;
        after_fork_child(); /* also run by the atfork handler; doing it twice is harmless */
        errno = saved;
    }
    return pid;
}
