/* dcxemu heap: the fabric's shared allocator (CQ, SRQ and mkey storage). */
#define _GNU_SOURCE
#include "dcxemu_int.h"

#include <string.h>

/* First-fit allocator over the sparse heap, free list sorted by offset,
 * coalescing on free. Called with the fabric lock held. */

struct heap_blk {
    uint64_t size; /* including this header */
    uint64_t next_free;
    uint32_t free;
    uint32_t magic;
    uint64_t owner_token; /* member that allocated it: the reaper frees what a
                             dead one held */
};
#define HEAP_MAGIC 0x68656170u
#define HEAP_HDR   ((uint64_t)sizeof(struct heap_blk))

static struct heap_blk *blk(uint64_t off)
{
    return (struct heap_blk *)dcxemu_ptr(off);
}

void dcxemu_heap_init(void)
{
    struct heap_blk *b    = blk(dcxemu_fab->heap_off);
    b->size               = dcxemu_fab->heap_size;
    b->next_free          = 0;
    b->free               = 1;
    b->magic              = HEAP_MAGIC;
    dcxemu_fab->heap_free = dcxemu_fab->heap_off;
}

uint64_t dcxemu_heap_alloc(uint64_t size)
{
    uint64_t need  = (size + HEAP_HDR + 63) & ~63ull;
    uint64_t *link = &dcxemu_fab->heap_free;
    if (size == 0 || size > dcxemu_fab->heap_size) {
        return 0;
    }
    while (*link != 0) {
        uint64_t off       = *link;
        struct heap_blk *b = blk(off);
        if (b->size >= need) {
            if (b->size - need >= 256) {
                uint64_t rest      = off + need;
                struct heap_blk *r = blk(rest);
                r->size            = b->size - need;
                r->next_free       = b->next_free;
                r->free            = 1;
                r->magic           = HEAP_MAGIC;
                b->size            = need;
                *link              = rest;
            } else {
                *link = b->next_free;
            }
            b->owner_token = dcxemu_my_token;
            b->next_free   = 0;
            b->free        = 0; /* last: a dying allocator leaves a block
                                   dcxemu_heap_rebuild frees */
            return off + HEAP_HDR;
        }
        link = &b->next_free;
    }
    return 0;
}

void dcxemu_heap_free(uint64_t data_off)
{
    uint64_t off       = data_off - HEAP_HDR;
    struct heap_blk *b = blk(off), *prev = NULL;
    uint64_t *link = &dcxemu_fab->heap_free;
    if (data_off == 0 || b->magic != HEAP_MAGIC || b->free) {
        return;
    }
    while (*link != 0 && *link < off) {
        prev = blk(*link);
        link = &prev->next_free;
    }
    b->free      = 1;
    b->next_free = *link;
    *link        = off;
    if (b->next_free != 0 && off + b->size == b->next_free) {
        struct heap_blk *n = blk(b->next_free);
        b->size += n->size;
        b->next_free = n->next_free;
    }
    if (prev != NULL &&
        (uint64_t)((char *)prev - (char *)dcxemu_fab) + prev->size == off) {
        prev->size += b->size;
        prev->next_free = b->next_free;
    }
}

/* After a member died holding the fabric lock: rebuild the free list from the
 * block headers. Every update above keeps the headers walkable (a split writes
 * the new header before it shrinks the block; freeing is one store), so the
 * walk is always valid. */
void dcxemu_heap_rebuild(void)
{
    uint64_t off = dcxemu_fab->heap_off, end = off + dcxemu_fab->heap_size;
    uint64_t *link             = &dcxemu_fab->heap_free;
    struct heap_blk *prev_free = NULL;
    while (off < end) {
        struct heap_blk *b = blk(off);
        if (b->magic != HEAP_MAGIC || b->size < HEAP_HDR ||
            b->size > end - off) {
            break; /* cannot happen with the ordering above; stop rather than
                      guess */
        }
        if (b->free) {
            if (prev_free != NULL &&
                (uint64_t)((char *)prev_free - (char *)dcxemu_fab) +
                                prev_free->size ==
                        off) {
                prev_free->size += b->size;
            } else {
                b->next_free = 0;
                *link        = off;
                link         = &b->next_free;
                prev_free    = b;
            }
        }
        off += b->size;
    }
    *link = 0;
}

/* Fabric lock held: free every heap block a (dead) member still owns. */
void dcxemu_heap_free_owned(uint64_t token)
{
    uint64_t off = dcxemu_fab->heap_off, end = off + dcxemu_fab->heap_size;
    while (off < end) {
        struct heap_blk *b = blk(off);
        uint64_t next;
        if (b->magic != HEAP_MAGIC || b->size < HEAP_HDR ||
            b->size > end - off) {
            break;
        }
        next = off + b->size;
        if (!b->free && b->owner_token == token) {
            dcxemu_heap_free(off + HEAP_HDR);
        }
        off = next;
    }
}
