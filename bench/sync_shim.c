/* Loaded with LD_PRELOAD into a traceanalyze process: every fsync / fdatasync first waits
 * $SYNC_DELAY_US microseconds (a file system as slow to sync as a network one: made so, for
 * bench/bench_sync.py), and appends the path of the file synced to $SYNC_LOG (one line each:
 * tests/test_reduce_commits.py counts them). Build: cc -shared -fPIC -O2 -o shim.so sync_shim.c -ldl */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

static void before_sync(int fd) {
    const char *delay = getenv("SYNC_DELAY_US");
    const char *log = getenv("SYNC_LOG");
    if (delay) usleep((useconds_t)atoi(delay));
    if (!log) return;
    char link[64], path[4096];
    snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
    ssize_t n = readlink(link, path, sizeof path - 2);
    if (n < 0) return;
    path[n++] = '\n';
    int out = open(log, O_WRONLY | O_APPEND | O_CREAT, 0600);
    if (out >= 0) {
        ssize_t written = write(out, path, (size_t)n);
        (void)written;
        close(out);
    }
}

int fdatasync(int fd) {
    static int (*real)(int);
    if (!real) real = (int (*)(int))dlsym(RTLD_NEXT, "fdatasync");
    before_sync(fd);
    return real(fd);
}

int fsync(int fd) {
    static int (*real)(int);
    if (!real) real = (int (*)(int))dlsym(RTLD_NEXT, "fsync");
    before_sync(fd);
    return real(fd);
}
