/*
 * Copyright (c) 2026, the dcx developers. See LICENSE for terms.
 *
 * mpi_check: an MPI program that verifies every byte it moves.
 * Point-to-point across eager and rendezvous sizes (blocking, non-blocking,
 * synchronous, any-source), collectives, and one-sided communication
 * (active and passive target, accumulate and atomics). Run under
 * mpirun -np N (N >= 2), optionally with one stage: p2p, coll or rma
 * (default: all); exits 0 only when every check passed on every
 * rank, 1 on a mismatch, 2 on misuse.
 */
#include <mpi.h>

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int rank, nprocs;
static long checks, errors;

#define CHECK(_cond, ...)                                      \
    do {                                                       \
        ++checks;                                              \
        if (!(_cond)) {                                        \
            if (++errors <= 10) {                              \
                fprintf(stderr, "mpi_check: rank %d: ", rank); \
                fprintf(stderr, __VA_ARGS__);                  \
                fputc('\n', stderr);                           \
            }                                                  \
        }                                                      \
    } while (0)

/* The byte at offset i of a message from src to dst of a given length. */
static unsigned char pattern(int src, int dst, size_t len, size_t i)
{
    return (unsigned char)(src * 131 + dst * 17 + len * 7 + i * 29 + (i >> 8));
}

static void fill(unsigned char *buf, int src, int dst, size_t len)
{
    size_t i;
    for (i = 0; i < len; ++i) {
        buf[i] = pattern(src, dst, len, i);
    }
}

/* Returns the first wrong offset, or -1. */
static long verify(const unsigned char *buf, int src, int dst, size_t len)
{
    size_t i;
    for (i = 0; i < len; ++i) {
        if (buf[i] != pattern(src, dst, len, i)) {
            return (long)i;
        }
    }
    return -1;
}

static void *xmalloc(size_t len)
{
    void *p = malloc(len ? len : 1);
    if (p == NULL) {
        fprintf(stderr, "mpi_check: rank %d: out of memory (%zu bytes)\n", rank,
                len);
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    return p;
}

/* Eager to rendezvous: UCX switches protocols around 8 KiB (bcopy) and
 * tens of KiB (rendezvous) by default. */
static const size_t sizes[] = { 0,    1,     7,     64,     1000,    4096,
                                8192, 12345, 65536, 262144, 1 << 20, 4 << 20 };
#define NUM_SIZES (sizeof(sizes) / sizeof(sizes[0]))

static void check_ring(void)
{
    int right = (rank + 1) % nprocs, left = (rank + nprocs - 1) % nprocs;
    size_t s;
    long bad;

    for (s = 0; s < NUM_SIZES; ++s) {
        size_t len          = sizes[s];
        unsigned char *sbuf = xmalloc(len), *rbuf = xmalloc(len);
        MPI_Status st;
        int count;

        fill(sbuf, rank, right, len);
        memset(rbuf, 0xee, len);
        MPI_Sendrecv(sbuf, (int)len, MPI_BYTE, right, 100 + (int)s, rbuf,
                     (int)len, MPI_BYTE, left, 100 + (int)s, MPI_COMM_WORLD,
                     &st);
        MPI_Get_count(&st, MPI_BYTE, &count);
        CHECK((size_t)count == len, "sendrecv %zu B: received %d B", len,
              count);
        bad = verify(rbuf, left, rank, len);
        CHECK(bad < 0, "sendrecv %zu B from %d: wrong byte at %ld", len, left,
              bad);

        /* Synchronous send one way, then back. */
        memset(rbuf, 0xee, len);
        if (rank % 2 == 0) {
            MPI_Ssend(sbuf, (int)len, MPI_BYTE, right, 200, MPI_COMM_WORLD);
            MPI_Recv(rbuf, (int)len, MPI_BYTE, left, 200, MPI_COMM_WORLD, &st);
        } else {
            MPI_Recv(rbuf, (int)len, MPI_BYTE, left, 200, MPI_COMM_WORLD, &st);
            MPI_Ssend(sbuf, (int)len, MPI_BYTE, right, 200, MPI_COMM_WORLD);
        }
        bad = verify(rbuf, left, rank, len);
        CHECK(bad < 0, "ssend %zu B from %d: wrong byte at %ld", len, left,
              bad);
        free(sbuf);
        free(rbuf);
    }
}

/* Every rank sends to every other rank at once, posted receives first on
 * odd sizes and unexpected messages (sends first) on even ones. */
static void check_all_to_all_nb(void)
{
    size_t s;
    int peer;

    for (s = 0; s < NUM_SIZES; ++s) {
        size_t len           = sizes[s];
        unsigned char **sbuf = xmalloc(nprocs * sizeof(*sbuf));
        unsigned char **rbuf = xmalloc(nprocs * sizeof(*rbuf));
        MPI_Request *req     = xmalloc(2 * nprocs * sizeof(*req));
        int nreq             = 0;

        for (peer = 0; peer < nprocs; ++peer) {
            sbuf[peer] = xmalloc(len);
            rbuf[peer] = xmalloc(len);
            fill(sbuf[peer], rank, peer, len);
            memset(rbuf[peer], 0xee, len);
        }
        if (s % 2) {
            for (peer = 0; peer < nprocs; ++peer) {
                MPI_Irecv(rbuf[peer], (int)len, MPI_BYTE, peer, 300,
                          MPI_COMM_WORLD, &req[nreq++]);
            }
            MPI_Barrier(MPI_COMM_WORLD);
        }
        for (peer = 0; peer < nprocs; ++peer) {
            MPI_Isend(sbuf[peer], (int)len, MPI_BYTE, peer, 300, MPI_COMM_WORLD,
                      &req[nreq++]);
        }
        if (!(s % 2)) {
            MPI_Barrier(MPI_COMM_WORLD);
            for (peer = 0; peer < nprocs; ++peer) {
                MPI_Irecv(rbuf[peer], (int)len, MPI_BYTE, peer, 300,
                          MPI_COMM_WORLD, &req[nreq++]);
            }
        }
        MPI_Waitall(nreq, req, MPI_STATUSES_IGNORE);
        for (peer = 0; peer < nprocs; ++peer) {
            long bad = verify(rbuf[peer], peer, rank, len);
            CHECK(bad < 0, "isend/irecv %zu B from %d: wrong byte at %ld", len,
                  peer, bad);
            free(sbuf[peer]);
            free(rbuf[peer]);
        }
        free(sbuf);
        free(rbuf);
        free(req);
    }
}

/* Rank 0 receives from MPI_ANY_SOURCE with a probe for the size. */
static void check_any_source(void)
{
    size_t len = 50000;
    int i;

    if (rank == 0) {
        for (i = 1; i < nprocs; ++i) {
            MPI_Status st;
            int count;
            unsigned char *buf;

            MPI_Probe(MPI_ANY_SOURCE, 400, MPI_COMM_WORLD, &st);
            MPI_Get_count(&st, MPI_BYTE, &count);
            buf = xmalloc(count);
            MPI_Recv(buf, count, MPI_BYTE, st.MPI_SOURCE, 400, MPI_COMM_WORLD,
                     &st);
            CHECK((size_t)count == len + st.MPI_SOURCE, "probe: %d B from %d",
                  count, st.MPI_SOURCE);
            CHECK(verify(buf, st.MPI_SOURCE, 0, count) < 0,
                  "any-source data from %d", st.MPI_SOURCE);
            free(buf);
        }
    } else {
        unsigned char *buf = xmalloc(len + rank);
        fill(buf, rank, 0, len + rank);
        MPI_Send(buf, (int)(len + rank), MPI_BYTE, 0, 400, MPI_COMM_WORLD);
        free(buf);
    }
}

static void check_collectives(void)
{
    const int n = 1 << 18; /* 1 MiB of ints: rendezvous-sized collectives */
    int *a = xmalloc(n * sizeof(int)), *b = xmalloc(n * sizeof(int));
    int *all = xmalloc((size_t)nprocs * 1024 * sizeof(int));
    int i, root, r, bad;
    long long lsum, expect;

    for (root = 0; root < nprocs; ++root) {
        for (i = 0; i < n; ++i) {
            a[i] = (rank == root) ? i * 3 + root : -1;
        }
        MPI_Bcast(a, n, MPI_INT, root, MPI_COMM_WORLD);
        for (i = 0, bad = -1; i < n && bad < 0; ++i) {
            if (a[i] != i * 3 + root) {
                bad = i;
            }
        }
        CHECK(bad < 0, "bcast from %d: wrong element %d", root, bad);
    }

    for (i = 0; i < n; ++i) {
        a[i] = i + rank;
    }
    MPI_Allreduce(a, b, n, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    for (i = 0, bad = -1; i < n && bad < 0; ++i) {
        if (b[i] != nprocs * i + nprocs * (nprocs - 1) / 2) {
            bad = i;
        }
    }
    CHECK(bad < 0, "allreduce: wrong element %d", bad);

    lsum = rank + 1;
    MPI_Reduce(rank == 0 ? MPI_IN_PLACE : &lsum, &lsum, 1, MPI_LONG_LONG,
               MPI_SUM, 0, MPI_COMM_WORLD);
    expect = (long long)nprocs * (nprocs + 1) / 2;
    if (rank == 0) {
        CHECK(lsum == expect, "reduce: %lld, expected %lld", lsum, expect);
    }

    for (i = 0; i < 1024; ++i) {
        a[i] = rank * 100000 + i;
    }
    MPI_Allgather(a, 1024, MPI_INT, all, 1024, MPI_INT, MPI_COMM_WORLD);
    for (r = 0, bad = -1; r < nprocs && bad < 0; ++r) {
        for (i = 0; i < 1024; ++i) {
            if (all[r * 1024 + i] != r * 100000 + i) {
                bad = r * 1024 + i;
                break;
            }
        }
    }
    CHECK(bad < 0, "allgather: wrong element %d", bad);

    /* Alltoall: element j of block d from rank s is s*1000000 + d*1000 + j. */
    for (r = 0; r < nprocs; ++r) {
        for (i = 0; i < 1024; ++i) {
            all[r * 1024 + i] = rank * 1000000 + r * 1000 + i;
        }
    }
    MPI_Alltoall(all, 1024, MPI_INT, b, 1024, MPI_INT, MPI_COMM_WORLD);
    for (r = 0, bad = -1; r < nprocs && bad < 0; ++r) {
        for (i = 0; i < 1024; ++i) {
            if (b[r * 1024 + i] != r * 1000000 + rank * 1000 + i) {
                bad = r * 1024 + i;
                break;
            }
        }
    }
    CHECK(bad < 0, "alltoall: wrong element %d", bad);

    MPI_Barrier(MPI_COMM_WORLD);
    free(a);
    free(b);
    free(all);
}

static void check_one_sided(void)
{
    const int n = 1 << 17; /* window of 128 Ki longs = 1 MiB */
    long *base, *buf = xmalloc(n * sizeof(long));
    long value, result, compare;
    int right = (rank + 1) % nprocs, left = (rank + nprocs - 1) % nprocs;
    int i, bad, round;
    MPI_Win win;

    MPI_Win_allocate((MPI_Aint)n * sizeof(long), sizeof(long), MPI_INFO_NULL,
                     MPI_COMM_WORLD, &base, &win);
    for (i = 0; i < n; ++i) {
        base[i] = -1;
    }

    /* Active target: put to the right neighbour, get from the left. */
    MPI_Win_fence(0, win);
    for (i = 0; i < n; ++i) {
        buf[i] = (long)rank * n + i;
    }
    MPI_Put(buf, n, MPI_LONG, right, 0, n, MPI_LONG, win);
    MPI_Win_fence(0, win);
    for (i = 0, bad = -1; i < n && bad < 0; ++i) {
        if (base[i] != (long)left * n + i) {
            bad = i;
        }
    }
    CHECK(bad < 0, "put from %d: wrong element %d", left, bad);

    memset(buf, 0, n * sizeof(long));
    MPI_Get(buf, n, MPI_LONG, left, 0, n, MPI_LONG, win);
    MPI_Win_fence(0, win);
    /* The left neighbour's window holds what its own left neighbour put. */
    for (i = 0, bad = -1; i < n && bad < 0; ++i) {
        if (buf[i] != (long)((left + nprocs - 1) % nprocs) * n + i) {
            bad = i;
        }
    }
    CHECK(bad < 0, "get from %d: wrong element %d", left, bad);

    /* Small strided puts: every 7th element of the first 7000. */
    for (i = 0; i < 1000; ++i) {
        buf[i] = 5000000 + rank * 1000 + i;
    }
    MPI_Datatype vec;
    MPI_Type_vector(1000, 1, 7, MPI_LONG, &vec);
    MPI_Type_commit(&vec);
    MPI_Put(buf, 1000, MPI_LONG, right, 0, 1, vec, win);
    MPI_Win_fence(0, win);
    MPI_Type_free(&vec);
    for (i = 0, bad = -1; i < 1000 && bad < 0; ++i) {
        if (base[i * 7] != 5000000 + left * 1000 + i) {
            bad = i;
        }
    }
    CHECK(bad < 0, "strided put from %d: wrong element %d", left, bad);

    /* Accumulate into rank 0 from everybody, and contended atomics on
     * element 0 of rank 0 under passive-target locks. */
    base[1] = 0;
    base[2] = 0;
    base[3] = 0;
    MPI_Win_fence(0, win);
    value = rank + 1;
    MPI_Accumulate(&value, 1, MPI_LONG, 0, 1, 1, MPI_LONG, MPI_SUM, win);
    MPI_Win_fence(0, win);
    if (rank == 0) {
        CHECK(base[1] == (long)nprocs * (nprocs + 1) / 2, "accumulate: %ld",
              base[1]);
    }
    MPI_Win_fence(0, win);

    for (round = 0; round < 200; ++round) {
        value = 1;
        MPI_Win_lock(MPI_LOCK_SHARED, 0, 0, win);
        MPI_Fetch_and_op(&value, &result, MPI_LONG, 0, 2, MPI_SUM, win);
        MPI_Win_unlock(0, win);
        CHECK(result >= 0 && result < 200L * nprocs, "fetch_and_op result %ld",
              result);
    }

    /* Compare-and-swap: ranks 1..N-1 claim slot 3 of rank 0 in turn (spin
     * until the slot holds the previous claimant's count). Rank 0 does not
     * take part: Open MPI 4.1.4's osc ucx returns stale compare-and-swap
     * results for a rank's own window over UCX's "self" transport (seen
     * with UCX_TLS=tcp,self and sm,self as well). */
    for (round = 0; (rank > 0) && (round < 20); ++round) {
        long want  = (long)round * (nprocs - 1) + (rank - 1);
        long tries = 0;
        do {
            compare = want;
            value   = want + 1;
            MPI_Win_lock(MPI_LOCK_EXCLUSIVE, 0, 0, win);
            MPI_Compare_and_swap(&value, &compare, &result, MPI_LONG, 0, 3,
                                 win);
            MPI_Win_unlock(0, win);
        } while ((result != want) && (result < want) && (++tries < 1000000));
        CHECK(result == want,
              "compare_and_swap round %d: slot holds %ld, want %ld", round,
              result, want);
        if (result != want) {
            break;
        }
    }
    MPI_Barrier(MPI_COMM_WORLD);
    if (rank == 0) {
        MPI_Win_lock(MPI_LOCK_SHARED, 0, 0, win);
        MPI_Win_unlock(0, win);
        CHECK(base[2] == 200L * nprocs, "fetch_and_op total %ld, expected %ld",
              base[2], 200L * nprocs);
        CHECK(base[3] == 20L * (nprocs - 1),
              "compare_and_swap total %ld, expected %ld", base[3],
              20L * (nprocs - 1));
    }
    MPI_Barrier(MPI_COMM_WORLD);
    MPI_Win_free(&win);
    free(buf);
}

/* The same accumulate and fetch-and-op on 32-bit integers (osc ucx asks UCP
 * for 32- and 64-bit atomics; UCP uses device atomics only if the transport
 * has both widths). */
static void check_one_sided_int(void)
{
    int *base, value, result, round;
    MPI_Win win;

    MPI_Win_allocate(4 * sizeof(int), sizeof(int), MPI_INFO_NULL,
                     MPI_COMM_WORLD, &base, &win);
    base[0] = base[1] = base[2] = base[3] = 0;
    MPI_Win_fence(0, win);
    value = rank + 1;
    MPI_Accumulate(&value, 1, MPI_INT, 0, 1, 1, MPI_INT, MPI_SUM, win);
    MPI_Win_fence(0, win);
    if (rank == 0) {
        CHECK(base[1] == nprocs * (nprocs + 1) / 2, "int accumulate: %d",
              base[1]);
    }
    MPI_Win_fence(0, win);
    for (round = 0; round < 200; ++round) {
        value = 1;
        MPI_Win_lock(MPI_LOCK_SHARED, 0, 0, win);
        MPI_Fetch_and_op(&value, &result, MPI_INT, 0, 2, MPI_SUM, win);
        MPI_Win_unlock(0, win);
        CHECK(result >= 0 && result < 200 * nprocs,
              "int fetch_and_op result %d", result);
    }
    MPI_Barrier(MPI_COMM_WORLD);
    if (rank == 0) {
        MPI_Win_lock(MPI_LOCK_SHARED, 0, 0, win);
        MPI_Win_unlock(0, win);
        CHECK(base[2] == 200 * nprocs, "int fetch_and_op total %d, expected %d",
              base[2], 200 * nprocs);
        CHECK(base[0] == 0 && base[3] == 0, "int neighbours changed: %d %d",
              base[0], base[3]);
    }
    MPI_Barrier(MPI_COMM_WORLD);
    MPI_Win_free(&win);
}

int main(int argc, char **argv)
{
    long total_errors = 0, total_checks = 0;
    double start;

    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &nprocs);
    const char *stage = (argc > 1) ? argv[1] : "all";
    int p2p           = !strcmp(stage, "all") || !strcmp(stage, "p2p");
    int coll          = !strcmp(stage, "all") || !strcmp(stage, "coll");
    int rma           = !strcmp(stage, "all") || !strcmp(stage, "rma");
    if ((argc > 2) || !(p2p || coll || rma)) {
        if (rank == 0) {
            fprintf(stderr,
                    "usage: mpirun -np N %s [all|p2p|coll|rma]   (N >= 2)\n",
                    argv[0]);
        }
        MPI_Finalize();
        return 2;
    }
    if (nprocs < 2) {
        fprintf(stderr,
                "mpi_check: needs at least 2 ranks (mpirun -np N, N >= 2)\n");
        MPI_Finalize();
        return 2;
    }

    start = MPI_Wtime();
    if (p2p) {
        check_ring();
        check_all_to_all_nb();
        check_any_source();
        if (rank == 0) {
            printf("mpi_check: point-to-point done (%zu sizes, 0 B .. %zu B)\n",
                   NUM_SIZES, sizes[NUM_SIZES - 1]);
            fflush(stdout);
        }
    }
    if (coll) {
        check_collectives();
        if (rank == 0) {
            printf("mpi_check: collectives done\n");
            fflush(stdout);
        }
    }
    if (rma) {
        check_one_sided();
        check_one_sided_int();
        if (rank == 0) {
            printf("mpi_check: one-sided done\n");
            fflush(stdout);
        }
    }

    MPI_Allreduce(&errors, &total_errors, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
    MPI_Allreduce(&checks, &total_checks, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
    if (rank == 0) {
        printf("mpi_check: %s (%s): %d ranks, %ld checks, %ld failed, %.2f s\n",
               total_errors ? "FAIL" : "PASS", stage, nprocs, total_checks,
               total_errors, MPI_Wtime() - start);
        fflush(stdout);
    }
    MPI_Finalize();
    return total_errors ? 1 : 0;
}
