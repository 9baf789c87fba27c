/* dcxemu memory stage (mem.c): memory keys resolved into pieces of an address
 * space, the WRITE gather from indirect layouts, and UMR / LOCAL_INV. */
#ifndef DCXEMU_MEM_H
#define DCXEMU_MEM_H

#include "dcxemu_int.h"

#include <sys/uio.h>

/* Growable iovec list: an indirect mkey can turn one SGE into many pieces. */
struct iovbuf {
    struct iovec *v;
    int n, cap;
    struct iovec small[DCXEMU_MAX_SGE + 2];
};

/* The local mkey of one SGE of a gathered WRITE, copied under the fabric lock:
 * the gather runs after the lock is given back and must not read an mkey a UMR
 * may be rewriting. */
struct gather_key {
    struct dcxemu_shm_mkey k;
    struct dcxemu_mkey_entry
            *e; /* copy of k's entries; NULL: the SGE is a plain MR */
};

void dcxemu_iovbuf_init(struct iovbuf *b);

void dcxemu_iovbuf_fini(struct iovbuf *b);

int dcxemu_iovbuf_push(struct iovbuf *b, void *p, size_t len);

int dcxemu_resolve(uint32_t key, uint16_t owner, uint64_t token, uint64_t pd_id,
                   uint64_t addr, uint64_t len, uint32_t need,
                   struct iovbuf *out);

int dcxemu_sge_is_small_interleaved(const struct ibv_sge *sg);

/* Copy the mkeys of the n SGEs (fabric lock held, keys already checked).  0, or
 * -1: no memory. */
int dcxemu_gather_keys_take(const struct ibv_sge *sges, uint32_t n,
                            struct gather_key *g);

void dcxemu_gather_keys_free(struct gather_key *g, uint32_t n);

/* Move the checked local SGEs of a WRITE (their mkeys in g) to the remote
 * pieces of process pid, chunk by chunk through the staging buffer, in
 * ascending order (no lock held).  0 or errno as dcxemu_vm_copy. */
int dcxemu_gather_write(pid_t pid, const struct ibv_sge *sges,
                        const struct gather_key *g, uint32_t nsge,
                        const struct iovec *remote, int nr);

/* UMR and LOCAL_INV on the loopback RC QP: local key updates (fabric lock
 * held). */
struct exec_out;
void dcxemu_mem_local_op(struct dcxemu_qp *qp, struct dcxemu_wqe *w,
                         struct exec_out *o);

#endif
