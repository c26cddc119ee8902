// model/arch — what an architecture is, described once: its name, presets
// and config keys (with defaults and the checks its kernels need), its
// tensors (name, role, shape rule, tensor-parallel shard rule, weight
// decay, init rule) grouped into the three parts a pipeline stage may
// hold, the forward and backward of its block and final norm, its FLOPs
// per token, and its Hugging Face name (model_type, config.json keys,
// tensor names). model/gpt2.c, model/llama.c and model/qwen2.c each define
// one Arch, and the registry (arch_registry) lists them: config parsing,
// the parameter table (model/params), the generic stage (model/stage),
// the Hugging Face import and export (io/), the planner (plan/) and MFU
// all iterate or ask it, so adding an architecture is one file and one
// line of the registry. Code outside model/ and io/'s mappings finds a
// tensor by its role, never by its name.
#ifndef TSR_MODEL_ARCH_H
#define TSR_MODEL_ARCH_H

#include <stddef.h>
#include <stdint.h>

#include "core/check.h"
#include "core/half.h"
#include "model/config.h"
#include "model/tp.h"

// What a tensor is, for the code that must treat some tensors apart (the
// embeddings' gradient rows, the tied head, the Hugging Face layouts).
typedef enum {
    ROLE_TOK_EMB,    // token embedding (Vp, C); also the output head when the arch ties it
    ROLE_POS_EMB,    // learned position embedding (max_seq, C)
    ROLE_NORM,       // a norm's gain or bias (C)
    ROLE_QKV,        // q, k and v stacked on a leading dimension of 3: (3, C, C)
    ROLE_QKV_BIAS,   // their biases (3, C)
    ROLE_LINEAR,     // a linear layer's weight, (out, in)
    ROLE_BIAS,       // a linear layer's bias (out)
    ROLE_HEAD,       // an untied output head (Vp, C)
} Role;

// Where a tensor lives: the first stage's embeddings, every block, or the
// last stage's final norm (and an untied head). A tied token embedding is
// held by the last stage as well.
typedef enum { PART_EMBED, PART_BLOCK, PART_FINAL, PART_COUNT } Part;

// Shape rules: each dimension a function of the config.
typedef enum {
    DIM_3,     // 3 (q, k, v)
    DIM_C,     // d_model
    DIM_F,     // d_ff
    DIM_VP,    // the vocabulary rows: Vp (V when counting without padding)
    DIM_S,     // max_seq
    DIM_KV,    // n_kv_head × head size
} Dim;

enum { PARAM_NO_DECAY = 1 };                    // TensorDesc.flags
enum { INIT_NORMAL, INIT_ZERO, INIT_ONE };      // TensorDesc.init
typedef enum { STD_BASE, STD_RESID } InitStd;   // 0.02, or 0.02/√(2L) for projections into the residual stream
enum { ARCH_MAX_DIM = 3, ARCH_MAX_TENSORS = 16, ARCH_MAX_BUFS = 16 };

typedef struct TensorDesc {
    const char *name;    // block tensors: the name after the block prefix
    Role role;
    int ndim;
    Dim dim[ARCH_MAX_DIM];
    int shard_dim;       // the dimension tensor parallelism splits, -1: every TP rank holds it whole
    int flags;           // PARAM_NO_DECAY
    int init;            // INIT_NORMAL (std below), INIT_ZERO, INIT_ONE
    InitStd std;
} TensorDesc;

// Sizes a block sees on one rank for one micro-batch (the local slice).
typedef struct LocalDims {
    int B, T, N;         // batch, sequence, rows N = B·T
    int C;               // d_model (the residual stream is never split by width)
    int Cl, NHl, Fl;     // this TP rank's attention width, heads, FFN width
    int NKVl, KVl;       // its key/value heads and their width (grouped-query attention; GPT-2: NHl, Cl)
    int Vl, v0;          // its vocabulary rows [v0, v0 + Vl)
    int Ns, s0;          // its rows of the residual stream [s0, s0 + Ns): all N, or under
                         // sequence parallelism the N/tp from s0 = tp_rank·Ns
    int sp;              // sequence parallel
} LocalDims;

// One call of a block's (or the final norm's) forward or backward. The
// residual stream (x, dres, the final norm's input) is the rank's Ns rows;
// a block enters its tensor-parallel regions with tp_gather and leaves them
// with tp_reduce (model/tp), which are no-ops for one rank.
// Incremental decoding (tessera sample): every layer's keys and values of
// the positions so far, so that a new position attends to them instead of
// the whole context being run again.
typedef struct KvCache {
    float *k, *v;        // (L,S,KVl) each: layer l's keys and values of positions [0, pos)
    int S;               // positions it holds
    int pos;             // the pass's first new position
    int doc0;            // document masking: the first position of the document position pos belongs to
} KvCache;

typedef struct BlockRun {
    const ModelConfig *cfg;
    const LocalDims *d;
    Tp *tp;              // the TP group, NULL for one rank
    float *const *w;     // its tensors' parameters, in the order of the arch's part table
    float *const *g;     // their gradients, added into (backward only)
    float *const *act;   // its saved activations for this micro-batch (block: Arch.act_floats; final: out (N,C)
                         // gathered, mean (Ns), rstd (Ns))
    float *const *scr;   // scratch shared by every block (Arch.scratch_floats)
    const float *x;      // (Ns,C) input
    float *tmp;          // (N,C) scratch; the final norm's backward reads d(output), partial over TP, from it
    float *dres;         // (Ns,C) backward: in, d(output); out, d(input) (the final norm adds into it)
    Precision prec;      // what the saved activations are stored in (arch_stored)
    // The micro-batch's 16-bit store of each activation (NULL entries: kept
    // in fp32 or shared), given in its first forward only (NULL otherwise),
    // and the bits of those arch_stored has written into it.
    uint16_t *const *act16;
    unsigned *act16_done;
    // Backward: the micro-batch's 16-bit stores, given where Arch.act_fn16's
    // inputs are read from them and were not widened (NULL otherwise).
    const uint16_t *const *in16;
    KvCache *kv;         // incremental decoding (B = 1, positions kv->pos on), or NULL
    int layer;           // with kv: the block's layer
    // Document masking (model/doc), or NULL: for each of the N rows its
    // document's first position within its sequence (attention's start) and
    // its place in the document (the positions the block encodes). With kv:
    // the pass's T rows, starts counted in the cache's positions.
    const int *doc_start, *doc_pos;
    // A block with an auxiliary loss (a mixture of experts' load balance)
    // adds it here in its forward, weighted and summed over the
    // micro-batch's rows as the per-token losses are, and adds that term's
    // gradient itself in its backward; NULL in a recomputing forward (the
    // loss was counted). stage_take_aux hands the sum to the trainer. None
    // of today's blocks has one.
    double *aux_loss;
} BlockRun;

// A preset: the sizes of a named model. plan_only: described for the
// planner (no tokenizer of its vocabulary here, or too big to mean
// training on a CPU).
typedef struct ArchPreset {
    const char *name;
    int L, NH, KV, C, F, S, V;   // KV 0: NH
    float theta, eps;            // 0: the architecture's defaults
    int tie, plan_only;
} ArchPreset;

// The config keys an architecture may have beyond the common ones
// (n_layer, n_head, d_model, d_ff, max_seq, vocab).
enum { KEY_KV_HEADS = 1u, KEY_ROPE_THETA = 2u, KEY_NORM_EPS = 4u, KEY_TIE = 8u };

// A key of a Hugging Face config.json: what tessera does with it.
typedef enum {
    HF_KEY_READ,      // a size or value: the tessera model field `want` names (NULL: checked apart, e.g. head_dim)
    HF_KEY_IGNORED,   // bookkeeping, or training-time only (dropout): the same model either way; `want`, when
                      // set, is the JSON an export writes
    HF_KEY_FIXED,     // a feature with one value tessera implements: `want` (JSON text; alternatives '|'), or absent
} HfKeyKind;
typedef struct HfKey {
    const char *name;
    HfKeyKind kind;
    const char *want;
} HfKey;

// An architecture under its Hugging Face name.
typedef struct ArchHf {
    const char *model_type;     // config.json's "model_type"
    const char *architecture;   // its "architectures" entry
    const char *prefix;         // put before every tensor name but the head's ("model.", "transformer.")
    const HfKey *keys;          // config.json's keys, in the order an export writes them
    int nkeys;
    const char *buffer;         // a scanf pattern (one %d: the layer) of a buffer files may hold that the model does
                                // not read (LLaMA's rotary inv_freq), or NULL
    int conv1d;                 // linear weights stored (in, out) and q/k/v as (C, 3C): GPT-2's Conv1D
} ArchHf;

typedef struct Arch Arch;
struct Arch {
    const char *name;                     // the registry name: config's "arch", checkpoints', --arch
    const char *label;                    // its name in prose ("LLaMA")
    const char *summary;                  // what it is, one line (plan --explain)
    const ArchPreset *presets;
    int npresets;
    unsigned keys;                        // KEY_*: the config keys it has beyond the common ones
    float rope_theta, norm_eps;           // the defaults of those it has
    // What its kernels require of a config beyond the common checks (an
    // even head size for the rotary embedding), as a message naming the
    // field; NULL: nothing.
    int (*validate)(const ModelConfig *c, Err *err);
    const ArchHf *hf;
    // The same architecture with its head tied to the token embedding
    // (tie_embeddings: 1), or NULL where tying is not a choice.
    const Arch *tied;
    const char *block_prefix;             // printf format of a block tensor's name prefix, given the layer
    const TensorDesc *part[PART_COUNT];   // the tensors of each part, in flat-buffer order
    int n[PART_COUNT];
    int tied_head;                        // the output head is the token embedding
    int has_train;                        // forward and backward exist (else the arch is described for planning only)
    // A block's saved activations (nact buffers, act_out its output) and the
    // scratch its passes share (nscratch buffers), in floats.
    int nact, act_out, nscratch;
    // The saved activations kept in fp32 under bf16/fp16 (bit j: activation
    // j): the norms' statistics, the softmax's log-sum-exp and the block's
    // output, the residual stream (as Megatron-LM's fp32 residual
    // connection). The others are stored in 16 bits.
    unsigned act_keep32;
    // Of the others, those only products read (the linear layers' inputs,
    // forward and backward, and attention's q, k and v): under bf16 on the
    // bf16 units the products read their 16-bit store, and their floats are
    // neither rounded in place nor widened again for the backward.
    unsigned act_gemm16;
    // And the inputs only an elementwise function reads, whose output is in
    // act_gemm16 (GELU's, SwiGLU's): there the function runs from and into
    // the 16-bit stores (gelu_forward16), its input's floats not rounded in
    // place, and its backward reads the input's store (BlockRun.in16).
    unsigned act_fn16;
    // The attention core's saved activations (ncore of them: selective
    // recomputation keeps one shared set of them and recomputes them from
    // the others before each backward, with core_forward).
    int ncore, core[4];
    void (*core_forward)(const BlockRun *r);
    size_t (*act_floats)(const LocalDims *d, int i);
    size_t (*scratch_floats)(const LocalDims *d, int i);
    void (*block_forward)(const BlockRun *r);
    void (*block_backward)(const BlockRun *r);
    void (*final_forward)(const BlockRun *r);
    void (*final_backward)(const BlockRun *r);
    // The name of the block's linear layer taking `in` features to `out`
    // on this rank ("qkv", "fc", ...), NULL for none (a profile's rows).
    const char *(*linear_name)(const LocalDims *d, int in, int out);
};

extern const Arch arch_gpt2, arch_llama, arch_llama_tied, arch_qwen2, arch_qwen2_tied;

// Every architecture, indexed by ArchId.
extern const Arch *const arch_registry[ARCH_COUNT];
// The architecture with this Hugging Face model_type, or NULL.
const Arch *arch_of_hf(const char *model_type, ArchId *id);

// Training FLOPs per token of a sequence of T (model FLOPs: PaLM's
// appendix B): 6 per parameter a token's products touch (an untied token
// embedding is only looked up: no FLOPs; a tied one is the head's GEMM
// too) and 12·L·T·C for attention's scores and weighted sums.
double arch_flops_token(const ModelConfig *c, int T);
// The same with attention over `pairs` (query, key) pairs per sequence of T
// on average instead of causal attention's T(T+1)/2: document masking's
// sum of L(L+1)/2 over a sequence's documents (model/doc), the attention
// term scaled by pairs / (T(T+1)/2).
double arch_flops_token_pairs(const ModelConfig *c, int T, double pairs);

// Helpers of the blocks' tensor-parallel passes (model/gpt2, model/llama):
// this rank's rows of a gathered (N,C) buffer; the gradient arriving at a
// row-parallel linear's output, all N rows (the rank's dres, gathered into
// dy under sequence parallelism); and, under sequence parallelism, where a
// norm sees only the rank's rows so its parameters' gradients are partial,
// the k vectors of C the backward gathered in `partial` summed over the TP
// ranks and added to the gradients which[0..k) (Megatron-LM sums them the
// same way, once per step).
float *arch_own_rows(const LocalDims *d, float *full);
const float *arch_rows_of_dres(const BlockRun *r, float *dy);
void arch_norm_grads_done(const BlockRun *r, float *partial, int k, const int *which);

// A block's forward has finished writing activation j (before anything
// reads it): under bf16/fp16, unless the arch keeps it in fp32, its values
// are rounded in place to what the 16-bit store will hold, so that the
// forward goes on with, and the backward reads, the same values (and
// recomputation gives the same bits). In the first forward the same pass
// writes the activation's 16-bit store (act16), which the stage then need
// not pack.
void arch_stored(const Arch *ar, const BlockRun *r, int j);
// Whether y = fn(x) runs on the 16-bit stores (Arch.act_fn16 x, act_gemm16
// y: under bf16 on the bf16 units, both stores given); if so, both count as
// stored and y's store is bound for the products that read it.
int arch_fn16(const Arch *ar, const BlockRun *r, int jx, int jy);
// Activation j (Arch.act_gemm16) = x (N,C) · w^T + b where it lives in its
// 16-bit store alone: on the tiles the product writes the store itself
// (linear_forward16), j counts as stored and is bound — 1; otherwise 0 and
// nothing done (the caller multiplies into the floats and stores them).
int arch_linear16(const Arch *ar, const BlockRun *r, int j, const float *x, const float *w, const float *b, int N,
                  int C, int OC);

// A block forward's attention: out (N,NH·HS) and lse from qkv (N,(NH +
// 2·NKV)·HS). Without a cache, the fused causal attention over the pass's
// T positions (scratch: attention_scratch_floats); with one (B = 1), the
// pass's keys and values are stored at kv->pos and, unless the pass starts
// at position 0 (then it is the whole sequence), its positions attend to
// every cached one (lse is not written then: nothing runs backward). With
// r->doc_start, each position attends to its own document's keys only.
void arch_attention(const BlockRun *r, float *out, float *lse, const float *qkv, float *scratch, int NH, int NKV,
                    int HS);

// The description of c's architecture (config_arch_name names it): the
// registry's entry, its tied form when c ties the head.
const Arch *arch_of(const ModelConfig *c);
// Exact parameter count of the whole model, with V (padded=0) or Vp
// vocabulary rows: the one count in tessera.
int64_t config_param_count(const ModelConfig *c, int padded);
// The value of a shape rule; padded = 0 counts V vocabulary rows, else Vp.
int64_t arch_dim(const ModelConfig *c, Dim d, int padded);
// Elements of tensor t on one of tp tensor-parallel ranks.
int64_t arch_tensor_numel(const ModelConfig *c, const TensorDesc *t, int tp, int padded);
// Parameters of part p (one block for PART_BLOCK) on one of tp ranks.
int64_t arch_part_params(const ModelConfig *c, Part p, int tp, int padded);
// The elements of the copy of the embeddings part that the last stage of a
// pipeline holds for a tied head, on one of tp ranks (0 for an untied
// head): the whole part, so that both copies split into the same ZeRO
// pieces (the position table's gradient there is zero).
int64_t arch_tied_copy(const ModelConfig *c, int tp, int padded);

#endif
