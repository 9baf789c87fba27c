/* x86-64 store decoder: the moves a compiler emits for a doorbell (REX.W 89 in
 * libmlx5 and UCX), their narrower and immediate forms, and the SSE, MMX and
 * VEX stores of memcpy-like code.  Anything else is refused with a reason:
 * the trap must never guess what an instruction wrote. */
#define _GNU_SOURCE
#include "x86_store.h"

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
    int vex; /* VEX-encoded */
    int vex_l; /* VEX.L: 256-bit */
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

/* ModRM, SIB and displacement of a memory operand. */
static dcxemu_x86_status_t x86_modrm(x86_insn_t *in)
{
    uint8_t modrm, sib;
    unsigned mod, rm;
    if (!x86_byte(in, &modrm)) {
        return DCXEMU_X86_TRUNCATED;
    }
    mod       = modrm >> 6;
    rm        = modrm & 7;
    in->reg   = ((modrm >> 3) & 7) | ((in->rex & X86_REX_R) ? 8 : 0);
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
        return x86_signed(in, 1, &in->disp) ? DCXEMU_X86_OK :
                                              DCXEMU_X86_TRUNCATED;
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
    unsigned vec  = in->vex_l ? 32 : 16;
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
        return (in->simd == 0x66 || in->simd == 0xf3) ? DCXEMU_X86_OK :
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
 * in the FXSAVE area's software bytes): the upper 128 bits of ymm n, zero
 * when the AVX state is in its initial configuration.  0, or -1 when the
 * frame carries no AVX state. */
#define X86_FP_XSTATE_MAGIC1 0x46505853u
#define X86_XSAVE_HDR_OFFSET 512
#define X86_XSAVE_YMM_OFFSET 576
#define X86_XFEATURE_YMM     (1ull << 2)

static int
x86_ymm_high(const struct _libc_fpstate *fp, unsigned n, uint8_t *out)
{
    const uint8_t *img = (const uint8_t *)fp;
    uint64_t xfeatures, xstate_bv;
    uint32_t magic1;

    /* sw_reserved: magic1, extended_size, xfeatures, xstate_size */
    memcpy(&magic1, &fp->__glibc_reserved1[12], sizeof(magic1));
    memcpy(&xfeatures, &fp->__glibc_reserved1[14], sizeof(xfeatures));
    if ((magic1 != X86_FP_XSTATE_MAGIC1) || !(xfeatures & X86_XFEATURE_YMM)) {
        return -1;
    }
    memcpy(&xstate_bv, img + X86_XSAVE_HDR_OFFSET, sizeof(xstate_bv));
    if (!(xstate_bv & X86_XFEATURE_YMM)) {
        memset(out, 0, 16);
    } else {
        memcpy(out, img + X86_XSAVE_YMM_OFFSET + 16 * n, 16);
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
        *value = fp->_xmm[in->reg].element[0] |
                 ((uint64_t)fp->_xmm[in->reg].element[1] << 32);
        memcpy(bytes, &fp->_xmm[in->reg], 16);
        if ((size == 32) && (x86_ymm_high(fp, in->reg, bytes + 16) != 0)) {
            return DCXEMU_X86_NO_FPREGS;
        }
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
    in.code  = code;
    in.avail = avail;
    status   = x86_prefixes(&in);
    if (status != DCXEMU_X86_OK) {
        return status;
    }
    if (!x86_byte(&in, &op)) {
        return DCXEMU_X86_TRUNCATED;
    }
    if (op == 0x62) {
        return DCXEMU_X86_EVEX; /* 64-bit mode: always EVEX, never BOUND */
    }
    if (op == 0xc4 || op == 0xc5) {
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
        return "EVEX (AVX-512) instruction";
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
