// Generates tests/data/llama_cases.jsonl: LLaMA token ids from the npm
// package llama-tokenizer-js@1.2.2 (encode with <s> and the front space, its
// defaults) for hard cases — white-space runs, digits, CJK, emoji, byte
// fallback, long runs — plus the count and CRC-32C of the ids of all of
// tinyshakespeare.
//
//   npm install llama-tokenizer-js@1.2.2      (so that node resolves it)
//   node scripts/gen_llama_tests.mjs ../shared/data/tinyshakespeare.txt > tests/data/llama_cases.jsonl
import fs from "fs";
import llamaTokenizer from "llama-tokenizer-js";

function crc32c(u8) {
  const table = new Uint32Array(256);
  for (let i = 0; i < 256; i++) {
    let c = i;
    for (let k = 0; k < 8; k++) c = c & 1 ? (c >>> 1) ^ 0x82f63b78 : c >>> 1;
    table[i] = c >>> 0;
  }
  let c = 0xffffffff;
  for (let i = 0; i < u8.length; i++) c = table[(c ^ u8[i]) & 0xff] ^ (c >>> 8);
  return (c ^ 0xffffffff) >>> 0;
}

let seed = 4242;
function rand(n) { seed = (seed * 1103515245 + 12345) % 2147483648; return seed % n; }
const ranges = [[0x20, 0x7e], [0xa0, 0x24f], [0x300, 0x36f], [0x391, 0x3c9], [0x400, 0x4ff], [0x5d0, 0x5ea],
  [0x600, 0x6ff], [0x900, 0x97f], [0x2000, 0x206f], [0x3000, 0x303f], [0x3040, 0x30ff], [0x4e00, 0x9fff],
  [0xac00, 0xd7a3], [0x1f300, 0x1f64f], [0x1d400, 0x1d4ff], [0x9, 0xd], [0x2581, 0x2581]];
function randomText(len) {
  let s = "";
  for (let i = 0; i < len; i++) {
    const r = ranges[rand(ranges.length)];
    s += String.fromCodePoint(r[0] + rand(r[1] - r[0] + 1));
  }
  return s;
}

const cases = [
  "", "a", " ", "  ", "\n", "\n\n\n", "Hello world!", " Hello  world  ", "Hello\n\nworld\n",
  "I'll we've they're she'd it's don't I'M YOU'RE", "1234567890 3.14159 1,000,000 -42 +7 0x1F 1e10",
  "٣٤٥ ²³ ¼½ Ⅻ ⅷ 𝟘𝟙", "日本語のテキストです。中文文本，한국어 텍스트", "こんにちは世界", "龘靐齉",
  "emoji 😀😃 👍🏽 👨‍👩‍👧‍👦 🏳️‍🌈 ❤️", "e\u0301 a\u0308 n\u0303 ǅ ß ﬁ", "Ελληνικά Русский עברית العربية हिन्दी",
  "tab\there\tand\r\nwindows\r\nlines", "trailing spaces   ", "   leading", " \n \n ", "▁ already ▁▁ here",
  "nbsp\u00a0here ideographic\u3000space line\u2028sep nel\u0085x bom\ufeffx", "zero\u200bwidth",
  "punct!!! ??? ... --- *** @#$%^&*()", "<s> and </s> are text here", "<0x0A> too",
  "x".repeat(3000), " ".repeat(2000) + "x", "!".repeat(1500), "ab".repeat(1200), "1".repeat(1000),
  "\u00e9".repeat(700), "😀".repeat(300), "a\n".repeat(500), "中".repeat(400), "\u0000\u0001\u007f",
  "    def f(x):\n        return x * 2\n", "The quick brown fox jumps over the lazy dog.",
];
for (let i = 0; i < 50; i++) cases.push(randomText(5 + rand(150)));

for (const text of cases) {
  const ids = llamaTokenizer.encode(text);
  const hex = Buffer.from(text, "utf8").toString("hex");
  console.log(JSON.stringify({ hex, ids: ids || [] }));
}
if (process.argv[2]) {
  const text = fs.readFileSync(process.argv[2], "utf8");
  const ids = llamaTokenizer.encode(text);
  const u8 = new Uint8Array(Uint32Array.from(ids).buffer);
  console.log(JSON.stringify({ file: "tinyshakespeare.txt", count: ids.length, crc32c: crc32c(u8),
    first: ids.slice(0, 16), last: ids.slice(-16) }));
}
