// The reference row for tessera's LLaMA tokenizer: llama-tokenizer-js's
// encode (with <s> and the front space, as tessera) of a text file, the
// best of three after a warm-up, in MB/s.
//   node bench/llama_tok_bench.mjs FILE      (llama-tokenizer-js on NODE_PATH's package path)
import fs from "fs";
import llamaTokenizer from "llama-tokenizer-js";

const text = fs.readFileSync(process.argv[2], "utf8");
const bytes = Buffer.byteLength(text, "utf8");
llamaTokenizer.encode(text.slice(0, 10000));
let best = Infinity, n = 0;
for (let r = 0; r < 3; r++) {
  const t0 = process.hrtime.bigint();
  n = llamaTokenizer.encode(text).length;
  const s = Number(process.hrtime.bigint() - t0) / 1e9;
  if (s < best) best = s;
}
console.log(`llama-tokenizer-js 1.2.2 (node ${process.version})   ${(bytes / 1e6 / best).toFixed(2)} MB/s   ${n} ids   ${best.toFixed(2)} s`);
