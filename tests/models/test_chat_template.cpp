// Chat templates (models/tokenizer/chat_template.hpp): real Hugging Face templates (ChatML/Qwen2,
// Llama 2, Zephyr, Llama 3, Qwen2.5 with tools, Qwen3 with a generation block) rendered for 3- and
// 4-message conversations equal python3-jinja2's output; whitespace control, trim_blocks and
// lstrip_blocks, slices, filters, tests, scoping, loop controls; every error (raise_exception, syntax,
// unknown tag/filter, nesting, output and loop bombs) an InputError naming the template and the
// problem; tokenizer_config.json read from temporary directories.
//
// The expected strings were obtained by rendering the same templates and conversations with
// python3-jinja2 3.1 as transformers' apply_chat_template sets it up:
//   env = jinja2.sandbox.ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
//                                                      extensions=[Generation, "jinja2.ext.loopcontrols"])
//   env.globals["raise_exception"] = raise_exception   # raises jinja2.exceptions.TemplateError
//   env.filters["tojson"] = lambda x, ensure_ascii=False, indent=None, separators=None, sort_keys=False:
//       json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)
//   env.from_string(src).render(messages=..., tools=None, documents=None, add_generation_prompt=..., **specials)
// where Generation is transformers' AssistantTracker when not tracking ({% generation %} renders its
// body), and the outputs were written out here as C string literals.
#include "models/tokenizer/chat_template.hpp"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "runtime/error.hpp"
#include "test_helpers.hpp"

namespace zf::test {
namespace {

using tok::ChatMessage;
using tok::ChatTemplate;
using Specials = std::map<std::string, std::string>;

const std::string kWhere = "DIR/tokenizer_config.json: chat_template";

const std::vector<ChatMessage> kConv = {
    {"system", "You are a pirate."},
    {"user", "Hello, how are you?"},
    {"assistant", "  I'm fine, thanks! \n"},
    {"user", "Tell me a joke about \"quotes\", 'apostrophes' and caf\303\251s.\n"}};
const std::vector<ChatMessage> kConv3(kConv.begin() + 1, kConv.end());
const std::vector<ChatMessage> kThink = {
    {"user", "2+2?"}, {"assistant", "<think>\nadd them\n</think>\n\n4"}, {"user", "and 3+3?"}};

const Specials kLlama2Specials = {{"bos_token", "<s>"}, {"eos_token", "</s>"}, {"unk_token", "<unk>"}};
const Specials kLlama3Specials = {{"bos_token", "<|begin_of_text|>"}, {"eos_token", "<|eot_id|>"}};
const Specials kQwenSpecials = {{"eos_token", "<|im_end|>"}, {"pad_token", "<|endoftext|>"}};

// The templates, character for character as their tokenizer_config.json holds them, in
// tests/tokenizer/fixtures/chat_templates/ (tests/tokenizer/chat_template_test.py renders them with
// python3-jinja2 for many more conversations).
std::string fixture(const std::string& name) {
  std::ifstream in(std::string(ZF_SOURCE_DIR) + "/tests/tokenizer/fixtures/chat_templates/" + name, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  if (ss.str().empty()) throw std::runtime_error("cannot read the fixture " + name);
  return ss.str();
}
// ChatML as Qwen2-Instruct ships it.
const std::string kChatML = fixture("chatml.jinja");
// meta-llama/Llama-2-7b-chat-hf.
const std::string kLlama2 = fixture("llama2.jinja");
// HuggingFaceH4/zephyr-7b-beta and TinyLlama-1.1B-Chat-v1.0: newlines between the tags.
const std::string kZephyr = fixture("zephyr.jinja");
// meta-llama/Meta-Llama-3-8B-Instruct.
const std::string kLlama3 = fixture("llama3.jinja");
// Qwen/Qwen2.5-*-Instruct (tools, tool calls, tojson, whitespace control).
const std::string kQwen25 = fixture("qwen2.5.jinja");
// Qwen/Qwen3-0.6B's, with its assistant turn in one {% generation %} block (as Levanter-style
// SFT data carries it): namespace, ns.x = ..., is string, [::-1], split/rstrip/lstrip, messages|length.
const std::string kQwen3 = fixture("qwen3.jinja");

std::string render(const std::string& src, const std::vector<ChatMessage>& msgs = kConv, bool gen = true,
                   const Specials& sp = {{"bos_token", "<s>"}, {"eos_token", "</s>"}}) {
  return ChatTemplate(src, kWhere).render(msgs, gen, sp);
}

// The InputError of parsing and rendering `src`: its where() must name the template.
std::string error_of(const std::string& src, const std::vector<ChatMessage>& msgs = kConv) {
  try {
    render(src, msgs);
  } catch (const InputError& e) {
    EXPECT_EQ(e.where(), kWhere);
    return e.message();
  }
  ADD_FAILURE() << "no InputError for: " << src.substr(0, 200);
  return "";
}

struct RealCase {
  const char* name;
  const std::string* tpl;
  const std::vector<ChatMessage>* conv;
  bool add_generation_prompt;
  const Specials* specials;
  const char* expected;
};
const RealCase kRealCases[] = {
  {"ChatML/CONV", &kChatML, &kConv, false, &kQwenSpecials,
      "<|im_start|>system\n"
      "You are a pirate.<|im_end|>\n"
      "<|im_start|>user\n"
      "Hello, how are you?<|im_end|>\n"
      "<|im_start|>assistant\n"
      "  I'm fine, thanks! \n"
      "<|im_end|>\n"
      "<|im_start|>user\n"
      "Tell me a joke about \"quotes\", 'apostrophes' and caf\303\251s.\n"
      "<|im_end|>\n"},
  {"ChatML/CONV", &kChatML, &kConv, true, &kQwenSpecials,
      "<|im_start|>system\n"
      "You are a pirate.<|im_end|>\n"
      "<|im_start|>user\n"
      "Hello, how are you?<|im_end|>\n"
      "<|im_start|>assistant\n"
      "  I'm fine, thanks! \n"
      "<|im_end|>\n"
      "<|im_start|>user\n"
      "Tell me a joke about \"quotes\", 'apostrophes' and caf\303\251s.\n"
      "<|im_end|>\n"
      "<|im_start|>assistant\n"},
  {"ChatML/CONV3", &kChatML, &kConv3, false, &kQwenSpecials,
      "<|im_start|>system\n"
      "You are a helpful assistant.<|im_end|>\n"
      "<|im_start|>user\n"
      "Hello, how are you?<|im_end|>\n"
      "<|im_start|>assistant\n"
      "  I'm fine, thanks! \n"
      "<|im_end|>\n"
      "<|im_start|>user\n"
      "Tell me a joke about \"quotes\", 'apostrophes' and caf\303\251s.\n"
      "<|im_end|>\n"},
  {"ChatML/CONV3", &kChatML, &kConv3, true, &kQwenSpecials,
      "<|im_start|>system\n"
      "You are a helpful assistant.<|im_end|>\n"
      "<|im_start|>user\n"
      "Hello, how are you?<|im_end|>\n"
      "<|im_start|>assistant\n"
      "  I'm fine, thanks! \n"
      "<|im_end|>\n"
      "<|im_start|>user\n"
      "Tell me a joke about \"quotes\", 'apostrophes' and caf\303\251s.\n"
      "<|im_end|>\n"
      "<|im_start|>assistant\n"},
  {"Llama2/CONV", &kLlama2, &kConv, false, &kLlama2Specials,
      "<s>[INST] <<SYS>>\n"
      "You are a pirate.\n"
      "<</SYS>>\n"
      "\n"
      "Hello, how are you? [/INST] I'm fine, thanks! </s><s>[INST] Tell me a joke about \"quotes\", 'apostrophes' and caf\303\251s. [/INST]"},
  {"Llama2/CONV", &kLlama2, &kConv, true, &kLlama2Specials,
      "<s>[INST] <<SYS>>\n"
      "You are a pirate.\n"
      "<</SYS>>\n"
      "\n"
      "Hello, how are you? [/INST] I'm fine, thanks! </s><s>[INST] Tell me a joke about \"quotes\", 'apostrophes' and caf\303\251s. [/INST]"},
  {"Llama2/CONV3", &kLlama2, &kConv3, false, &kLlama2Specials,
      "<s>[INST] Hello, how are you? [/INST] I'm fine, thanks! </s><s>[INST] Tell me a joke about \"quotes\", 'apostrophes' and caf\303\251s. [/INST]"},
  {"Llama2/CONV3", &kLlama2, &kConv3, true, &kLlama2Specials,
      "<s>[INST] Hello, how are you? [/INST] I'm fine, thanks! </s><s>[INST] Tell me a joke about \"quotes\", 'apostrophes' and caf\303\251s. [/INST]"},
  {"Zephyr/CONV", &kZephyr, &kConv, false, &kLlama2Specials,
      "<|system|>\n"
      "You are a pirate.</s>\n"
      "<|user|>\n"
      "Hello, how are you?</s>\n"
      "<|assistant|>\n"
      "  I'm fine, thanks! \n"
      "</s>\n"
      "<|user|>\n"
      "Tell me a joke about \"quotes\", 'apostrophes' and caf\303\251s.\n"
      "</s>\n"},
  {"Zephyr/CONV", &kZephyr, &kConv, true, &kLlama2Specials,
      "<|system|>\n"
      "You are a pirate.</s>\n"
      "<|user|>\n"
      "Hello, how are you?</s>\n"
      "<|assistant|>\n"
      "  I'm fine, thanks! \n"
      "</s>\n"
      "<|user|>\n"
      "Tell me a joke about \"quotes\", 'apostrophes' and caf\303\251s.\n"
      "</s>\n"
      "<|assistant|>\n"},
  {"Llama3/CONV", &kLlama3, &kConv, false, &kLlama3Specials,
      "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n"
      "\n"
      "You are a pirate.<|eot_id|><|start_header_id|>user<|end_header_id|>\n"
      "\n"
      "Hello, how are you?<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n"
      "\n"
      "I'm fine, thanks!<|eot_id|><|start_header_id|>user<|end_header_id|>\n"
      "\n"
      "Tell me a joke about \"quotes\", 'apostrophes' and caf\303\251s.<|eot_id|>"},
  {"Llama3/CONV", &kLlama3, &kConv, true, &kLlama3Specials,
      "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n"
      "\n"
      "You are a pirate.<|eot_id|><|start_header_id|>user<|end_header_id|>\n"
      "\n"
      "Hello, how are you?<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n"
      "\n"
      "I'm fine, thanks!<|eot_id|><|start_header_id|>user<|end_header_id|>\n"
      "\n"
      "Tell me a joke about \"quotes\", 'apostrophes' and caf\303\251s.<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n"
      "\n"},
  {"Qwen25/CONV", &kQwen25, &kConv, false, &kQwenSpecials,
      "<|im_start|>system\n"
      "You are a pirate.<|im_end|>\n"
      "<|im_start|>user\n"
      "Hello, how are you?<|im_end|>\n"
      "<|im_start|>assistant\n"
      "  I'm fine, thanks! \n"
      "<|im_end|>\n"
      "<|im_start|>user\n"
      "Tell me a joke about \"quotes\", 'apostrophes' and caf\303\251s.\n"
      "<|im_end|>\n"},
  {"Qwen25/CONV", &kQwen25, &kConv, true, &kQwenSpecials,
      "<|im_start|>system\n"
      "You are a pirate.<|im_end|>\n"
      "<|im_start|>user\n"
      "Hello, how are you?<|im_end|>\n"
      "<|im_start|>assistant\n"
      "  I'm fine, thanks! \n"
      "<|im_end|>\n"
      "<|im_start|>user\n"
      "Tell me a joke about \"quotes\", 'apostrophes' and caf\303\251s.\n"
      "<|im_end|>\n"
      "<|im_start|>assistant\n"},
  {"Qwen25/CONV3", &kQwen25, &kConv3, false, &kQwenSpecials,
      "<|im_start|>system\n"
      "You are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\n"
      "<|im_start|>user\n"
      "Hello, how are you?<|im_end|>\n"
      "<|im_start|>assistant\n"
      "  I'm fine, thanks! \n"
      "<|im_end|>\n"
      "<|im_start|>user\n"
      "Tell me a joke about \"quotes\", 'apostrophes' and caf\303\251s.\n"
      "<|im_end|>\n"},
  {"Qwen25/CONV3", &kQwen25, &kConv3, true, &kQwenSpecials,
      "<|im_start|>system\n"
      "You are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\n"
      "<|im_start|>user\n"
      "Hello, how are you?<|im_end|>\n"
      "<|im_start|>assistant\n"
      "  I'm fine, thanks! \n"
      "<|im_end|>\n"
      "<|im_start|>user\n"
      "Tell me a joke about \"quotes\", 'apostrophes' and caf\303\251s.\n"
      "<|im_end|>\n"
      "<|im_start|>assistant\n"},
  {"Qwen3/CONV", &kQwen3, &kConv, false, &kQwenSpecials,
      "<|im_start|>system\n"
      "You are a pirate.<|im_end|>\n"
      "<|im_start|>user\n"
      "Hello, how are you?<|im_end|>\n"
      "<|im_start|>assistant\n"
      "  I'm fine, thanks! \n"
      "<|im_end|>\n"
      "<|im_start|>user\n"
      "Tell me a joke about \"quotes\", 'apostrophes' and caf\303\251s.\n"
      "<|im_end|>\n"},
  {"Qwen3/CONV", &kQwen3, &kConv, true, &kQwenSpecials,
      "<|im_start|>system\n"
      "You are a pirate.<|im_end|>\n"
      "<|im_start|>user\n"
      "Hello, how are you?<|im_end|>\n"
      "<|im_start|>assistant\n"
      "  I'm fine, thanks! \n"
      "<|im_end|>\n"
      "<|im_start|>user\n"
      "Tell me a joke about \"quotes\", 'apostrophes' and caf\303\251s.\n"
      "<|im_end|>\n"
      "<|im_start|>assistant\n"},
  {"Qwen3/THINK", &kQwen3, &kThink, false, &kQwenSpecials,
      "<|im_start|>user\n"
      "2+2?<|im_end|>\n"
      "<|im_start|>assistant\n"
      "4<|im_end|>\n"
      "<|im_start|>user\n"
      "and 3+3?<|im_end|>\n"},
  {"Qwen3/THINK", &kQwen3, &kThink, true, &kQwenSpecials,
      "<|im_start|>user\n"
      "2+2?<|im_end|>\n"
      "<|im_start|>assistant\n"
      "4<|im_end|>\n"
      "<|im_start|>user\n"
      "and 3+3?<|im_end|>\n"
      "<|im_start|>assistant\n"},
};

TEST(ChatTemplate, RealTemplatesMatchJinja2) {
  for (const RealCase& c : kRealCases) {
    const ChatTemplate t(*c.tpl, kWhere);
    EXPECT_EQ(t.render(*c.conv, c.add_generation_prompt, *c.specials), c.expected)
        << c.name << (c.add_generation_prompt ? " with" : " without") << " the generation prompt";
  }
}

// Small templates, each on the 4-message conversation with the generation prompt, bos "<s>", eos "</s>".
struct FeatureCase {
  const char* name;
  const char* tpl;
  const char* expected;
};
const FeatureCase kFeatureCases[] = {
  {"trim_blocks", "a\n  {% if true %}\n  x\n  {% endif %}\nb",
   "a\n"
      "  x\n"
      "b"},
  {"lstrip_only_at_line_start", "a  {% if true %}x{% endif %}  \nb",
   "a  x  \n"
      "b"},
  {"no_trim_after_print", "  {{ 1 }}\n{% if true %} y{% endif %}\n",
   "  1\n"
      " y"},
  {"comments", "a {#- c -#} b|a\n  {# c #}\nb",
   "ab|a\n"
      "b"},
  {"minus_on_prints", "{{- ' x ' -}}  \n  {{ 1 }}",
   " x 1"},
  {"minus_on_blocks", "a\n  {%- if true -%}\n  x\n  {%- endif %}\nb",
   "axb"},
  {"plus_keeps_whitespace", "  {%+ if true %}x{% endif +%}\ny",
   "  x\n"
      "y"},
  {"crlf_and_trailing_newline", "one\015\n{% if true %}\015\ntwo\015\n{% endif %}\015\n",
   "one\n"
      "two\n"},
  {"slices", "{{ [1,2,3,4][1:3] }}{{ [1,2,3,4][::2] }}{{ 'hello'[-3:] }}{{ [1,2,3][::-1] }}{{ [1,2,3][1:-1] }}{{ 'h\303\251llo'[1:3] }}{{ messages[1:]|length }}{{ [1,2,3][-1] }}[{{ [1,2,3][5] }}]{{ 'abc'[::-1] }}{{ [1,2,3,4,5][4:0:-2] }}",
   "[2, 3][1, 3]llo[3, 2, 1][2]\303\251l33[]cba[5, 3]"},
  {"filters", "{{ '  a  '|trim }}|{{ 'abc'|length }}{{ [1,2]|count }}|{{ [3,4]|first }}{{ 'xy'|last }}|{{ 'AbC'|lower }}{{ 'AbC'|upper }}|{{ 'hELLO wORLD'|capitalize }}|{{ 'aXbX'|replace('X', '-') }}|{{ [1,'a']|join(', ') }}|{{ x|default('d') }}{{ ''|default('e', true) }}|{{ '12'|int + 1 }}{{ 'x'|int }}|{{ 7|string ~ '!' }}|{{ 'ab'|list }}|{{ {'k': 'v'}|items|list }}|{{ x|length }}|{{ \"they're bill's\"|title }}|{{ [1, 2]|reverse|list }}",
   "a|32|3y|abcABC|Hello world|a-b-|1, a|de|130|7!|['a', 'b']|[('k', 'v')]|0|They're Bill's|[2, 1]"},
  {"tojson", "{{ {'b': 1, 'a': [1, 2.5, none, true, 'x']}|tojson }}|{{ 'caf\303\251 \"q\"\n\\u0001'|tojson }}|{{ {'a': [1, {}], 'b': []}|tojson(indent=2) }}|{{ 'caf\303\251'|tojson(ensure_ascii=true) }}|{{ {'b': 1, 'a': 2}|tojson(sort_keys=true) }}",
   "{\"b\": 1, \"a\": [1, 2.5, null, true, \"x\"]}|\"caf\303\251 \\\"q\\\"\\n\\u0001\"|{\n"
      "  \"a\": [\n"
      "    1,\n"
      "    {}\n"
      "  ],\n"
      "  \"b\": []\n"
      "}|\"caf\\u00e9\"|{\"a\": 2, \"b\": 1}"},
  {"select_map", "{{ messages|selectattr('role', 'equalto', 'user')|map(attribute='content')|join(' / ') }}|{{ messages|rejectattr('role', 'in', ['user', 'system'])|map(attribute='role')|list }}|{{ ['a', 'b']|map('upper')|join }}",
   "Hello, how are you? / Tell me a joke about \"quotes\", 'apostrophes' and caf\303\251s.\n"
      "|['assistant']|AB"},
  {"tests", "{{ x is defined }}{{ messages is defined }}{{ x is not defined }}{{ none is none }}{{ 'a' is string }}{{ {} is mapping }}{{ [] is iterable }}{{ 'a' is sequence }}{{ 3 is number }}{{ true is true }}{{ 0 is false }}{{ 4 is even }}{{ 9 is divisibleby 3 }}{{ tools is none }}{{ tools is defined }}{{ messages[0] is mapping }}{{ 1 is string }}",
   "FalseTrueTrueTrueTrueTrueTrueTrueTrueTrueFalseTrueTrueTrueTrueTrueFalse"},
  {"operators", "{{ 7 // 2 }} {{ -7 % 3 }} {{ 7 / 2 }} {{ 2 ** 10 }} {{ -2 ** 2 }} {{ 'a' ~ 1 ~ none }} {{ [1] + [2] }} {{ 'ab' * 2 }} {{ 1 < 2 < 3 }} {{ 'a' in 'cat' }} {{ 'z' not in ['a'] }} {{ 1 if false else 2 }} {{ not 1 == 2 }} {{ 1 and 'x' }} {{ 0 or [] }} {{ 10 - 2 - 3 }} {{ 0.1 + 0.2 }} {{ 1e20 }} {{ (1, 'a') }} {{ {'a': none} }} {{ -3|abs }} {{ 2 + 3 * 4 }} {{ 1 == 1.0 }} {{ 'b' > 'a' }} {{ [1, 2] < [1, 3] }} {{ 'k' in {'k': 1} }} {{ 1e-05 }} {{ 10 / 4 }} [{{ 'x' if false }}]",
   "3 2 3.5 1024 4 a1None [1, 2] abab True True True 2 True x [] 5 0.30000000000000004 1e+20 (1, 'a') {'a': None} 3 14 True True True True 1e-05 2.5 []"},
  {"methods", "{{ ' a '.strip() }}|{{ 'xxaxx'.strip('x') }}|{{ ' a '.lstrip() }}|{{ ' a '.rstrip() }}|{{ 'abc'.startswith('ab') }}{{ 'abc'.endswith(('x', 'c')) }}|{{ ' a  b '.split() }}{{ 'a,b,,c'.split(',') }}{{ 'a,b,c'.split(',', 1) }}|{{ \"they're here\".title() }}|{{ 'a-b'.replace('-', '+') }}|{{ {'a': 1}.get('a') }}{{ {'a': 1}.get('b') }}{{ {'a': 1}.get('b', 2) }}|{{ {'a': 1}.keys()|list }}{{ {'a': 1}.values()|list }}|{{ ', '.join(['x', 'y']) }}|{{ 'aXbXc'.split('X')[-1] }}|{{ 'Ab'.upper() }}{{ 'Ab'.lower() }}",
   "a|a|a | a|TrueTrue|['a', 'b']['a', 'b', '', 'c']['a', 'b,c']|They'Re Here|a+b|1None2|['a'][1]|x, y|c|ABab"},
  {"scoping", "{% set c = 0 %}{% for i in [1, 2, 3] %}{% set c = c + i %}{{ c }}{% endfor %}|{{ c }}|{% set ns = namespace(total=0) %}{% for i in [1, 2, 3] %}{% set ns.total = ns.total + i %}{% endfor %}{{ ns.total }}|{% if true %}{% set d = 'leak' %}{% endif %}{{ d }}|{% for i in [1] %}{% set e = 1 %}{% endfor %}{{ e is defined }}|{% set a, b = 1, 2 %}{{ a }}{{ b }}|{% set blk %}x{{ 1 }}y{% endset %}{{ blk }}|{% for i in [1, 2] %}{% for j in [3] %}{% set k = j %}{% endfor %}{{ k is defined }}{% endfor %}",
   "123|0|6|leak|False|12|x1y|FalseFalse"},
  {"loops", "{% for i in range(10) %}{% if i == 2 %}{% continue %}{% endif %}{% if i == 5 %}{% break %}{% endif %}{{ i }}{% endfor %}|{% for i in [] %}x{% else %}empty{% endfor %}|{% for i in range(6) if i is odd %}{{ loop.index }}/{{ loop.length }}{% endfor %}|{% for c in 'ab' %}{{ loop.index0 }}{{ loop.revindex }}{{ loop.first }}{{ loop.last }}{{ loop.previtem }}{{ loop.nextitem }}{% endfor %}|{% for k, v in {'x': 1, 'y': 2}|items %}{{ k }}={{ v }};{% endfor %}|{% for m in messages %}{{ loop.cycle('a', 'b') }}{% endfor %}|{% for i in range(2, 9, 3) %}{{ i }}{% endfor %}|{% for k in {'p': 1, 'q': 2} %}{{ k }}{% endfor %}",
   "0134|empty|1/32/33/3|02TrueFalseb11FalseTruea|x=1;y=2;|abab|258|pq"},
  {"generation", "{% for m in messages %}{% generation %}[{{ m.role }}]{% endgeneration %}{% endfor %}",
   "[system][user][assistant][user]"},
  {"strings", "{{ 'a\\tb\\x41\\u00e9\\'' }}{{ \"it's\" }}{{ ['it\\'s', \"q\\\"\"] }}{{ 'a' 'b' }}{{ 'multi\nline' }}",
   "a\011bA\303\251'it's[\"it's\", 'q\"']abmulti\n"
      "line"},
  {"items_and_attrs", "{{ messages[0].role }}{{ messages[0]['content'] }}[{{ messages[0].nope }}]|{{ messages[-1].role }}|{{ {'a': {'b': 1}}['a']['b'] }}|{{ messages[0] }}|{{ {'a': {'b': 1}}.a.b }}|{{ bos_token }}{{ eos_token }}[{{ unk_token }}]",
   "systemYou are a pirate.[]|user|1|{'role': 'system', 'content': 'You are a pirate.'}|1|<s></s>[]"},
};

TEST(ChatTemplate, FeaturesMatchJinja2) {
  for (const FeatureCase& c : kFeatureCases) EXPECT_EQ(render(c.tpl), c.expected) << c.name;
}

TEST(ChatTemplate, ParsedOnceRenderedMany) {
  ChatTemplate a(kChatML, kWhere);
  ChatTemplate b = std::move(a);  // movable: the other engineer keeps one per tokenizer
  a = std::move(b);
  const std::string one = a.render({{"user", "hi"}}, true, {});
  EXPECT_EQ(one, "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\nhi<|im_end|>\n"
                 "<|im_start|>assistant\n");
  EXPECT_EQ(a.render({{"user", "hi"}}, true, {}), one);
  // Absent specials are undefined: "" when printed, an error when added to a string.
  EXPECT_EQ(render("[{{ bos_token }}]", kConv, true, {}), "[]");
  EXPECT_NE(error_of("{{ unk_token + 'x' }}").find("'unk_token' is undefined"), std::string::npos);
}

TEST(ChatTemplate, RaiseExceptionNamesTheMessage) {
  const std::vector<ChatMessage> bad = {{"user", "a"}, {"user", "b"}};
  try {
    ChatTemplate(kLlama2, kWhere).render(bad, false, kLlama2Specials);
    ADD_FAILURE() << "no InputError";
  } catch (const InputError& e) {
    EXPECT_EQ(e.where(), kWhere);
    EXPECT_EQ(e.message(), "line 1: raise_exception: Conversation roles must alternate user/assistant/user/assistant/...");
    EXPECT_NE(std::string(e.what()).find(kWhere), std::string::npos);
  }
  EXPECT_EQ(error_of("a\n\n{{ raise_exception('boom') }}"), "line 3: raise_exception: boom");
}

TEST(ChatTemplate, SyntaxErrorsNameLineAndProblem) {
  auto parse_error = [](const std::string& src) {
    try {
      ChatTemplate t(src, kWhere);
    } catch (const InputError& e) {
      EXPECT_EQ(e.where(), kWhere);
      return e.message();
    }
    ADD_FAILURE() << "no InputError at parse for: " << src.substr(0, 200);
    return std::string();
  };
  const std::string unclosed = parse_error("a\n{% if true %}x");
  EXPECT_NE(unclosed.find("'if' of line 2 is not closed"), std::string::npos) << unclosed;
  EXPECT_NE(unclosed.find("'endif'"), std::string::npos) << unclosed;
  EXPECT_NE(parse_error("{% for m in messages %}x{% endif %}").find("unexpected 'endif'"), std::string::npos);
  EXPECT_NE(parse_error("{% macro f() %}x{% endmacro %}").find("unknown tag 'macro'"), std::string::npos);
  EXPECT_NE(parse_error("{% raw %}x{% endraw %}").find("unknown tag 'raw'"), std::string::npos);
  EXPECT_EQ(parse_error("x\n\n{{ 1 + }}"), "line 3: expected an expression, got '}}'");
  EXPECT_NE(parse_error("{{ 'abc }}").find("unterminated string"), std::string::npos);
  EXPECT_NE(parse_error("{{ x ").find("missing end of tag '}}'"), std::string::npos);
  EXPECT_NE(parse_error("{# x").find("missing end of comment"), std::string::npos);
  EXPECT_NE(parse_error("{% break %}").find("'break' outside a loop"), std::string::npos);
  EXPECT_NE(parse_error("{{ f(*a) }}").find("outside the supported subset"), std::string::npos);
  EXPECT_NE(parse_error("{% for x in y recursive %}{% endfor %}").find("recursive"), std::string::npos);
  EXPECT_NE(parse_error("{{ (1] }}").find("unexpected ']'"), std::string::npos);
  EXPECT_NE(parse_error("{{ 99999999999999999999 }}").find("beyond 64 bits"), std::string::npos);
}

TEST(ChatTemplate, UnknownNamesFailOnlyWhenReached) {
  EXPECT_EQ(render("{% if false %}{{ 1|bogus }}{{ 1 is bogus }}{{ bogus() }}{{ 'a'.bogus() }}{% endif %}ok"), "ok");
  EXPECT_EQ(error_of("{{ 1|bogus }}"), "line 1: unknown filter 'bogus'");
  EXPECT_EQ(error_of("\n{{ 1 is bogus }}"), "line 2: unknown test 'bogus'");
  EXPECT_EQ(error_of("{{ bogus() }}"), "line 1: unknown function 'bogus'");
  EXPECT_NE(error_of("{{ 'a'.bogus() }}").find("unknown method 'bogus'"), std::string::npos);
  EXPECT_NE(error_of("{{ x.y }}").find("'x' is undefined"), std::string::npos);
  EXPECT_NE(error_of("{{ 'a' + 1 }}").find("can only concatenate str"), std::string::npos);
  EXPECT_NE(error_of("{{ 1 // 0 }}").find("division or modulo by zero"), std::string::npos);
  EXPECT_NE(error_of("{{ '%s' % 1 }}").find("outside the supported subset"), std::string::npos);
  EXPECT_NE(error_of("{{ none|tojson }}{{ x|tojson }}").find("not JSON serializable"), std::string::npos);
  EXPECT_NE(error_of("{% for x in 3 %}{% endfor %}").find("'int' object is not iterable"), std::string::npos);
  EXPECT_NE(error_of("{% set x = 1 %}{% set x.a = 2 %}").find("not a namespace"), std::string::npos);
}

TEST(ChatTemplate, NestingBombsAreRefused) {
  auto refused = [](const std::string& src) {
    const std::string m = error_of(src);
    EXPECT_NE(m.find("deeper than 256"), std::string::npos) << m;
  };
  refused("{{ " + std::string(100000, '(') + "1" + std::string(100000, ')') + " }}");
  refused("{{ " + std::string(100000, '[') + std::string(100000, ']') + " }}");
  std::string chain = "{{ 1";
  for (int i = 0; i < 100000; ++i) chain += " + 1";
  refused(chain + " }}");
  std::string filters = "{{ 'a'";
  for (int i = 0; i < 100000; ++i) filters += "|trim";
  refused(filters + " }}");
  std::string ifs;
  for (int i = 0; i < 100000; ++i) ifs += "{% if true %}";
  refused(ifs);
  refused("{{ " + std::string(100000, '-') + "1 }}");
  std::string nots = "{{ ";
  for (int i = 0; i < 100000; ++i) nots += "not ";
  refused(nots + "1 }}");
  // Values nested while rendering.
  refused("{% set ns = namespace(x=[]) %}{% for i in range(1000) %}{% set ns.x = [ns.x] %}{% endfor %}");
  // 100 levels of parentheses are still fine.
  EXPECT_EQ(render("{{ " + std::string(100, '(') + "1" + std::string(100, ')') + " }}"), "1");
}

TEST(ChatTemplate, OutputAndLoopBombsAreRefused) {
  const std::string loops = error_of("{% for i in range(100000) %}{% for j in range(100000) %}x{% endfor %}{% endfor %}");
  EXPECT_TRUE(loops.find("loop iterations") != std::string::npos || loops.find("64 MiB") != std::string::npos) << loops;
  EXPECT_NE(error_of("{% for i in range(100) %}{{ 'x' * 1000000 }}{% endfor %}").find("larger than 64 MiB"), std::string::npos);
  EXPECT_NE(error_of("{{ 'x' * 100000000 }}").find("larger than 64 MiB"), std::string::npos);
  EXPECT_NE(error_of("{% set ns = namespace(s='x') %}{% for i in range(100) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}")
                .find("larger than 64 MiB"),
            std::string::npos);
  EXPECT_NE(error_of("{{ range(100001)|length }}").find("range too big"), std::string::npos);
  EXPECT_NE(error_of("{% set ns = namespace(l=[1]) %}{% for i in range(60) %}{% set ns.l = ns.l + ns.l %}{% endfor %}")
                .find("512 MiB"),
            std::string::npos);
  EXPECT_NE(error_of("{% set ns = namespace(a=1) %}{% set ns.b = ns %}").find("cannot be stored"), std::string::npos);
  EXPECT_NE(error_of("{{ 2 ** 64 }}").find("integer overflow"), std::string::npos);
}

// tokenizer_config.json in a temporary model directory.
TEST(ChatTemplate, ReadsTokenizerConfig) {
  TempDir d("zf_chat_template");
  EXPECT_FALSE(tok::read_chat_template_config(d.p.string()));  // no file
  const std::string path = d.path("tokenizer_config.json");
  d.write("tokenizer_config.json", R"({"bos_token": "<s>", "eos_token": {"content": "</s>", "lstrip": false},
                                      "unk_token": null, "chat_template": "{{ bos_token }}x"})");
  auto c = tok::read_chat_template_config(d.p.string());
  ASSERT_TRUE(c);
  EXPECT_EQ(c->source, "{{ bos_token }}x");
  EXPECT_EQ(c->where, path + ": chat_template");
  EXPECT_EQ(c->specials, (Specials{{"bos_token", "<s>"}, {"eos_token", "</s>"}}));
  EXPECT_EQ(ChatTemplate(c->source, c->where).render(kConv, false, c->specials), "<s>x");

  d.write("tokenizer_config.json", R"({"chat_template": [{"name": "tool_use", "template": "T"},
                                                          {"name": "default", "template": "D"}]})");
  c = tok::read_chat_template_config(d.p.string());
  ASSERT_TRUE(c);
  EXPECT_EQ(c->source, "D");
  EXPECT_EQ(c->where, path + ": chat_template[1].template");
  EXPECT_TRUE(c->specials.empty());

  d.write("tokenizer_config.json", R"({"bos_token": "<s>"})");
  EXPECT_FALSE(tok::read_chat_template_config(d.p.string()));
  d.write("tokenizer_config.json", R"({"chat_template": null})");
  EXPECT_FALSE(tok::read_chat_template_config(d.p.string()));

  auto refused = [&](const std::string& json, std::initializer_list<std::string> parts) {
    d.write("tokenizer_config.json", json);
    expect_input_error([&] { tok::read_chat_template_config(d.p.string()); }, parts);
  };
  refused("{\"chat_template\": ", {path});
  refused("[1]", {path, "expected an object"});
  refused(R"({"chat_template": 3})", {path + ": chat_template", "expected a string or a list"});
  refused(R"({"chat_template": [{"name": "tool_use", "template": "T"}]})", {path + ": chat_template", "\"default\""});
  refused(R"({"chat_template": [{"name": "default"}]})", {path + ": chat_template[0].template", "missing"});
  refused(R"({"chat_template": [{"name": "default", "template": 1}]})", {path + ": chat_template[0].template", "expected a string"});
  refused(R"({"chat_template": "x", "bos_token": 1})", {path + ": bos_token", "expected a string or an object"});
  refused(R"({"chat_template": "x", "eos_token": {"lstrip": true}})", {path + ": eos_token.content", "missing"});

  // chat_template.jinja (where transformers saves the template) takes priority; the specials still
  // come from tokenizer_config.json, which may be absent
  d.write("tokenizer_config.json", R"({"bos_token": "<s>", "chat_template": "from the config"})");
  d.write("chat_template.jinja", "{{ bos_token }}from the file\n");
  c = tok::read_chat_template_config(d.p.string());
  ASSERT_TRUE(c);
  EXPECT_EQ(c->source, "{{ bos_token }}from the file\n");
  EXPECT_EQ(c->where, d.path("chat_template.jinja"));
  EXPECT_EQ(c->specials, (Specials{{"bos_token", "<s>"}}));
  std::filesystem::remove(path);
  c = tok::read_chat_template_config(d.p.string());
  ASSERT_TRUE(c);
  EXPECT_TRUE(c->specials.empty());
  std::filesystem::remove(d.path("chat_template.jinja"));
  std::filesystem::create_directory(d.path("chat_template.jinja"));
  expect_input_error([&] { tok::read_chat_template_config(d.p.string()); },
                     {d.path("chat_template.jinja"), "is a directory"});
}

}  // namespace
}  // namespace zf::test
