/* dcxemu observability: the DCXEMU_TRACE line writer and the fabric-wide
 * counters. */
#define _GNU_SOURCE
#include "dcxemu_int.h"

#include <stdarg.h>
#include <stdio.h>
#include <unistd.h>

int dcxemu_trace_fd = -1;

void dcxemu_trace(const char *fmt, ...)
{
    char line[320];
    va_list ap;
    int n = snprintf(line, sizeof(line), "dcxemu %d ", (int)getpid());
    va_start(ap, fmt);
    n += vsnprintf(line + n, sizeof(line) - (size_t)n - 1, fmt, ap);
    va_end(ap);
    if (n > (int)sizeof(line) - 2) {
        n = (int)sizeof(line) - 2;
    }
    line[n++] = '\n';
    /* one write per line: lines of concurrent processes never interleave
     * (O_APPEND) */
    if (write(dcxemu_trace_fd, line, (size_t)n) < 0) {
        return;
    }
}

void dcxemu_count(int member, int dev, size_t off, uint64_t n)
{
    if (dev < 0 || dev >= DCXEMU_MAX_DEVICES || dcxemu_fab == NULL) {
        return;
    }
    __atomic_fetch_add((uint64_t *)((char *)&dcxemu_fab->dev_cnt[dev] + off), n,
                       __ATOMIC_RELAXED);
    if (member >= 0 && member < DCXEMU_MAX_MEMBERS) {
        __atomic_fetch_add(
                (uint64_t *)((char *)&dcxemu_fab->member_cnt[member][dev] +
                             off),
                n, __ATOMIC_RELAXED);
    }
}
