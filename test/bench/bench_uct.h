/**
 * Copyright (c) 2026, the dcx developers. See LICENSE for terms.
 *
 * What the UCT benchmarks share: finding the component and memory domain
 * that offer a transport on a device, and opening an interface of it with
 * its own worker and memory domain. Every failure prints what failed and
 * exits 1 (a benchmark has nothing to fall back on).
 */

#ifndef DCX_BENCH_UCT_H
#define DCX_BENCH_UCT_H

#include <uct/api/uct.h>

/* The transport a benchmark runs on. */
typedef struct {
    const char *prog; /* for the messages */
    const char *tl_name, *dev_name;
    uct_component_h component; /* set by bench_uct_find_resource */
    char md_name[UCT_MD_NAME_MAX];
} bench_uct_resource_t;

/* One interface of it. */
typedef struct {
    ucs_async_context_t *async;
    uct_worker_h worker;
    uct_md_h md;
    uct_iface_h iface;
} bench_uct_side_t;

/* Exits with 'what failed' unless 'cond' holds. */
void bench_uct_check(const bench_uct_resource_t *r, int cond, const char *what);

/* Sets r->component and r->md_name; exits when no memory domain offers
 * r->tl_name on r->dev_name ('hint' says what the transport may need). */
void bench_uct_find_resource(bench_uct_resource_t *r, const char *hint);

/* An interface with its own worker, memory domain and configuration read
 * from the environment, progress enabled both ways. */
void bench_uct_side_open(const bench_uct_resource_t *r, bench_uct_side_t *s);

void bench_uct_side_close(bench_uct_side_t *s);

#endif
