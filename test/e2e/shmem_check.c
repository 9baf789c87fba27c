/*
 * Copyright (c) 2026, the dcx developers. See LICENSE for terms.
 *
 * shmem_check: an OpenSHMEM program that verifies every element it moves:
 * contiguous put/get of several sizes, strided shmem_iput/shmem_iget,
 * contended atomics (fetch-add, add, inc, swap, compare-swap) and barriers.
 * Run under oshrun -np N (N >= 2); exits 0 only when every check passed on
 * every PE, 1 on a mismatch, 2 on misuse.
 */
#include <shmem.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int me, npes;
static long checks, errors;

#define CHECK(_cond, ...)                                    \
    do {                                                     \
        ++checks;                                            \
        if (!(_cond)) {                                      \
            if (++errors <= 10) {                            \
                fprintf(stderr, "shmem_check: PE %d: ", me); \
                fprintf(stderr, __VA_ARGS__);                \
                fputc('\n', stderr);                         \
            }                                                \
        }                                                    \
    } while (0)

#define MAX_ELEMS (1 << 18) /* 2 MiB of longs */

static long value_of(int pe, long i, long salt)
{
    return (long)pe * 1000003L + i * 7 + salt;
}

static void *xmalloc(size_t len)
{
    void *p = malloc(len);
    if (p == NULL) {
        fprintf(stderr, "shmem_check: PE %d: out of memory\n", me);
        shmem_global_exit(2);
    }
    return p;
}

static void check_put_get(long *sym)
{
    static const long sizes[] = { 1, 8, 100, 1024, 8192, 65536, MAX_ELEMS };
    int right = (me + 1) % npes, left = (me + npes - 1) % npes;
    long *buf = xmalloc(MAX_ELEMS * sizeof(long));
    unsigned s;
    long i, bad;

    for (s = 0; s < sizeof(sizes) / sizeof(sizes[0]); ++s) {
        long n = sizes[s];

        for (i = 0; i < MAX_ELEMS; ++i) {
            sym[i] = -1;
        }
        shmem_barrier_all();
        for (i = 0; i < n; ++i) {
            buf[i] = value_of(me, i, n);
        }
        shmem_long_put(sym, buf, n, right);
        shmem_barrier_all(); /* completes the puts (quiet) */
        for (i = 0, bad = -1; i < n && bad < 0; ++i) {
            if (sym[i] != value_of(left, i, n)) {
                bad = i;
            }
        }
        CHECK(bad < 0, "put of %ld longs from %d: wrong element %ld", n, left,
              bad);
        CHECK(n == MAX_ELEMS || sym[n] == -1,
              "put of %ld longs wrote past its end", n);

        /* Read back what the right neighbour received (from me). */
        memset(buf, 0, n * sizeof(long));
        shmem_long_get(buf, sym, n, right);
        for (i = 0, bad = -1; i < n && bad < 0; ++i) {
            if (buf[i] != value_of(me, i, n)) {
                bad = i;
            }
        }
        CHECK(bad < 0, "get of %ld longs from %d: wrong element %ld", n, right,
              bad);
        shmem_barrier_all(); /* before anyone resets its array */
    }

    /* Non-blocking put + quiet, single elements with shmem_p / shmem_g. */
    shmem_barrier_all();
    shmem_long_put_nbi(sym, buf, 4096, right);
    shmem_quiet();
    shmem_long_p(&sym[MAX_ELEMS - 1], value_of(me, 42, 1), right);
    shmem_barrier_all();
    CHECK(sym[MAX_ELEMS - 1] == value_of(left, 42, 1), "shmem_p from %d: %ld",
          left, sym[MAX_ELEMS - 1]);
    CHECK(shmem_long_g(&sym[MAX_ELEMS - 1], right) == value_of(me, 42, 1),
          "shmem_g from %d", right);
    free(buf);
}

static void check_strided(long *sym)
{
    int right = (me + 1) % npes, left = (me + npes - 1) % npes;
    const long n = 1000;
    long *buf    = xmalloc(4 * n * sizeof(long));
    long i, bad;

    for (i = 0; i < 4 * n; ++i) {
        sym[i] = -1;
        buf[i] = value_of(me, i, 77);
    }
    shmem_barrier_all();
    /* Every 2nd source element to every 3rd target element. */
    shmem_long_iput(sym, buf, 3, 2, n, right);
    shmem_barrier_all();
    for (i = 0, bad = -1; i < 3 * n && bad < 0; ++i) {
        long expect = (i % 3 == 0) ? value_of(left, (i / 3) * 2, 77) : -1;
        if (sym[i] != expect) {
            bad = i;
        }
    }
    CHECK(bad < 0, "iput from %d: wrong element %ld", left, bad);

    /* Every 3rd element of the right neighbour's array into every 4th. */
    for (i = 0; i < 4 * n; ++i) {
        buf[i] = -2;
    }
    shmem_long_iget(buf, sym, 4, 3, n, right);
    for (i = 0, bad = -1; i < 4 * n && bad < 0; ++i) {
        long expect = (i % 4 == 0) ? value_of(me, (i / 4) * 2, 77) : -2;
        if (buf[i] != expect) {
            bad = i;
        }
    }
    CHECK(bad < 0, "iget from %d: wrong element %ld", right, bad);
    shmem_barrier_all();
    free(buf);
}

static long counter, added, incs, swap_slot, ticket;
static int icounter, iadded;

static void check_atomics(void)
{
    const int rounds = 500;
    int i, pe;
    long old, seen_max = -1, prev;

    counter = added = incs = ticket = 0;
    icounter = iadded = 0;
    swap_slot         = -1;
    shmem_barrier_all();

    /* Everybody hammers PE 0 (and the last PE) at once. */
    for (i = 0; i < rounds; ++i) {
        old = shmem_long_atomic_fetch_add(&counter, 3, 0);
        CHECK(old >= 0 && old % 3 == 0 && old < 3L * rounds * npes,
              "fetch_add returned %ld", old);
        if (old > seen_max) {
            seen_max = old;
        }
        shmem_long_atomic_add(&added, (long)me + 1, npes - 1);
        shmem_long_atomic_inc(&incs, 0);
    }
    shmem_barrier_all();
    /* The same on int: spml ucx asks UCP for 32- and 64-bit atomics. */
    for (i = 0; i < rounds; ++i) {
        int iold = shmem_int_atomic_fetch_add(&icounter, 3, 0);
        CHECK(iold >= 0 && iold % 3 == 0 && iold < 3 * rounds * npes,
              "int fetch_add returned %d", iold);
        shmem_int_atomic_add(&iadded, me + 1, npes - 1);
    }
    shmem_barrier_all();
    if (me == 0) {
        CHECK(icounter == 3 * rounds * npes,
              "int fetch_add total %d, expected %d", icounter,
              3 * rounds * npes);
    }
    if (me == npes - 1) {
        CHECK(iadded == rounds * npes * (npes + 1) / 2, "int add total %d",
              iadded);
    }
    if (me == 0) {
        CHECK(counter == 3L * rounds * npes,
              "fetch_add total %ld, expected %ld", counter, 3L * rounds * npes);
        CHECK(incs == (long)rounds * npes, "inc total %ld, expected %ld", incs,
              (long)rounds * npes);
    }
    if (me == npes - 1) {
        CHECK(added == (long)rounds * npes * (npes + 1) / 2, "add total %ld",
              added);
    }
    CHECK(shmem_long_atomic_fetch(&counter, 0) == 3L * rounds * npes,
          "atomic fetch");

    /* Ticket lock by compare-swap on PE 0: PEs 1..N-1 take tickets in turn.
     * PE 0 does not take part: on Open MPI 4.1.4 + UCX 1.13.1 a PE's
     * compare-swap on its own memory returns stale values (seen with
     * UCX_TLS=tcp,self too, so not a dcx matter). */
    for (i = 0; (me > 0) && (i < 50); ++i) {
        long want  = (long)i * (npes - 1) + (me - 1);
        long tries = 0;
        while ((old = shmem_long_atomic_compare_swap(&ticket, want, want + 1,
                                                     0)) != want &&
               old < want && ++tries < 1000000) {
        }
        CHECK(old == want, "compare_swap: ticket %ld, want %ld", old, want);
        if (old != want) {
            break;
        }
    }

    /* Swap chain: every PE swaps its id in; the values seen form a chain. */
    shmem_barrier_all();
    prev = shmem_long_atomic_swap(&swap_slot, me, 0);
    CHECK(prev >= -1 && prev < npes && prev != me, "swap returned %ld", prev);
    shmem_barrier_all();
    if (me == 0) {
        CHECK(ticket == 50L * (npes - 1),
              "compare_swap total %ld, expected %ld", ticket, 50L * (npes - 1));
    }
    for (pe = 0; pe < npes; ++pe) {
        shmem_barrier_all();
    }
}

int main(int argc, char **argv)
{
    static long pSync[SHMEM_REDUCE_SYNC_SIZE];
    static long pWrk[SHMEM_REDUCE_MIN_WRKDATA_SIZE];
    static long my_errors, all_errors, my_checks, all_checks;
    long *sym;
    int i;

    shmem_init();
    me   = shmem_my_pe();
    npes = shmem_n_pes();
    if (argc > 1) {
        if (me == 0) {
            fprintf(stderr, "usage: oshrun -np N %s   (N >= 2, no arguments)\n",
                    argv[0]);
        }
        shmem_finalize();
        return 2;
    }
    if (npes < 2) {
        fprintf(stderr,
                "shmem_check: needs at least 2 PEs (oshrun -np N, N >= 2)\n");
        shmem_finalize();
        return 2;
    }

    sym = shmem_malloc(MAX_ELEMS * sizeof(long));
    if (sym == NULL) {
        fprintf(stderr, "shmem_check: PE %d: shmem_malloc failed\n", me);
        shmem_global_exit(2);
    }

    check_put_get(sym);
    if (me == 0) {
        printf("shmem_check: put/get done\n");
        fflush(stdout);
    }
    check_strided(sym);
    if (me == 0) {
        printf("shmem_check: iput/iget done\n");
        fflush(stdout);
    }
    check_atomics();

    for (i = 0; i < SHMEM_REDUCE_SYNC_SIZE; ++i) {
        pSync[i] = SHMEM_SYNC_VALUE;
    }
    my_errors = errors;
    my_checks = checks;
    shmem_barrier_all();
    shmem_long_sum_to_all(&all_errors, &my_errors, 1, 0, 0, npes, pWrk, pSync);
    shmem_barrier_all();
    shmem_long_sum_to_all(&all_checks, &my_checks, 1, 0, 0, npes, pWrk, pSync);
    if (me == 0) {
        printf("shmem_check: atomics done\n");
        printf("shmem_check: %s: %d PEs, %ld checks, %ld failed\n",
               all_errors ? "FAIL" : "PASS", npes, all_checks, all_errors);
        fflush(stdout);
    }
    shmem_free(sym);
    shmem_finalize();
    return (all_errors || errors) ? 1 : 0;
}
