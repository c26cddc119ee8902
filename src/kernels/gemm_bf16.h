// kernels/gemm_bf16 — products on the CPU's bf16 units (AVX512_BF16).
//
// vdpbf16ps multiplies 16 pairs of bf16 values by 16 pairs and adds each
// pair's two products to an fp32 lane: twice the multiply-adds of an fp32
// FMA per instruction. Its operands come in k-pairs, so the reduction runs
// two k at a time and the operands are laid out for it:
//
//   A (R, 2·KP) bf16 row-major, lda ≥ 2·KP: row i's pair p is the 32 bits
//     at A + i·lda + 2p, broadcast to every lane (rows of a bf16 row-major
//     matrix are already in this layout);
//   B packed (KP, NC, 2) bf16, ldb ≥ NC pairs: Bp[p][n] = (B[2p][n], B[2p+1][n]),
//     16 columns' pairs in one 512-bit load.
//
// An odd K is padded with a zero pair half on both sides by the packers.
// Shapes: C (R,NC) fp32 (+)= A (R,K) · B (K,NC); every element of C is the
// pairs' sums added in ascending p, in blocks whose size does not depend on
// the thread count, so results do not depend on it. Compiled when the
// compiler targets AVX512_BF16 (-march=native on such a CPU); elsewhere
// gemm_bf16_own() is 0 and linear layers multiply in fp32 as before.
#ifndef TSR_KERNELS_GEMM_BF16_H
#define TSR_KERNELS_GEMM_BF16_H

#include <stddef.h>
#include <stdint.h>

// 1 when the bf16 kernel is compiled in, 0 otherwise (nothing below may be called then).
int gemm_bf16_own(void);

// The unit gemm_bf16 multiplies on: the AMX tiles where the CPU and the OS
// have them (kernels/gemm_amx.h), else vdpbf16ps on the vector units. Both
// read the same operands; their sums differ in the last bits.
typedef enum { BF16_DOT, BF16_AMX } Bf16Unit;
Bf16Unit gemm_bf16_unit(void);
// Chooses the unit for the calls that follow (tests run their cases on
// each); returns 0 and changes nothing where the CPU lacks it.
int gemm_bf16_use(Bf16Unit u);
// "AMX tiles (tdpbf16ps)" or "vdpbf16ps": the unit in use.
const char *gemm_bf16_unit_name(void);

// C (R,NC) = A (R,2·KP) · Bp (KP,NC,2), + C when accumulate; lda in bf16
// values, ldb in pairs, ldc in floats. Threads split the tiles of C.
void gemm_bf16(int R, int NC, int KP, const uint16_t *A, int lda, const uint16_t *Bp, int ldb, float *C, int ldc,
               int accumulate);
// C (R,NC) = bias (NC, every row) + A · Bp: the bits of gemm_bf16 accumulating
// onto rows that hold the bias, without writing and reading C for it.
void gemm_bf16_bias(int R, int NC, int KP, const uint16_t *A, int lda, const uint16_t *Bp, int ldb, float *C, int ldc,
                    const float *bias);

// An operand as the caller holds it. gemm_bf16_op reads it in its form: the
// tiles pack their panels from it directly (one pass, no copy in
// gemm_bf16's layouts); the vector units get it packed into those layouts
// first, in room the caller gives. A (R,K), B (K,NC); ld in elements.
typedef enum {
    OP_PAIRS16,   // gemm_bf16's own layouts: A rows of pairs (ld in bf16 values), B packed pairs (ld in pairs)
    OP_ROWS16,    // B only: bf16 row-major (K,NC)
    OP_COLS16,    // bf16 read transposed: B (NC,K) as B[k][n] = p[n·ld + k], or A (K,R) as A[r][k] = p[k·ld + r]
    OP_ROWS32,    // fp32 row-major, A (R,K) or B (K,NC), rounded as read
    OP_COLS32,    // fp32 read transposed, A[r][k] = p[k·ld + r] or B[k][n] = p[n·ld + k], rounded as read
    OP_PANELS,    // B only: the tiles' own panels (gemm_bf16_panels_at), AMX alone; ld: the pairs they were packed over
    OP_STRIPS16,  // B only: the vector units' strips (bf16_strips) of the whole B; ld unused
} Bf16Form;
typedef struct {
    Bf16Form form;
    const void *p;
    int ld;
} Bf16Op;

// C (R,NC) = [bias +] A (R,K) · B (K,NC) [+ C when accumulate], the bits of
// gemm_bf16 on the same values rounded to bf16. room: gemm_bf16_room's
// values, read only on the vector units (NULL where the caller knows none
// is needed). 0, or -1 with C untouched where room is wanting or the vector
// units meet panels.
int gemm_bf16_op(int R, int NC, int K, Bf16Op a, Bf16Op b, float *C, int ldc, int accumulate, const float *bias,
                 uint16_t *room);
// The room (bf16 values) gemm_bf16_op packs operands in these forms into
// on the vector units: for an A not in pairs R rows of 2·kp(K) + 32 (64
// bytes past the pairs, so that at a K of a multiple of 128 the rows do not
// all fall on the same L1 sets: the transposing packer wrote them at half
// the speed), then kp(K)·NC·2 for a B not in pairs or strips.
size_t gemm_bf16_room(int R, int NC, int K, Bf16Form a, Bf16Form b);
// gemm_bf16_op, and with sq given, *sq = the sum of squares (float64) of C's
// values as the product leaves them, each tile's read as it is stored (the
// pass a weight gradient's norm would make after its last product): tiles'
// sums added in tile order, the same for every thread count. *sq is left as
// it was where the product fails or the room for the tiles' sums is not to
// be had.
int gemm_bf16_op_sq(int R, int NC, int K, Bf16Op a, Bf16Op b, float *C, int ldc, int accumulate,
                    const float *bias, uint16_t *room, double *sq);

// C16 (R,NC) = the bf16 values (half_pack's rounding) of [bias +] A · B,
// rows ldc apart: the product's output where only its 16-bit store is kept,
// each tile's sums rounded as it stores them, with no fp32 pass between. C
// (R,NC) is room for a reduction in blocks, its values left undefined; room
// as gemm_bf16_op's. 0, or -1 with nothing written where the product is
// empty or the operands' room is missing (the caller multiplies into C and
// packs it).
int gemm_bf16_op16(int R, int NC, int K, Bf16Op a, Bf16Op b, uint16_t *C16, float *C, int ldc, const float *bias,
                   uint16_t *room);

// B (K,NC) from b as the tiles' panels, for an operand read by many products
// (a weight held across calls, a head's keys); only where gemm_bf16_unit()
// is BF16_AMX. gemm_bf16_panels_len() values at dst. A product reads them as
// the operand gemm_bf16_panels_at() gives: B from row k0 and column c0 on,
// both multiples of 32. Its reduction may end before K: the rows past it
// in the last chunk of 16 pairs meet zeros in A.
size_t gemm_bf16_panels_len(int K, int NC);
void gemm_bf16_panels(uint16_t *dst, Bf16Op b, int K, int NC);
Bf16Op gemm_bf16_panels_at(const uint16_t *panels, int K, int k0, int c0);

// B (K,NC) from b (rows or columns, fp32 or bf16) as the vector units'
// strips: the columns in strips of bf16_strip_width(NC) — the width of the
// tile gemm_bf16 runs on NC columns; the last strip what is left — one
// after another, each strip's pairs row after row, (kp(K), w, 2). A tile
// then reads one run of memory, where in the pairs (kp(K), NC, 2) it reads
// 64-256 bytes of rows NC·4 bytes apart, a page apart at NC ≥ 1,024 (5-10%
// faster on Zen 5). kp(K)·NC·2 values at dst, as many as the pairs; read as
// (Bf16Op){OP_STRIPS16, dst, 0} by a product of K and NC alike. gemm_bf16_op
// packs a B it is given in another form so on the vector units.
int bf16_strip_width(int NC);
void bf16_strips(uint16_t *dst, Bf16Op b, int K, int NC);

// The packers, each rounding fp32 to bf16 (nearest even) and writing a zero
// into the pad of an odd K. kp(K) = (K+1)/2 pairs.
//
// dst (R, 2·kp(K)) = src (R,K), rows ld apart: an A operand from row-major fp32.
void bf16_pack_rows(uint16_t *dst, int ldd, const float *src, int lds, int R, int K);
// dst (R, 2·kp(K)) = src^T where src is (K,R): an A operand from the transpose.
void bf16_pack_rows_t(uint16_t *dst, int ldd, const float *src, int lds, int R, int K);
// dst (kp(K), NC, 2) pairs = src (K,NC): a B operand from row-major fp32 (rows 2p, 2p+1 interleaved).
void bf16_pack_pairs(uint16_t *dst, const float *src, int lds, int K, int NC);
// dst (kp(K), NC, 2) pairs = src^T where src is (NC,K): a B operand from the transpose.
void bf16_pack_pairs_t(uint16_t *dst, const float *src, int lds, int K, int NC);
// The same two B layouts from values already in bf16 (a 16-bit weight copy,
// a stored activation): no rounding, 2 bytes read per element instead of 4.
void bf16_pairs16(uint16_t *dst, const uint16_t *src, int lds, int K, int NC);
void bf16_pairs_t16(uint16_t *dst, const uint16_t *src, int lds, int K, int NC);
// dst (R, 2·kp(K)) = src^T where src is (K,R) bf16: an A operand from a bf16 transpose.
void bf16_rows_t16(uint16_t *dst, int ldd, const uint16_t *src, int lds, int R, int K);
// dst[0, n) = src[0, n) rounded to bf16 as the tiles' packers round (nearest
// even, subnormals to zero), in ascending order: dst may be src's own start,
// each row of floats becoming a row of bf16 in its first half.
void bf16_round_row(uint16_t *dst, const float *src, size_t n);

#endif
