#!/usr/bin/env python3
# zenflow's chat templates (models/tokenizer/chat_template.hpp) against python3-jinja2 set up as
# transformers' apply_chat_template sets it up (ImmutableSandboxedEnvironment, trim_blocks,
# lstrip_blocks, loopcontrols, raise_exception, tojson, {% generation %}), on the real templates of
# fixtures/chat_templates/ and 300 conversations each: 1 to 6 messages of random roles (system,
# user, assistant, tool), contents with leading/trailing whitespace, newlines, quotes, braces,
# Jinja-like text and non-ASCII, with and without the generation prompt. Every text must be equal,
# byte for byte; where jinja2 raises (a template's raise_exception, say, roles that do not alternate),
# zenflow must refuse too. Prints one line per template and "FAIL: ..." / exit 1 on a difference.
# Usage: /usr/bin/python3 chat_template_test.py ZF_CHAT_TEMPLATE_TOOL FIXTURE_DIR WORK_DIR (Debian's python3,
# with python3-jinja2)
import json
import os
import random
import subprocess
import sys

try:
    import jinja2
    import jinja2.sandbox
    from jinja2.ext import Extension
except ImportError:
    print("FAIL: python3-jinja2 is missing (bash tools/zf setup installs it)")
    sys.exit(1)

tool, fixtures, work = sys.argv[1:4]
os.makedirs(work, exist_ok=True)


class Generation(Extension):  # transformers' AssistantTracker when not tracking: the body as is
    tags = {"generation"}

    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(["name:endgeneration"], drop_needle=True)
        return jinja2.nodes.CallBlock(self.call_method("_render", []), [], [], body).set_lineno(lineno)

    def _render(self, caller):
        return caller()


def raise_exception(message):
    raise jinja2.exceptions.TemplateError(message)


def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


env = jinja2.sandbox.ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                                   extensions=[Generation, jinja2.ext.loopcontrols])
env.globals["raise_exception"] = raise_exception
env.filters["tojson"] = tojson

SPECIALS = [{}, {"bos_token": "<s>", "eos_token": "</s>"},
            {"bos_token": "<|begin_of_text|>", "eos_token": "<|eot_id|>", "pad_token": "<|endoftext|>"}]
PIECES = ["Hello", "  padded  ", "\n", "line one\nline two", "\"quoted\"", "it's", "{{ not a tag }}", "{% if %}",
          "caf\u00e9", "\u65e5\u672c", "\U0001F600", "tab\there", "<think>\nhm\n</think>\n\n", "42", "", " "]


def conversation(rng):
    n = rng.randint(1, 6)
    roles = ["system", "user", "assistant", "tool"]
    weights = [1, 4, 4, 1]
    msgs = []
    for i in range(n):
        if rng.random() < 0.6:  # mostly alternating, as real data
            role = "user" if (i % 2 == 0) else "assistant"
            if i == 0 and rng.random() < 0.3:
                role = "system"
        else:
            role = rng.choices(roles, weights)[0]
        content = "".join(rng.choice(PIECES) for _ in range(rng.randint(0, 4)))
        msgs.append({"role": role, "content": content})
    return msgs


failed = 0
rng = random.Random(20261205)
for name in sorted(os.listdir(fixtures)):
    src = open(os.path.join(fixtures, name), encoding="utf-8").read()
    tmpl = env.from_string(src)
    cases, expected = [], []
    for _ in range(300):
        c = {"messages": conversation(rng), "add_generation_prompt": rng.random() < 0.5,
             "specials": rng.choice(SPECIALS)}
        cases.append(c)
        try:
            expected.append(tmpl.render(messages=c["messages"], tools=None, documents=None,
                                        add_generation_prompt=c["add_generation_prompt"], **c["specials"]))
        except jinja2.exceptions.TemplateError as e:
            expected.append(None)
    cases_path = os.path.join(work, name + ".cases.json")
    out_path = os.path.join(work, name + ".out.json")
    json.dump(cases, open(cases_path, "w"))
    subprocess.run([tool, os.path.join(fixtures, name), cases_path, out_path], check=True)
    got = json.load(open(out_path))
    texts = errors = 0
    for c, want, g in zip(cases, expected, got):
        if want is None:
            errors += 1
            if "error" not in g:
                failed += 1
                print(f"FAIL: {name}: jinja2 raises, zenflow renders {g['text']!r} for {json.dumps(c)}")
        else:
            texts += 1
            if g.get("text") != want:
                failed += 1
                print(f"FAIL: {name}: {json.dumps(c)}\n  jinja2:  {want!r}\n  zenflow: {g!r}")
    print(f"chat_template_test: {name}: {texts} texts equal to jinja2's, {errors} refusals by both")
    if failed > 20:
        break
if failed:
    print(f"FAIL: {failed} differences")
    sys.exit(1)
print("PASS")
