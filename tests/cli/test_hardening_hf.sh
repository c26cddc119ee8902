#!/usr/bin/env bash
# Hugging Face model directories and the files around them: a stale index or
# stray shards, a weight_map that does not describe the shards, config.json
# features tessera does not implement, tensors nothing reads, temporaries of
# the user's, and train --init-from from every source tessera reads. Each
# refusal is one line naming the flag or file, exit 2, nothing written. Run
# from the repository root.
source "$(dirname "$0")/lib.sh"

# shard SRC.safetensors DIR N [dup|unmapped|misplaced]: DIR gets the tensors
# of SRC in N shards and model.safetensors.index.json, as Hugging Face
# writes them, then the named damage: a tensor of shard 1 copied into shard 2
# as well (dup), a shard holding a tensor weight_map does not list
# (unmapped), weight_map naming shard 2 for a tensor of shard 1 (misplaced).
shard() {
  python3 - "$@" <<'PY'
import json, struct, sys
src, out, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
damage = sys.argv[4] if len(sys.argv) > 4 else ""
b = open(src, "rb").read()
hl = struct.unpack("<Q", b[:8])[0]
hdr = json.loads(b[8:8 + hl]); data = b[8 + hl:]
names = [k for k in hdr if k != "__metadata__"]
parts = [names[i::n] for i in range(n)]
if damage == "dup": parts[1].append(parts[0][0])
if damage == "unmapped": parts[1].append("extra")
wm = {}
for i, p in enumerate(parts):
    fn = "model-%05d-of-%05d.safetensors" % (i + 1, n)
    h, blob = {}, b""
    for k in p:
        t = hdr.get(k, hdr[names[0]])
        a, e = t["data_offsets"]
        h[k] = {"dtype": t["dtype"], "shape": t["shape"], "data_offsets": [len(blob), len(blob) + e - a]}
        blob += data[a:e]
        if k != "extra": wm.setdefault(k, fn)
    hj = json.dumps(h).encode(); hj += b" " * (-len(hj) % 8)
    open(out + "/" + fn, "wb").write(struct.pack("<Q", len(hj)) + hj + blob)
if damage == "misplaced": wm[parts[0][0]] = "model-00002-of-%05d.safetensors" % n
json.dump({"metadata": {}, "weight_map": wm}, open(out + "/model.safetensors.index.json", "w"))
PY
}
# cfg DIR PY: edits DIR/config.json with the Python statement PY on dict c.
cfg() { python3 -c "import json,sys; p=sys.argv[1]+'/config.json'; c=json.load(open(p)); $2; json.dump(c, open(p,'w'))" "$1"; }
# hfcopy NAME: a fresh copy of the LLaMA directory as $TMP/NAME.
hfcopy() { rm -rf "$TMP/$1"; cp -r "$TMP/lhf" "$TMP/$1"; }

T=(train --data "$DATA" --tokenizer byte --steps 2 --seq 32 --batch 2)
"$BIN" "${T[@]}" --model llama-tiny --ckpt-dir "$TMP/l" >/dev/null 2>&1
"$BIN" "${T[@]}" --model gpt2-tiny --ckpt-dir "$TMP/g" >/dev/null 2>&1
"$BIN" export --ckpt "$TMP/l" --hf-dir "$TMP/lhf" >/dev/null 2>&1
"$BIN" export --ckpt "$TMP/g" --hf-dir "$TMP/ghf" >/dev/null 2>&1
"$BIN" export --ckpt "$TMP/g" --out "$TMP/g.safetensors" >/dev/null 2>&1
[ -f "$TMP/lhf/model.safetensors" ] && [ -f "$TMP/ghf/model.safetensors" ] && [ -f "$TMP/g.safetensors" ] ||
  bad "setting up: two runs and their exports" "$(ls "$TMP")"
"$BIN" import --in "$TMP/lhf" --out "$TMP/lref" --tokenizer byte >/dev/null 2>&1

# ---- 4: export over a sharded directory; a model.safetensors beside a stale index ----
hfcopy sh4; rm "$TMP/sh4/model.safetensors"; shard "$TMP/lhf/model.safetensors" "$TMP/sh4" 2
before=$(ls "$TMP/sh4" | sort | tr '\n' ' '); sum=$(cat "$TMP/sh4"/* | md5sum)
expect "export --hf-dir over an index and its shards" 2 "holds model-00001-of-00002.safetensors, model-00002-of-00002.safetensors, model.safetensors.index.json" \
  "$BIN" export --ckpt "$TMP/l" --hf-dir "$TMP/sh4"
[ "$(ls "$TMP/sh4" | sort | tr '\n' ' ')" = "$before" ] && [ "$(cat "$TMP/sh4"/* | md5sum)" = "$sum" ] &&
  ok "the refused export wrote and removed nothing" || bad "the refused export changed the directory" "$(ls "$TMP/sh4")"
hfcopy st4; echo x >"$TMP/st4/adapter.safetensors"
expect "export --hf-dir beside a stray adapter.safetensors" 2 "--hf-dir $TMP/st4: holds adapter.safetensors" \
  "$BIN" export --ckpt "$TMP/l" --hf-dir "$TMP/st4"
"$BIN" export --ckpt "$TMP/l" --hf-dir "$TMP/lhf" >/dev/null 2>&1 && [ "$(ls "$TMP/lhf" | tr '\n' ' ')" = "config.json model.safetensors " ] &&
  ok "export --hf-dir over its own earlier export: replaced, nothing beside it" || bad "re-export over an export" "$(ls "$TMP/lhf")"
# the stale index: shards of the step-2 weights beside a model.safetensors of other weights
"$BIN" "${T[@]}" --model llama-tiny --seed 7 --ckpt-dir "$TMP/l7" >/dev/null 2>&1
"$BIN" export --ckpt "$TMP/l7" --hf-dir "$TMP/l7hf" >/dev/null 2>&1
hfcopy stale; shard "$TMP/lhf/model.safetensors" "$TMP/stale" 2; cp "$TMP/l7hf/model.safetensors" "$TMP/stale/"
expect "import of model.safetensors beside an index that disagrees" 2 "$TMP/stale: model.safetensors and model.safetensors.index.json disagree" \
  "$BIN" import --in "$TMP/stale" --out "$TMP/stale_imp" --tokenizer byte
[ ! -e "$TMP/stale_imp" ] && ok "the refused import wrote no checkpoint" || bad "the refused import wrote $TMP/stale_imp"
hfcopy agree; shard "$TMP/lhf/model.safetensors" "$TMP/agree" 3
"$BIN" import --in "$TMP/agree" --out "$TMP/agree_imp" --tokenizer byte >/dev/null 2>&1 && [ "$(params_rel "$TMP/lref" "$TMP/agree_imp")" = 0 ] &&
  ok "model.safetensors beside an index of the same tensors: imported, the same parameters" || bad "an agreeing index and file" "$(cat "$TMP/x.err")"

# ---- 5: weight_map is followed exactly ----
hfcopy sh5; rm "$TMP/sh5/model.safetensors"; shard "$TMP/lhf/model.safetensors" "$TMP/sh5" 3
"$BIN" import --in "$TMP/sh5" --out "$TMP/sh5_imp" --tokenizer byte >/dev/null 2>&1 && [ "$(params_rel "$TMP/lref" "$TMP/sh5_imp")" = 0 ] &&
  ok "three shards and their index: the parameters of model.safetensors" || bad "a sharded import" "$(params_rel "$TMP/lref" "$TMP/sh5_imp")"
for dmg in dup misplaced unmapped; do
  hfcopy "d_$dmg"; rm "$TMP/d_$dmg/model.safetensors"; shard "$TMP/lhf/model.safetensors" "$TMP/d_$dmg" 2 $dmg
done
expect "a tensor in two shards" 2 "is in model-00002-of-00002.safetensors as well as in model-00001-of-00002.safetensors, where weight_map puts it" \
  "$BIN" import --in "$TMP/d_dup" --out "$TMP/d_imp" --tokenizer byte
expect "weight_map naming a shard that does not hold the tensor" 2 "in model-00002-of-00002.safetensors, which does not hold it" \
  "$BIN" import --in "$TMP/d_misplaced" --out "$TMP/d_imp" --tokenizer byte
expect "a shard's tensor weight_map does not list" 2 "tensor extra in model-00002-of-00002.safetensors is not in weight_map" \
  "$BIN" import --in "$TMP/d_unmapped" --out "$TMP/d_imp" --tokenizer byte
g5="$TMP/g5"; mkdir -p "$g5"; cp "$TMP/ghf/config.json" "$g5/"; shard "$TMP/ghf/model.safetensors" "$g5" 2 dup
expect "GPT-2: a tensor in two shards" 2 "as well as in" "$BIN" import --in "$g5" --out "$TMP/d_imp" --tokenizer byte
[ ! -e "$TMP/d_imp" ] && ok "no refused import wrote a checkpoint" || bad "a refused import wrote $TMP/d_imp"

# ---- 6: config.json features tessera does not implement, sizes that are not integers, tensors nothing reads ----
cf() {   # cf NAME PY TEXT: the LLaMA directory with config.json edited by PY is refused with TEXT
  hfcopy c6; cfg "$TMP/c6" "$2"
  expect "$1" 2 "$3" "$BIN" import --in "$TMP/c6" --out "$TMP/c6_imp" --tokenizer byte
}
cf "hidden_act gelu" "c['hidden_act']='gelu'" "'hidden_act' is \"gelu\"; tessera implements only \"silu\""
cf "rope_scaling linear" "c['rope_scaling']={'type':'linear','factor':2.0}" "'rope_scaling' is an object; tessera implements only null"
cf "attention_bias true" "c['attention_bias']=True" "'attention_bias' is true; tessera implements only false"
cf "num_hidden_layers 3 of 4 layers' tensors" "c['num_hidden_layers']=3" "tensor model.layers.3.input_layernorm.weight is not part of a 3-layer LLaMA"
cf "num_attention_heads 4.5" "c['num_attention_heads']=4.5" "field 'num_attention_heads' is 4.5, not an integer"
cf "tie_word_embeddings \"true\" (a string)" "c['tie_word_embeddings']='true'" "field 'tie_word_embeddings' is a string, not true or false"
cf "hidden_size \"128\" (a string)" "c['hidden_size']='128'" "field 'hidden_size' is string, not an integer"
cf "mlp_bias true" "c['mlp_bias']=True" "'mlp_bias' is true"
cf "an unknown key" "c['sliding_window']=4096" "key 'sliding_window' is not one tessera knows"
hfcopy c6; cfg "$TMP/c6" "c['rope_scaling']=None; c['attention_bias']=False; c['attention_dropout']=0.1; c['pretraining_tp']=1"
"$BIN" import --in "$TMP/c6" --out "$TMP/c6_ok" --tokenizer byte >/dev/null 2>&1 && [ "$(params_rel "$TMP/lref" "$TMP/c6_ok")" = 0 ] &&
  ok "rope_scaling null, attention_bias false, dropout, pretraining_tp: the same model, imported" || bad "defaults refused"
# bias tensors the config does not declare: nothing would read them
hfcopy b6; python3 - "$TMP/b6/model.safetensors" <<'PY'
import json, struct, sys
p = sys.argv[1]; b = open(p, "rb").read(); hl = struct.unpack("<Q", b[:8])[0]
h = json.loads(b[8:8 + hl]); data = b[8 + hl:]
h["model.layers.0.self_attn.q_proj.bias"] = {"dtype": "F32", "shape": [128], "data_offsets": [len(data), len(data) + 512]}
hj = json.dumps(h).encode(); hj += b" " * (-len(hj) % 8)
open(p, "wb").write(struct.pack("<Q", len(hj)) + hj + data + bytes(512))
PY
expect "a q_proj.bias in the weights" 2 "tensor model.layers.0.self_attn.q_proj.bias is not part of a 4-layer LLaMA" \
  "$BIN" import --in "$TMP/b6" --out "$TMP/c6_imp" --tokenizer byte
gf() {   # gf NAME PY TEXT: the GPT-2 directory with config.json edited by PY is refused with TEXT
  rm -rf "$TMP/gc6"; cp -r "$TMP/ghf" "$TMP/gc6"; cfg "$TMP/gc6" "$2"
  expect "$1" 2 "$3" "$BIN" import --in "$TMP/gc6" --out "$TMP/c6_imp" --tokenizer byte
}
gf "GPT-2 activation_function relu" "c['activation_function']='relu'" "'activation_function' is \"relu\""
gf "GPT-2 n_layer 3 of 4 layers' tensors" "c['n_layer']=3" "n_layer is 3 but the weights hold 4"
gf "GPT-2 n_head 4.0" "c['n_head']=4.0" "field 'n_head' is 4.0, not an integer"
gf "GPT-2 tie_word_embeddings false" "c['tie_word_embeddings']=False" "'tie_word_embeddings' is false; tessera implements only true"
[ ! -e "$TMP/c6_imp" ] && ok "no refused import wrote a checkpoint" || bad "a refused import wrote $TMP/c6_imp"

# ---- 12: temporaries are this process's own; a user's FILE.tmp is left alone ----
mkdir -p "$TMP/u"
for f in g.safetensors.tmp p.svg.tmp; do echo mine >"$TMP/u/$f"; done
mkdir -p "$TMP/u/hf"; echo mine >"$TMP/u/hf/config.json.tmp"; echo mine >"$TMP/u/hf/model.safetensors.tmp"
"$BIN" export --ckpt "$TMP/g" --out "$TMP/u/g.safetensors" >/dev/null 2>&1 &&
  "$BIN" export --ckpt "$TMP/g" --hf-dir "$TMP/u/hf" >/dev/null 2>&1 &&
  "$BIN" "${T[@]}" --log "$TMP/u/run.jsonl" >/dev/null 2>&1 && "$BIN" plot "$TMP/u/run.jsonl" --out "$TMP/u/p.svg" >/dev/null 2>&1
left=$(cat "$TMP/u/g.safetensors.tmp" "$TMP/u/p.svg.tmp" "$TMP/u/hf/config.json.tmp" "$TMP/u/hf/model.safetensors.tmp" 2>&1 | tr '\n' ' ')
[ "$left" = "mine mine mine mine " ] && cmp -s "$TMP/u/g.safetensors" "$TMP/g.safetensors" && [ -s "$TMP/u/p.svg" ] &&
  [ -z "$(ls "$TMP/u" "$TMP/u/hf" | grep '\.tmp\.')" ] &&
  ok "export --out, export --hf-dir, plot: the user's FILE.tmp untouched, the output written, no temporary left" ||
  bad "a user's .tmp file" "$left; $(ls "$TMP/u" "$TMP/u/hf" | tr '\n' ' ')"
mkdir -p "$TMP/pu"; echo mine >"$TMP/pu/train_000000.bin.tmp"
"$BIN" prepare --input "$DATA" --out "$TMP/pu" --tokenizer byte >/dev/null 2>&1
[ "$(cat "$TMP/pu/train_000000.bin.tmp")" = mine ] && [ -s "$TMP/pu/train_000000.bin" ] &&
  ok "prepare: the user's train_000000.bin.tmp untouched" || bad "prepare and a user's .tmp file" "$(ls "$TMP/pu")"
(ulimit -f 64; "$BIN" export --ckpt "$TMP/g" --out "$TMP/u/big.safetensors" >/dev/null 2>"$TMP/x.err"); rc=$?
[ $rc -eq 1 ] && grep -q "big.safetensors: write failed: File too large" "$TMP/x.err" && [ -z "$(ls "$TMP/u" | grep big)" ] &&
  [ "$(cat "$TMP/u/g.safetensors.tmp")" = mine ] &&
  ok "an export past ulimit -f removes its own temporary only" || bad "export past ulimit -f" "exit $rc: $(cat "$TMP/x.err"); $(ls "$TMP/u")"

# ---- 16: train --init-from a tessera checkpoint or a Hugging Face directory of either architecture ----
I=(train --data "$DATA" --tokenizer byte --steps 3 --seq 32 --batch 2 --seed 3)
"$BIN" "${I[@]}" --init-from "$TMP/lhf" --log "$TMP/i_hf.jsonl" >"$TMP/i_hf.out" 2>&1; r1=$?
"$BIN" "${I[@]}" --init-from "$TMP/l" --log "$TMP/i_ck.jsonl" >/dev/null 2>&1; r2=$?
"$BIN" "${I[@]}" --init-from "$TMP/lref" --model llama-tiny --log "$TMP/i_imp.jsonl" >/dev/null 2>&1; r3=$?
"$BIN" "${I[@]}" --model llama-tiny --log "$TMP/i_seed.jsonl" >/dev/null 2>&1
[ $r1$r2$r3 = 000 ] && losses_match "$TMP/i_hf.jsonl" "$TMP/i_ck.jsonl" && losses_match "$TMP/i_hf.jsonl" "$TMP/i_imp.jsonl" &&
  ! losses_match "$TMP/i_hf.jsonl" "$TMP/i_seed.jsonl" && grep -q "4 heads, d_model 128, d_ff 352" "$TMP/i_hf.out" &&
  ok "--init-from a LLaMA directory, its run directory, its imported checkpoint: the same losses, not the seed's" ||
  bad "--init-from LLaMA" "rc $r1 $r2 $r3: $(tail -2 "$TMP/i_hf.out")"
"$BIN" "${I[@]}" --init-from "$TMP/ghf" --log "$TMP/g_hf.jsonl" >/dev/null 2>&1 &&
  "$BIN" "${I[@]}" --init-from "$TMP/g.safetensors" --log "$TMP/g_f.jsonl" >/dev/null 2>&1 &&
  losses_match "$TMP/g_hf.jsonl" "$TMP/g_f.jsonl" &&
  ok "--init-from a GPT-2 directory and its single file: the same losses" || bad "--init-from GPT-2"
expect "--init-from a GPT-2 file with --model llama-tiny" 2 "--model llama-tiny: --init-from $TMP/g.safetensors holds another model (gpt2," \
  "$BIN" "${I[@]}" --init-from "$TMP/g.safetensors" --model llama-tiny
expect "--init-from a LLaMA directory with --model gpt2-tiny" 2 "--model gpt2-tiny: --init-from $TMP/lhf holds another model (llama," \
  "$BIN" "${I[@]}" --init-from "$TMP/lhf" --model gpt2-tiny
expect "--init-from a LLaMA run directory with --model llama-120m" 2 "holds another model" \
  "$BIN" "${I[@]}" --init-from "$TMP/l" --model llama-120m
mkdir -p "$TMP/empty"
expect "--init-from an empty directory" 2 "--init-from: $TMP/empty" "$BIN" "${I[@]}" --init-from "$TMP/empty"
expect "--resume of an imported checkpoint" 2 "holds no optimizer state (an imported model? use --init-from)" \
  "$BIN" "${I[@]}" --resume "$TMP/lref"

# ---- 17: errors that say what is wrong, under the right flag ----
hfcopy e17; rm "$TMP/e17/model.safetensors"; echo '{"weight_map": {}}' >"$TMP/e17/model.safetensors.index.json"
expect "a LLaMA directory whose weight_map is {}" 2 "model.safetensors.index.json: weight_map lists no tensors" \
  "$BIN" import --in "$TMP/e17" --out "$TMP/e17_imp" --tokenizer byte
grep -q "GPT-2" "$TMP/x.err" && bad "the empty weight_map's error mentions GPT-2" "$(cat "$TMP/x.err")"
expect "--init-from a directory whose weight_map is {}" 2 "weight_map lists no tensors" "$BIN" "${I[@]}" --init-from "$TMP/e17"
echo x >"$TMP/afile"
expect "export --hf-dir a regular file" 2 "--hf-dir $TMP/afile: not a directory" "$BIN" export --ckpt "$TMP/l" --hf-dir "$TMP/afile"
[ "$(cat "$TMP/afile")" = x ] && ok "the file given as --hf-dir is untouched" || bad "--hf-dir FILE changed the file"
expect "export --hf-dir under a missing directory" 2 "--hf-dir $TMP/no/dir: No such file or directory" \
  "$BIN" export --ckpt "$TMP/l" --hf-dir "$TMP/no/dir"
expect "export --out of a LLaMA" 2 "--out: a single safetensors file holds GPT-2" "$BIN" export --ckpt "$TMP/l" --out "$TMP/l.safetensors"

echo "$pass passed, $fail failed"
[ $fail -eq 0 ]
