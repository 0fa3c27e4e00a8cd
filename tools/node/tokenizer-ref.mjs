// Reference Llama 3 tokenizer for internal/tokenizer's tests, backed by llama3-tokenizer-js.
//
//   node tokenizer-ref.mjs dump OUT.json     write {tokens, merges, bos, eos, eot, special_start}
//   node tokenizer-ref.mjs encode CORPUS     print a JSON array with the ids of each string
//   node tokenizer-ref.mjs split NAME CORPUS print each string's pre-tokens under pattern NAME
//                                            (llama-bpe, qwen2 or gpt2), run by V8's regex engine
//
// CORPUS is a JSON array of strings when its name ends in .json, otherwise one string per line.
// Encoding adds neither BOS nor EOS, and text such as "<|eot_id|>" is encoded as plain text
// (the library's special-token regex is replaced by one that never matches), which is what the
// Go tokenizer's Encode does.
import { readFileSync, writeFileSync } from 'node:fs';

const [cmd, file, file2] = process.argv.slice(2);

// Loaded only by the commands that need it: parsing its 3 MB of baked data takes most of a second.
async function library() {
  return (await import('llama3-tokenizer-js')).default;
}

// The split patterns as the models publish them, with (?i:...) spelled out because JavaScript
// has no inline flags. V8 supports the lookahead that Go's regexp lacks, so it checks the Go
// splitters directly.
const contractionsI = "'(?:[sS]|[tT]|[rR][eE]|[vV][eE]|[mM]|[lL][lL]|[dD])";
const patterns = {
  'llama-bpe': `${contractionsI}|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+`,
  qwen2: `${contractionsI}|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+`,
  gpt2: `'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+`,
};

function readCorpus(corpus) {
  const text = readFileSync(corpus, 'utf8');
  return corpus.endsWith('.json') ? JSON.parse(text) : text.split('\n');
}

function split(name, corpus) {
  if (!(name in patterns)) throw new Error(`unknown pattern ${name}`);
  const re = new RegExp(patterns[name], 'gu');
  const out = readCorpus(corpus).map((s) => {
    const pieces = [];
    let prev = 0;
    for (const m of s.matchAll(re)) {
      if (prev < m.index) pieces.push(s.slice(prev, m.index)); // unmatched text, kept as is
      if (m[0].length > 0) pieces.push(m[0]);
      prev = m.index + m[0].length;
    }
    if (prev < s.length) pieces.push(s.slice(prev));
    return pieces;
  });
  process.stdout.write(JSON.stringify(out) + '\n');
}

async function dump(out) {
  const llama3Tokenizer = await library();
  const tokens = llama3Tokenizer.vocabById;
  // merges maps "left right" to its priority; ascending priority is rank order.
  const merges = [...llama3Tokenizer.merges.entries()].sort((a, b) => a[1] - b[1]).map(([k]) => k);
  const specialStart = tokens.indexOf('<|begin_of_text|>');
  if (specialStart < 0) throw new Error('vocabulary has no <|begin_of_text|>');
  const id = (s) => llama3Tokenizer.getSpecialTokenId(s);
  writeFileSync(out, JSON.stringify({
    tokens,
    merges,
    special_start: specialStart,
    bos: id('<|begin_of_text|>'),
    eos: id('<|end_of_text|>'),
    eot: [id('<|eot_id|>'), id('<|eom_id|>')],
  }));
}

async function encode(corpus) {
  const llama3Tokenizer = await library();
  const items = readCorpus(corpus);
  const never = /(?!)/g;
  const ids = items.map((s) => llama3Tokenizer.encode(s, { bos: false, eos: false, specialTokenRegex: never }));
  process.stdout.write(JSON.stringify(ids) + '\n');
}

if (cmd === 'dump' && file) {
  await dump(file);
} else if (cmd === 'encode' && file) {
  await encode(file);
} else if (cmd === 'split' && file && file2) {
  split(file, file2);
} else {
  process.stderr.write('usage: node tokenizer-ref.mjs dump OUT.json | encode CORPUS | split NAME CORPUS\n');
  process.exit(2);
}
