// model/stage — forward and backward of one rank's part of the model
// (DESIGN §1.1): a contiguous range of transformer blocks and a
// tensor-parallel slice of heads, FFN columns and vocabulary. It is generic
// over the architecture (model/arch): the blocks and the final norm are the
// arch's; the embeddings, the head and the loss are the stage's. With the
// whole slice it is the whole model; there is no second implementation.
//
// A stage owns its flat parameter and gradient buffers (described by its
// ParamTable) and its activations: `slots` sets of them, each for one
// micro-batch of at most B×T tokens, so a pipeline schedule can keep
// several micro-batches in flight (forward of slot i, later backward of
// slot i): the saved activations and the gradient flowing back are the
// slot's; scratch is shared. The first stage embeds tokens; others read
// stage_input(). The last stage computes the loss (and the output head);
// others leave stage_output().
//
// Under an interleaved schedule the slice has several chunks (model/params),
// each a stage of the pipeline of its own, all of one length: a slot holds
// a micro-batch of any chunk (stage_bind says which) and a pass runs that
// chunk's blocks. Only chunk 0 of the first stage embeds; only the last
// chunk of the last stage has the head and the loss.
//
// Gradients accumulate (+=) into the gradient buffer across calls until the
// caller zeroes it, which is what gradient accumulation needs.
//
// The struct's fields are read by other modules, never written: the stage
// changes only through these functions.
#ifndef TSR_MODEL_STAGE_H
#define TSR_MODEL_STAGE_H

#include <stddef.h>
#include <stdint.h>

#include "comm/comm.h"
#include "core/check.h"
#include "model/arch.h"
#include "model/config.h"
#include "model/params.h"

typedef struct StageActs StageActs;   // internal (model/stage_impl.h): activations and scratch

// Where the stage finds parameters and puts gradients, segment by segment
// (ParamTable.seg); data parallelism installs them (parallel/dp: ZeRO-3
// gathers parameters and reduces gradients by segment, and the embedding
// lookup's gradient travels as rows, parallel/embsync). Any of them may be
// NULL: the stage then reads its own flat parameters, adds into its own
// flat gradients, or makes no call. Every buffer is laid out as the
// segment's range [lo, hi) of the flat buffer. Below, a forward is one
// stage_forward of a slot (its chunk), a backward pass the stage_forward
// with dscale != 0 and the stage_backward of the same slot, which a
// schedule may run other slots' passes between. Calls come in this order
// on every layout; the hooks may rely on all of it.
//
//   params(seg, next): seg's parameters, before the stage reads them. Each
//     call is followed, within the same stage_forward, stage_backward or
//     stage_logits, by params_done(seg), after which the stage does not
//     read them; seg is not asked again before it. A forward asks for each
//     segment it uses once: the embeddings (on the first chunk, and for a
//     tied head on a last chunk that does not embed: the copy it holds),
//     the chunk's blocks in order, the final part (the last chunk); a
//     stage_backward asks for the chunk's blocks again, last to first (the
//     lookup's gradient needs no parameters); stage_logits for the head's
//     segment. At most two segments are held (asked, not yet done) at
//     once: the embeddings and one other.
//   params_done(seg): a block's comes right after its forward, and in
//     stage_backward after its backward, before its grads_done; the
//     embeddings' right after the lookup or, when the chunk has a tied
//     head, after the head (without targets, after the final norm), the
//     copy a last chunk asks for too; the final part's last in the forward
//     (after the head's and its own backward when dscale != 0).
//   next: a prefetch hint, the segment the stage expects to ask for after
//     seg, or -1. In a forward the embeddings name the chunk's first
//     block, each block the next, the last block the final part on the
//     last chunk (else -1), the final part the chunk's last block when
//     dscale != 0 (the backward to come), else -1; the tied copy -1. In
//     stage_backward each block names the one before it, the first -1;
//     stage_logits -1. A hint names a segment of this pass or of the
//     slot's stage_backward, not always the next call (the tied copy
//     comes between the final part and the backward, other slots' passes
//     may too): a hook serves whatever it is asked, and a segment it
//     fetched on a hint may never be asked.
//   grads(seg): a buffer the stage adds seg's gradients into; asked again
//     before grads_done(seg), it is the same buffer. Every grads_done(seg)
//     follows a grads(seg) of the same backward pass. At most two
//     segments' gradients are open (asked, not yet done) at once: the
//     embeddings and one other.
//   grads_done(seg): seg's gradients of this backward pass are complete:
//     the stage writes nothing more into the buffer until it asks for
//     grads(seg) again. It comes once per backward pass for every segment
//     the pass touches, in this order:
//       1. on the last chunk, in stage_forward: the embeddings, right
//          after the head, when the head is the tied token embedding and
//          the chunk does not embed (a pipeline's last stage: only the head
//          writes its copy) or take_rows took the lookup's rows; then the
//          final part, after its backward;
//       2. in stage_backward, the chunk's blocks, last to first, each
//          right after its backward;
//       3. on the first chunk, last, the embeddings unless 1 did: after
//          the lookup's scatter-add or, with the rows taken, before rows
//          (nothing written to them then: their dense part is zero).
//   take_rows(): asked once per backward pass on the first chunk of the
//     first stage: when the chunk also has the head, in stage_forward
//     after grads for the head's segment and before the head runs, else
//     first in stage_backward. If it returns true, the lookup adds nothing
//     into the embeddings' gradient; the stage calls rows(tokens, dres, B,
//     T) instead, as the last call of stage_backward, after the
//     embeddings' grads_done. tokens (B,T) are the micro-batch's token ids
//     and dres (B·T,C) the gradient at the embeddings' output, every row
//     (gathered under sequence parallelism): row i is what the lookup
//     would add to token row tokens[i] (where this rank's vocabulary slice
//     holds it) and to position row i % T (where the arch has position
//     embeddings). Both are valid during the call only. rows is set
//     whenever take_rows is.
typedef struct StageHooks {
    void *ctx;
    const float *(*params)(void *ctx, int seg, int next);
    void (*params_done)(void *ctx, int seg);
    float *(*grads)(void *ctx, int seg);
    void (*grads_done)(void *ctx, int seg);
    int (*take_rows)(void *ctx);
    void (*rows)(void *ctx, const int *tokens, const float *dres, int B, int T);
} StageHooks;

// stage_init flags: buffers the hooks replace; activation recomputation
// (one at most): full keeps only each block's output (the next block's
// input) and runs the block forward again before its backward; selective
// keeps everything but the attention core's output, recomputed from the
// saved q/k/v. Either gives the gradients of keeping everything, bit for
// bit; the recomputed activations live in one shared set.
//
// Precision (one at most; neither: fp32): under bf16 or fp16 the passes
// read a 16-bit copy of the weights (MEM_PARAMS16, made from the fp32
// parameters, the optimizer's masters, segment by segment on first use
// after stage_params_changed; a segment that hooks gather for the pass is
// rounded as it arrives) and store each block's activations in 16 bits but
// those the arch keeps in fp32 (Arch.act_keep32); every operation computes
// in fp32, from the 16-bit values. Under fp16 the gradient flowing back out
// of each block (and out of the head) is held in fp16 too, the range a loss
// scale exists for. Gradients are fp32.
//
// STAGE_PARAMS16_ONLY (with bf16 or fp16): no fp32 parameters (params is
// NULL: their masters live elsewhere, the optimizer offload's files); the
// stage keeps its own 16-bit copy, which its owner writes and marks
// current (stage_params16, stage_params16_current) before every pass.
enum {
    STAGE_NO_PARAMS = 1, STAGE_NO_GRADS = 2, STAGE_RECOMPUTE_FULL = 4, STAGE_RECOMPUTE_SELECTIVE = 8,
    STAGE_BF16 = 16, STAGE_FP16 = 32, STAGE_PARAMS16_ONLY = 64
};

// The stage_init flag of a precision (0 for fp32).
unsigned stage_prec_flag(Precision p);

typedef struct Stage {
    ModelConfig cfg;
    ModelSlice slice;
    ParamTable table;
    float *params;     // table.total floats (MEM_PARAMS), or NULL with STAGE_NO_PARAMS
    float *grads;      // table.total floats (MEM_GRADS), or NULL with STAGE_NO_GRADS
    int B, T;          // activation capacity per slot
    int slots;         // micro-batches whose activations it can hold at once
    int chunks;        // the slice's chunks (slice_chunks)
    Precision prec;    // PREC_FP32, or with STAGE_BF16 / STAGE_FP16 the 16-bit format
    StageHooks hooks;
    StageActs *acts;
} Stage;

// Allocates parameters (uninitialised: call ptable_init or load them),
// gradients (zero) and `slots` sets of activations for up to B×T tokens
// of one chunk;
// flags (STAGE_NO_PARAMS, STAGE_NO_GRADS) leave out flat buffers that
// hooks will provide. Refuses an architecture described for planning only.
int stage_init(Stage *s, const ModelConfig *cfg, const ModelSlice *slice, int B, int T, int slots, unsigned flags,
               Err *err);
// Whether c splits over tp tensor-parallel ranks (heads, key/value heads,
// FFN width, padded vocabulary) and, with sequence parallelism, a sequence
// of T tokens does too; ERR_USAGE naming --tp/--sp otherwise. stage_init
// checks it; the command line checks it before starting any rank.
int stage_check_split(const ModelConfig *c, int tp, int sp, int T, Err *err);
void stage_free(Stage *s);
// The bytes of activations (MEM_ACTS) stage_init allocates for these
// arguments (a valid configuration of a trainable arch; 0 otherwise),
// without allocating them: the planner's count for tessera's own runs.
size_t stage_act_bytes(const ModelConfig *cfg, const ModelSlice *slice, int B, int T, int slots, unsigned flags);

// Before a step's first backward: the gradient buffer zeroed, but for the
// linear layers' weights when the stage owns its gradients (no grads
// hook): their first product of the step writes them instead (the same
// values as adding to zero, one pass over them fewer); and without any
// hook an untied token embedding's table is zeroed only in the rows the
// last step's lookups added to. Without it the gradients accumulate onto
// what the buffer holds. The bytes it zeroed.
size_t stage_grads_begin(Stage *s);
// Gradients were written outside the passes (a test's injected inf): the
// next stage_grads_begin zeroes every gradient it does not leave to a
// product, the untied token embedding's whole table included.
void stage_grads_touched(Stage *s);

// The parameters changed (an optimizer step, a load): under bf16/fp16 the
// 16-bit copy of each segment is made again when next read.
void stage_params_changed(Stage *s);
// The 16-bit copy of the stage's own parameters (table.total values in the
// format *prec), for an optimizer that writes it as it updates them; NULL
// when there is none (fp32, or parameters that hooks gather). After such
// an update, stage_params16_current says the whole copy is current.
uint16_t *stage_params16(Stage *s, Precision *prec);
void stage_params16_current(Stage *s);

// The name of the stage's linear layer taking `in` features to `out` on
// this rank into buf: the block's ("qkv", "fc", ...), "head", both when
// their shapes coincide ("qkv/head"), or "" for none. Returns buf.
char *stage_linear_name(const Stage *s, int in, int out, char *buf, size_t n);

// Incremental decoding (tessera sample: one stage holding the whole model,
// B = 1): a cache of every layer's keys and values for the stage's T
// positions. Once it is on, stage_forward(s, 0, tokens, NULL, 1, n, 0)
// runs the n positions from stage_kv_pos on — their tokens only — attending
// to the cached ones, and moves the cache on by n. 0, or -1 with err.
int stage_kv_init(Stage *s, Err *err);
// Empties the cache: the next pass starts at position 0.
void stage_kv_reset(Stage *s);
// The positions cached (the next pass's first).
int stage_kv_pos(const Stage *s);

// Document masking (model/doc) from the next pass on: sep is the token that
// opens every document (-1: off, as at stage_init). Each pass then reads
// its micro-batch's tokens on every stage (stage_forward's and
// stage_backward's `tokens`): attention stays inside the documents of each
// row and positions count from each document's first token; under
// incremental decoding a separator starts a new document in the cache.
// 0, or -1 with err (out of memory).
int stage_set_doc_mask(Stage *s, int sep, Err *err);
// The separator of document masking, or -1.
int stage_doc_sep(const Stage *s);

// Installs the hooks (NULL: none; the flat buffers are used).
void stage_set_hooks(Stage *s, const StageHooks *h);

// The tensor-parallel group of a slice with tp_size > 1 (c's size and this
// rank's place in it are the slice's), set once before the first pass:
// blocks, embeddings and the loss then exchange over it (model/tp).
// With tp_size 1 it does nothing. 0, or -1 with err (out of memory).
int stage_set_tp(Stage *s, Comm *c, Err *err);
// Rows the output head takes at once (its logits chunk) for Vl vocabulary
// rows and N rows per micro-batch; the vocabulary-parallel loss exchanges
// its statistics once per chunk.
int stage_head_rows(int Vl, int N);
// 0, or -1 with the first tensor-parallel collective that failed (the
// passes go on, their numbers meaningless, so that every rank reaches the
// check).
int stage_tp_status(const Stage *s, Err *err);

// Runs the stage forward on B×T tokens (B ≤ s->B, T ≤ s->T), keeping the
// activations in `slot`. tokens (B,T) are read by the first stage (and for
// position ids), targets (B,T) by the last, where -1 skips a position. On
// the last stage (in its last chunk) returns the sum of the per-token
// losses; when dscale != 0
// it also back-propagates the head with d(loss_sum)·dscale, so
// stage_backward can follow.
double stage_forward(Stage *s, int slot, const int *tokens, const int *targets, int B, int T, float dscale);
// The sum of the auxiliary losses the stage's blocks added (BlockRun.aux_loss:
// each already weighted and summed over its rows, like the per-token
// losses) since the last call, and zero again. Every stage has its own;
// the trainer adds them into the step's loss, evaluation leaves them out.
double stage_take_aux(Stage *s);

// The gradient norm's sums taken as the gradients are last written. With
// on, where the stage adds into its own buffer (no grads hooks) and the
// caller does nothing to the gradients between the passes and the norm
// (one data-parallel rank, no sharding), the product that writes a linear
// layer's weight gradient last in a step — in the backward of the step's
// last micro-batch (stage_microbatch) — stores its sum of squares as it
// writes it (on the bf16 units: matmul_grad_sumsq), and the norm reads
// that gradient no more. stage_microbatch: the passes to come are of
// micro-batch mb of the step's M (M 0: outside a training step, as
// evaluation and sampling run). stage_grad_sumsq: per tensor of the stage's
// table, this step's sums so taken (negative where none was: the norm
// reads that gradient), or NULL when off. Sums are of whole products: one
// over neighbouring tensors (LLaMA's q, k, v) is the first's, the others 0.
void stage_fuse_norm(Stage *s, int on);
void stage_microbatch(Stage *s, int mb, int M);
// The micro-batches' weight gradients are gathered into fewer products of
// more rows (kernels/matmul: matmul_defer; the same bits as without):
// stage_microbatch sets it up, and each gradient's products take turns
// over the micro-batches before the last; the last one's passes finish
// every gradient. With stage_grads_hold(s, 1), and where no hook reads the
// gradients as they are finished, the last micro-batch's products wait for
// stage_grads_flush instead, which the caller must then run after that
// micro-batch's backward (a pipeline stage: once its input gradient is on
// its way, so that the previous stage does not wait for them).
void stage_grads_hold(Stage *s, int on);
void stage_grads_flush(Stage *s);
const double *stage_grad_sumsq(const Stage *s);

// Back-propagates the slot's micro-batch through the blocks (after
// stage_forward with dscale != 0 on the last stage, or after the caller
// filled the slot's stage_grad_output()), adding into the gradients. On
// the first stage ends in the embeddings.
void stage_backward(Stage *s, int slot, const int *tokens, int B, int T);

// Logits (B,Vl) of position pos of every row — this rank's vocabulary
// slice [v0, v0 + Vl) — after a forward pass of the slot on the last stage
// with dscale == 0 and targets == NULL.
void stage_logits(Stage *s, int slot, int B, int T, int pos, float *logits);

// The chunk whose blocks the slot's passes run, from its next forward pass
// until it is bound again (initially chunk 0).
void stage_bind(Stage *s, int slot, int chunk);

// Pipeline boundaries of a slot's micro-batch, (B,T,C) each — under
// sequence parallelism the rank's rows of it, (B·T/tp, C).
float *stage_input(Stage *s, int slot);         // input of a non-first stage
float *stage_output(Stage *s, int slot);        // output of a non-last stage
float *stage_grad_output(Stage *s, int slot);   // gradient arriving at a non-last stage
float *stage_grad_input(Stage *s, int slot);    // gradient leaving the stage's input (after stage_backward)
// Floats of each of them for a micro-batch of B×T tokens; the same of a
// stage not yet made, from its config and slice.
size_t stage_boundary_floats(const Stage *s, int B, int T);
size_t stage_boundary_floats_of(const ModelConfig *cfg, const ModelSlice *slice, int B, int T);

#endif
