#!/usr/bin/env python3
"""make_tokenizer_golden.py: reference data for the C++ tokenizer tests (tests/tokenizer).

Run by hand; the output is committed under tests/data/tokenizer/ (kept small, < 300 KB):

  smollm2_golden.json  token ids from the HF tokenizer of the SmolLM2 GGUF (transformers,
                       gguf_file=...), with and without special-token parsing, for ~35 strings.
  pretok_splits.json   pre-token splits of the same strings under the GPT-2, Llama-3 and Qwen2
                       regexes (Python `regex`), so the C++ splitter is tested without a vocab.
  chat_golden.json     jinja2 renderings (HF's settings: trim_blocks, lstrip_blocks) of the SmolLM2
                       template (from the GGUF) and the published Qwen2.5, Llama-3, Llama-2-chat,
                       Mistral-Instruct and Gemma 3 templates, over a set of conversations
                       (--chat-only writes this file alone).
  spm_tiny.json        a small SentencePiece BPE model trained here (byte fallback), written as
                       GGUF-style tokenizer.ggml.* metadata, with `sentencepiece` encodings.
  hf_bpe_tiny.json     two small byte-level BPE tokenizer.json files trained here with the
                       `tokenizers` library (Llama-3-style and Qwen2-style Split pre-tokenizers,
                       the latter with Qwen2's NFC normalizer), with their encodings; tests
                       Tokenizer::from_hf_json.
  hf_spm_tiny.json     the spm_tiny SentencePiece model converted to two SentencePiece-style
                       tokenizer.json files (Llama-2 style: Prepend/Replace normalizer; newer
                       style: Metaspace pre-tokenizer), with HF tokenizers' encodings.
  nfc_golden.json      Python unicodedata NFC of the strings above and of random mixes of
                       combining marks, Hangul jamo and composable letters.

With --nfc-tables it also writes src/tokenizer/nfc_tables.inc, the Unicode data (canonical
decompositions, composition flags, combining classes) behind the C++ NFC normalizer, taken from
Python's unicodedata (its Unicode version is recorded in the file).

Usage: python3 tools/make_tokenizer_golden.py [--model PATH.gguf] [--out DIR] [--nfc-tables]
Needs: transformers, tokenizers, gguf, jinja2, regex, sentencepiece.
"""
import argparse
import io
import json
import os
import sys

import regex

GPT2_PATTERN = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"
LLAMA3_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|"
                  r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
QWEN2_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}|"
                 r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
PATTERNS = {"gpt2": GPT2_PATTERN, "llama3": LLAMA3_PATTERN, "qwen2": QWEN2_PATTERN}

STRINGS = [
    "Hello world",
    "Hello, world! How are you doing today?",
    "  leading spaces and trailing   ",
    "The year 2024 had 366 days; 12345678 is a number, 3.14159 too.",
    "def foo(x):\n    return x ** 2  # square\n",
    "for (int i = 0; i < n; ++i) { sum += a[i]; }",
    "line1\nline2\r\nline3\n\n\nline4",
    "tabs\tand\t\tmore\ttabs",
    "multiple     spaces    between",
    "emoji: \U0001F600\U0001F389\U0001F44D\U0001F3FD \U0001F468\u200D\U0001F469\u200D\U0001F467\u200D\U0001F466",
    "中文测试：你好，世界！",
    "日本語のテキストとカタカナ",
    "한국어 텍스트",
    "مرحبا بالعالم",
    "Ünïcödé àccéntéd Látin çharacters",
    "combining: e\u0301 a\u0308 o\u0302",
    "Zalgo: Z\u0334\u0321\u0322a\u0337l\u0336g\u0338o",
    "I'm sure you've seen it, they'll say we'd done it. DON'T SHOUT",
    "<|im_start|>user\nHi there<|im_end|>\n<|im_start|>assistant\n",
    "text with <|endoftext|> in the middle",
    "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nHi!<|eot_id|>",
    "almost special <|im_start and <im_end|> <|im_start|",
    "https://example.com/path?query=1&x=y#frag",
    "email@example.org, @mention #hashtag $100 50% ^caret~tilde",
    "\u00a0non-breaking\u00a0space and\u2009thin space\u3000ideographic",
    "",
    " ",
    "\n",
    "a" * 50,
    "0123456789 00 000 0000",
    "mixed123abc456def 1,000,000.00",
    "\u200bzero\u200bwidth\u200djoiner\ufeffbom",
    "Ελληνικά και русский язык",
    "replacement \ufffd private \ue000 astral \U0001D518\U0001D52B\U0001D526",
    "\x1c\x1d\x1e\x1f control \x85 nel \x0b vt \x0c ff",
    "ℕ ① ½ Ⅻ ٣ numbers",
    "invalid-looking: \\xff\\xfe %C3%28 \\u00 &#xD800;",
]

CHATML_GENERIC = ("{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + message['content']"
                  " + '<|im_end|>' + '\\n'}}{% endfor %}{% if add_generation_prompt %}"
                  "{{ '<|im_start|>assistant\\n' }}{% endif %}")

# Published chat templates (Qwen2.5-Instruct, Meta-Llama-3-Instruct, Llama-2-chat, Mistral-7B-Instruct).
QWEN25_TEMPLATE = r'''{%- if tools %}
    {{- '<|im_start|>system\n' }}
    {%- if messages[0]['role'] == 'system' %}
        {{- messages[0]['content'] }}
    {%- else %}
        {{- 'You are Qwen, created by Alibaba Cloud. You are a helpful assistant.' }}
    {%- endif %}
    {{- "\n\n# Tools\n\nYou may call one or more functions to assist with the user query.\n\nYou are provided with function signatures within <tools></tools> XML tags:\n<tools>" }}
    {%- for tool in tools %}
        {{- "\n" }}
        {{- tool | tojson }}
    {%- endfor %}
    {{- "\n</tools>\n\nFor each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, \"arguments\": <args-json-object>}\n</tool_call><|im_end|>\n" }}
{%- else %}
    {%- if messages[0]['role'] == 'system' %}
        {{- '<|im_start|>system\n' + messages[0]['content'] + '<|im_end|>\n' }}
    {%- else %}
        {{- '<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\n' }}
    {%- endif %}
{%- endif %}
{%- for message in messages %}
    {%- if (message.role == "user") or (message.role == "system" and not loop.first) or (message.role == "assistant" and not message.tool_calls) %}
        {{- '<|im_start|>' + message.role + '\n' + message.content + '<|im_end|>' + '\n' }}
    {%- elif message.role == "assistant" %}
        {{- '<|im_start|>' + message.role }}
        {%- if message.content %}
            {{- '\n' + message.content }}
        {%- endif %}
        {%- for tool_call in message.tool_calls %}
            {%- if tool_call.function is defined %}
                {%- set tool_call = tool_call.function %}
            {%- endif %}
            {{- '\n<tool_call>\n{"name": "' }}
            {{- tool_call.name }}
            {{- '", "arguments": ' }}
            {{- tool_call.arguments | tojson }}
            {{- '}\n</tool_call>' }}
        {%- endfor %}
        {{- '<|im_end|>\n' }}
    {%- elif message.role == "tool" %}
        {%- if (loop.index0 == 0) or (messages[loop.index0 - 1].role != "tool") %}
            {{- '<|im_start|>user' }}
        {%- endif %}
        {{- '\n<tool_response>\n' }}
        {{- message.content }}
        {{- '\n</tool_response>' }}
        {%- if loop.last or (messages[loop.index0 + 1].role != "tool") %}
            {{- '<|im_end|>\n' }}
        {%- endif %}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|im_start|>assistant\n' }}
{%- endif %}
'''

LLAMA3_TEMPLATE = ("{% set loop_messages = messages %}{% for message in loop_messages %}{% set content = "
                   "'<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n'+ message['content'] | trim "
                   "+ '<|eot_id|>' %}{% if loop.index0 == 0 %}{% set content = bos_token + content %}{% endif %}"
                   "{{ content }}{% endfor %}{% if add_generation_prompt %}"
                   "{{ '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}{% endif %}")

LLAMA2_TEMPLATE = ("{% if messages[0]['role'] == 'system' %}{% set loop_messages = messages[1:] %}{% set system_message"
                   " = messages[0]['content'] %}{% else %}{% set loop_messages = messages %}{% set system_message = false"
                   " %}{% endif %}{% for message in loop_messages %}{% if (message['role'] == 'user') != (loop.index0 % 2"
                   " == 0) %}{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}"
                   "{% endif %}{% if loop.index0 == 0 and system_message != false %}{% set content = '<<SYS>>\\n' + "
                   "system_message + '\\n<</SYS>>\\n\\n' + message['content'] %}{% else %}{% set content = "
                   "message['content'] %}{% endif %}{% if message['role'] == 'user' %}{{ bos_token + '[INST] ' + "
                   "content.strip() + ' [/INST]' }}{% elif message['role'] == 'assistant' %}{{ ' '  + content.strip() "
                   "+ ' ' + eos_token }}{% endif %}{% endfor %}")

LLAMA31_TEMPLATE = r'''{{- bos_token }}
{%- if custom_tools is defined %}
    {%- set tools = custom_tools %}
{%- endif %}
{%- if not tools_in_user_message is defined %}
    {%- set tools_in_user_message = true %}
{%- endif %}
{%- if not date_string is defined %}
    {%- set date_string = "26 Jul 2024" %}
{%- endif %}
{%- if not tools is defined %}
    {%- set tools = none %}
{%- endif %}

{#- This block extracts the system message, so we can slot it into the right place. #}
{%- if messages[0]['role'] == 'system' %}
    {%- set system_message = messages[0]['content']|trim %}
    {%- set messages = messages[1:] %}
{%- else %}
    {%- set system_message = "" %}
{%- endif %}

{#- System message + builtin tools #}
{{- "<|start_header_id|>system<|end_header_id|>\n\n" }}
{%- if builtin_tools is defined or tools is not none %}
    {{- "Environment: ipython\n" }}
{%- endif %}
{%- if builtin_tools is defined %}
    {{- "Tools: " + builtin_tools | reject('equalto', 'code_interpreter') | join(", ") + "\n\n"}}
{%- endif %}
{{- "Cutting Knowledge Date: December 2023\n" }}
{{- "Today Date: " + date_string + "\n\n" }}
{%- if tools is not none and not tools_in_user_message %}
    {{- "You have access to the following functions. To call a function, please respond with JSON for a function call." }}
    {{- 'Respond in the format {"name": function name, "parameters": dictionary of argument name and its value}.' }}
    {{- "Do not use variables.\n\n" }}
    {%- for t in tools %}
        {{- t | tojson(indent=4) }}
        {{- "\n\n" }}
    {%- endfor %}
{%- endif %}
{{- system_message }}
{{- "<|eot_id|>" }}

{#- Custom tools are passed in a user message with some extra guidance #}
{%- if tools_in_user_message and not tools is none %}
    {#- Extract the first user message so we can plug it in here #}
    {%- if messages | length != 0 %}
        {%- set first_user_message = messages[0]['content']|trim %}
        {%- set messages = messages[1:] %}
    {%- else %}
        {{- raise_exception("Cannot put tools in the first user message when there's no first user message!") }}
    {%- endif %}
    {{- '<|start_header_id|>user<|end_header_id|>\n\n' -}}
    {{- "Given the following functions, please respond with a JSON for a function call " }}
    {{- "with its proper arguments that best answers the given prompt.\n\n" }}
    {{- 'Respond in the format {"name": function name, "parameters": dictionary of argument name and its value}.' }}
    {{- "Do not use variables.\n\n" }}
    {%- for t in tools %}
        {{- t | tojson(indent=4) }}
        {{- "\n\n" }}
    {%- endfor %}
    {{- first_user_message + "<|eot_id|>"}}
{%- endif %}

{%- for message in messages %}
    {%- if not (message.role == 'ipython' or message.role == 'tool' or 'tool_calls' in message) %}
        {{- '<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n'+ message['content'] | trim + '<|eot_id|>' }}
    {%- elif 'tool_calls' in message %}
        {%- if not message.tool_calls|length == 1 %}
            {{- raise_exception("This model only supports single tool-calls at once!") }}
        {%- endif %}
        {%- set tool_call = message.tool_calls[0].function %}
        {%- if builtin_tools is defined and tool_call.name in builtin_tools %}
            {{- '<|start_header_id|>assistant<|end_header_id|>\n\n' -}}
            {{- "<|python_tag|>" + tool_call.name + ".call(" }}
            {%- for arg_name, arg_val in tool_call.arguments | items %}
                {{- arg_name + '="' + arg_val + '"' }}
                {%- if not loop.last %}
                    {{- ", " }}
                {%- endif %}
            {%- endfor %}
            {{- ")" }}
        {%- else  %}
            {{- '<|start_header_id|>assistant<|end_header_id|>\n\n' -}}
            {{- '{"name": "' + tool_call.name + '", ' }}
            {{- '"parameters": ' }}
            {{- tool_call.arguments | tojson }}
            {{- "}" }}
        {%- endif %}
        {%- if builtin_tools is defined %}
            {#- This means we're in ipython mode #}
            {{- "<|eom_id|>" }}
        {%- else %}
            {{- "<|eot_id|>" }}
        {%- endif %}
    {%- elif message.role == "tool" or message.role == "ipython" %}
        {{- "<|start_header_id|>ipython<|end_header_id|>\n\n" }}
        {%- if message.content is mapping or message.content is iterable %}
            {{- message.content | tojson }}
        {%- else %}
            {{- message.content }}
        {%- endif %}
        {{- "<|eot_id|>" }}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|start_header_id|>assistant<|end_header_id|>\n\n' }}
{%- endif %}
'''

# Llama-3.2 differs in how the date is found: strftime_now (defined by HF) gives today's date.
LLAMA32_TEMPLATE = LLAMA31_TEMPLATE.replace(
    '''    {%- set date_string = "26 Jul 2024" %}''',
    '''    {%- if strftime_now is defined %}
        {%- set date_string = strftime_now("%d %b %Y") %}
    {%- else %}
        {%- set date_string = "26 Jul 2024" %}
    {%- endif %}''')
# The fixed "today" used for strftime_now in the golden renderings (tests set the same date).
GOLDEN_TODAY = (2025, 1, 15)

MISTRAL_TEMPLATE = ("{{ bos_token }}{% for message in messages %}{% if (message['role'] == 'user') != (loop.index0 % 2 =="
                    " 0) %}{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}"
                    "{% endif %}{% if message['role'] == 'user' %}{{ '[INST] ' + message['content'] + ' [/INST]' }}"
                    "{% elif message['role'] == 'assistant' %}{{ message['content'] + eos_token}}{% else %}"
                    "{{ raise_exception('Only user and assistant roles are supported!') }}{% endif %}{% endfor %}")

# The published Gemma 3 chat template (google/gemma-3-*-it tokenizer_config.json).
GEMMA3_TEMPLATE = r"""{{ bos_token }}
{%- if messages[0]['role'] == 'system' -%}
    {%- if messages[0]['content'] is string -%}
        {%- set first_user_prefix = messages[0]['content'] + '\n\n' -%}
    {%- else -%}
        {%- set first_user_prefix = messages[0]['content'][0]['text'] + '\n\n' -%}
    {%- endif -%}
    {%- set loop_messages = messages[1:] -%}
{%- else -%}
    {%- set first_user_prefix = "" -%}
    {%- set loop_messages = messages -%}
{%- endif -%}
{%- for message in loop_messages -%}
    {%- if (message['role'] == 'user') != (loop.index0 % 2 == 0) -%}
        {{ raise_exception("Conversation roles must alternate user/assistant/user/assistant/...") }}
    {%- endif -%}
    {%- if (message['role'] == 'assistant') -%}
        {%- set role = "model" -%}
    {%- else -%}
        {%- set role = message['role'] -%}
    {%- endif -%}
    {{ '<start_of_turn>' + role + '\n' + (first_user_prefix if loop.first else "") }}
    {%- if message['content'] is string -%}
        {{ message['content'] | trim }}
    {%- elif message['content'] is iterable -%}
        {%- for item in message['content'] -%}
            {%- if item['type'] == 'image' -%}
                {{ '<start_of_image>' }}
            {%- elif item['type'] == 'text' -%}
                {{ item['text'] | trim }}
            {%- endif -%}
        {%- endfor -%}
    {%- else -%}
        {{ raise_exception("Invalid content type") }}
    {%- endif -%}
    {{ '<end_of_turn>\n' }}
{%- endfor -%}
{%- if add_generation_prompt -%}
    {{'<start_of_turn>model\n'}}
{%- endif -%}
"""

CONVERSATIONS = [
    [{"role": "user", "content": "Hello!"}],
    [{"role": "system", "content": "You are a pirate."}, {"role": "user", "content": "Hi"},
     {"role": "assistant", "content": "Arr!"}, {"role": "user", "content": "Where is the treasure?"}],
    [{"role": "user", "content": "  spaced content \n"}, {"role": "assistant", "content": " answer\u3000 "},
     {"role": "user", "content": "\tnext\u00a0"}],
    [],
    [{"role": "system", "content": ""}, {"role": "user", "content": ""}],
    [{"role": "user", "content": "¿Qué tal? 你好 😀 <b>bold</b> {{ not jinja }}"}],
    [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}],
    [{"role": "user", "content": "x"}, {"role": "user", "content": "y"}],
    [{"role": "user", "content": "What's the weather?"}, {"role": "assistant", "content": "Let me check."},
     {"role": "tool", "content": "{\"temp\": 20}"}, {"role": "tool", "content": "sunny"},
     {"role": "user", "content": "Thanks"}],
    [{"role": "user", "content": "first"}, {"role": "system", "content": "late system"}],
    [{"role": "system", "content": "sys\nwith\nlines"}, {"role": "user", "content": "multi\nline\n"}],
    [{"role": "user", "content": "q"}, {"role": "tool", "content": "tab\there \x01 \x7f é \\ \"q\" \u2028 /"}],
]


def segments(pattern, text):
    """Pre-tokens of `text` under `pattern`: matches and the gaps between them (HF Split Isolated)."""
    out, pos = [], 0
    for m in regex.finditer(pattern, text):
        if m.start() > pos:
            out.append(text[pos:m.start()])
        if m.end() > m.start():
            out.append(m.group(0))
        pos = m.end()
    if pos < len(text):
        out.append(text[pos:])
    return out


def make_smollm2(model_path):
    from transformers import AutoTokenizer
    from gguf import GGUFReader

    d, name = os.path.split(model_path)
    hf = AutoTokenizer.from_pretrained(d, gguf_file=name)
    backend = hf.backend_tokenizer

    # The original SmolLM2 tokenizer.json pipeline: digits one by one, then GPT-2 ByteLevel.
    from tokenizers import Tokenizer, pre_tokenizers
    orig = Tokenizer.from_str(backend.to_str())
    orig.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.Digits(individual_digits=True),
                                                  pre_tokenizers.ByteLevel(add_prefix_space=False)])
    # transformers' GGUF conversion ignores tokenizer.ggml.pre = "smollm" and uses plain ByteLevel;
    # the two differ only on non-ASCII numerals (e.g. "①", "½"). The original pipeline (which
    # llama.cpp's "smollm" pre-tokenizer also follows) is the reference; differences are recorded.
    cases = []
    for s in STRINGS:
        orig.encode_special_tokens = False
        with_special = orig.encode(s, add_special_tokens=False).ids
        orig.encode_special_tokens = True
        plain = orig.encode(s, add_special_tokens=False).ids
        case = {"text": s, "ids_special": with_special, "ids_plain": plain,
                "decoded": orig.decode(with_special, skip_special_tokens=False)}
        gguf_ids = backend.encode(s, add_special_tokens=False).ids
        if gguf_ids != with_special:
            case["ids_transformers_gguf"] = gguf_ids
            print(f"note: transformers' GGUF tokenizer differs from the original pipeline on {s!r}", file=sys.stderr)
        cases.append(case)

    reader = GGUFReader(model_path)
    template = reader.fields["tokenizer.chat_template"].contents()
    return {"model": name, "cases": cases}, template


def make_splits():
    return {"patterns": PATTERNS,
            "cases": [{"text": s, **{k: segments(p, s) for k, p in PATTERNS.items()}} for s in STRINGS]}


def render_all(templates):
    import jinja2
    import jinja2.ext
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    def raise_exception(msg):
        raise jinja2.exceptions.TemplateError(msg)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[jinja2.ext.loopcontrols])
    env.filters["tojson"] = lambda x, **kw: json.dumps(x, ensure_ascii=False, **kw)
    env.globals["raise_exception"] = raise_exception
    import datetime
    env.globals["strftime_now"] = lambda fmt: datetime.date(*GOLDEN_TODAY).strftime(fmt)
    renders = []
    for name, t in templates.items():
        compiled = env.from_string(t["template"])
        for ci, conv in enumerate(CONVERSATIONS):
            for gen in (False, True):
                r = {"template": name, "conversation": ci, "add_generation_prompt": gen}
                try:
                    r["text"] = compiled.render(messages=conv, add_generation_prompt=gen,
                                                bos_token=t["bos"], eos_token=t["eos"])
                except jinja2.exceptions.TemplateError as e:
                    r["error"] = str(e)
                renders.append(r)
    import datetime
    today = datetime.date(*GOLDEN_TODAY).strftime("%d %b %Y")
    return {"templates": templates, "conversations": CONVERSATIONS, "today": today, "renders": renders}


def make_spm():
    import sentencepiece as spm

    corpus = [s for s in STRINGS if s.strip()] * 3
    # Some plain English so that real merges are learned.
    corpus += [
        "the quick brown fox jumps over the lazy dog",
        "a tokenizer turns text into tokens and tokens back into text",
        "hello hello world world the the and and of of to to in in",
        "sentencepiece uses a dummy prefix and byte fallback for unknown characters",
        "numbers like 2024 and 12345678 are split into pieces",
    ] * 20
    model = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(corpus), model_writer=model, vocab_size=600, model_type="bpe",
        byte_fallback=True, normalization_rule_name="identity", add_dummy_prefix=True,
        remove_extra_whitespaces=False, character_coverage=0.99, split_digits=False,
        unk_id=0, bos_id=1, eos_id=2, pad_id=-1, minloglevel=2)
    sp = spm.SentencePieceProcessor(model_proto=model.getvalue())
    global SPM_PROCESSOR
    SPM_PROCESSOR = sp
    tokens, scores, types = [], [], []
    for i in range(sp.get_piece_size()):
        tokens.append(sp.id_to_piece(i))
        scores.append(sp.get_score(i))
        if sp.is_unknown(i):
            types.append(2)
        elif sp.is_control(i):
            types.append(3)
        elif sp.is_byte(i):
            types.append(6)
        elif sp.is_unused(i):
            types.append(5)
        else:
            types.append(1)
    meta = {
        "tokenizer.ggml.model": "llama",
        "tokenizer.ggml.tokens": tokens,
        "tokenizer.ggml.scores": scores,
        "tokenizer.ggml.token_type": types,
        "tokenizer.ggml.bos_token_id": 1,
        "tokenizer.ggml.eos_token_id": 2,
        "tokenizer.ggml.unknown_token_id": 0,
        "tokenizer.ggml.add_bos_token": True,
        "tokenizer.chat_template": LLAMA2_TEMPLATE,
    }
    cases = [{"text": s, "ids": sp.encode(s), "decoded": sp.decode(sp.encode(s))} for s in STRINGS]
    return {"metadata": meta, "cases": cases}


SPM_PROCESSOR = None


def spm_merges(sp):
    """BPE merges equivalent to a SentencePiece BPE model: every split of a piece into two pieces,
    ordered by the piece's score (best first), ties by the ids of the two halves."""
    vocab = {sp.id_to_piece(i): i for i in range(sp.get_piece_size())}
    merges = []
    for piece, pid in vocab.items():
        if not (sp.is_unknown(pid) or sp.is_control(pid) or sp.is_byte(pid)):
            local = [(piece[:k], piece[k:]) for k in range(1, len(piece))
                     if piece[:k] in vocab and piece[k:] in vocab]
            local.sort(key=lambda m: (vocab[m[0]], vocab[m[1]]))
            merges += [(l, r, sp.get_score(pid)) for l, r in local]
    merges.sort(key=lambda m: -m[2])
    return vocab, [(l, r) for l, r, _ in merges]


def make_hf_spm():
    from tokenizers import AddedToken, Tokenizer, decoders, models, normalizers, pre_tokenizers

    sp = SPM_PROCESSOR
    vocab, merges = spm_merges(sp)
    out = {}
    for style in ("llama2", "metaspace"):
        tk = Tokenizer(models.BPE(vocab, merges, unk_token="<unk>", fuse_unk=True, byte_fallback=True))
        if style == "llama2":
            tk.normalizer = normalizers.Sequence([normalizers.Prepend("\u2581"), normalizers.Replace(" ", "\u2581")])
        else:
            tk.pre_tokenizer = pre_tokenizers.Metaspace(replacement="\u2581", prepend_scheme="first", split=False)
        tk.decoder = decoders.Sequence([decoders.Replace("\u2581", " "), decoders.ByteFallback(), decoders.Fuse(),
                                        decoders.Strip(" ", 1, 0)])
        tk.add_special_tokens([AddedToken(t, normalized=False) for t in ("<unk>", "<s>", "</s>")])
        config = {"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>", "add_bos_token": True,
                  "chat_template": MISTRAL_TEMPLATE}
        cases = []
        for s in STRINGS:
            tk.encode_special_tokens = False
            ws = tk.encode(s, add_special_tokens=False).ids
            tk.encode_special_tokens = True
            pl = tk.encode(s, add_special_tokens=False).ids
            tk.encode_special_tokens = False
            cases.append({"text": s, "ids_special": ws, "ids_plain": pl, "decoded": tk.decode(ws, skip_special_tokens=False),
                          "sentencepiece": sp.encode(s)})
        out[style] = {"tokenizer": json.loads(tk.to_str()), "tokenizer_config": config, "cases": cases}
    return out


def make_hf_bpe():
    from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers

    corpus = STRINGS * 3 + [
        "the quick brown fox jumps over the lazy dog", "I'm here, you're there, we'll see.",
        "numbers 1234567890 and 3.14159", "code: for (i = 0; i < 10; i++) { x += i; }",
    ] * 20
    out = {}
    for name, pattern, specials in (
            ("llama3", LLAMA3_PATTERN, ["<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>",
                                        "<|end_header_id|>", "<|eot_id|>"]),
            ("qwen2", QWEN2_PATTERN, ["<|endoftext|>", "<|im_start|>", "<|im_end|>"])):
        tk = Tokenizer(models.BPE(ignore_merges=(name == "llama3")))
        tk.pre_tokenizer = pre_tokenizers.Sequence([
            pre_tokenizers.Split(Regex(pattern), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
        tk.decoder = decoders.ByteLevel()
        if name == "qwen2":
            tk.normalizer = normalizers.NFC()
        trainer = trainers.BpeTrainer(vocab_size=700, special_tokens=specials, show_progress=False,
                                      initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
        tk.train_from_iterator(corpus, trainer)
        # A non-special added token, matched even without parse_special.
        tk.add_tokens(["<custom_tool>"])
        if name == "llama3":
            config = {"bos_token": "<|begin_of_text|>", "eos_token": "<|eot_id|>", "add_bos_token": True,
                      "chat_template": LLAMA3_TEMPLATE}
        else:
            config = {"bos_token": None, "eos_token": "<|im_end|>", "chat_template": QWEN25_TEMPLATE}
        cases = []
        for s in STRINGS:
            tk.encode_special_tokens = False
            ws = tk.encode(s, add_special_tokens=False).ids
            tk.encode_special_tokens = True
            pl = tk.encode(s, add_special_tokens=False).ids
            tk.encode_special_tokens = False
            cases.append({"text": s, "ids_special": ws, "ids_plain": pl})
        out[name] = {"tokenizer": json.loads(tk.to_str()), "tokenizer_config": config, "cases": cases}
    return out


HANGUL_FIRST, HANGUL_LAST = 0xAC00, 0xD7A3


def make_nfc_tables(path):
    """Writes the C++ NFC tables (see unicode_nfc.cpp for how they are used)."""
    import unicodedata
    decomp = []
    for cp in range(0x110000):
        if HANGUL_FIRST <= cp <= HANGUL_LAST:
            continue  # Hangul syllables are decomposed algorithmically
        d = unicodedata.decomposition(chr(cp))
        if not d or d.startswith("<"):
            continue  # no mapping, or a compatibility mapping (not used by NFC)
        parts = [int(x, 16) for x in d.split()]
        second = parts[1] if len(parts) == 2 else 0
        composes = int(len(parts) == 2 and unicodedata.normalize("NFC", chr(parts[0]) + chr(parts[1])) == chr(cp))
        decomp.append((cp, parts[0], second, composes))
    ranges = []  # (first, last, ccc) runs of equal nonzero combining class
    for cp in range(0x110000):
        ccc = unicodedata.combining(chr(cp))
        if not ccc:
            continue
        if ranges and ranges[-1][1] == cp - 1 and ranges[-1][2] == ccc:
            ranges[-1][1] = cp
        else:
            ranges.append([cp, cp, ccc])
    lines = [
        "// nfc_tables.inc: Unicode data for the NFC normalizer (unicode_nfc.cpp). GENERATED by",
        "// tools/make_tokenizer_golden.py --nfc-tables from Python's unicodedata, Unicode "
        + unicodedata.unidata_version + ". Do not edit.",
        "//",
        "// kNfcDecomp: canonical decomposition mappings, one level, sorted by code point {cp, first,",
        "// second (0 for a singleton), composes (1 if first+second recombine to cp under NFC)}.",
        "// kNfcCcc: runs of code points with the same nonzero canonical combining class.",
        "",
        f"inline constexpr const char* kNfcUnicodeVersion = \"{unicodedata.unidata_version}\";",
        "",
        "inline constexpr NfcDecomp kNfcDecomp[] = {",
    ]
    row = []
    for cp, a, b, c in decomp:
        row.append(f"{{0x{cp:X},0x{a:X},0x{b:X},{c}}},")
        if len(row) == 6:
            lines.append("    " + "".join(row))
            row = []
    if row:
        lines.append("    " + "".join(row))
    lines += ["};", "", "inline constexpr NfcCccRange kNfcCcc[] = {"]
    row = []
    for first, last, ccc in ranges:
        row.append(f"{{0x{first:X},0x{last:X},{ccc}}},")
        if len(row) == 8:
            lines.append("    " + "".join(row))
            row = []
    if row:
        lines.append("    " + "".join(row))
    lines += ["};", ""]
    with open(path, "w") as f:
        f.write("\n".join(lines))
    print(f"wrote {path} ({os.path.getsize(path)} bytes)")


def make_nfc_golden():
    import random
    import unicodedata
    rng = random.Random(5)
    atoms = ["e", "a", "o", "u", "A", "s", "\u0301", "\u0300", "\u0308", "\u0302", "\u0323", "\u0307",
             "\u031b", "\u0345", "\u05b0", "\u0591", "\u1100", "\u1161", "\u11a8", "\uac00", "\u0915",
             "\u093c", "\u0cc6", "\u0cc2", "\u0cd5", "\u212b", "\u2126", "\u0344", "\u0f73", "\u1e9b",
             "\U0001d15e", "\U0001d165", " ", "x", "\u00e9", "\u1ec7", "\u0958", "\u2adc", "\u0338"]
    texts = list(STRINGS)
    for _ in range(300):
        texts.append("".join(rng.choice(atoms) for _ in range(rng.randint(1, 12))))
    return {"unicode_version": unicodedata.unidata_version,
            "cases": [{"text": t, "nfc": unicodedata.normalize("NFC", t)} for t in texts]}


def write(path, obj):
    with open(path, "w", encoding="utf-8") as f:
        json.dump(obj, f, ensure_ascii=False, separators=(",", ":"))
        f.write("\n")
    print(f"wrote {path} ({os.path.getsize(path)} bytes)")


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default=os.path.expanduser(
        "~/.cache/longctx/models/SmolLM2-135M-Instruct.Q4_1.gguf"))
    ap.add_argument("--out", default=os.path.join(here, "..", "tests", "data", "tokenizer"))
    ap.add_argument("--nfc-tables", action="store_true",
                    help="also write src/tokenizer/nfc_tables.inc")
    ap.add_argument("--chat-only", action="store_true", help="write chat_golden.json only (needs jinja2 only)")
    args = ap.parse_args()
    if args.nfc_tables:
        make_nfc_tables(os.path.join(here, "..", "src", "tokenizer", "nfc_tables.inc"))
    os.makedirs(args.out, exist_ok=True)

    if args.chat_only:  # the SmolLM2 template as the committed golden file holds it
        with open(os.path.join(args.out, "chat_golden.json")) as f:
            smol_template = json.load(f)["templates"]["smollm2"]["template"]
    else:
        smol, smol_template = make_smollm2(args.model)
        write(os.path.join(args.out, "smollm2_golden.json"), smol)
        write(os.path.join(args.out, "pretok_splits.json"), make_splits())
    templates = {
        "smollm2": {"template": smol_template, "bos": "<|im_start|>", "eos": "<|im_end|>"},
        "chatml": {"template": CHATML_GENERIC, "bos": "", "eos": "<|im_end|>"},
        "qwen2.5": {"template": QWEN25_TEMPLATE, "bos": "", "eos": "<|im_end|>"},
        "llama3": {"template": LLAMA3_TEMPLATE, "bos": "<|begin_of_text|>", "eos": "<|eot_id|>"},
        "llama3.1": {"template": LLAMA31_TEMPLATE, "bos": "<|begin_of_text|>", "eos": "<|eot_id|>"},
        "llama3.2": {"template": LLAMA32_TEMPLATE, "bos": "<|begin_of_text|>", "eos": "<|eot_id|>"},
        "llama2": {"template": LLAMA2_TEMPLATE, "bos": "<s>", "eos": "</s>"},
        "mistral": {"template": MISTRAL_TEMPLATE, "bos": "<s>", "eos": "</s>"},
        "gemma3": {"template": GEMMA3_TEMPLATE, "bos": "<bos>", "eos": "<eos>"},
    }
    write(os.path.join(args.out, "chat_golden.json"), render_all(templates))
    if args.chat_only:
        return
    write(os.path.join(args.out, "spm_tiny.json"), make_spm())
    write(os.path.join(args.out, "hf_bpe_tiny.json"), make_hf_bpe())
    write(os.path.join(args.out, "hf_spm_tiny.json"), make_hf_spm())
    write(os.path.join(args.out, "nfc_golden.json"), make_nfc_golden())


if __name__ == "__main__":
    main()
