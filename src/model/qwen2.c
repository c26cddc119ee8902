// model/qwen2 — Qwen2 (Yang et al. 2024) as tessera runs it: the LLaMA
// family's block (model/llama_family.h) with biases on q, k and v, a
// rotary base of 10⁶ and RMSNorm eps of 10⁻⁶ by default, grouped-query
// heads, and an output head tied to the token embedding in the small
// models (tie_embeddings). Names are Hugging Face Qwen2ForCausalLM's
// without "model.".
#include "model/llama_family.h"

static const TensorDesc embed[] = {LF_EMBED_TENSORS};
static const TensorDesc block[LF_NBLOCK_BIAS] = {
    LF_BLOCK_TENSORS,
    [LF_Q_B] = {"self_attn.q_proj.bias", ROLE_BIAS, 1, {DIM_C}, 0, PARAM_NO_DECAY, INIT_ZERO, STD_BASE},
    [LF_K_B] = {"self_attn.k_proj.bias", ROLE_BIAS, 1, {DIM_KV}, 0, PARAM_NO_DECAY, INIT_ZERO, STD_BASE},
    [LF_V_B] = {"self_attn.v_proj.bias", ROLE_BIAS, 1, {DIM_KV}, 0, PARAM_NO_DECAY, INIT_ZERO, STD_BASE},
};
static const TensorDesc final[] = {LF_FINAL_TENSORS};

// The released sizes (Qwen2 technical report, table 1) and a tiny one for
// tests; Qwen2's vocabulary is 151,936 rows (152,064 for 7B).
static const ArchPreset presets[] = {
    {"qwen2-tiny", 4, 4, 2, 128, 352, 64, 151936, 0, 0, 1, 0},
    {"qwen2-0.5b", 24, 14, 2, 896, 4864, 32768, 151936, 0, 0, 1, 0},
    {"qwen2-1.5b", 28, 12, 2, 1536, 8960, 32768, 151936, 0, 0, 1, 0},
    {"qwen2-7b", 28, 28, 4, 3584, 18944, 32768, 152064, 0, 0, 0, 0},
};

// Qwen2ForCausalLM's config.json: the sizes read, the features fixed at
// what tessera's Qwen2 computes (no sliding window: use_sliding_window
// false makes sliding_window and max_window_layers inert), bookkeeping.
static const HfKey hf_keys[] = {
    {"hidden_size", HF_KEY_READ, "d_model"},           {"intermediate_size", HF_KEY_READ, "d_ff"},
    {"num_attention_heads", HF_KEY_READ, "n_head"},    {"num_hidden_layers", HF_KEY_READ, "n_layer"},
    {"num_key_value_heads", HF_KEY_READ, "n_kv_head"}, {"max_position_embeddings", HF_KEY_READ, "max_seq"},
    {"vocab_size", HF_KEY_READ, "vocab"},              {"rms_norm_eps", HF_KEY_READ, "norm_eps"},
    {"rope_theta", HF_KEY_READ, "rope_theta"},         {"tie_word_embeddings", HF_KEY_READ, "tie_embeddings"},
    {"hidden_act", HF_KEY_FIXED, "\"silu\""},          {"model_type", HF_KEY_FIXED, "\"qwen2\""},
    {"rope_scaling", HF_KEY_FIXED, "null"},            {"use_sliding_window", HF_KEY_FIXED, "false"},
    {"sliding_window", HF_KEY_IGNORED, NULL},          {"max_window_layers", HF_KEY_IGNORED, NULL},
    {"bos_token_id", HF_KEY_IGNORED, "151643"},        {"eos_token_id", HF_KEY_IGNORED, "151643"},
    {"architectures", HF_KEY_IGNORED, NULL},           {"torch_dtype", HF_KEY_IGNORED, NULL},
    {"transformers_version", HF_KEY_IGNORED, NULL},    {"_name_or_path", HF_KEY_IGNORED, NULL},
    {"initializer_range", HF_KEY_IGNORED, NULL},       {"use_cache", HF_KEY_IGNORED, NULL},
    {"attention_dropout", HF_KEY_IGNORED, NULL},       // training-time only
};

static const ArchHf hf = {
    .model_type = "qwen2",
    .architecture = "Qwen2ForCausalLM",
    .prefix = "model.",
    .keys = hf_keys,
    .nkeys = sizeof hf_keys / sizeof hf_keys[0],
};

#define QWEN2_COMMON                                                                                                   \
    .name = "qwen2", .label = "Qwen2", .summary = "Qwen2 (LLaMA's block with q/k/v biases; RoPE θ 1e6)",               \
    .presets = presets, .npresets = sizeof presets / sizeof presets[0],                                                \
    .keys = KEY_KV_HEADS | KEY_ROPE_THETA | KEY_NORM_EPS | KEY_TIE, .rope_theta = 1e6f, .norm_eps = 1e-6f,             \
    .hf = &hf, .tied = &arch_qwen2_tied, .block_prefix = "layers.%d.",                                                 \
    .part = {embed, block, final}, LLAMA_FAMILY_RUN

const Arch arch_qwen2 = {QWEN2_COMMON, .n = {1, LF_NBLOCK_BIAS, 2}, .tied_head = 0};
const Arch arch_qwen2_tied = {QWEN2_COMMON, .n = {1, LF_NBLOCK_BIAS, 1}, .tied_head = 1};
