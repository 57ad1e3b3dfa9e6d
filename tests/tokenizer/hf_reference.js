// The tokenizer test's reference side (tests/tokenizer_test.sh): writes the tokenizer.json
// variants under test, each a directory WORK/models/NAME, made from the repository's two trained
// tokenizers (graphs/tokenizers/kjv-bpe: byte-level BPE; tests/tokenizer/fixtures/llama2-kjv: BPE
// with byte fallback), then Hugging Face's own results for each variant and text:
// WORK/hf/NAME/TEXT.ids (ids of encode(text, add_special_tokens=false), space-separated), .dec
// and .decskip (decode without and with skip_special_tokens), .pieces (the pre-tokenizer's pieces of
// the raw text, JSON), as zf_tokenizer_tool writes them.
// --only=A,B: the results of those variants only (the variants are written every time), without
// the pieces.
//   node hf_reference.js SOURCE_DIR WORK [--only=NAME,...] TEXT_FILE...
const fs = require('fs');
const path = require('path');
const {Tokenizer} = require('@anush008/tokenizers');
let [src, work, ...texts] = process.argv.slice(2);
let only = null;
if (texts.length && texts[0].startsWith('--only=')) only = texts.shift().slice(7).split(',');

const GPT2 = String.raw`'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+`;
const QWEN2 = String.raw`(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`;
const byteLevel = (prefix, regex) => ({type: 'ByteLevel', add_prefix_space: prefix, trim_offsets: true, use_regex: regex});
const added = (id, content, o = {}) => Object.assign({id, content, single_word: false, lstrip: false, rstrip: false,
  normalized: false, special: true}, o);
const load = (p) => JSON.parse(fs.readFileSync(path.join(src, p), 'utf8'));
const clone = (x) => JSON.parse(JSON.stringify(x));

const kjv = load('graphs/tokenizers/kjv-bpe/tokenizer.json');
const llama2 = load('tests/tokenizer/fixtures/llama2-kjv/tokenizer.json');
const n = Object.keys(kjv.model.vocab).length;  // 4094
const variants = {
  // as shipped: Llama 3's regex, ByteLevel, ignore_merges, two special tokens
  'kjv-llama3': clone(kjv),
  // GPT-2's form: ByteLevel's own regex, merges as "a b" strings, a normalized special token
  'kjv-gpt2': Object.assign(clone(kjv), {pre_tokenizer: byteLevel(false, true),
    added_tokens: [added(n, '<|endoftext|>', {normalized: true})]}),
  // Qwen2's regex, NFC, added tokens with lstrip, rstrip, single_word, a normalized non-special one
  'kjv-qwen2': Object.assign(clone(kjv), {normalizer: {type: 'NFC'},
    pre_tokenizer: {type: 'Sequence', pretokenizers: [
      {type: 'Split', pattern: {Regex: QWEN2}, behavior: 'Isolated', invert: false}, byteLevel(false, false)]},
    added_tokens: [added(n, '<|im_start|>'), added(n + 1, '<|im_end|>', {rstrip: true}),
      added(n + 2, '[MASK]', {lstrip: true, single_word: true}), added(n + 3, 'Jesus Christ', {normalized: true, special: false}),
      added(n + 4, '<|begin_of_text|>', {lstrip: true, rstrip: true})]}),
  // GPT-2's regex spelled as a Split, ByteLevel with a prefix space, no ignore_merges
  'kjv-split-gpt2': Object.assign(clone(kjv), {pre_tokenizer: {type: 'Sequence', pretokenizers: [
    {type: 'Split', pattern: {Regex: GPT2}, behavior: 'Isolated', invert: false}, byteLevel(true, false)]}}),
  // ids above 65535 (uint32 token files): a vocabulary entry at 70000, added as a special token
  'kjv-wide': clone(kjv),
  // Llama 2 as converted by transformers (legacy): Prepend + Replace normalizers, byte fallback
  'llama2-legacy': clone(llama2),
  // Llama 2 in the newer form: Metaspace pre-tokenizer (prepend "first", no split), Metaspace decoder
  'llama2-metaspace': Object.assign(clone(llama2), {normalizer: null,
    pre_tokenizer: {type: 'Metaspace', replacement: '\u2581', prepend_scheme: 'first', split: false},
    decoder: {type: 'Sequence', decoders: [{type: 'Metaspace', replacement: '\u2581', prepend_scheme: 'first', split: false},
      {type: 'ByteFallback'}, {type: 'Fuse'}]}}),
  // Metaspace splitting on "▁" (older Llama tokenizers), no byte fallback: unknown characters fused into <unk>
  'llama2-unk': Object.assign(clone(llama2), {normalizer: null,
    pre_tokenizer: {type: 'Metaspace', replacement: '\u2581', prepend_scheme: 'always', split: true}}),
};
variants['kjv-gpt2'].model.merges = kjv.model.merges.map(([a, b]) => a + ' ' + b);
variants['kjv-gpt2'].model.ignore_merges = false;
variants['kjv-split-gpt2'].model.ignore_merges = false;
variants['kjv-wide'].model.vocab['<|wide|>'] = 70000;
variants['kjv-wide'].added_tokens = [added(n + 1, '<|begin_of_text|>'), added(n + 2, '<|end_of_text|>'), added(70000, '<|wide|>')];
variants['llama2-unk'].model.byte_fallback = false;
variants['llama2-unk'].model.fuse_unk = true;

for (const [name, j] of Object.entries(variants)) {
  const dir = path.join(work, 'models', name);
  fs.mkdirSync(dir, {recursive: true});
  fs.writeFileSync(path.join(dir, 'tokenizer.json'), JSON.stringify(j));
}

(async () => {
  for (const name of Object.keys(variants)) {
    if (only && !only.includes(name)) continue;
    const t = Tokenizer.fromFile(path.join(work, 'models', name, 'tokenizer.json'));
    const out = path.join(work, 'hf', name);
    fs.mkdirSync(out, {recursive: true});
    for (const file of texts) {
      const text = fs.readFileSync(file, 'utf8');
      const t0 = Date.now();
      const ids = (await t.encode(text, null, {addSpecialTokens: false})).getIds();
      const base = path.join(out, path.basename(file));
      fs.writeFileSync(base + '.ids', ids.join(' ') + '\n');
      fs.writeFileSync(base + '.dec', await t.decode(ids, false));
      fs.writeFileSync(base + '.decskip', await t.decode(ids, true));
      const pre = t.getPreTokenizer();  // the regexes' pieces, which ids show only where a merge crosses them
      if (pre && !only) fs.writeFileSync(base + '.pieces', JSON.stringify(pre.preTokenizeString(text).map((p) => p[0])));
      console.error(`hf_reference: ${name}: ${path.basename(file)}: ${ids.length} ids in ${Date.now() - t0} ms`);
    }
  }
})().catch((e) => { console.error('hf_reference: ' + e); process.exit(1); });
