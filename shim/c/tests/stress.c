/*
 * Concurrency probe for the preload library: many threads in several forked processes read
 * random ranges of the test files through every read-like call and check each byte against
 * the content function (content.h). Files are dropped from the page cache now and then so
 * that misses keep reaching the daemon.
 *
 * Usage: vk_stress DIR FILES THREADS PROCS ITERATIONS
 *   DIR holds f000 .. f(FILES-1), written by the test with vodkit_workload::content::fill.
 *   The parent runs THREADS threads and also forks PROCS processes running THREADS/8
 *   threads each (at least 2).
 * Prints "ok reads=N bytes=M" per process; exit status 0 only when every byte was right.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/sendfile.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <unistd.h>

#include "content.h"

#define MAX_LEN (256 * 1024)

static const char *dir;
static int files, iterations;
static long long total_reads, total_bytes, failures;

struct worker {
    pthread_t thread;
    uint64_t rng;
    unsigned char *buf;
};

static uint64_t next(uint64_t *s) {
    *s += 0x9e3779b97f4a7c15ULL;
    return vk_splitmix64(*s);
}

static void fail(const char *what, const char *name, long off, long detail) {
    fprintf(stderr, "stress: %s on %s at %ld (%ld)\n", what, name, off, detail);
    __atomic_add_fetch(&failures, 1, __ATOMIC_RELAXED);
}

/* Read [off, off+len) of `fd` with the call numbered `how`; returns bytes read into buf. */
static long read_with(int fd, int how, unsigned char *buf, long off, long len, int pipefd[2]) {
    switch (how) {
    case 0:
        return pread(fd, buf, (size_t)len, off);
    case 1:
        if (lseek(fd, off, SEEK_SET) != off) return -1;
        return read(fd, buf, (size_t)len);
    case 2: {
        long half = len / 2;
        struct iovec iov[2] = { { buf, (size_t)half }, { buf + half, (size_t)(len - half) } };
        return preadv(fd, iov, 2, off);
    }
    case 3: {
        if (lseek(fd, off, SEEK_SET) != off) return -1;
        struct iovec iov[1] = { { buf, (size_t)len } };
        return readv(fd, iov, 1);
    }
    default: {
        /* sendfile into a pipe, then read the pipe back */
        if (len > 65536) len = 65536;
        off_t o = off;
        ssize_t n = sendfile(pipefd[1], fd, &o, (size_t)len);
        if (n <= 0) return n;
        long got = 0;
        while (got < n) {
            ssize_t r = read(pipefd[0], buf + got, (size_t)(n - got));
            if (r <= 0) return -1;
            got += r;
        }
        return got;
    }
    }
}

static void *run_worker(void *arg) {
    struct worker *w = arg;
    int pipefd[2];
    if (pipe(pipefd) != 0) {
        fail("pipe", "-", 0, errno);
        return NULL;
    }
    fcntl(pipefd[1], F_SETPIPE_SZ, 1 << 17);
    for (int i = 0; i < iterations; i++) {
        char name[32], full[4200];
        snprintf(name, sizeof name, "f%03d", (int)(next(&w->rng) % (uint64_t)files));
        snprintf(full, sizeof full, "%s/%s", dir, name);
        int fd = open(full, O_RDONLY);
        if (fd < 0) {
            fail("open", name, 0, errno);
            continue;
        }
        struct stat st;
        fstat(fd, &st);
        long size = (long)st.st_size;
        long len = 1 + (long)(next(&w->rng) % MAX_LEN);
        long off = (long)(next(&w->rng) % (uint64_t)size);
        if (next(&w->rng) % 8 == 0) posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
        int how = (int)(next(&w->rng) % 5);
        long n = read_with(fd, how, w->buf, off, len, pipefd);
        long expect = size - off < len ? size - off : len;
        if (how == 4 && expect > 65536) expect = 65536;
        if (n < 0) fail("read error", name, off, errno);
        else if (n == 0 && expect > 0) fail("short read", name, off, n);
        else {
            long bad = vk_first_mismatch(vk_path_key(name), (uint64_t)off, w->buf, (size_t)n);
            if (bad >= 0) fail("wrong byte", name, off, bad);
            __atomic_add_fetch(&total_bytes, n, __ATOMIC_RELAXED);
        }
        __atomic_add_fetch(&total_reads, 1, __ATOMIC_RELAXED);
        close(fd);
    }
    close(pipefd[0]);
    close(pipefd[1]);
    return NULL;
}

static int run_threads(int threads, uint64_t seed) {
    struct worker *ws = calloc((size_t)threads, sizeof *ws);
    for (int t = 0; t < threads; t++) {
        ws[t].rng = seed * 1000 + (uint64_t)t;
        ws[t].buf = malloc(MAX_LEN);
        if (pthread_create(&ws[t].thread, NULL, run_worker, &ws[t]) != 0) {
            fail("pthread_create", "-", t, errno);
            ws[t].buf = NULL;
        }
    }
    for (int t = 0; t < threads; t++)
        if (ws[t].buf) pthread_join(ws[t].thread, NULL);
    printf("ok reads=%lld bytes=%lld failures=%lld pid=%d\n", total_reads, total_bytes, failures,
           (int)getpid());
    fflush(stdout);
    return failures == 0 ? 0 : 1;
}

int main(int argc, char **argv) {
    if (argc != 6) {
        fprintf(stderr, "usage: vk_stress DIR FILES THREADS PROCS ITERATIONS\n");
        return 2;
    }
    dir = argv[1];
    files = atoi(argv[2]);
    int threads = atoi(argv[3]);
    int procs = atoi(argv[4]);
    iterations = atoi(argv[5]);
    if (files <= 0 || threads <= 0 || procs < 0 || iterations <= 0) return 2;
    fflush(stdout);
    pid_t kids[256];
    int nkids = 0;
    for (int p = 0; p < procs && p < 256; p++) {
        pid_t pid = fork();
        if (pid == 0) {
            int per = threads / 8 < 2 ? 2 : threads / 8;
            _exit(run_threads(per, (uint64_t)p + 1));
        }
        if (pid > 0) kids[nkids++] = pid;
    }
    int status = run_threads(threads, 0);
    for (int k = 0; k < nkids; k++) {
        int st = 0;
        if (waitpid(kids[k], &st, 0) < 0 || !WIFEXITED(st) || WEXITSTATUS(st) != 0) {
            fprintf(stderr, "stress: child %d failed (status %d)\n", (int)kids[k], st);
            status = 1;
        }
    }
    return status;
}
