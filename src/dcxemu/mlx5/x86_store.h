/* Decoding of the x86-64 store instructions that can write a doorbell: the
 * doorbell trap (trap.c) emulates the one store that faulted on a protected
 * UAR page, so it needs where it writes, what and how long it is. */
#ifndef DCXEMU_MLX5_X86_STORE_H
#define DCXEMU_MLX5_X86_STORE_H

#include <stddef.h>
#include <stdint.h>
#include <ucontext.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The longest x86 instruction. */
#define DCXEMU_X86_INSN_MAX 15

/* Why an instruction is not a store the decoder knows. */
typedef enum {
    DCXEMU_X86_OK = 0,
    DCXEMU_X86_TRUNCATED, /* needs more bytes than given */
    DCXEMU_X86_PREFIX, /* a prefix it does not handle (fs/gs, 67, lock) */
    DCXEMU_X86_EVEX, /* EVEX (AVX-512) with a mask, broadcast or rounding */
    DCXEMU_X86_OPCODE, /* not a store it knows */
    DCXEMU_X86_REGISTER, /* mod=3: the destination is a register */
    DCXEMU_X86_NO_FPREGS /* an SSE/MMX store without saved FP registers, or
                            a wider one without the saved AVX (AVX-512)
                            state */
} dcxemu_x86_status_t;

/* A decoded store. */
typedef struct dcxemu_x86_store {
    uint64_t addr; /* effective address */
    uint64_t value; /* the stored value's low 64 bits, zero-extended */
    uint8_t bytes[64]; /* the bytes it writes, in memory order */
    unsigned size; /* bytes it writes: 1, 2, 4, 8, 16, 32 or 64 */
    unsigned length; /* bytes of the instruction */
    int fpregs; /* the value came from an xmm/ymm or mm register */
} dcxemu_x86_store_t;

/* Decode code[0..avail) (the instruction at the context's RIP) as a store,
 * with register values from uc: general registers from its gregs, xmm and mm
 * registers from its fpregs.  Async-signal-safe. */
dcxemu_x86_status_t dcxemu_x86_store_decode(const uint8_t *code, size_t avail,
                                            const ucontext_t *uc,
                                            dcxemu_x86_store_t *st);

/* A short reason for a status, for diagnostics. */
const char *dcxemu_x86_status_str(dcxemu_x86_status_t status);

#ifdef __cplusplus
}
#endif

#endif
