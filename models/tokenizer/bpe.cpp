#include "models/tokenizer/bpe.hpp"

#include <cstdio>
#include <queue>

#include "models/tokenizer/unicode.hpp"

namespace zf::tok {

void BpeModel::finish() {
  unk_id.reset();
  if (unk_token) {
    auto it = vocab.find(*unk_token);
    if (it != vocab.end()) unk_id = it->second;
  }
  byte_ids.assign(256, std::nullopt);
  for (int b = 0; b < 256; ++b) {
    char name[8];
    std::snprintf(name, sizeof name, "<0x%02X>", b);
    auto it = vocab.find(name);
    if (it != vocab.end()) byte_ids[b] = it->second;
  }
}

namespace {

struct Symbol {
  uint32_t id;
  int64_t prev, next;
  size_t len;  // bytes; 0: merged into its left neighbour
};

// One entry of the queue: lowest rank first, then lowest position (HF's Ord for Merge).
struct Merge {
  size_t pos;
  uint32_t rank, new_id;
  bool operator<(const Merge& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
};

void add_symbol(std::vector<Symbol>& w, uint32_t id, size_t len) {
  const int64_t n = static_cast<int64_t>(w.size());
  w.push_back({id, n - 1, n + 1, len});
}

// Word::merge_all without dropout.
void merge_all(std::vector<Symbol>& w, const BpeModel& m) {
  if (!w.empty()) w.back().next = -1;
  std::priority_queue<Merge> queue;
  auto find = [&](uint32_t a, uint32_t b) { return m.merges.find(BpeModel::pair_key(a, b)); };
  for (size_t i = 0; i + 1 < w.size(); ++i) {
    auto it = find(w[i].id, w[i + 1].id);
    if (it != m.merges.end()) queue.push({i, it->second.first, it->second.second});
  }
  while (!queue.empty()) {
    const Merge top = queue.top();
    queue.pop();
    Symbol& cur = w[top.pos];
    if (cur.len == 0 || cur.next == -1) continue;
    const size_t next_pos = static_cast<size_t>(cur.next);
    const Symbol right = w[next_pos];
    auto it = find(cur.id, right.id);
    if (it == m.merges.end() || it->second.second != top.new_id) continue;  // stale entry
    cur.id = top.new_id;
    cur.len += right.len;
    cur.next = right.next;
    w[next_pos].len = 0;
    if (right.next > -1 && static_cast<size_t>(right.next) < w.size()) w[right.next].prev = static_cast<int64_t>(top.pos);
    if (cur.prev >= 0) {
      auto p = find(w[cur.prev].id, cur.id);
      if (p != m.merges.end()) queue.push({static_cast<size_t>(cur.prev), p->second.first, p->second.second});
    }
    if (cur.next >= 0 && static_cast<size_t>(cur.next) < w.size()) {
      auto n = find(cur.id, w[cur.next].id);
      if (n != m.merges.end()) queue.push({top.pos, n->second.first, n->second.second});
    }
  }
}

}  // namespace

void BpeModel::encode_word(std::string_view word, std::vector<uint32_t>& out) const {
  if (ignore_merges) {
    auto it = vocab.find(std::string(word));
    if (it != vocab.end()) {
      out.push_back(it->second);
      return;
    }
  }
  std::vector<Symbol> w;
  w.reserve(word.size());
  bool unk = false;  // a pending unknown token, of unk_len bytes
  size_t unk_len = 0;
  std::string s;
  for (size_t i = 0; i < word.size();) {
    size_t n;
    decode_utf8(word, i, n);
    s.assign(word.substr(i, n));
    const size_t byte_len = n;
    if (i > 0 && continuing_subword_prefix) s = *continuing_subword_prefix + s;
    i += n;
    if (i >= word.size() && end_of_word_suffix) s += *end_of_word_suffix;
    auto it = vocab.find(s);
    if (it != vocab.end()) {
      if (unk) add_symbol(w, *unk_id, unk_len), unk = false;
      add_symbol(w, it->second, byte_len);
      continue;
    }
    if (byte_fallback) {
      bool all = true;
      for (unsigned char b : s) all = all && byte_ids[b].has_value();
      if (all) {
        for (unsigned char b : s) add_symbol(w, *byte_ids[b], 1);
        continue;
      }
    }
    if (unk_id) {  // an unknown character: the unknown token (fused with a preceding one)
      if (unk && fuse_unk) {
        unk_len += byte_len;
      } else {
        if (unk) add_symbol(w, *unk_id, unk_len);
        unk = true, unk_len = byte_len;
      }
    }
    // no unknown token: the character is dropped, as Hugging Face's BPE drops it
  }
  if (unk) add_symbol(w, *unk_id, unk_len);
  merge_all(w, *this);
  for (const Symbol& sym : w)
    if (sym.len != 0) out.push_back(sym.id);
}

}  // namespace zf::tok
