// model/stage_impl.h — what the stage's files share (internal to model/).
//
// A stage's activations are one StageActs: the slots (one micro-batch's
// saved activations each), the scratch, the 16-bit weights and where each
// tensor lies in the flat buffers. The files divide the work:
//   stage.c       the layout, the hooks' callers, the embeddings and the
//                 blocks' forward and backward;
//   stage_head.c  the final part, the output head and the loss;
//   stage16.c     bf16/fp16: the 16-bit copy of the weights and the
//                 16-bit store of the activations;
//   stage_kv.c    the key/value cache of incremental decoding.
//   stage_doc.c   document masking: each pass's document starts and positions.
#ifndef TSR_MODEL_STAGE_IMPL_H
#define TSR_MODEL_STAGE_IMPL_H

#include <stddef.h>
#include <stdint.h>

#include "model/stage.h"

// One micro-batch's saved activations.
typedef struct {
    float *x0;            // (Ns,C) stage input / embeddings (the rank's rows of the residual stream)
    float **blk;          // cl × nact: the activations of each of its chunk's blocks (Arch.act_floats)
    uint16_t **blk16;     // cl × nact: those stored in 16 bits (bf16/fp16), NULL where blk is not
    float *fin[3];        // final norm: output (N,C) gathered, mean (Ns), rstd (Ns)
    float *losses;        // (N)
    float *dres;          // (Ns,C) gradient of the residual stream: the head's leaves it here for stage_backward
    int rows;             // this backward pass's embedding rows go to the rows hook
    int chunk;            // the chunk whose blocks it runs
} Slot;

struct StageActs {
    const Arch *arch;
    LocalDims dim;                          // capacity (B, T, N = B·T) and the local slice
    KvCache *kv;                            // incremental decoding (stage_kv_init), or NULL
    int doc_sep;                            // document masking's separator token, or -1 (stage_set_doc_mask)
    int *doc_start, *doc_pos;               // with it: the pass's (B,T) starts and positions (BlockRun's)
    Tp *tp;                                 // the TP group (NULL: one rank)
    int nl;                                 // blocks on this stage
    int recompute;                          // 0, STAGE_RECOMPUTE_FULL or STAGE_RECOMPUTE_SELECTIVE
    double aux;                             // the blocks' auxiliary losses since stage_take_aux
    Precision prec;
    float *rc[ARCH_MAX_BUFS];               // the shared fp32 set of one block's activations that recomputation
                                            // drops or 16 bits store (NULL: not shared)
    unsigned char *gfresh;                  // per segment: its linear layers' gradients (the embeddings': a tied
                                            // head's) are not yet written this step (stage_grads_begin), so
                                            // their first backward writes them
    int *emb_rows;                          // an untied token embedding's: the tokens whose gradient rows the
    size_t emb_n, emb_cap;                  // passes added to since stage_grads_begin, which zeroes only those
    int emb_all;                            // rows; 1: not all listed (or written elsewhere), zero the table
    double *gsq;                            // per tensor: its gradient's sum of squares taken by its last product
                                            // this step, negative where not (NULL: none taken, stage_fuse_norm)
    int mb_last, mb_count;                  // the passes are of the step's last micro-batch; its micro-batches
    int hold_last;                          // the last micro-batch queues its weight gradients too (stage_grads_hold)
                                            // (0: outside a training step) (stage_microbatch)
    uint16_t *w16;                          // bf16/fp16: the 16-bit copy of the weights (table.total), or NULL
    unsigned char *w16_stale;               // per segment: the copy is older than the parameters
    uint64_t w16_version;                   // names the copy's values: a new number, unique across stages,
                                            // each time the parameters or the copy change
    float *wbuf[PART_COUNT];                // bf16/fp16: one segment of each part's weights as the passes read them
    int wbuf_seg[PART_COUNT];               // the segment a part's buffer holds (-1: none), from the copy of
    uint64_t wbuf_version[PART_COUNT];      // this version, with its linear weights bound (1) or in floats (0):
    int wbuf_bound[PART_COUNT];             // a fetch of the same again has nothing to widen
    void *wbuf_block;
    int cl;                                 // of them in each chunk (chunk v: blocks v·cl .. v·cl + cl − 1)
    size_t (*blk_off)[ARCH_MAX_TENSORS];    // flat-buffer offset of each block tensor
    int *blk_seg;                           // each block's segment
    int seg_emb, seg_fin, seg_head;         // segments of the embeddings, the final part, the head; -1 if absent
    size_t off_tok, off_pos, off_head;      // flat offsets (SIZE_MAX: absent)
    size_t off_fin[ARCH_MAX_TENSORS];
    Slot *slot;
    // scratch
    float *tmp;                             // (N,C): partial sums over TP, gathered rows
    float *logits;                          // (head_rows, Vl)
    int head_rows;
    float *scr[ARCH_MAX_BUFS];              // the arch's block scratch
    void *act_block, *ws_block;
    size_t act_bytes, ws_bytes;
};

// ---- stage.c ----

// Segment seg's parameters as the passes read them: through the params
// hook (next: its prefetch hint) or from the flat buffer, under bf16/fp16
// through the 16-bit copy (stage16_params). Each is followed by
// stage_seg_params_done.
const float *stage_seg_params(Stage *s, int seg, int next);
void stage_seg_params_done(Stage *s, int seg);
// The buffer segment seg's gradients are added into (the grads hook or
// the flat buffer), and the hook call saying they are complete.
// Whether the linear layers read the tensor (and nothing else does): its
// 16-bit copy is not widened, its gradient is written by one product.
int stage_linear_only(Role r);
// A segment's linear layers' gradients marked unwritten for their products
// (matmul_grad_fresh) at its first backward of the step (stage_grads_begin
// left them as they were); g holds its tensors' gradients in the order of
// the part's table.
void stage_grads_fresh(Stage *s, int seg, Part part, float *const *g);
// A backward pass's lookups (n tokens), noted where the token embedding is
// untied and the stage has no hooks, for stage_grads_begin to zero their
// rows (the whole table when the list cannot grow).
void stage_note_emb_rows(Stage *s, const int *tokens, size_t n);
// The linear layers' gradients of a part (g in the order of the part's
// table) marked for their products to take their sums of squares
// (matmul_grad_sumsq) where those products are their last of the step;
// checked untouched since where they are not.
void stage_sumsq_mark(Stage *s, Part part, float *const *g);
// The head's gradient marked so before the product of its last rows in
// the step's last micro-batch, where no other stage adds to it after: an
// untied head's, or a tied one's on the stage that also runs the lookups
// (whose rows stage_emb_sumsq then counts again).
void stage_sumsq_head(Stage *s, float *dhead);
// Around the lookups' rows added into the token embedding's gradient gtok
// (Vl rows of C): tied, where the head's product took its sum, before
// (sign −1) and after (+1), the squares of the distinct rows the tokens
// name added into the sum; untied, after the last micro-batch's (+1, the
// tokens noted: stage_note_emb_rows), its sum from the rows the step's
// lookups added to, the others being zero.
void stage_emb_sumsq(Stage *s, const float *gtok, const int *tokens, size_t n, double sign);
float *stage_seg_grads(Stage *s, int seg);
void stage_seg_grads_done(Stage *s, int seg);
// Whether the take_rows hook takes this backward pass's embedding rows.
int stage_take_rows(Stage *s);
// The tensor at flat offset off in buf, which holds segment seg.
float *stage_at(const Stage *s, const float *buf, int seg, size_t off);
// Carves n floats at *off from base (64-byte steps); with base NULL only counts.
float *stage_carve(char *base, size_t *off, size_t n);
// The slot's activations (a checked index).
Slot *stage_slot(Stage *s, int slot);
// Whether the slot's chunk ends the model (has the final norm, the head
// and the loss).
int stage_chunk_last(const Stage *s, const Slot *sl);
// A pass of the slot's j-th block (j = -1: the final norm, after the last
// block) of its micro-batch, with its activation buffers act.
BlockRun stage_run(Stage *s, const LocalDims *d, Slot *sl, int j, float *const *act, float **w, float **g);

// ---- stage16.c ----

// Under bf16/fp16 the 16-bit weights of segment seg, whose fp32 values are
// at src, in fp32 for the kernels (or bound for the linear layers).
const float *stage16_params(Stage *s, int seg, const float *src);
// The version the head holds its weight under (matmul_hold): the 16-bit
// copy's where the passes read the weights from it on the bf16 units, else
// 0 (gathered weights: packed again at every hold).
uint64_t stage16_version(const Stage *s);
// bf16/fp16: the 16-bit copy of the stage's own weights (own: it holds
// them) and the fp32 buffers the passes read them through. 0, or -1 with err.
int stage16_alloc(Stage *s, int own, Err *err);
void stage16_free(StageActs *a);
// The slot's j-th block's 16-bit activations: stored from the shared set
// after its forward (out; those whose bits are in done were stored by
// arch_stored as they were written), or back into it before its backward (in;
// those only products read, Arch.act_gemm16, bound for the products
// instead while the products run on the bf16 units: unbound after the backward).
void stage16_move(StageActs *a, Slot *sl, int j, const LocalDims *d, int out, unsigned done);
// The slot's j-th block's 16-bit stores for its backward to read
// (BlockRun.in16) where stage16_move left Arch.act_fn16's unwidened: under
// bf16 on the bf16 units; NULL otherwise.
const uint16_t *const *stage16_in(const StageActs *a, Slot *sl, int j);
// Under fp16 the gradient leaving a block or the head is held in fp16.
void stage16_round_grad(const StageActs *a, Slot *sl, const LocalDims *d);

// ---- stage_head.c ----

// The rest of a forward pass of the slot's last chunk: the final part, and
// with targets the head's loss (returned, summed), and with dscale != 0
// the head's and the final part's backward. first: the chunk embeds too,
// its embeddings' parameters at pe (held for a tied head); else pe NULL.
double stage_head_forward(Stage *s, Slot *sl, const LocalDims *d, int first, const float *pe, const int *targets,
                          float dscale);

// ---- stage_kv.c ----

void stage_kv_free(StageActs *a);

// ---- stage_doc.c ----

// Document masking: the pass's starts and positions from its tokens (with
// the cache, from kv->pos on, moving its document on); nothing when off.
void stage_doc_pass(StageActs *a, const int *tokens, int B, int T);
void stage_doc_free(StageActs *a);

#endif
