// bench_dnnl — the linear layers' three products at gpt2-124m's shapes on
// oneDNN's matmul primitive (Debian's libdnnl, the library PyTorch's CPU
// path uses) beside tessera's own paths, in fp32 and bf16, each quoted
// against the register-only peak of its arithmetic (kernels/peak) for the
// same threads. A measurement for deciding whether to adopt oneDNN; built
// only where dnnl.h is installed (scripts/deps.sh --bench installs it).
//
//   bench_dnnl THREADS [ROWS ...]     (default rows: 256 2048)
//
// Products: forward out (N,OC) = inp (N,C) · weight (OC,C)^T; input
// gradient dinp (N,C) = dout (N,OC) · weight; weight gradient
// dweight (OC,C) += dout^T · inp.
// oneDNN: one primitive per shape, product and precision, made before the
// timing; operands in tessera's row-major layouts, the transposes given as
// strides; the weight gradient accumulates through a sum post-op. Under bf16
// its operands are converted to bf16 before the timing (not timed), as a
// bf16 trainer holds them; it sums and writes fp32. Its threads are OpenMP's
// (Debian's build), set to THREADS with tessera's.
// tessera: linear_forward / linear_backward in fp32, and with
// matmul_set_bf16(1), where the operands are rounded to bf16 as they are
// packed (timed); "bound" reads the weight from its bf16 copy
// (matmul_bind16), the activations and gradients still rounded in the pack.
// Each call runs with its operands evicted from cache (a 48 MiB sweep); the
// best of 5 calls is quoted. "diff": the largest difference between
// oneDNN's results and tessera's (fp32 against fp32, bf16 against the
// bound bf16 path and bf16's weight gradient), over the largest magnitude.
#include <dnnl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/alloc.h"
#include "core/half.h"
#include "core/timer.h"
#include "kernels/gemm_bf16.h"
#include "kernels/matmul.h"
#include "kernels/peak.h"

enum { REPS = 5 };

static float *g_sweep;
static void evict(void) {
    for (size_t i = 0; i < ((size_t)12 << 20); i += 16) g_sweep[i] += 1.0f;
}

static void fill(float *x, size_t n, unsigned seed) {
    for (size_t i = 0; i < n; i++) x[i] = (float)((i * 2654435761u + seed) % 1000) * 1e-3f - 0.5f;
}

static void dn(dnnl_status_t s, const char *what) {
    if (s == dnnl_success) return;
    fprintf(stderr, "bench_dnnl: %s failed (oneDNN status %d)\n", what, (int)s);
    exit(1);
}

// One oneDNN product C (M,NC) f32 (+)= A (M,K) · B (K,NC), A and B of type dt
// at the given element strides (row, column), C row-major.
typedef struct {
    dnnl_primitive_t prim;
    dnnl_memory_t a, b, c;
    char impl[64];
} Mm;

static void mm_init(Mm *m, dnnl_engine_t eng, dnnl_data_type_t dt, int M, int K, int NC, const void *a,
                    dnnl_dim_t as0, dnnl_dim_t as1, const void *b, dnnl_dim_t bs0, dnnl_dim_t bs1, float *c,
                    int accumulate) {
    dnnl_memory_desc_t amd, bmd, cmd;
    dnnl_dims_t ad = {M, K}, bd = {K, NC}, cd = {M, NC}, ast = {as0, as1}, bst = {bs0, bs1}, cst = {NC, 1};
    dn(dnnl_memory_desc_init_by_strides(&amd, 2, ad, dt, ast), "memory_desc (A)");
    dn(dnnl_memory_desc_init_by_strides(&bmd, 2, bd, dt, bst), "memory_desc (B)");
    dn(dnnl_memory_desc_init_by_strides(&cmd, 2, cd, dnnl_f32, cst), "memory_desc (C)");
    dnnl_matmul_desc_t desc;
    dn(dnnl_matmul_desc_init(&desc, &amd, &bmd, NULL, &cmd), "matmul_desc_init");
    dnnl_primitive_attr_t attr;
    dn(dnnl_primitive_attr_create(&attr), "primitive_attr_create");
    if (accumulate) {
        dnnl_post_ops_t po;
        dn(dnnl_post_ops_create(&po), "post_ops_create");
        dn(dnnl_post_ops_append_sum(po, 1.0f), "post_ops_append_sum");
        dn(dnnl_primitive_attr_set_post_ops(attr, po), "primitive_attr_set_post_ops");
        dnnl_post_ops_destroy(po);
    }
    dnnl_primitive_desc_t pd;
    dn(dnnl_primitive_desc_create(&pd, &desc, attr, eng, NULL), "primitive_desc_create (matmul)");
    const char *impl = "?";
    dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &impl);
    snprintf(m->impl, sizeof m->impl, "%s", impl);
    dn(dnnl_primitive_create(&m->prim, pd), "primitive_create");
    dnnl_primitive_desc_destroy(pd);
    dnnl_primitive_attr_destroy(attr);
    dn(dnnl_memory_create(&m->a, &amd, eng, (void *)a), "memory_create (A)");
    dn(dnnl_memory_create(&m->b, &bmd, eng, (void *)b), "memory_create (B)");
    dn(dnnl_memory_create(&m->c, &cmd, eng, c), "memory_create (C)");
}

static void mm_free(Mm *m) {
    dnnl_primitive_destroy(m->prim);
    dnnl_memory_destroy(m->a);
    dnnl_memory_destroy(m->b);
    dnnl_memory_destroy(m->c);
}

static void mm_exec(const Mm *m, dnnl_stream_t st) {
    dnnl_exec_arg_t args[3] = {{DNNL_ARG_SRC, m->a}, {DNNL_ARG_WEIGHTS, m->b}, {DNNL_ARG_DST, m->c}};
    dn(dnnl_primitive_execute(m->prim, st, 3, args), "primitive_execute");
    dn(dnnl_stream_wait(st), "stream_wait");
}

// The three products of one shape on oneDNN, in one precision: forward,
// input gradient, weight gradient. inp, weight, dout are float or bf16
// (uint16_t) as dt says; the outputs are fp32.
static void mm_shape(Mm m[3], dnnl_engine_t eng, dnnl_data_type_t dt, int N, int C, int OC, const void *inp,
                     const void *weight, const void *dout, float *out, float *dinp, float *dweight) {
    // out (N,OC) = inp (N,C) · weight^T: B (C,OC) is weight read by columns
    mm_init(&m[0], eng, dt, N, C, OC, inp, C, 1, weight, 1, C, out, 0);
    // dinp (N,C) = dout (N,OC) · weight (OC,C)
    mm_init(&m[1], eng, dt, N, OC, C, dout, OC, 1, weight, C, 1, dinp, 0);
    // dweight (OC,C) += dout^T (OC,N) · inp (N,C): A is dout read by columns
    mm_init(&m[2], eng, dt, OC, N, C, dout, 1, OC, inp, C, 1, dweight, 1);
}

typedef struct {
    int N, C, OC;
    float *x, *w, *y, *dy, *dx, *dw;   // x (N,C), w (OC,C), y and dy (N,OC), dx (N,C), dw (OC,C)
    const uint16_t *w16;               // w in bf16, for the bound path
} Operands;

// One call of tessera's product `what` (0 forward, 1 input gradient, 2 weight
// gradient); mode 0 fp32, 1 bf16, 2 bf16 with the weight bound. Seconds.
static double tessera_once(int what, int mode, const Operands *o) {
    int prev = matmul_set_bf16(mode > 0);
    if (mode == 2) matmul_bind16(1, o->w, o->w16, (size_t)o->OC * o->C);
    double t0 = timer_now();
    if (what == 0) linear_forward(o->y, o->x, o->w, NULL, o->N, o->C, o->OC);
    else if (what == 1) linear_backward(o->dx, NULL, NULL, o->dy, o->x, o->w, o->N, o->C, o->OC, 0);
    else linear_backward(NULL, o->dw, NULL, o->dy, o->x, o->w, o->N, o->C, o->OC, 0);
    double t = timer_now() - t0;
    if (mode == 2) matmul_unbind16(1);
    matmul_set_bf16(prev);
    return t;
}

static double flops(const Operands *o) { return 2.0 * o->N * (double)o->C * o->OC; }

// GFLOP/s of the best of REPS calls, operands evicted before each.
static double tessera_run(int what, int mode, const Operands *o) {
    double best = 1e30;
    for (int r = 0; r < REPS; r++) {
        evict();
        double t = tessera_once(what, mode, o);
        if (t < best) best = t;
    }
    return flops(o) / best * 1e-9;
}

static double dnnl_run(const Mm *m, dnnl_stream_t st, const Operands *o) {
    double best = 1e30;
    for (int r = 0; r < REPS; r++) {
        evict();
        double t0 = timer_now();
        mm_exec(m, st);
        double t = timer_now() - t0;
        if (t < best) best = t;
    }
    return flops(o) / best * 1e-9;
}

// max |a - b| / max |a| over n values
static double reldiff(const float *a, const float *b, size_t n) {
    double d = 0, s = 0;
    for (size_t i = 0; i < n; i++) {
        double e = fabs((double)a[i] - b[i]), v = fabs((double)a[i]);
        if (e > d) d = e;
        if (v > s) s = v;
    }
    return s > 0 ? d / s : d;
}

// The worst difference over the three products between tessera (mode) and
// oneDNN's primitives m, each product run once untimed, gradients from zero.
static double check(int mode, const Mm m[3], dnnl_stream_t st, const Operands *o, float *y2, float *dx2, float *dw2) {
    size_t ny = (size_t)o->N * o->OC, nx = (size_t)o->N * o->C, nw = (size_t)o->OC * o->C;
    double worst = 0, d;
    memset(o->dw, 0, nw * sizeof(float));
    memset(dw2, 0, nw * sizeof(float));
    tessera_once(0, mode, o);
    tessera_once(1, mode, o);
    tessera_once(2, mode == 2 ? 1 : mode, o);
    for (int p = 0; p < 3; p++) mm_exec(&m[p], st);
    if ((d = reldiff(o->y, y2, ny)) > worst) worst = d;
    if ((d = reldiff(o->dx, dx2, nx)) > worst) worst = d;
    if ((d = reldiff(o->dw, dw2, nw)) > worst) worst = d;
    return worst;
}

static const char *isa_name(dnnl_cpu_isa_t isa) {
    switch (isa) {
    case dnnl_cpu_isa_sse41: return "sse41";
    case dnnl_cpu_isa_avx: return "avx";
    case dnnl_cpu_isa_avx2: return "avx2";
    case dnnl_cpu_isa_avx2_vnni: return "avx2_vnni";
    case dnnl_cpu_isa_avx512_core: return "avx512_core";
    case dnnl_cpu_isa_avx512_core_vnni: return "avx512_core_vnni";
    case dnnl_cpu_isa_avx512_core_bf16: return "avx512_core_bf16";
    case dnnl_cpu_isa_avx512_core_amx: return "avx512_core_amx";
    default: return "other";
    }
}

// Adds name to the comma-separated list if it is not in it yet.
static void note_impl(char *list, size_t cap, const char *name) {
    size_t n = strlen(name);
    for (const char *p = list; (p = strstr(p, name)) != NULL; p += n)
        if ((p == list || p[-1] == ' ') && (p[n] == ',' || p[n] == '\0')) return;
    size_t len = strlen(list);
    snprintf(list + len, cap - len, "%s%s", len ? ", " : "", name);
}

static void cell(double g, double peak) { printf(" %5.0f %3.0f%%", g, 100 * g / peak); }

int main(int argc, char **argv) {
    int threads = argc > 1 ? atoi(argv[1]) : 1, nrows = argc > 2 ? argc - 2 : 2;
    int rows[16] = {256, 2048};
    if (threads < 1 || nrows > 16) {
        fprintf(stderr, "usage: bench_dnnl THREADS [ROWS ...] (at most 16 row counts)\n");
        return 2;
    }
    for (int i = 0; i < nrows && argc > 2; i++) rows[i] = atoi(argv[2 + i]);
    kernels_set_threads(threads);   // OpenMP's threads: oneDNN's too
    int own16 = gemm_bf16_own();
    Peaks pk;
    peak_probe(&pk, threads);
    double p32 = peak_fp32(&pk), p16 = peak_bf16_pays(&pk) ? peak_for(&pk, PREC_BF16) : pk.bf16 > 0 ? pk.bf16 : p32;

    dnnl_engine_t eng;
    dnnl_stream_t st;
    dn(dnnl_engine_create(&eng, dnnl_cpu, 0), "engine_create");
    dn(dnnl_stream_create(&st, eng, dnnl_stream_default_flags), "stream_create");
    const dnnl_version_t *v = dnnl_version();
    const char *ct = getenv("OPENBLAS_CORETYPE");
    printf("  oneDNN %d.%d.%d (%s runtime), effective ISA %s; tessera on %s, OPENBLAS_CORETYPE=%s\n", v->major,
           v->minor, v->patch, v->cpu_runtime == DNNL_RUNTIME_OMP ? "OpenMP" : "non-OpenMP",
           isa_name(dnnl_get_effective_cpu_isa()), kernels_blas_info(), ct ? ct : "(unset)");
    printf("  %d thread%s: fp32 peak %.0f GFLOP/s, bf16 peak %.0f; each product's GFLOP/s and %% of its peak\n", threads,
           threads == 1 ? "" : "s", p32, p16);

    static const struct { const char *name; int C, OC; } layers[] = {
        {"qkv", 768, 2304}, {"attn.proj", 768, 768}, {"fc", 768, 3072}, {"mlp.proj", 3072, 768}, {"head", 768, 50304},
    };
    enum { NL = sizeof layers / sizeof layers[0] };
    int nmax = 0;
    for (int i = 0; i < nrows; i++) {
        if (rows[i] < 1) {
            fprintf(stderr, "bench_dnnl: rows must be positive, not %d\n", rows[i]);
            return 2;
        }
        nmax = rows[i] > nmax ? rows[i] : nmax;
    }
    size_t xmax = (size_t)nmax * 3072, wmax = (size_t)50304 * 768, ymax = (size_t)nmax * 50304;
    g_sweep = mem_alloc(MEM_WORKSPACE, ((size_t)12 << 20) * sizeof(float));
    float *x = mem_alloc(MEM_WORKSPACE, xmax * 4), *w = mem_alloc(MEM_WORKSPACE, wmax * 4);
    float *y = mem_alloc(MEM_WORKSPACE, ymax * 4), *dy = mem_alloc(MEM_WORKSPACE, ymax * 4);
    float *dx = mem_alloc(MEM_WORKSPACE, xmax * 4), *dw = mem_alloc(MEM_WORKSPACE, wmax * 4);
    float *y2 = mem_alloc(MEM_WORKSPACE, ymax * 4), *dx2 = mem_alloc(MEM_WORKSPACE, xmax * 4);
    float *dw2 = mem_alloc(MEM_WORKSPACE, wmax * 4);
    uint16_t *x16 = mem_alloc(MEM_WORKSPACE, xmax * 2), *w16 = mem_alloc(MEM_WORKSPACE, wmax * 2);
    uint16_t *dy16 = mem_alloc(MEM_WORKSPACE, ymax * 2);
    if (!g_sweep || !x || !w || !y || !dy || !dx || !dw || !y2 || !dx2 || !dw2 || !x16 || !w16 || !dy16) {
        fprintf(stderr, "bench_dnnl: out of memory\n");
        return 1;
    }
    fill(x, xmax, 1); fill(w, wmax, 2); fill(dy, ymax, 3);
    // the bf16 operands a bf16 trainer holds: converted once, outside the timing
    half_pack(PREC_BF16, x16, x, xmax);
    half_pack(PREC_BF16, w16, w, wmax);
    half_pack(PREC_BF16, dy16, dy, ymax);

    static const char *prods[3] = {"forward", "input gradient", "weight gradient"};
    char impls[2][3][256] = {{{0}}};
    for (int prec = 0; prec < 2; prec++) {
        printf("\n");
        if (prec == 0) {
            printf("  fp32: tessera's dispatch (OpenBLAS, or its own SGEMM) against oneDNN, both on fp32 operands\n");
            printf("  %-10s %5s %-14s | %-21s | %-21s | %-21s | %7s\n", "layer", "rows", "C -> OC", prods[0], prods[1],
                   prods[2], "diff");
            printf("  %-10s %5s %-14s | %10s %10s | %10s %10s | %10s %10s |\n", "", "", "", "tessera", "oneDNN",
                   "tessera", "oneDNN", "tessera", "oneDNN");
        } else {
            printf("  bf16 products, fp32 sums and outputs: tessera rounds its fp32 operands as it packs them (timed),\n"
                   "  bound reads the weight from its bf16 copy; oneDNN's operands were converted to bf16 beforehand\n"
                   "  (not timed)%s\n", own16 ? "" : "; tessera's bf16 kernel is not built in here (no AVX512_BF16): -");
            printf("  %-10s %5s %-14s | %-32s | %-32s | %-21s | %7s\n", "layer", "rows", "C -> OC", prods[0], prods[1],
                   prods[2], "diff");
            printf("  %-10s %5s %-14s | %10s %10s %10s | %10s %10s %10s | %10s %10s |\n", "", "", "", "tessera",
                   "bound", "oneDNN", "tessera", "bound", "oneDNN", "tessera", "oneDNN");
        }
        for (int r = 0; r < nrows; r++)
            for (int l = 0; l < NL; l++) {
                Operands o = {rows[r], layers[l].C, layers[l].OC, x, w, y, dy, dx, dw, w16};
                Mm m[3];
                if (prec == 0) mm_shape(m, eng, dnnl_f32, o.N, o.C, o.OC, x, w, dy, y2, dx2, dw2);
                else mm_shape(m, eng, dnnl_bf16, o.N, o.C, o.OC, x16, w16, dy16, y2, dx2, dw2);
                for (int p = 0; p < 3; p++) note_impl(impls[prec][p], sizeof impls[prec][p], m[p].impl);
                char shape[32];
                snprintf(shape, sizeof shape, "%d -> %d", o.C, o.OC);
                printf("  %-10s %5d %-14s |", layers[l].name, o.N, shape);
                for (int p = 0; p < 3; p++) {
                    if (prec == 0) {
                        cell(tessera_run(p, 0, &o), p32);
                        cell(dnnl_run(&m[p], st, &o), p32);
                    } else {
                        if (own16) cell(tessera_run(p, 1, &o), p16);
                        else printf(" %10s", "-");
                        if (p < 2 && own16) cell(tessera_run(p, 2, &o), p16);
                        else if (p < 2) printf(" %10s", "-");
                        cell(dnnl_run(&m[p], st, &o), p16);
                    }
                    printf(" |");
                }
                if (prec == 0 || own16) printf(" %7.1e\n", check(prec == 0 ? 0 : 2, m, st, &o, y2, dx2, dw2));
                else printf(" %7s\n", "-");
                fflush(stdout);
                for (int p = 0; p < 3; p++) mm_free(&m[p]);
            }
    }
    printf("\n  oneDNN's implementations (as its primitive descriptors name them):\n");
    for (int prec = 0; prec < 2; prec++)
        for (int p = 0; p < 3; p++) printf("    %s %-15s %s\n", prec ? "bf16" : "fp32", prods[p], impls[prec][p]);
    dnnl_stream_destroy(st);
    dnnl_engine_destroy(eng);
    return 0;
}
