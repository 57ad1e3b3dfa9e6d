#include "models/tokenizer/hf_tokenizer.hpp"

#include <algorithm>

#include "models/tokenizer/unicode.hpp"
#include "runtime/error.hpp"
#include "runtime/json_input.hpp"

namespace zf::tok {

namespace {

// BPE's merges: ["a b", ...] (before tokenizers 0.20) or [["a", "b"], ...].
std::pair<std::string, std::string> merge_pair(const JsonField& m) {
  if (m.json().is_array()) {
    if (m.size() != 2) m.fail("expected a pair of two strings");
    return {m[0].str(), m[1].str()};
  }
  const std::string s = m.str();
  const size_t sp = s.find(' ');
  if (sp == std::string::npos || s.find(' ', sp + 1) != std::string::npos)
    m.fail("expected \"LEFT RIGHT\" (two tokens and one space) or a pair [\"LEFT\", \"RIGHT\"]");
  return {s.substr(0, sp), s.substr(sp + 1)};
}

std::optional<std::string> opt_str(const JsonField& f, const char* key) {
  if (!f.has(key)) return std::nullopt;
  return f.at(key).str();
}

BpeModel read_bpe(const JsonField& m) {
  const JsonField type = m.at("type");
  if (type.str() != "BPE") type.fail("model type '" + excerpt(type.str(), 40) + "' is not supported (BPE)");
  BpeModel b;
  if (m.has("dropout")) {
    const auto& d = m.at("dropout").json();
    if (!d.is_number() || d.get<double>() != 0.0)
      m.at("dropout").fail("expected null or 0 (BPE dropout randomises training-time tokenization)");
  }
  b.unk_token = opt_str(m, "unk_token");
  b.continuing_subword_prefix = opt_str(m, "continuing_subword_prefix");
  b.end_of_word_suffix = opt_str(m, "end_of_word_suffix");
  b.fuse_unk = m.boolean_or("fuse_unk", false);
  b.byte_fallback = m.boolean_or("byte_fallback", false);
  b.ignore_merges = m.boolean_or("ignore_merges", false);
  const JsonField vocab = m.at("vocab");
  for (auto it = vocab.object().begin(); it != vocab.object().end(); ++it) {
    const uint32_t id = vocab.child(it.value(), "[\"" + excerpt(it.key(), 40) + "\"]").u32();
    b.vocab[it.key()] = id;
    b.vocab_r[id] = it.key();
  }
  if (b.unk_token && !b.vocab.count(*b.unk_token)) m.at("unk_token").fail("not in model.vocab");
  const JsonField merges = m.at("merges");
  merges.array();
  const size_t prefix = b.continuing_subword_prefix ? b.continuing_subword_prefix->size() : 0;
  uint32_t rank = 0;
  for (size_t i = 0; i < merges.size(); ++i) {
    const JsonField mi = merges[i];
    if (mi.json().is_string() && mi.str().rfind("#version", 0) == 0) continue;  // a merges.txt header
    auto [a, c] = merge_pair(mi);
    auto ia = b.vocab.find(a), ic = b.vocab.find(c);
    if (ia == b.vocab.end()) mi.fail("token " + excerpt(a, 40) + " is not in model.vocab");
    if (ic == b.vocab.end()) mi.fail("token " + excerpt(c, 40) + " is not in model.vocab");
    if (c.size() < prefix) mi.fail("right token shorter than continuing_subword_prefix");
    const std::string merged = a + c.substr(prefix);
    auto im = b.vocab.find(merged);
    if (im == b.vocab.end()) mi.fail("the merged token " + excerpt(merged, 40) + " is not in model.vocab");
    b.merges[BpeModel::pair_key(ia->second, ic->second)] = {rank++, im->second};
  }
  b.finish();
  return b;
}

}  // namespace

HfTokenizer::HfTokenizer(const std::string& text, const std::string& path) : path_(path) {
  const nlohmann::json j = parse_json_input(text, path);
  const JsonField root(j, path, "");
  root.object();
  if (root.has("version") && root.at("version").str() != "1.0") root.at("version").fail("expected \"1.0\"");
  bpe_ = read_bpe(root.at("model"));
  for (auto& [id, tok] : bpe_.vocab_r) vocab_size_ = std::max<uint64_t>(vocab_size_, uint64_t(id) + 1);
  auto part = [&](const char* key) {
    static const nlohmann::json null_json;
    return root.json().contains(key) ? JsonField(root.json()[key], path, key) : JsonField(null_json, path, key);
  };
  normalizer_ = parse_normalizer(part("normalizer"));
  pre_tokenizer_ = parse_pre_tokenizer(part("pre_tokenizer"));
  if (!part("decoder").is_null()) decoder_ = parse_decoder(part("decoder"));
  if (root.has("added_tokens")) read_added_tokens(root.at("added_tokens"));
}

// AddedVocabulary::add_tokens as tokenizer.json's loader calls it: an id from the vocabulary
// where the content is in it, else the next free one; the file's ids must be those.
void HfTokenizer::read_added_tokens(const JsonField& list) {
  list.array();
  std::vector<AddedToken> specials, others;
  uint64_t next_id = bpe_.vocab.size();  // HF: the model's vocabulary size, then one more per new token
  for (size_t i = 0; i < list.size(); ++i) {
    const JsonField f = list[i];
    AddedToken t{f.at("id").u32(), f.at("content").str(), f.at("single_word").boolean(), f.at("lstrip").boolean(),
                 f.at("rstrip").boolean(), f.at("normalized").boolean(), f.at("special").boolean()};
    if (t.content.empty()) continue;
    if (t.special && special_.insert(t.content).second) specials.push_back(t);
    uint32_t id;
    if (auto a = added_ids_.find(t.content); a != added_ids_.end()) id = a->second;
    else if (auto v = bpe_.vocab.find(t.content); v != bpe_.vocab.end()) id = v->second;
    else {
      if (next_id > UINT32_MAX) f.at("id").fail("no id left");
      id = static_cast<uint32_t>(next_id++);
    }
    if (id != t.id)
      f.at("id").fail(std::to_string(t.id) + ", but Hugging Face's tokenizers gives " + excerpt(t.content, 40) +
                      " the id " + std::to_string(id) + " (its id in model.vocab, or the next after the vocabulary)");
    added_ids_[t.content] = id;
    added_by_id_[id] = t;
    if (!special_.count(t.content)) others.push_back(t);
    vocab_size_ = std::max<uint64_t>(vocab_size_, uint64_t(id) + 1);
  }
  for (const auto* group : {&specials, &others})
    for (const AddedToken& t : *group) {
      const uint32_t id = added_ids_.at(t.content);
      if (t.normalized) add_to_trie(normalized_trie_, normalize(normalizer_, t.content), id);
      else add_to_trie(raw_trie_, t.content, id);
    }
}

void HfTokenizer::add_to_trie(Trie& t, const std::string& pattern, uint32_t id) {
  if (pattern.empty()) return;
  auto& v = t.by_first_byte[static_cast<unsigned char>(pattern[0])];
  // longest first; among equal lengths the earlier pattern (aho-corasick's leftmost-longest)
  auto at = std::find_if(v.begin(), v.end(), [&](auto& p) { return p.first.size() < pattern.size(); });
  v.insert(at, {pattern, id});
  t.empty = false;
}

// AddedVocabulary::find_matches: the non-overlapping leftmost-longest matches, each kept or
// discarded (single_word) and widened over whitespace (lstrip, rstrip), and the text between.
std::vector<HfTokenizer::Split> HfTokenizer::find_matches(std::string_view s, const Trie& t) const {
  std::vector<Split> out;
  size_t start_offset = 0;
  auto word_before = [&](size_t i) { return i > 0 && is_word_char(decode_at(s, prev_utf8(s, i))); };
  auto word_after = [&](size_t i) { return i < s.size() && is_word_char(decode_at(s, i)); };
  for (size_t i = 0; !t.empty && i < s.size();) {
    const auto& cands = t.by_first_byte[static_cast<unsigned char>(s[i])];
    const std::pair<std::string, uint32_t>* hit = nullptr;
    for (const auto& c : cands)
      if (s.compare(i, c.first.size(), c.first) == 0) {
        hit = &c;
        break;
      }
    if (!hit) {
      ++i;
      continue;
    }
    size_t start = i, stop = i + hit->first.size();
    i = stop;
    const AddedToken& tok = added_by_id_.at(hit->second);
    if (tok.single_word && (word_before(start) || word_after(stop))) continue;
    if (tok.lstrip) {  // the whitespace before it, not before what an earlier match took
      size_t k = start;
      while (k > 0 && is_space(decode_at(s, prev_utf8(s, k)))) k = prev_utf8(s, k);
      start = std::max(k, start_offset);
    }
    if (tok.rstrip)
      while (stop < s.size() && is_space(decode_at(s, stop))) stop += utf8_len_at(s, stop);
    if (start_offset < start) out.push_back({start_offset, start, std::nullopt});
    out.push_back({start, stop, hit->second});
    start_offset = stop;
  }
  if (start_offset < s.size()) out.push_back({start_offset, s.size(), std::nullopt});
  return out;
}

std::vector<uint32_t> HfTokenizer::encode(std::string_view text, const std::function<void(size_t)>& progress) const {
  check_utf8(text, "text");
  std::vector<uint32_t> ids;
  size_t reported = 0;
  auto model = [&](std::string_view piece, bool) {
    bpe_.encode_word(piece, ids);
    if (progress && ids.size() >= reported + (1u << 16)) progress(reported = ids.size());
  };
  for (const Split& a : find_matches(text, raw_trie_)) {
    if (a.id) {
      ids.push_back(*a.id);
      continue;
    }
    if (a.end <= a.start) continue;
    const std::string norm = normalize(normalizer_, std::string(text.substr(a.start, a.end - a.start)));
    for (const Split& b : find_matches(norm, normalized_trie_)) {
      if (b.id) ids.push_back(*b.id);
      else if (b.end > b.start)
        pre_tokenize(pre_tokenizer_, std::string_view(norm).substr(b.start, b.end - b.start), a.start == 0 && b.start == 0, model);
    }
  }
  if (progress) progress(ids.size());
  return ids;
}

std::string HfTokenizer::decode(const std::vector<uint32_t>& ids, bool skip_special_tokens) const {
  std::vector<std::string> tokens;
  tokens.reserve(ids.size());
  for (uint32_t id : ids) {
    const std::string* t = nullptr;
    if (auto a = added_by_id_.find(id); a != added_by_id_.end()) t = &a->second.content;
    else if (auto v = bpe_.vocab_r.find(id); v != bpe_.vocab_r.end()) t = &v->second;
    if (!t) throw InputError(path_ + ": decode", "id " + std::to_string(id) + " is not in the vocabulary");
    if (skip_special_tokens && special_.count(*t)) continue;
    tokens.push_back(*t);
  }
  return decode_tokens(decoder_, std::move(tokens));
}

std::vector<std::string> HfTokenizer::pre_tokenize_pieces(std::string_view text) const {
  check_utf8(text, "text");
  std::vector<std::string> pieces;
  pre_tokenize(pre_tokenizer_, text, true, [&](std::string_view p, bool) { pieces.emplace_back(p); });
  return pieces;
}

uint64_t HfTokenizer::vocab_size() const { return vocab_size_; }

bool HfTokenizer::has_id(uint32_t id) const { return added_by_id_.count(id) || bpe_.vocab_r.count(id); }

std::string HfTokenizer::describe() const {
  bool byte_level = false;
  for (auto& s : pre_tokenizer_) byte_level = byte_level || s.kind == PreTokenizerStep::Kind::ByteLevel;
  return path_ + " (" + (byte_level ? "byte-level BPE" : bpe_.byte_fallback ? "BPE with byte fallback" : "BPE") + ", " +
         std::to_string(vocab_size_) + " ids)";
}

}  // namespace zf::tok
