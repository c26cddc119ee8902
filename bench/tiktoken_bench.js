// tiktoken (npm, WASM) GPT-2 encoding throughput on the same text as
// bench_tokenizer: FILE repeated to at least 20 MB, one thread.
//   node bench/tiktoken_bench.js FILE
const fs = require("fs");
const { get_encoding } = require("tiktoken");
const one = fs.readFileSync(process.argv[2], "utf8");
const text = one.repeat(Math.floor((20 << 20) / Buffer.byteLength(one)) + 1);
const enc = get_encoding("gpt2");
const t0 = process.hrtime.bigint();
const n = enc.encode_ordinary(text).length;
const s = Number(process.hrtime.bigint() - t0) / 1e9;
const mb = Buffer.byteLength(text) / 1e6;
console.log(`tiktoken ${mb.toFixed(1).padStart(5)} MB | ${String(n).padStart(9)} tokens | 1 thread ${(mb / s).toFixed(2).padStart(7)} MB/s`);
