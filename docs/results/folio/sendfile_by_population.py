# Micro-experiment (docs/results/folio/report.md): how the way
# a file's pages entered the page cache changes what sendfile(2) of them costs. Needs root
# (it drops the page cache) and about 256 MiB in /var/tmp. Usage:
#   python3 sendfile_by_population.py [random|normal|shuffled|willneed|mmap-huge ...]
import mmap
import os
import random
import resource
import socket
import sys
import threading

PATH = "/var/tmp/vodkit-folio-test.bin"
SIZE = 256 << 20
WINDOW = 2 << 20
MADV_POPULATE_READ = 22  # not in Python's mmap module


def drop_caches():
    os.sync()
    with open("/proc/sys/vm/drop_caches", "w") as f:
        f.write("3\n")


def populate(how):
    """Read the whole file into the page cache the way `how` says."""
    fd = os.open(PATH, os.O_RDONLY)
    offsets = list(range(0, SIZE, WINDOW))
    if how == "shuffled":
        random.Random(1).shuffle(offsets)
    if how in ("random", "willneed"):
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_RANDOM)  # what vodkit's engine does
    if how == "mmap-huge":
        m = mmap.mmap(fd, SIZE, prot=mmap.PROT_READ)
        m.madvise(mmap.MADV_HUGEPAGE)
        m.madvise(mmap.MADV_RANDOM)
        for o in offsets:
            m.madvise(MADV_POPULATE_READ, o, WINDOW)
        m.close()
    else:
        for o in offsets:
            if how == "willneed":
                os.posix_fadvise(fd, o, WINDOW, os.POSIX_FADV_WILLNEED)
            os.pread(fd, WINDOW, o)
    os.close(fd)


def sendfile_cost(rounds=4):
    """CPU seconds of this thread to sendfile the file `rounds` times to a loopback peer."""
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(1)

    def drain():
        c = socket.create_connection(srv.getsockname())
        while c.recv(1 << 20):
            pass

    t = threading.Thread(target=drain)
    t.start()
    conn, _ = srv.accept()
    fd = os.open(PATH, os.O_RDONLY)
    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_RANDOM)  # as vodkit's sending descriptor
    r0 = resource.getrusage(resource.RUSAGE_THREAD)
    for _ in range(rounds):
        off = 0
        while off < SIZE:
            off += os.sendfile(conn.fileno(), fd, off, min(768 << 10, SIZE - off))
    r1 = resource.getrusage(resource.RUSAGE_THREAD)
    conn.close()
    t.join()
    os.close(fd)
    return (r1.ru_stime - r0.ru_stime) + (r1.ru_utime - r0.ru_utime)


if __name__ == "__main__":
    if not os.path.exists(PATH):
        with open(PATH, "wb") as f:
            for _ in range(SIZE // WINDOW):
                f.write(os.urandom(WINDOW))
    for how in sys.argv[1:] or ["random", "normal"]:
        drop_caches()
        populate(how)
        cpu = sendfile_cost()
        print(f"{how:10s}: {4 * SIZE / cpu / 1e9:6.2f} GB sent per CPU-second")
