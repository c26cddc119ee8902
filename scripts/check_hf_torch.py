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

Or the other way: --make DIR writes a Qwen2ForCausalLM directory of its
own (random weights, biases on q/k/v, a tied head, config.json as
transformers writes it) for tessera to import and evaluate:

  python3 scripts/check_hf_torch.py --make DIR && python3 scripts/check_hf_torch.py DIR FILE 8 64
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


def save_safetensors(path, tensors):
    header, blobs, off = {}, [], 0
    for name, t in tensors.items():
        b = t.contiguous().numpy().astype("<f4").tobytes()
        header[name] = {"dtype": "F32", "shape": list(t.shape), "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))


def make_qwen2(d):
    """A small Qwen2 as transformers would save it: 2 layers, 4 heads on 2
    key/value heads, width 64, FFN 176, byte vocabulary, tied head."""
    import os
    os.makedirs(d, exist_ok=True)
    L, C, NH, KV, F, V = 2, 64, 4, 2, 176, 256
    HS = C // NH
    g = torch.Generator().manual_seed(7)

    def rnd(*shape, std=0.08):
        return torch.randn(*shape, generator=g) * std

    w = {"model.embed_tokens.weight": rnd(V, C, std=0.1), "model.norm.weight": 1 + rnd(C)}
    for l in range(L):
        p = f"model.layers.{l}."
        w[p + "input_layernorm.weight"] = 1 + rnd(C)
        w[p + "post_attention_layernorm.weight"] = 1 + rnd(C)
        for n, rows in (("q_proj", C), ("k_proj", KV * HS), ("v_proj", KV * HS)):
            w[p + f"self_attn.{n}.weight"] = rnd(rows, C)
            w[p + f"self_attn.{n}.bias"] = rnd(rows, std=0.5)
        w[p + "self_attn.o_proj.weight"] = rnd(C, C)
        w[p + "mlp.gate_proj.weight"], w[p + "mlp.up_proj.weight"] = rnd(F, C), rnd(F, C)
        w[p + "mlp.down_proj.weight"] = rnd(C, F)
    save_safetensors(f"{d}/model.safetensors", w)
    cfg = {"architectures": ["Qwen2ForCausalLM"], "attention_dropout": 0.0, "bos_token_id": 151643,
           "eos_token_id": 151643, "hidden_act": "silu", "hidden_size": C, "initializer_range": 0.02,
           "intermediate_size": F, "max_position_embeddings": 64, "max_window_layers": L, "model_type": "qwen2",
           "num_attention_heads": NH, "num_hidden_layers": L, "num_key_value_heads": KV, "rms_norm_eps": 1e-06,
           "rope_theta": 1000000.0, "sliding_window": 64, "tie_word_embeddings": True, "torch_dtype": "float32",
           "transformers_version": "4.40.1", "use_cache": True, "use_sliding_window": False, "vocab_size": V}
    json.dump(cfg, open(f"{d}/config.json", "w"), indent=2)


def rotate_half(x):
    h = x.shape[-1] // 2
    return torch.cat((-x[..., h:], x[..., :h]), dim=-1)


def main():
    if sys.argv[1] == "--make":
        make_qwen2(sys.argv[2])
        return
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
