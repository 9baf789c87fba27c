/* x86-64 store decoder: the moves a compiler emits for a doorbell (REX.W 89 in
 * libmlx5 and UCX), their narrower and immediate forms, and the SSE, MMX,
 * VEX and EVEX stores of memcpy-like code (glibc's memcpy copies a
 * BlueFlame WQE with 64-byte zmm stores where the CPU has AVX-512).
 * Anything else is refused with a reason: the trap must never guess what an
 * instruction wrote. */
#define _GNU_SOURCE
#include "x86_store.h"

#include <cpuid.h>
#include <string.h>

/* The gregs slot of each register number of the encoding (rax..r15). */
static const int x86_gregs[16] = { REG_RAX, REG_RCX, REG_RDX, REG_RBX,
                                   REG_RSP, REG_RBP, REG_RSI, REG_RDI,
                                   REG_R8,  REG_R9,  REG_R10, REG_R11,
                                   REG_R12, REG_R13, REG_R14, REG_R15 };

#define X86_REX_B 0x1
#define X86_REX_X 0x2
#define X86_REX_R 0x4
#define X86_REX_W 0x8

/* Where the stored value comes from. */
typedef enum {
    X86_SRC_GPR, /* general register, ModRM.reg */
    X86_SRC_GPR8, /* byte register, ModRM.reg (ah..bh without REX) */
    X86_SRC_IMM, /* immediate after the displacement */
    X86_SRC_XMM, /* xmm/ymm register, ModRM.reg */
    X86_SRC_MM /* MMX register, ModRM.reg */
} x86_src_t;

/* The instruction as read so far. */
typedef struct {
    const uint8_t *code;
    size_t avail;
    size_t pos;
    unsigned rex; /* W, R, X, B bits, from REX or VEX */
    int has_rex; /* a REX byte (changes the byte registers) */
    unsigned simd; /* the SSE mandatory prefix (or VEX.pp): 0, 66, f2, f3 */
    int osize; /* a 66 prefix: 16-bit operands */
    int vex; /* VEX- or EVEX-encoded */
    int vex_l; /* VEX.L: 256-bit */
    unsigned vlen; /* EVEX: the vector's bytes (16, 32, 64), else 0 */
    unsigned reg_hi; /* EVEX.R': 16 more to the register number */
    unsigned disp8_n; /* EVEX: what an 8-bit displacement counts in */
    /* the ModRM memory operand */
    unsigned reg;
    int base; /* register number, -1: none */
    int index; /* register number, -1: none */
    unsigned scale;
    int64_t disp;
    int riprel;
} x86_insn_t;

static int x86_byte(x86_insn_t *in, uint8_t *b)
{
    if (in->pos >= in->avail || in->pos >= DCXEMU_X86_INSN_MAX) {
        return 0;
    }
    *b = in->code[in->pos++];
    return 1;
}

/* A little-endian signed field of n bytes (1, 2 or 4). */
static int x86_signed(x86_insn_t *in, unsigned n, int64_t *v)
{
    uint64_t u = 0;
    unsigned i;
    uint8_t b;
    for (i = 0; i < n; ++i) {
        if (!x86_byte(in, &b)) {
            return 0;
        }
        u |= (uint64_t)b << (8 * i);
    }
    *v = (int64_t)(u << (64 - 8 * n)) >> (64 - 8 * n);
    return 1;
}

/* Legacy prefixes: the ones that do not change the address are taken. */
static dcxemu_x86_status_t x86_prefixes(x86_insn_t *in)
{
    uint8_t b;
    for (;;) {
        if (!x86_byte(in, &b)) {
            return DCXEMU_X86_TRUNCATED;
        }
        switch (b) {
        case 0x66:
            in->osize = 1;
            if (in->simd == 0) {
                in->simd = 0x66;
            }
            break;
        case 0xf2:
        case 0xf3:
            in->simd = b; /* the last of f2/f3 wins over 66 */
            break;
        case 0x26: /* es, cs, ss, ds: no segment base in 64-bit mode */
        case 0x2e:
        case 0x36:
        case 0x3e:
            break;
        case 0x64: /* fs, gs: a segment base we do not have */
        case 0x65:
        case 0x67: /* 32-bit addressing */
        case 0xf0: /* lock: not on a plain store */
            return DCXEMU_X86_PREFIX;
        default:
            in->pos--;
            if ((b & 0xf0) == 0x40) {
                in->rex     = b & 0xf;
                in->has_rex = 1;
                in->pos++;
            }
            return DCXEMU_X86_OK;
        }
    }
}

/* A VEX prefix (c4/c5, the byte already read): its register extension bits,
 * mandatory prefix and length; only map 0f is taken.  Returns the opcode. */
static dcxemu_x86_status_t x86_vex(x86_insn_t *in, uint8_t first, uint8_t *op)
{
    uint8_t b1, b2;
    if (in->has_rex || in->simd || in->osize) {
        return DCXEMU_X86_OPCODE; /* #UD before VEX */
    }
    if (!x86_byte(in, &b1)) {
        return DCXEMU_X86_TRUNCATED;
    }
    if (first == 0xc5) {
        in->rex = (b1 & 0x80) ? 0 : X86_REX_R;
        b2      = b1;
    } else {
        if ((b1 & 0x1f) != 1) {
            return DCXEMU_X86_OPCODE; /* maps 0f38, 0f3a: no stores here */
        }
        if (!x86_byte(in, &b2)) {
            return DCXEMU_X86_TRUNCATED;
        }
        in->rex = ((b1 & 0x80) ? 0 : X86_REX_R) |
                  ((b1 & 0x40) ? 0 : X86_REX_X) |
                  ((b1 & 0x20) ? 0 : X86_REX_B) | ((b2 & 0x80) ? X86_REX_W : 0);
    }
    in->vex   = 1;
    in->vex_l = (b2 >> 2) & 1;
    in->simd  = (const unsigned[]){ 0, 0x66, 0xf3, 0xf2 }[b2 & 3];
    return x86_byte(in, op) ? DCXEMU_X86_OK : DCXEMU_X86_TRUNCATED;
}

/* An EVEX prefix (the 62 already read): register extension bits (R' gives
 * registers 16-31), mandatory prefix and vector length; only map 0f, and
 * neither masking (which bytes a masked store writes depends on a k
 * register) nor broadcast or rounding.  Returns the opcode. */
static dcxemu_x86_status_t x86_evex(x86_insn_t *in, uint8_t *op)
{
    uint8_t p0, p1, p2;
    unsigned ll;
    if (in->has_rex || in->simd || in->osize) {
        return DCXEMU_X86_OPCODE; /* #UD before EVEX */
    }
    if (!x86_byte(in, &p0) || !x86_byte(in, &p1) || !x86_byte(in, &p2)) {
        return DCXEMU_X86_TRUNCATED;
    }
    ll = (p2 >> 5) & 3;
    if (((p0 & 0x0c) != 0) || !(p1 & 0x04) || ((p0 & 3) != 1)) {
        return DCXEMU_X86_OPCODE; /* reserved bits, or not map 0f */
    }
    if (((p2 & 0x07) != 0) || (p2 & 0x10) || (ll == 3)) {
        return DCXEMU_X86_EVEX;
    }
    in->rex = ((p0 & 0x80) ? 0 : X86_REX_R) | ((p0 & 0x40) ? 0 : X86_REX_X) |
              ((p0 & 0x20) ? 0 : X86_REX_B) | ((p1 & 0x80) ? X86_REX_W : 0);
    in->reg_hi = (p0 & 0x10) ? 0 : 16;
    in->vex    = 1;
    in->vex_l  = ll != 0;
    in->vlen   = 16u << ll;
    in->simd   = (const unsigned[]){ 0, 0x66, 0xf3, 0xf2 }[p1 & 3];
    return x86_byte(in, op) ? DCXEMU_X86_OK : DCXEMU_X86_TRUNCATED;
}

/* ModRM, SIB and displacement of a memory operand. */
static dcxemu_x86_status_t x86_modrm(x86_insn_t *in)
{
    uint8_t modrm, sib;
    unsigned mod, rm;
    if (!x86_byte(in, &modrm)) {
        return DCXEMU_X86_TRUNCATED;
    }
    mod     = modrm >> 6;
    rm      = modrm & 7;
    in->reg = ((modrm >> 3) & 7) | ((in->rex & X86_REX_R) ? 8 : 0) | in->reg_hi;
    in->index = -1;
    in->scale = 0;
    in->disp  = 0;
    if (mod == 3) {
        return DCXEMU_X86_REGISTER;
    }
    if (rm == 4) {
        if (!x86_byte(in, &sib)) {
            return DCXEMU_X86_TRUNCATED;
        }
        in->scale = sib >> 6;
        in->index = ((sib >> 3) & 7) | ((in->rex & X86_REX_X) ? 8 : 0);
        if (in->index == 4) {
            in->index = -1; /* rsp cannot be an index: none */
        }
        in->base = (sib & 7) | ((in->rex & X86_REX_B) ? 8 : 0);
        if (mod == 0 && (sib & 7) == 5) {
            in->base = -1; /* disp32 without a base */
            mod      = 2;
        }
    } else if (mod == 0 && rm == 5) {
        in->riprel = 1;
        in->base   = -1;
        mod        = 2;
    } else {
        in->base = rm | ((in->rex & X86_REX_B) ? 8 : 0);
    }
    if (mod == 1) {
        if (!x86_signed(in, 1, &in->disp)) {
            return DCXEMU_X86_TRUNCATED;
        }
        in->disp *= in->disp8_n; /* EVEX: compressed (disp8 * N) */
        return DCXEMU_X86_OK;
    }
    if (mod == 2) {
        return x86_signed(in, 4, &in->disp) ? DCXEMU_X86_OK :
                                              DCXEMU_X86_TRUNCATED;
    }
    return DCXEMU_X86_OK;
}

/* The form of a one-byte opcode: source, size and immediate size. */
static dcxemu_x86_status_t x86_form1(x86_insn_t *in, uint8_t op, x86_src_t *src,
                                     unsigned *size, unsigned *imm)
{
    unsigned wide = (in->rex & X86_REX_W) ? 8 : (in->osize ? 2 : 4);
    switch (op) {
    case 0x88:
        *src  = X86_SRC_GPR8;
        *size = 1;
        return DCXEMU_X86_OK;
    case 0x89:
        *src  = X86_SRC_GPR;
        *size = wide;
        return DCXEMU_X86_OK;
    case 0xc6:
        *src  = X86_SRC_IMM;
        *size = *imm = 1;
        return DCXEMU_X86_OK;
    case 0xc7:
        *src  = X86_SRC_IMM;
        *size = wide;
        *imm  = (wide == 2) ? 2 : 4; /* REX.W: imm32 sign-extended */
        return DCXEMU_X86_OK;
    default:
        return DCXEMU_X86_OPCODE;
    }
}

/* The form of an opcode of map 0f, legacy or VEX. */
static dcxemu_x86_status_t
x86_form0f(x86_insn_t *in, uint8_t op, x86_src_t *src, unsigned *size)
{
    unsigned vec  = in->vlen ? in->vlen : in->vex_l ? 32 : 16;
    unsigned wide = (in->rex & X86_REX_W) ? 8 : 4;
    *src          = X86_SRC_XMM;
    switch (op) {
    case 0x11: /* movups, movupd, movss, movsd */
        *size = (in->simd == 0xf3) ? 4 : (in->simd == 0xf2) ? 8 : vec;
        return DCXEMU_X86_OK;
    case 0x29: /* movaps, movapd */
    case 0x2b: /* movntps, movntpd */
        *size = vec;
        return (in->simd == 0 || in->simd == 0x66) ? DCXEMU_X86_OK :
                                                     DCXEMU_X86_OPCODE;
    case 0x7f: /* movdqa, movdqu; movq from mm */
        if (in->simd == 0 && !in->vex) {
            *src  = X86_SRC_MM;
            *size = 8;
            return DCXEMU_X86_OK;
        }
        *size = vec;
        /* EVEX f2: vmovdqu8, vmovdqu16 */
        return (in->simd == 0x66 || in->simd == 0xf3 ||
                (in->simd == 0xf2 && in->vlen)) ?
                       DCXEMU_X86_OK :
                       DCXEMU_X86_OPCODE;
    case 0xe7: /* movntdq; movntq from mm */
        if (in->simd == 0 && !in->vex) {
            *src  = X86_SRC_MM;
            *size = 8;
            return DCXEMU_X86_OK;
        }
        *size = vec;
        return (in->simd == 0x66) ? DCXEMU_X86_OK : DCXEMU_X86_OPCODE;
    case 0xd6: /* movq from xmm */
        *size = 8;
        return (in->simd == 0x66 && !in->vex_l) ? DCXEMU_X86_OK :
                                                  DCXEMU_X86_OPCODE;
    case 0x7e: /* movd/movq from xmm or mm */
        if (in->simd == 0 && !in->vex) {
            *src  = X86_SRC_MM;
            *size = wide;
            return DCXEMU_X86_OK;
        }
        *size = wide;
        return (in->simd == 0x66 && !in->vex_l) ? DCXEMU_X86_OK :
                                                  DCXEMU_X86_OPCODE;
    case 0xc3: /* movnti */
        *src  = X86_SRC_GPR;
        *size = wide;
        return (in->simd == 0 && !in->vex) ? DCXEMU_X86_OK : DCXEMU_X86_OPCODE;
    default:
        return DCXEMU_X86_OPCODE;
    }
}

/* The signal frame's XSAVE image after the FXSAVE one (the kernel marks it
 * in the FXSAVE area's software bytes, and writes it in the standard form:
 * each component at the offset CPUID leaf 0xd gives).  len bytes of
 * component comp from byte off, zero when the component is in its initial
 * configuration.  0, or -1 when the frame does not carry it. */
#define X86_FP_XSTATE_MAGIC1 0x46505853u
#define X86_XSAVE_HDR_OFFSET 512
#define X86_XCOMP_YMM        2 /* upper 128 bits of ymm0-15 */
#define X86_XCOMP_ZMM_HI256  6 /* upper 256 bits of zmm0-15 */
#define X86_XCOMP_HI16_ZMM   7 /* zmm16-31 */

static int x86_xstate(const struct _libc_fpstate *fp, unsigned comp,
                      unsigned off, unsigned len, uint8_t *out)
{
    const uint8_t *img = (const uint8_t *)fp;
    uint64_t xfeatures, xstate_bv;
    unsigned eax, ebx, ecx, edx;
    uint32_t magic1, xstate_size;

    /* sw_reserved: magic1, extended_size, xfeatures, xstate_size */
    memcpy(&magic1, &fp->__glibc_reserved1[12], sizeof(magic1));
    memcpy(&xfeatures, &fp->__glibc_reserved1[14], sizeof(xfeatures));
    memcpy(&xstate_size, &fp->__glibc_reserved1[16], sizeof(xstate_size));
    if ((magic1 != X86_FP_XSTATE_MAGIC1) || !(xfeatures & (1ull << comp)) ||
        !__get_cpuid_count(0xd, comp, &eax, &ebx, &ecx, &edx) ||
        (ebx + off + len > xstate_size)) {
        return -1;
    }
    memcpy(&xstate_bv, img + X86_XSAVE_HDR_OFFSET, sizeof(xstate_bv));
    if (!(xstate_bv & (1ull << comp))) {
        memset(out, 0, len);
    } else {
        memcpy(out, img + ebx + off, len);
    }
    return 0;
}

/* The size bytes of vector register n (0-31): xmm from the FXSAVE image,
 * the rest from the XSAVE components. */
static int x86_vector(const struct _libc_fpstate *fp, unsigned n, unsigned size,
                      uint8_t *out)
{
    if (n >= 16) {
        return x86_xstate(fp, X86_XCOMP_HI16_ZMM, 64 * (n - 16), size, out);
    }
    memcpy(out, &fp->_xmm[n], (size < 16) ? size : 16);
    if ((size > 16) &&
        (x86_xstate(fp, X86_XCOMP_YMM, 16 * n, 16, out + 16) != 0)) {
        return -1;
    }
    if ((size > 32) &&
        (x86_xstate(fp, X86_XCOMP_ZMM_HI256, 32 * n, 32, out + 32) != 0)) {
        return -1;
    }
    return 0;
}

static uint64_t x86_greg(const ucontext_t *uc, int n)
{
    return (uint64_t)uc->uc_mcontext.gregs[x86_gregs[n]];
}

/* The value of a register operand: the low 64 bits of it, and for an
 * xmm/ymm register its @a size bytes. */
static dcxemu_x86_status_t x86_value(const x86_insn_t *in, const ucontext_t *uc,
                                     x86_src_t src, unsigned size,
                                     uint64_t *value, uint8_t *bytes)
{
    const struct _libc_fpstate *fp = uc->uc_mcontext.fpregs;
    const struct _libc_fpxreg *st;
    unsigned top;
    switch (src) {
    case X86_SRC_GPR8:
        if (!in->has_rex && in->reg >= 4 && in->reg < 8) {
            *value = x86_greg(uc, in->reg - 4) >> 8; /* ah, ch, dh, bh */
        } else {
            *value = x86_greg(uc, in->reg);
        }
        return DCXEMU_X86_OK;
    case X86_SRC_GPR:
        *value = x86_greg(uc, in->reg);
        return DCXEMU_X86_OK;
    case X86_SRC_XMM:
        if (fp == NULL) {
            return DCXEMU_X86_NO_FPREGS;
        }
        if (x86_vector(fp, in->reg, (size > 8) ? size : 8, bytes) != 0) {
            return DCXEMU_X86_NO_FPREGS;
        }
        memcpy(value, bytes, sizeof(*value));
        return DCXEMU_X86_OK;
    case X86_SRC_MM:
        if (fp == NULL) {
            return DCXEMU_X86_NO_FPREGS;
        }
        /* The FXSAVE image is in stack order: mmN is ST((N - TOP) mod 8). */
        top    = (fp->swd >> 11) & 7;
        st     = &fp->_st[((in->reg & 7) - top) & 7];
        *value = st->significand[0] | ((uint64_t)st->significand[1] << 16) |
                 ((uint64_t)st->significand[2] << 32) |
                 ((uint64_t)st->significand[3] << 48);
        return DCXEMU_X86_OK;
    default:
        return DCXEMU_X86_OPCODE;
    }
}

dcxemu_x86_status_t dcxemu_x86_store_decode(const uint8_t *code, size_t avail,
                                            const ucontext_t *uc,
                                            dcxemu_x86_store_t *st)
{
    x86_insn_t in;
    dcxemu_x86_status_t status;
    x86_src_t src = X86_SRC_GPR;
    unsigned size = 0, imm = 0;
    int64_t immv = 0;
    uint64_t value, rip;
    uint8_t op;

    memset(&in, 0, sizeof(in));
    in.code    = code;
    in.avail   = avail;
    in.disp8_n = 1;
    status     = x86_prefixes(&in);
    if (status != DCXEMU_X86_OK) {
        return status;
    }
    if (!x86_byte(&in, &op)) {
        return DCXEMU_X86_TRUNCATED;
    }
    if (op == 0x62) { /* 64-bit mode: always EVEX, never BOUND */
        status = x86_evex(&in, &op);
        if (status == DCXEMU_X86_OK) {
            status = x86_form0f(&in, op, &src, &size);
        }
        in.disp8_n = size; /* full-vector and scalar moves: N = size */
    } else if (op == 0xc4 || op == 0xc5) {
        status = x86_vex(&in, op, &op);
        if (status == DCXEMU_X86_OK) {
            status = x86_form0f(&in, op, &src, &size);
        }
    } else if (op == 0x0f) {
        if (!x86_byte(&in, &op)) {
            return DCXEMU_X86_TRUNCATED;
        }
        status = x86_form0f(&in, op, &src, &size);
    } else {
        status = x86_form1(&in, op, &src, &size, &imm);
    }
    if (status != DCXEMU_X86_OK) {
        return status;
    }

    status = x86_modrm(&in);
    if (status != DCXEMU_X86_OK) {
        return status;
    }
    if (src == X86_SRC_IMM) {
        if ((in.reg & 7) != 0) {
            return DCXEMU_X86_OPCODE; /* c6/c7 /1../7 are not moves */
        }
        if (!x86_signed(&in, imm, &immv)) {
            return DCXEMU_X86_TRUNCATED;
        }
        value = (uint64_t)immv;
    } else {
        status = x86_value(&in, uc, src, size, &value, st->bytes);
        if (status != DCXEMU_X86_OK) {
            return status;
        }
    }

    rip      = (uint64_t)uc->uc_mcontext.gregs[REG_RIP];
    st->addr = (uint64_t)in.disp;
    st->addr += in.riprel ? rip + in.pos : 0;
    st->addr += (in.base >= 0) ? x86_greg(uc, in.base) : 0;
    st->addr += (in.index >= 0) ? x86_greg(uc, in.index) << in.scale : 0;
    st->value = (size < 8) ? value & ((1ull << (8 * size)) - 1) : value;
    if (size <= 8) {
        memcpy(st->bytes, &st->value, sizeof(st->value)); /* little-endian */
    }
    st->size   = size;
    st->length = (unsigned)in.pos;
    st->fpregs = (src == X86_SRC_XMM) || (src == X86_SRC_MM);
    return DCXEMU_X86_OK;
}

const char *dcxemu_x86_status_str(dcxemu_x86_status_t status)
{
    switch (status) {
    case DCXEMU_X86_OK:
        return "a known store";
    case DCXEMU_X86_TRUNCATED:
        return "instruction bytes not readable";
    case DCXEMU_X86_PREFIX:
        return "unsupported prefix (fs/gs, addr32 or lock)";
    case DCXEMU_X86_EVEX:
        return "EVEX (AVX-512) store with a mask, broadcast or rounding";
    case DCXEMU_X86_OPCODE:
        return "not a store the trap knows";
    case DCXEMU_X86_REGISTER:
        return "register operand (mod=3)";
    case DCXEMU_X86_NO_FPREGS:
        return "no FP registers in the signal context";
    default:
        return "unknown";
    }
}
