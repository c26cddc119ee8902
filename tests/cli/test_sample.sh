#!/usr/bin/env bash
# tessera sample keeps every layer's keys and values (a KV cache): a new
# token runs one position instead of the whole context. The text is the one
# sampling without the cache gives (--no-cache runs the whole context for
# every token, as sampling always did), for GPT-2 and LLaMA, past the
# model's positions (where the window slides), greedy and at temperature,
# in bf16 too. Run from the repository root.
source "$(dirname "$0")/lib.sh"
"$BIN" train --model gpt2-tiny --data "$DATA" --tokenizer byte --steps 60 --batch 8 --seq 64 --ckpt-dir "$TMP/g" >/dev/null 2>&1
"$BIN" train --model llama-tiny --data "$DATA" --tokenizer byte --steps 60 --batch 8 --seq 64 --ckpt-dir "$TMP/l" >/dev/null 2>&1
for c in "g|--seed 1" "g|--seed 2 --temperature 0" "g|--seed 3 --top-k 0 --temperature 1.2" "g|--seed 4 --precision bf16" \
         "l|--seed 1" "l|--seed 5 --temperature 0" "l|--seed 6 --precision bf16"; do
  d=${c%%|*}; f=${c#*|}
  "$BIN" sample --ckpt "$TMP/$d" --prompt "ROMEO:" --tokens 150 $f >"$TMP/c.txt" 2>&1
  "$BIN" sample --ckpt "$TMP/$d" --prompt "ROMEO:" --tokens 150 $f --no-cache >"$TMP/n.txt" 2>&1
  m=$([ "$d" = g ] && echo gpt2-tiny || echo llama-tiny)
  if cmp -s "$TMP/c.txt" "$TMP/n.txt" && [ "$(wc -c <"$TMP/c.txt")" -gt 150 ]; then
    ok "$m $f: 150 tokens past its 64 positions, the same text with the cache as without"
  else
    bad "$m $f: the cache changes the text" "$(cmp "$TMP/c.txt" "$TMP/n.txt" 2>&1 | head -1)"
  fi
done
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
