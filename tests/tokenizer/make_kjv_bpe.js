// Trains graphs/tokenizers/kjv-bpe/tokenizer.json: a byte-level BPE tokenizer in Llama 3's form
// (its pre-tokenizer regex, ByteLevel, ignore_merges) on the KJV text, with Hugging Face's own
// trainer (npm's @anush008/tokenizers, a Node build of HF's Rust tokenizers), kept to 4096 ids: the
// 256 byte characters (GPT-2's order), the first merges up to id 4093, and <|begin_of_text|> (4094)
// and <|end_of_text|> (4095). Run once by hand (docs/tokenizers.md); the file is in the repository.
//   NODE_PATH=DIR/node_modules node tests/tokenizer/make_kjv_bpe.js KJV.txt OUT/tokenizer.json
const fs = require('fs');
const {Tokenizer} = require('@anush008/tokenizers');
const [kjv, out] = process.argv.slice(2);
const LLAMA3 = String.raw`(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`;
const preTokenizer = {type: 'Sequence', pretokenizers: [
  {type: 'Split', pattern: {Regex: LLAMA3}, behavior: 'Isolated', invert: false},
  {type: 'ByteLevel', add_prefix_space: false, trim_offsets: true, use_regex: false}]};
const bpe = (vocab, merges, ignore) => ({type: 'BPE', dropout: null, unk_token: null, continuing_subword_prefix: null,
  end_of_word_suffix: null, fuse_unk: false, byte_fallback: false, ignore_merges: ignore, vocab, merges});
const base = {version: '1.0', truncation: null, padding: null, added_tokens: [], normalizer: null,
  pre_tokenizer: preTokenizer, post_processor: null,
  decoder: {type: 'ByteLevel', add_prefix_space: true, trim_offsets: true, use_regex: true}, model: bpe({}, [], false)};

// HF's trainer (BpeTrainer's defaults: up to 30000 ids) on the text
const trainer = Tokenizer.fromString(JSON.stringify(base));
trainer.train([kjv]);
const tmp = out + '.trained.json';
trainer.save(tmp, false);
const merges = JSON.parse(fs.readFileSync(tmp, 'utf8')).model.merges;
fs.unlinkSync(tmp);

// GPT-2's bytes_to_unicode order for ids 0..255
const bs = [];
for (let b = 33; b <= 126; b++) bs.push(b);
for (let b = 161; b <= 172; b++) bs.push(b);
for (let b = 174; b <= 255; b++) bs.push(b);
const cs = bs.slice();
for (let b = 0, n = 0; b < 256; b++) if (!bs.includes(b)) { bs.push(b); cs.push(256 + n++); }
const vocab = {};
cs.forEach((c, i) => { vocab[String.fromCodePoint(c)] = i; });
let next = 256;
const kept = [];
for (const m of merges) {
  const [a, b] = Array.isArray(m) ? m : m.split(' ');
  if (next >= 4094) break;
  if (!(a in vocab) || !(b in vocab)) continue;
  if (!((a + b) in vocab)) vocab[a + b] = next++;
  kept.push([a, b]);
}
const special = (id, content) => ({id, content, single_word: false, lstrip: false, rstrip: false, normalized: false, special: true});
const tok = Object.assign({}, base, {
  added_tokens: [special(4094, '<|begin_of_text|>'), special(4095, '<|end_of_text|>')],
  post_processor: {type: 'TemplateProcessing',
    single: [{SpecialToken: {id: '<|begin_of_text|>', type_id: 0}}, {Sequence: {id: 'A', type_id: 0}}],
    pair: [{SpecialToken: {id: '<|begin_of_text|>', type_id: 0}}, {Sequence: {id: 'A', type_id: 0}},
           {SpecialToken: {id: '<|begin_of_text|>', type_id: 1}}, {Sequence: {id: 'B', type_id: 1}}],
    special_tokens: {'<|begin_of_text|>': {id: '<|begin_of_text|>', ids: [4094], tokens: ['<|begin_of_text|>']}}},
  model: bpe(vocab, kept, true)});
fs.writeFileSync(out, JSON.stringify(tok, null, 1) + '\n');
// HF must load it and agree on the size
const check = Tokenizer.fromFile(out);
console.log(`make_kjv_bpe: ${out}: ${Object.keys(vocab).length} vocabulary ids, ${kept.length} merges, ` +
            `${check.getVocabSize(true)} ids with the added tokens`);
