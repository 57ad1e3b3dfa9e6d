// The spec's field table: every field once, with how it is read and validated, how to_json writes
// it, and whether a resumed run must match the checkpoint's value. parse_spec, Spec::to_json and
// the checkpoint compatibility check all walk this table; docs/spec.md lists every entry
// (tests/graphs/test_spec_fields.cpp checks that). A field's default is its Spec member's
// initializer (write(Spec{})), so that it is written once.
#pragma once
#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "graphs/schema/spec.hpp"

namespace zf {

class Fields;

// What --resume compares: nothing (the field may change), the field alone (named by its path; a
// checkpoint's spec without it holds the default), or the whole block it belongs to (named by the
// block; the block's fields marked `none` are left out of the comparison).
enum class Match { none, field, block };

struct FieldDef {
  std::string name;  // dotted path: "train.batch_size"; a top-level key: "strategy"
  // Reads and validates the field's key from its block's reader (the default stays when absent).
  std::function<void(Fields& block, const std::string& key, Spec& s)> read;
  std::function<nlohmann::json(const Spec& s)> write;  // its value in to_json
  std::function<bool(const Spec& s)> written;          // empty: always in to_json
  Match match = Match::none;
  int match_order = 0;                        // the checks run in this order; fields of one block share it
  std::function<bool(const Spec& s)> match_if;  // empty: always compared (when match is not none)

  std::string block() const;  // "train" for "train.batch_size"; "" for a top-level key
  std::string key() const;    // "batch_size"
  FieldDef only_if(std::function<bool(const Spec&)> w) && {
    written = std::move(w);
    return std::move(*this);
  }
  FieldDef must_match(Match m, int order, std::function<bool(const Spec&)> when = {}) && {
    match = m, match_order = order, match_if = std::move(when);
    return std::move(*this);
  }
};

// The table, in parse order (the order in which errors are found).
const std::vector<FieldDef>& spec_fields();

// Reads the fields of `block` ("" for the top-level ones) from `f` into s, in table order; does not
// call f.finish().
void read_block(Fields& f, const std::string& block, Spec& s);
// Writes the fields of the table into j (blocks as nested objects).
void write_fields(const Spec& s, nlohmann::json& j);
// Every field of one block, whether to_json would write it or not.
nlohmann::json block_json(const Spec& s, const std::string& block);

// One comparison of a resumed run: `value` extracts, from a spec's JSON (a checkpoint's or this
// run's to_json), what must be equal.
struct ResumeCheck {
  std::string name;  // the field's path or the block's name, for the message
  std::function<nlohmann::json(const nlohmann::json& spec_json)> value;
};
// The comparisons for a run of spec s, in order.
std::vector<ResumeCheck> resume_checks(const Spec& s);

// The zenflow block's reads and checks (the DeepSpeed translator validates a DeepSpeed file's
// block with it, so that errors name that file).
void parse_zenflow_block(Fields& f, Spec& s);

}  // namespace zf
