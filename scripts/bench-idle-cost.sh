#!/usr/bin/env bash
# What the machine charges for waking up, apart from attest (issue 19).
#
# Behind a model that takes 200 ms, every step of `attest run` starts on a
# CPU that has been idle for 200 ms. This measures, with a small C program
# and nothing of attest's, the kernel calls a step makes — a 4 KiB
# `pwrite` (SQLite's WAL frames), an `fcntl` lock and unlock (SQLite's
# locks), and a one-byte round trip to another process over a socket pair
# (a model server's answer waking the waiting process) — each as the first
# call after an idle gap, and again right after (warm). On a machine where
# waking is cheap the two columns are close; where it is not, the first
# call after 200 ms costs many times the warm one, on every step, whatever
# attest does. Two more rows read a byte from each of 256 pages of memory
# the process already holds, in 4 KiB pages and in one 2 MiB page: where
# the VM's page mappings go cold while it idles, the first read of each
# 4 KiB page pays again (the huge page is one mapping).
#
# Usage: scripts/bench-idle-cost.sh [ROUNDS]   (default 20; needs cc)
# Also prints the kernel's idle settings (cpuidle driver, haltpoll's
# polling window) where the machine exposes them.
set -euo pipefail
rounds=${1:-20}
command -v cc >/dev/null || { echo "needs a C compiler (cc)" >&2; exit 1; }
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT

cat >"$dir/probe.c" <<'C'
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

static double now_us(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e6 + t.tv_nsec / 1e3;
}

static int cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *v, int n) {
    qsort(v, n, sizeof *v, cmp);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

int main(int argc, char **argv) {
    int rounds = atoi(argv[1]);
    const char *file = argv[2];
    int fd = open(file, O_CREAT | O_RDWR, 0600);
    int sv[2];
    if (fd < 0 || socketpair(AF_UNIX, SOCK_STREAM, 0, sv) != 0) {
        perror("probe");
        return 1;
    }
    if (fork() == 0) {  // the "server": echoes each byte back
        char c;
        close(sv[0]);
        while (read(sv[1], &c, 1) == 1) write(sv[1], &c, 1);
        _exit(0);
    }
    close(sv[1]);
    static char page[4096];
    // 256 pages of memory, read a byte from each: in 4 KiB pages, and in one
    // 2 MiB transparent huge page (madvise; the kernel may not grant it).
    enum { PAGES = 256, HUGE = 2 << 20 };
    volatile char *small = mmap(0, PAGES * 4096L, PROT_READ | PROT_WRITE,
                                MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    char *area = mmap(0, 2 * HUGE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (small == MAP_FAILED || area == MAP_FAILED) {
        perror("probe: mmap");
        return 1;
    }
    volatile char *huge = (char *)(((unsigned long)area + HUGE - 1) & ~(HUGE - 1UL));
    madvise((char *)huge, HUGE, MADV_HUGEPAGE);
    memset((char *)small, 1, PAGES * 4096L);
    memset((char *)huge, 1, HUGE);
    long sum = 0;
    struct flock lock = {.l_whence = SEEK_SET, .l_start = 120, .l_len = 1};
    long gaps_us[] = {0, 2000, 200000};
    printf("%-10s %-22s %12s %12s\n", "idle", "call", "first (µs)", "warm (µs)");
    enum { KINDS = 5 };
    for (int g = 0; g < 3; g++) {
        double first[KINDS][rounds], warm[KINDS][rounds];
        for (int r = 0; r < rounds; r++) {
            for (int k = 0; k < KINDS; k++) {
                double t[3];
                for (int rep = 0; rep < 2; rep++) {
                    if (rep == 0 && gaps_us[g]) usleep(gaps_us[g]);
                    double a = now_us();
                    if (k == 0) {
                        pwrite(fd, page, sizeof page, 4096L * (r % 64));
                    } else if (k == 1) {
                        lock.l_type = F_WRLCK;
                        fcntl(fd, F_SETLK, &lock);
                        lock.l_type = F_UNLCK;
                        fcntl(fd, F_SETLK, &lock);
                    } else if (k == 2) {
                        char c = 'x';
                        write(sv[0], &c, 1);
                        read(sv[0], &c, 1);
                    } else {
                        volatile char *base = k == 3 ? small : huge;
                        for (int i = 0; i < PAGES; i++) sum += base[i * 4096L];
                    }
                    t[rep] = now_us() - a;
                }
                first[k][r] = t[0];
                warm[k][r] = t[1];
            }
        }
        const char *names[] = {"pwrite 4 KiB", "fcntl lock + unlock", "socket round trip",
                               "read 256 4 KiB pages", "same, 2 MiB page"};
        for (int k = 0; k < KINDS; k++) {
            char idle[32];
            snprintf(idle, sizeof idle, "%ld ms", gaps_us[g] / 1000);
            printf("%-10s %-22s %12.1f %12.1f\n", idle, names[k], median(first[k], rounds),
                   median(warm[k], rounds));
        }
    }
    close(sv[0]);
    (void)sum;  // the reads are volatile; the sum only gives them a use
    return 0;
}
C
cc -O2 -o "$dir/probe" "$dir/probe.c"
for f in /sys/devices/system/cpu/cpuidle/current_driver /sys/module/haltpoll/parameters/guest_halt_poll_ns; do
  [[ -r $f ]] && echo "$f: $(cat "$f")"
done
echo "CPU: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), ${rounds} rounds, medians"
"$dir/probe" "$rounds" "$dir/file"
