/*
 * Transparency probe for the preload library: performs every intercepted call on regular
 * files, sockets and pipes (successes and failures) and prints one line per call with the
 * result, errno and a checksum of the bytes moved. Run once without and once with the
 * library; the outputs must be identical.
 *
 * Usage: vk_transparency DIR   (DIR holds data.bin, written by the test; scratch files are
 * created next to it). Before each file read the file is dropped from the page cache, so
 * with the library every such read is a miss that goes to the daemon.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/sendfile.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <unistd.h>

#include "content.h"

static char dir[4096];
static unsigned char buf[1 << 21];
static unsigned char buf2[1 << 16];

static uint64_t fnv(const unsigned char *p, long n) {
    uint64_t h = 0xcbf29ce484222325ULL;
    for (long i = 0; i < n; i++) {
        h ^= p[i];
        h *= 0x00000100000001b3ULL;
    }
    return h;
}

static void report(const char *what, long ret, int err, const unsigned char *data) {
    printf("%-34s ret=%ld errno=%d", what, ret, err);
    if (data && ret > 0) printf(" sum=%016llx", (unsigned long long)fnv(data, ret));
    printf("\n");
    fflush(stdout);
}

#define CALL(label, expr, data)          \
    do {                                 \
        errno = 0;                       \
        long r_ = (long)(expr);          \
        int e_ = errno;                  \
        report(label, r_, e_, data);     \
    } while (0)

static char *path(const char *name) {
    static char p[2][4200];
    static int k;
    k ^= 1;
    snprintf(p[k], sizeof p[k], "%s/%s", dir, name);
    return p[k];
}

/* The cachestat(2) system call (Linux 6.5), declared here because older C headers lack
 * it. Unlike mincore it also counts pages still being read in. */
struct vk_cachestat_range { uint64_t off, len; };
struct vk_cachestat { uint64_t nr_cache, nr_dirty, nr_writeback, nr_evicted, nr_recently_evicted; };
#define VK_SYS_CACHESTAT 451

/* Pages of the file in the page cache, whether read in yet or not; -1 if unknown. */
static long cached_pages(int fd) {
    struct vk_cachestat_range range = { 0, 0 };
    struct vk_cachestat cs;
    if (syscall(VK_SYS_CACHESTAT, fd, &range, &cs, 0) != 0) return -1;
    return (long)cs.nr_cache;
}

/* Drop the file from the page cache and wait until no page of it is cached. One DONTNEED
 * is not enough: pages still locked under an earlier read's asynchronous read-ahead (which
 * covers the whole file when read_ahead_kb is large, in this process or the daemon's) are
 * skipped, and a later RWF_NOWAIT read would find them. Gives up after about two seconds,
 * or at once where cachestat(2) is missing. */
static void evict(int fd) {
    for (int attempt = 0; attempt < 400; attempt++) {
        posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
        if (cached_pages(fd) <= 0) return;
        usleep(5000);
    }
}

/* Drain what a call pushed into a pipe or socket and print its length and checksum. */
static void drain(int fd, long n) {
    uint64_t h = 0xcbf29ce484222325ULL;
    long got = 0;
    while (got < n) {
        long want = n - got < (long)sizeof buf2 ? n - got : (long)sizeof buf2;
        ssize_t r = read(fd, buf2, (size_t)want);
        if (r <= 0) break;
        for (ssize_t i = 0; i < r; i++) {
            h ^= buf2[i];
            h *= 0x00000100000001b3ULL;
        }
        got += r;
    }
    printf("  drained %ld bytes sum=%016llx\n", got, (unsigned long long)h);
}

/* A RWF_NOWAIT read of an evicted range. The kernel starts read-ahead before it gives up,
 * so whether the call fails with EAGAIN or returns a prefix of the range depends on how
 * fast the device answers. The probe prints which of the two allowed outcomes it saw as one
 * line, and anything else (another error, wrong bytes) as it was. */
static void nowait_cold(int fd, struct iovec *iov) {
    const off_t at = 2500000;
    errno = 0;
    long r = (long)preadv2(fd, iov, 3, at, RWF_NOWAIT);
    int e = errno;
    long want = (long)(iov[0].iov_len + iov[1].iov_len + iov[2].iov_len);
    int allowed = (r == -1 && e == EAGAIN) ||
                  (r > 0 && r <= want &&
                   vk_first_mismatch(vk_path_key("data.bin"), (uint64_t)at, buf, (size_t)r) < 0);
    if (allowed)
        printf("%-34s EAGAIN or a correct prefix\n", "preadv2 nowait cold");
    else
        report("preadv2 nowait cold", r, e, buf);
    fflush(stdout);
}

static void file_calls(void) {
    int fd;
    CALL("open data rdonly", fd = open(path("data.bin"), O_RDONLY), NULL);
    evict(fd);
    CALL("read 4096", read(fd, buf, 4096), buf);
    evict(fd);
    volatile size_t odd = 12345;
    CALL("read odd (fortified)", read(fd, buf, odd), buf);
    evict(fd);
    CALL("read 1MiB", read(fd, buf, 1 << 20), buf);
    CALL("lseek end-10", lseek(fd, -10, SEEK_END), NULL);
    CALL("read past eof", read(fd, buf, 100), buf);
    CALL("read at eof", read(fd, buf, 100), buf);
    CALL("read 0 bytes", read(fd, buf, 0), buf);
    evict(fd);
    CALL("pread 10000@1MiB", pread(fd, buf, 10000, 1 << 20), buf);
    evict(fd);
    CALL("pread64 unaligned", pread64(fd, buf, 70001, 4097), buf);
    CALL("pread beyond eof", pread(fd, buf, 10, 1LL << 40), buf);
    CALL("pread negative offset", pread(fd, buf, 10, -5), buf);
    evict(fd);
    void *volatile null_buf = NULL, *volatile bad_buf = (void *)16;
    CALL("pread null buffer", pread(fd, null_buf, 100, 0), NULL);
    CALL("pread bad buffer", pread(fd, bad_buf, 100, 0), NULL);

    struct iovec iov[3] = { { buf, 100 }, { buf + 100, 5000 }, { buf + 5100, 70000 } };
    CALL("lseek 300000", lseek(fd, 300000, SEEK_SET), NULL);
    evict(fd);
    CALL("readv 3 iovs", readv(fd, iov, 3), buf);
    evict(fd);
    CALL("preadv 3 iovs", preadv(fd, iov, 3, 2000000), buf);
    evict(fd);
    CALL("preadv64 3 iovs", preadv64(fd, iov, 3, 77), buf);
    evict(fd);
    CALL("preadv2 flags 0", preadv2(fd, iov, 3, 123456, 0), buf);
    evict(fd);
    nowait_cold(fd, iov);
    struct iovec *volatile bad_iov = (struct iovec *)8;
    CALL("readv bad iov pointer", readv(fd, bad_iov, 2), NULL);
    volatile int minus_one = -1, huge = 100000;
    CALL("readv iovcnt -1", readv(fd, iov, minus_one), NULL);
    CALL("readv iovcnt huge", readv(fd, iov, huge), NULL);

    int p[2];
    CALL("pipe", pipe(p), NULL);
    fcntl(p[1], F_SETPIPE_SZ, 1 << 20);
    off_t off = 1000;
    evict(fd);
    CALL("sendfile to pipe with offset", sendfile(p[1], fd, &off, 60000), NULL);
    CALL("  offset after", off, NULL);
    drain(p[0], 60000);
    CALL("lseek 5", lseek(fd, 5, SEEK_SET), NULL);
    evict(fd);
    CALL("sendfile64 null offset", sendfile64(p[1], fd, NULL, 4000), NULL);
    drain(p[0], 4000);
    CALL("  position after", lseek(fd, 0, SEEK_CUR), NULL);
    off_t *volatile bad_off = (off_t *)8;
    CALL("sendfile bad offset ptr", sendfile(p[1], fd, bad_off, 100), NULL);
    CALL("sendfile from closed fd", sendfile(p[1], 999, NULL, 100), NULL);

    int sv[2];
    CALL("socketpair", socketpair(AF_UNIX, SOCK_STREAM, 0, sv), NULL);
    off = 777777;
    evict(fd);
    CALL("sendfile to socket", sendfile(sv[0], fd, &off, 50000), NULL);
    drain(sv[1], 50000);

    int out;
    CALL("open copy target", out = open(path("copy.bin"), O_WRONLY | O_CREAT | O_TRUNC, 0600), NULL);
    off_t in_off = 123, out_off = 0;
    evict(fd);
    CALL("copy_file_range", copy_file_range(fd, &in_off, out, &out_off, 300000, 0), NULL);
    CALL("  in offset after", in_off, NULL);
    CALL("copy_file_range bad flags", copy_file_range(fd, &in_off, out, &out_off, 10, 99), NULL);
    int chk;
    CALL("open copy for check", chk = open(path("copy.bin"), O_RDONLY), NULL);
    CALL("  read copy", read(chk, buf, 1 << 21), buf);
    CALL("close copy check", close(chk), NULL);

    loff_t soff = 4096 * 7 + 3;
    evict(fd);
    CALL("splice file to pipe", splice(fd, &soff, p[1], NULL, 30000, 0), NULL);
    drain(p[0], 30000);
    CALL("splice file to file", splice(fd, &soff, out, NULL, 100, 0), NULL);

    CALL("read from write-only", read(out, buf, 10), NULL);
    CALL("close out", close(out), NULL);
    CALL("close sv0", close(sv[0]), NULL);
    CALL("close sv1", close(sv[1]), NULL);
    CALL("close pipe r", close(p[0]), NULL);
    CALL("close pipe w", close(p[1]), NULL);
    CALL("close data", close(fd), NULL);
    CALL("read closed", read(fd, buf, 10), NULL);
    CALL("close closed", close(fd), NULL);
}

static void socket_and_pipe_calls(void) {
    int sv[2];
    CALL("socketpair nonblock", socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, sv), NULL);
    CALL("read empty socket", read(sv[0], buf, 10), NULL);
    CALL("write socket", write(sv[1], "hello socket", 12), NULL);
    CALL("read socket", read(sv[0], buf, 100), buf);
    CALL("pread socket", pread(sv[0], buf, 10, 0), NULL);
    struct iovec iov[2] = { { buf, 3 }, { buf + 3, 50 } };
    CALL("write socket again", write(sv[1], "abcdefgh", 8), NULL);
    CALL("readv socket", readv(sv[0], iov, 2), buf);
    CALL("preadv socket", preadv(sv[0], iov, 2, 0), NULL);
    CALL("sendfile socket to socket", sendfile(sv[1], sv[0], NULL, 10), NULL);
    CALL("close sv0", close(sv[0]), NULL);
    CALL("close sv1", close(sv[1]), NULL);

    int p[2];
    CALL("pipe2 nonblock", pipe2(p, O_NONBLOCK), NULL);
    CALL("read empty pipe", read(p[0], buf, 10), NULL);
    CALL("write pipe", write(p[1], "pipe data!", 10), NULL);
    CALL("pread pipe", pread(p[0], buf, 10, 0), NULL);
    CALL("read pipe", read(p[0], buf, 100), buf);
    CALL("write pipe again", write(p[1], "0123456789", 10), NULL);
    CALL("readv pipe", readv(p[0], iov, 2), buf);
    int q[2];
    CALL("pipe", pipe(q), NULL);
    CALL("write pipe q", write(p[1], "spliced", 7), NULL);
    CALL("splice pipe to pipe", splice(p[0], NULL, q[1], NULL, 7, 0), NULL);
    CALL("read pipe q", read(q[0], buf, 7), buf);
    CALL("close p0", close(p[0]), NULL);
    CALL("close p1", close(p[1]), NULL);
    CALL("close q0", close(q[0]), NULL);
    CALL("close q1", close(q[1]), NULL);
}

static void open_calls(void) {
    int d, fd;
    CALL("open missing", open(path("missing"), O_RDONLY), NULL);
    CALL("open dir", d = open(dir, O_RDONLY | O_DIRECTORY), NULL);
    CALL("read dir", read(d, buf, 10), NULL);
    CALL("openat data", fd = openat(d, "data.bin", O_RDONLY | O_CLOEXEC), NULL);
    evict(fd);
    CALL("pread via openat", pread(fd, buf, 8192, 40000), buf);
    CALL("close openat", close(fd), NULL);
    CALL("openat64 data", fd = openat64(d, "data.bin", O_RDONLY), NULL);
    evict(fd);
    CALL("read via openat64", read(fd, buf, 9000), buf);
    CALL("close openat64", close(fd), NULL);
    CALL("open64 data", fd = open64(path("data.bin"), O_RDONLY), NULL);
    evict(fd);
    CALL("read via open64", read(fd, buf, 3000), buf);
    CALL("close open64", close(fd), NULL);
    CALL("open creat excl", fd = open(path("new.bin"), O_RDWR | O_CREAT | O_EXCL, 0640), NULL);
    struct stat st;
    fstat(fd, &st);
    CALL("  mode of created", st.st_mode & 07777, NULL);
    CALL("open creat excl again", open(path("new.bin"), O_RDWR | O_CREAT | O_EXCL, 0640), NULL);
    CALL("write new", write(fd, "0123456789", 10), NULL);
    CALL("pread own write", pread(fd, buf, 10, 0), buf);
    CALL("close new", close(fd), NULL);
    CALL("unlink new", unlink(path("new.bin")), NULL);
    CALL("open O_PATH", fd = open(path("data.bin"), O_PATH), NULL);
    CALL("read O_PATH", read(fd, buf, 10), NULL);
    CALL("close O_PATH", close(fd), NULL);
    CALL("close dir", close(d), NULL);
}

static void dup_calls(void) {
    int fd, d;
    CALL("open for dup", fd = open(path("data.bin"), O_RDONLY), NULL);
    CALL("dup", d = dup(fd), NULL);
    evict(fd);
    CALL("pread via dup", pread(d, buf, 5000, 123), buf);
    CALL("close dup", close(d), NULL);
    CALL("dup2 to 60", dup2(fd, 60), NULL);
    evict(fd);
    CALL("read via dup2", read(60, buf, 7000), buf);
    CALL("dup3 to 61 cloexec", dup3(fd, 61, O_CLOEXEC), NULL);
    CALL("  cloexec flag", fcntl(61, F_GETFD) & FD_CLOEXEC, NULL);
    CALL("dup3 same fd", dup3(61, 61, 0), NULL);
    CALL("dup2 bad fd", dup2(999, 62), NULL);
    int p[2];
    CALL("pipe for dup2", pipe(p), NULL);
    CALL("dup2 pipe over 60", dup2(p[0], 60), NULL);
    CALL("write pipe", write(p[1], "over", 4), NULL);
    CALL("read 60 (now a pipe)", read(60, buf, 4), buf);
    CALL("close 60", close(60), NULL);
    CALL("close 61", close(61), NULL);
    close(p[0]);
    close(p[1]);
    close(fd);
}

static void fork_calls(void) {
    int p[2];
    if (pipe(p) != 0) return;
    int fd = open(path("data.bin"), O_RDONLY);
    evict(fd);
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        close(p[0]);
        uint64_t sums[3];
        long n1 = pread(fd, buf, 50000, 600000);
        sums[0] = fnv(buf, n1);
        int fd2 = open(path("data.bin"), O_RDONLY);
        evict(fd2);
        long n2 = read(fd2, buf, 20000);
        sums[1] = fnv(buf, n2);
        sums[2] = (uint64_t)(n1 + n2);
        ssize_t w = write(p[1], sums, sizeof sums);
        _exit(w == (ssize_t)sizeof sums ? 0 : 1);
    }
    close(p[1]);
    uint64_t sums[3] = { 0, 0, 0 };
    CALL("read child result", read(p[0], sums, sizeof sums), NULL);
    int status = -1;
    waitpid(pid, &status, 0);
    printf("child sums %016llx %016llx bytes=%llu status=%d\n", (unsigned long long)sums[0],
           (unsigned long long)sums[1], (unsigned long long)sums[2], status);
    evict(fd);
    CALL("parent pread after fork", pread(fd, buf, 1000, 0), buf);
    close(fd);
    close(p[0]);
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: vk_transparency DIR\n");
        return 2;
    }
    snprintf(dir, sizeof dir, "%s", argv[1]);
    file_calls();
    socket_and_pipe_calls();
    open_calls();
    dup_calls();
    fork_calls();
    int fd;
    CALL("next descriptor number", fd = open(path("data.bin"), O_RDONLY), NULL);
    close(fd);
    return 0;
}
