"""The loss of a Hugging Face LLaMA or Qwen2 model directory on a
byte-tokenized text, computed by the model written here in PyTorch as
transformers' LlamaForCausalLM and Qwen2ForCausalLM compute it (fp32:
RMSNorm, rotate_half rotary embeddings with fp32 angles, grouped-query
attention, SwiGLU; Qwen2's q/k/v biases; the head tied to the embedding
when tie_word_embeddings says so) — to compare with `tessera eval` on the
same file. Outside the test suite (it needs PyTorch: Debian's
python3-torch).

  tessera export --ckpt RUN --hf-dir DIR
  python3 scripts/check_hf_torch.py DIR FILE B T     # the loss of the B windows of T+1 bytes
  tessera import --in DIR --out IMP --tokenizer byte && tessera eval --ckpt IMP --data FILE --batch B --seq T --batches 1
"""
import json
import struct
import sys

import torch


def load_safetensors(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    out = {}
    for name, t in header.items():
        if name == "__metadata__":
            continue
        assert t["dtype"] == "F32", f"{name}: {t['dtype']}"
        b, e = t["data_offsets"]
        out[name] = torch.frombuffer(bytearray(data[b:e]), dtype=torch.float32).reshape(t["shape"])
    return out


def rotate_half(x):
    h = x.shape[-1] // 2
    return torch.cat((-x[..., h:], x[..., :h]), dim=-1)


def main():
    d, text, B, T = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    cfg = json.load(open(f"{d}/config.json"))
    w = load_safetensors(f"{d}/model.safetensors")
    C, NH = cfg["hidden_size"], cfg["num_attention_heads"]
    KV, L = cfg.get("num_key_value_heads", NH), cfg["num_hidden_layers"]
    eps, theta, HS = cfg.get("rms_norm_eps", 1e-6), cfg.get("rope_theta", 10000.0), C // NH
    assert cfg["model_type"] in ("llama", "qwen2"), cfg["model_type"]
    data = torch.tensor(list(open(text, "rb").read()[: B * T + 1]), dtype=torch.long)
    x_ids = torch.stack([data[i * T:(i + 1) * T] for i in range(B)])
    y_ids = torch.stack([data[i * T + 1:(i + 1) * T + 1] for i in range(B)])

    def rms(x, g):
        return g * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps))

    inv = 1.0 / (theta ** (torch.arange(0, HS, 2, dtype=torch.int64).float() / HS))
    ang = torch.arange(T, dtype=torch.float32)[:, None] * inv[None, :]
    emb = torch.cat((ang, ang), dim=-1)
    cos, sin = emb.cos(), emb.sin()
    x = w["model.embed_tokens.weight"][x_ids]
    mask = torch.full((T, T), float("-inf")).triu(1)
    for l in range(L):
        p = f"model.layers.{l}."
        h = rms(x, w[p + "input_layernorm.weight"])
        def proj(name, heads):   # with its bias where the model has one (Qwen2's q, k and v)
            y = h @ w[p + f"self_attn.{name}.weight"].T
            if p + f"self_attn.{name}.bias" in w:
                y = y + w[p + f"self_attn.{name}.bias"]
            return y.view(B, T, heads, HS).transpose(1, 2)

        q, k, v = proj("q_proj", NH), proj("k_proj", KV), proj("v_proj", KV)
        q, k = q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin
        k, v = k.repeat_interleave(NH // KV, dim=1), v.repeat_interleave(NH // KV, dim=1)
        a = torch.softmax(q @ k.transpose(-1, -2) / HS ** 0.5 + mask, dim=-1) @ v
        x = x + a.transpose(1, 2).reshape(B, T, C) @ w[p + "self_attn.o_proj.weight"].T
        h = rms(x, w[p + "post_attention_layernorm.weight"])
        g, u = h @ w[p + "mlp.gate_proj.weight"].T, h @ w[p + "mlp.up_proj.weight"].T
        x = x + (torch.nn.functional.silu(g) * u) @ w[p + "mlp.down_proj.weight"].T
    head = w["model.embed_tokens.weight"] if cfg.get("tie_word_embeddings") else w["lm_head.weight"]
    logits = rms(x, w["model.norm.weight"]) @ head.T
    loss = torch.nn.functional.cross_entropy(logits.view(-1, logits.shape[-1]), y_ids.view(-1))
    print(f"pytorch loss {loss.item():.6f} over {B * T} tokens")


if __name__ == "__main__":
    main()
