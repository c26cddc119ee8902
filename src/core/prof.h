// core/prof — where a training step's time goes (`tessera train --profile`).
//
// A thread that wants a profile attaches one; code doing a kind of work
// brackets it with prof_begin/prof_end (GEMMs with prof_gemm, keyed by
// their shape). A thread with no profile attached records nothing, and the
// brackets cost it one branch: the comm progress thread, OpenMP's workers
// and every run without --profile. Brackets never nest: each one is a
// leaf (a kernel, a blocking wait), so the rows add up to the time they
// cover and the rest of the step is "other". A thread recording a timeline
// (core/trace, --trace) times the same brackets, and each one it closes
// inside the trace's steps is also an event of the trace.
#ifndef TSR_CORE_PROF_H
#define TSR_CORE_PROF_H

typedef enum {
    // GEMMs (M, N, K): C(M,N) = A(M,K)·B(K,N), one row per shape
    PROF_GEMM_FWD,    // out = inp · W^T
    PROF_GEMM_DX,     // dinp = dout · W
    PROF_GEMM_DW,     // dW += dout^T · inp
    PROF_ATTENTION,   // the fused causal attention, forward and backward
    PROF_LOSS,        // softmax + cross-entropy over the logits
    PROF_NORM,        // LayerNorm, RMSNorm
    PROF_POINTWISE,   // GELU, SwiGLU, RoPE, residual adds, bias gradients
    PROF_EMBEDDING,   // token and position lookups and their gradients
    PROF_HALF,        // 16-bit copies of weights and activations
    PROF_QUEUE,       // weight-gradient rows copied for a later product (kernels/matmul: matmul_defer)
    PROF_OPTIMIZER,   // AdamW
    PROF_GRADS,       // zeroing the gradients, their norm, the overflow scan
    PROF_LOADER,      // waiting for the next batch
    PROF_COMM,        // blocking collectives and waits on sends, receives and reductions
    PROF_CKPT,        // writing a checkpoint's files (after the steps that precede it)
    PROF_IO,          // waiting on the optimizer offload's disk reads and writes
    PROF_NKIND
} ProfKind;

typedef struct ProfRow {
    ProfKind kind;
    int m, n, k;                   // GEMM shape (0 for other kinds)
    double calls, seconds, flops, bytes;
} ProfRow;

#define PROF_MAX_ROWS 96

typedef struct Profile {
    int n;                         // rows used; rows past PROF_MAX_ROWS fold into the last
    ProfRow row[PROF_MAX_ROWS];
} Profile;

// Attaches p to the calling thread (NULL detaches); p is cleared.
void prof_attach(Profile *p);
// The calling thread's profile, NULL when none is attached.
Profile *prof_current(void);
// The start of a bracket: the time now, or 0 with no profile attached and
// no trace recording.
double prof_begin(void);
// The end of a bracket opened at t0 (nothing when t0 is 0): one call of
// kind, with its floating-point operations and the bytes it moves
// (either may be 0 when not meaningful).
void prof_end(double t0, ProfKind kind, double flops, double bytes);
// The end of a GEMM bracket: 2·m·n·k operations, a row per (kind, m, n, k).
void prof_gemm(double t0, ProfKind kind, int m, int n, int k);
// Adds src's rows to dst's.
void prof_merge(Profile *dst, const Profile *src);
// The kind's name in reports ("gemm fwd", "attention", ...), and as a
// JSON key ("gemm_fwd", "attention", ...).
const char *prof_kind_name(ProfKind kind);
const char *prof_kind_key(ProfKind kind);

#endif
