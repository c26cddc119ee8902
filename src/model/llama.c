// model/llama — LLaMA (Touvron et al. 2023) described for planning: RMSNorm,
// rotary positions (no position table), grouped-query attention, a SwiGLU
// MLP, no biases, and an untied output head. Names are Hugging Face
// LlamaForCausalLM's without "model.". The block's forward and backward
// are not in this build (has_train = 0): `tessera plan` sizes LLaMA models
// from this table, and training refuses the architecture by name.
#include "model/arch.h"

static const TensorDesc embed[] = {
    {"embed_tokens.weight", ROLE_TOK_EMB, 2, {DIM_VP, DIM_C}, 0, 0, INIT_NORMAL, STD_BASE},
};

static const TensorDesc block[] = {
    {"input_layernorm.weight", ROLE_NORM, 1, {DIM_C}, -1, PARAM_NO_DECAY, INIT_ONE, STD_BASE},
    {"self_attn.q_proj.weight", ROLE_LINEAR, 2, {DIM_C, DIM_C}, 0, 0, INIT_NORMAL, STD_BASE},
    {"self_attn.k_proj.weight", ROLE_LINEAR, 2, {DIM_KV, DIM_C}, 0, 0, INIT_NORMAL, STD_BASE},
    {"self_attn.v_proj.weight", ROLE_LINEAR, 2, {DIM_KV, DIM_C}, 0, 0, INIT_NORMAL, STD_BASE},
    {"self_attn.o_proj.weight", ROLE_LINEAR, 2, {DIM_C, DIM_C}, 1, 0, INIT_NORMAL, STD_RESID},
    {"post_attention_layernorm.weight", ROLE_NORM, 1, {DIM_C}, -1, PARAM_NO_DECAY, INIT_ONE, STD_BASE},
    {"mlp.gate_proj.weight", ROLE_LINEAR, 2, {DIM_F, DIM_C}, 0, 0, INIT_NORMAL, STD_BASE},
    {"mlp.up_proj.weight", ROLE_LINEAR, 2, {DIM_F, DIM_C}, 0, 0, INIT_NORMAL, STD_BASE},
    {"mlp.down_proj.weight", ROLE_LINEAR, 2, {DIM_C, DIM_F}, 1, 0, INIT_NORMAL, STD_RESID},
};

static const TensorDesc final[] = {
    {"norm.weight", ROLE_NORM, 1, {DIM_C}, -1, PARAM_NO_DECAY, INIT_ONE, STD_BASE},
    {"lm_head.weight", ROLE_HEAD, 2, {DIM_VP, DIM_C}, 0, 0, INIT_NORMAL, STD_BASE},
};

const Arch arch_llama = {
    .block_prefix = "layers.%d.",
    .part = {embed, block, final},
    .n = {1, 9, 2},
    .tied_head = 0,
    .has_train = 0,
};
