// model/llama_family — the block LLaMA and Qwen2 share (model/llama.c
// computes it): RMSNorm → attention with rotary positions and grouped-query
// heads → projection, RMSNorm → SwiGLU MLP, each added to the residual
// stream; a final RMSNorm. Qwen2 adds biases to q, k and v: an
// architecture whose block table has them after the LLaMA tensors (Q_B,
// K_B, V_B, adjacent like the weights) gets them added, and their
// gradients, with no other difference. Each architecture's file holds its
// tables, presets and Hugging Face keys, and points its Arch at these.
#ifndef TSR_MODEL_LLAMA_FAMILY_H
#define TSR_MODEL_LLAMA_FAMILY_H

#include "model/arch.h"

// The block's tensors: their index in the block table (BlockRun.w). q, k
// and v are one after another in the flat buffer (on a TP rank, its heads
// of each), and so are gate and up, and the biases: each trio or pair is
// one GEMM.
enum { LF_LN1_W, LF_Q_W, LF_K_W, LF_V_W, LF_O_W, LF_LN2_W, LF_GATE_W, LF_UP_W, LF_DOWN_W, LF_NBLOCK,
       LF_Q_B = LF_NBLOCK, LF_K_B, LF_V_B, LF_NBLOCK_BIAS };
// The final part: the norm, then the head unless it is tied.
enum { LF_NORM_W, LF_HEAD_W };

// The tables' entries (designated initializers): the token embedding;
// the block; the final norm and the untied head.
#define LF_EMBED_TENSORS {"embed_tokens.weight", ROLE_TOK_EMB, 2, {DIM_VP, DIM_C}, 0, 0, INIT_NORMAL, STD_BASE}
#define LF_BLOCK_TENSORS                                                                                               \
    [LF_LN1_W] = {"input_layernorm.weight", ROLE_NORM, 1, {DIM_C}, -1, PARAM_NO_DECAY, INIT_ONE, STD_BASE},           \
    [LF_Q_W] = {"self_attn.q_proj.weight", ROLE_LINEAR, 2, {DIM_C, DIM_C}, 0, 0, INIT_NORMAL, STD_BASE},              \
    [LF_K_W] = {"self_attn.k_proj.weight", ROLE_LINEAR, 2, {DIM_KV, DIM_C}, 0, 0, INIT_NORMAL, STD_BASE},             \
    [LF_V_W] = {"self_attn.v_proj.weight", ROLE_LINEAR, 2, {DIM_KV, DIM_C}, 0, 0, INIT_NORMAL, STD_BASE},             \
    [LF_O_W] = {"self_attn.o_proj.weight", ROLE_LINEAR, 2, {DIM_C, DIM_C}, 1, 0, INIT_NORMAL, STD_RESID},             \
    [LF_LN2_W] = {"post_attention_layernorm.weight", ROLE_NORM, 1, {DIM_C}, -1, PARAM_NO_DECAY, INIT_ONE, STD_BASE},  \
    [LF_GATE_W] = {"mlp.gate_proj.weight", ROLE_LINEAR, 2, {DIM_F, DIM_C}, 0, 0, INIT_NORMAL, STD_BASE},              \
    [LF_UP_W] = {"mlp.up_proj.weight", ROLE_LINEAR, 2, {DIM_F, DIM_C}, 0, 0, INIT_NORMAL, STD_BASE},                  \
    [LF_DOWN_W] = {"mlp.down_proj.weight", ROLE_LINEAR, 2, {DIM_C, DIM_F}, 1, 0, INIT_NORMAL, STD_RESID}
#define LF_FINAL_TENSORS                                                                                               \
    [LF_NORM_W] = {"norm.weight", ROLE_NORM, 1, {DIM_C}, -1, PARAM_NO_DECAY, INIT_ONE, STD_BASE},                     \
    [LF_HEAD_W] = {"lm_head.weight", ROLE_HEAD, 2, {DIM_VP, DIM_C}, 0, 0, INIT_NORMAL, STD_BASE}

// Saved activations of one block (BlockRun.act). Ns rows are the rank's
// rows of the residual stream; the norms' outputs are kept gathered.
enum {
    LF_A_LN1, LF_A_LN1_RSTD,   // (N,C), (Ns)
    LF_A_QKV,                  // (N,Cl + 2·KVl): q, k (both rotated) and v of the rank's heads
    LF_A_ATTY,                 // (N,Cl)
    LF_A_LSE,                  // (B,NHl,T)
    LF_A_RES2,                 // (Ns,C) residual after attention
    LF_A_LN2, LF_A_LN2_RSTD,   // (N,C), (Ns)
    LF_A_GU,                   // (N,2·Fl): gate then up
    LF_A_H,                    // (N,Fl) silu(gate)·up
    LF_A_RES3,                 // (Ns,C) block output
    LF_NACT
};
enum { LF_NSCR = 6 };
#define LF_KEEP32 (1u << LF_A_LN1_RSTD | 1u << LF_A_LN2_RSTD | 1u << LF_A_LSE | 1u << LF_A_RES3)
#define LF_GEMM16 (1u << LF_A_LN1 | 1u << LF_A_QKV | 1u << LF_A_LN2 | 1u << LF_A_H)
#define LF_FN16 (1u << LF_A_GU)

size_t llama_act_floats(const LocalDims *d, int i);
size_t llama_scratch_floats(const LocalDims *d, int i);
void llama_block_forward(const BlockRun *r);
void llama_core_forward(const BlockRun *r);
void llama_block_backward(const BlockRun *r);
void llama_final_forward(const BlockRun *r);
void llama_final_backward(const BlockRun *r);
const char *llama_linear_name(const LocalDims *d, int in, int out);
// The rotary embedding turns pairs of channels: an even head size.
int llama_validate(const ModelConfig *c, Err *err);

// Fills an Arch's block-running members with the family's.
#define LLAMA_FAMILY_RUN                                                                                               \
    .has_train = 1, .nact = LF_NACT, .act_out = LF_A_RES3, .act_keep32 = LF_KEEP32, .act_gemm16 = LF_GEMM16, .act_fn16 = LF_FN16, .nscratch = LF_NSCR, .ncore = 2,  \
    .core = {LF_A_ATTY, LF_A_LSE}, .core_forward = llama_core_forward, .act_floats = llama_act_floats,               \
    .scratch_floats = llama_scratch_floats, .block_forward = llama_block_forward,                                      \
    .block_backward = llama_block_backward, .final_forward = llama_final_forward,                                      \
    .final_backward = llama_final_backward, .linear_name = llama_linear_name, .validate = llama_validate

#endif
