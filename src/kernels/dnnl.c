#include "kernels/dnnl.h"

#ifdef TSR_DNNL
#include <dnnl.h>
#include <omp.h>
#include <stdio.h>
#include <string.h>

// The engine and stream, made at the first product; -1 when oneDNN failed.
static int g_state;   // 0 not yet tried, 1 ready, -1 unusable
static dnnl_engine_t g_eng;
static dnnl_stream_t g_stream;

static int ready(void) {
    if (g_state == 0) {
        g_state = dnnl_engine_create(&g_eng, dnnl_cpu, 0) == dnnl_success &&
                          dnnl_stream_create(&g_stream, g_eng, dnnl_stream_default_flags) == dnnl_success
                      ? 1
                      : -1;
    }
    return g_state == 1;
}

int dnnl_own(void) { return ready(); }

const char *dnnl_info(void) {
    static char buf[96];
    if (!ready()) return NULL;
    const dnnl_version_t *v = dnnl_version();
    const char *name;
    switch (dnnl_get_effective_cpu_isa()) {   // the ISAs' values are bit sets, not indices
    case dnnl_cpu_isa_avx2: name = "avx2"; break;
    case dnnl_cpu_isa_avx512_core: name = "avx512_core"; break;
    case dnnl_cpu_isa_avx512_core_vnni: name = "avx512_core_vnni"; break;
    case dnnl_cpu_isa_avx512_core_bf16: name = "avx512_core_bf16"; break;
    case dnnl_cpu_isa_avx512_core_amx: name = "avx512_core_amx"; break;
    default: name = "another ISA"; break;
    }
    snprintf(buf, sizeof buf, "oneDNN %d.%d.%d (%s)", v->major, v->minor, v->patch, name);
    return buf;
}

// One product's primitive and its operand memories (their addresses bound per call).
typedef struct Prim {
    long key[11];
    dnnl_primitive_t prim;   // NULL: oneDNN refused this product
    dnnl_memory_t a, b, c, v;   // v: the bias, or NULL
} Prim;

enum { PRIM_MAX = 64 };
static Prim g_prim[PRIM_MAX];
static int g_nprim;

// A product's primitive, a bias of NC floats added to every row where bias is set.
static dnnl_status_t make(Prim *p, int M, int NC, int K, long ars, long acs, long brs, long bcs, long ldc,
                          int accumulate, int bias) {
    dnnl_memory_desc_t amd, bmd, cmd, vmd;
    dnnl_dims_t ad = {M, K}, bd = {K, NC}, cd = {M, NC}, ast = {ars, acs}, bst = {brs, bcs}, cst = {ldc, 1};
    dnnl_dims_t vd = {1, NC}, vst = {NC, 1};
    dnnl_status_t s;
    if ((s = dnnl_memory_desc_init_by_strides(&amd, 2, ad, dnnl_f32, ast)) != dnnl_success ||
        (s = dnnl_memory_desc_init_by_strides(&bmd, 2, bd, dnnl_f32, bst)) != dnnl_success ||
        (s = dnnl_memory_desc_init_by_strides(&cmd, 2, cd, dnnl_f32, cst)) != dnnl_success ||
        (bias && (s = dnnl_memory_desc_init_by_strides(&vmd, 2, vd, dnnl_f32, vst)) != dnnl_success))
        return s;
    dnnl_matmul_desc_t desc;
    if ((s = dnnl_matmul_desc_init(&desc, &amd, &bmd, bias ? &vmd : NULL, &cmd)) != dnnl_success) return s;
    dnnl_primitive_attr_t attr;
    if ((s = dnnl_primitive_attr_create(&attr)) != dnnl_success) return s;
    if (accumulate) {   // C += A·B as a sum post-op
        dnnl_post_ops_t po;
        if ((s = dnnl_post_ops_create(&po)) == dnnl_success) {
            if ((s = dnnl_post_ops_append_sum(po, 1.0f)) == dnnl_success) s = dnnl_primitive_attr_set_post_ops(attr, po);
            dnnl_post_ops_destroy(po);
        }
    }
    dnnl_primitive_desc_t pd = NULL;
    if (s == dnnl_success) s = dnnl_primitive_desc_create(&pd, &desc, attr, g_eng, NULL);
    dnnl_primitive_attr_destroy(attr);
    if (s != dnnl_success) return s;
    s = dnnl_primitive_create(&p->prim, pd);
    dnnl_primitive_desc_destroy(pd);
    if (s == dnnl_success) s = dnnl_memory_create(&p->a, &amd, g_eng, DNNL_MEMORY_NONE);
    if (s == dnnl_success) s = dnnl_memory_create(&p->b, &bmd, g_eng, DNNL_MEMORY_NONE);
    if (s == dnnl_success) s = dnnl_memory_create(&p->c, &cmd, g_eng, DNNL_MEMORY_NONE);
    if (s == dnnl_success && bias) s = dnnl_memory_create(&p->v, &vmd, g_eng, DNNL_MEMORY_NONE);
    return s;
}

// The oneDNN objects of an entry, released (its key is kept).
static void prim_free(Prim *p) {
    if (p->prim) dnnl_primitive_destroy(p->prim);
    dnnl_memory_t m[4] = {p->a, p->b, p->c, p->v};
    for (int i = 0; i < 4; i++)
        if (m[i]) dnnl_memory_destroy(m[i]);
    p->prim = NULL, p->a = p->b = p->c = p->v = NULL;
}

// The primitive of a product, made at its first call; NULL when oneDNN refuses it.
static Prim *prim_of(int M, int NC, int K, long ars, long acs, long brs, long bcs, long ldc, int accumulate,
                     int bias) {
    long key[11] = {M, NC, K, ars, acs, brs, bcs, ldc, accumulate, omp_get_max_threads(), bias};
    for (int i = 0; i < g_nprim; i++)
        if (!memcmp(g_prim[i].key, key, sizeof key)) return g_prim[i].prim ? &g_prim[i] : NULL;
    Prim *p = &g_prim[g_nprim < PRIM_MAX ? g_nprim++ : PRIM_MAX - 1];
    prim_free(p);   // full: the last entry is replaced
    memcpy(p->key, key, sizeof key);
    if (make(p, M, NC, K, ars, acs, brs, bcs, ldc, accumulate, bias) != dnnl_success)
        prim_free(p);   // remembered as refused
    return p->prim ? p : NULL;
}

int dnnl_gemm_f32(int M, int NC, int K, const float *A, long ars, long acs, const float *B, long brs, long bcs,
                  float *C, long ldc, int accumulate, const float *bias) {
    if (M <= 0 || NC <= 0 || K <= 0 || !ready()) return -1;
    Prim *p = prim_of(M, NC, K, ars, acs, brs, bcs, ldc, accumulate, bias != NULL);
    if (!p || dnnl_memory_set_data_handle(p->a, (void *)A) != dnnl_success ||
        dnnl_memory_set_data_handle(p->b, (void *)B) != dnnl_success ||
        dnnl_memory_set_data_handle(p->c, C) != dnnl_success ||
        (bias && dnnl_memory_set_data_handle(p->v, (void *)bias) != dnnl_success))
        return -1;
    dnnl_exec_arg_t args[4] = {{DNNL_ARG_SRC, p->a}, {DNNL_ARG_WEIGHTS, p->b}, {DNNL_ARG_DST, p->c}, {DNNL_ARG_BIAS, p->v}};
    if (dnnl_primitive_execute(p->prim, g_stream, bias ? 4 : 3, args) != dnnl_success) return -1;
    return dnnl_stream_wait(g_stream) == dnnl_success ? 0 : -1;
}

#else   // not built with oneDNN

int dnnl_own(void) { return 0; }

const char *dnnl_info(void) { return NULL; }

int dnnl_gemm_f32(int M, int NC, int K, const float *A, long ars, long acs, const float *B, long brs, long bcs,
                  float *C, long ldc, int accumulate, const float *bias) {
    (void)M, (void)NC, (void)K, (void)A, (void)ars, (void)acs, (void)B, (void)brs, (void)bcs, (void)C, (void)ldc;
    (void)accumulate, (void)bias;
    return -1;
}

#endif
